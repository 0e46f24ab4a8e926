"""Causal attention of the KeyNorm study: one definition, kernels behind a registry.

  spec.py      Spec (one call's settings, defaults resolved, checked) and Learned (its arrays)
  path.py      PaTH's scores: products of data-dependent Householder factors, by chunks
  far.py       the far rotations, one frozen record each (ReRoPE, SelfExtend, String, ...)
  prepare.py   q', k', the per-query factor and the score modifications (Mods), once
  scores.py    the scores of a block of queries against a block of keys: biases and masks
  kernels/     reference (the definition), cpu, blocked, cudnn, xla; `select` picks one
  api.py       `attend`: prepare, select, run (the function the models call)
  reach.py     where attention goes (diagnostics), through `attend`
"""

from keynorm_jax.attention.api import attend, block_sizes, causal_attention, query_block_size
from keynorm_jax.attention.kernels import KERNELS, NAMES as KERNEL_NAMES, select
from keynorm_jax.attention.prepare import l2_normalize
from keynorm_jax.attention.spec import (VARIANTS, Learned, PathFactors, ScoreRules, Spec,
                                        cosa_default_scale)

__all__ = ["KERNELS", "KERNEL_NAMES", "VARIANTS", "Learned", "PathFactors", "ScoreRules", "Spec",
           "attend", "block_sizes", "causal_attention", "cosa_default_scale", "l2_normalize",
           "query_block_size", "select"]
