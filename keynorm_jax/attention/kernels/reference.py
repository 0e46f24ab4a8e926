"""The definition of the attention, which every other kernel is tested against:

  o_i = sum_j softmax_j(s_ij) v_j over the kept keys j (stick-breaking's weights for that variant),
  s_ij = multiplier_i (q'_i . k'_j) + bias_ij,

q', k' and multiplier_i as attention/prepare.py computes them (its docstring lists every variant's
and position option's formula), bias_ij and the kept pairs as attention/scores.py does. Here every
query is scored against every key at once, the softmax runs in float32 and probabilities times
values is an einsum (grouped: key/value heads shared by query heads are not repeated). Both products
take their inputs in the values' dtype (the model's compute dtype) and sum in float32
(keynorm_jax/precision.py: in float32 the plain einsums). No blocks, no custom backward of its
own. PaTH's scores (Prepared.path) are path.py's every score at once (pair_run:
kernels/path_runs.py's full_square, in float32), not q' . k'."""

import functools

from keynorm_jax.attention.kernels import path_runs
from keynorm_jax.attention.kernels.base import Kernel
from keynorm_jax.attention.scores import (block_scores, grouped_probs_times_values, grouped_scores,
                                          normalized_with_entropy)


def run(prepared, blocks=None):  # pylint: disable=unused-argument
  p = prepared
  dtype = p.values.dtype   # the products' inputs: the compute dtype
  probs_BxHxQxK, entropy_BxQxH = normalized_with_entropy(
      p.mods, *block_scores(p.mods, p.queries, p.keys,
                            functools.partial(grouped_scores, dtype=dtype)))
  out = grouped_probs_times_values(probs_BxHxQxK, p.values, dtype)
  return out, entropy_BxQxH


KERNEL = Kernel("reference", "the definition: full square, einsum products", run,
                pair_run=path_runs.full_square)
