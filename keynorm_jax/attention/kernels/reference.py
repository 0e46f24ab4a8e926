"""The definition: every query against every key, as attention/scores.py writes the scores; a float32
softmax; probabilities times values by jnp.einsum. No blocks, no custom backward, no switches: what
every other kernel is tested against."""

import jax.numpy as jnp

from keynorm_jax.attention.kernels.base import Kernel
from keynorm_jax.attention.scores import block_scores, head_by_head, softmax_with_entropy


def run(prepared, blocks=None):  # pylint: disable=unused-argument
  p = head_by_head(prepared)
  probs_BxHxQxK, entropy_BxQxH = softmax_with_entropy(*block_scores(p.mods, p.queries, p.keys))
  return jnp.einsum("bhqk,bkhe->bqhe", probs_BxHxQxK, p.values), entropy_BxQxH


KERNEL = Kernel("reference", "the definition: full square, einsum products", run)
