"""The definition: every query against every key, as attention/scores.py writes the scores; a float32
softmax; probabilities times values by jnp.einsum (grouped: key/value heads shared by query heads
are not repeated). No blocks, no custom backward, no switches: what every other kernel is tested
against."""

import jax.numpy as jnp

from keynorm_jax.attention.kernels.base import Kernel
from keynorm_jax.attention.scores import (block_scores, grouped_probs_times_values,
                                          softmax_with_entropy)


def run(prepared, blocks=None):  # pylint: disable=unused-argument
  p = prepared
  probs_BxHxQxK, entropy_BxQxH = softmax_with_entropy(*block_scores(p.mods, p.queries, p.keys))
  out = grouped_probs_times_values(probs_BxHxQxK, p.values.astype(jnp.float32))
  return out, entropy_BxQxH


KERNEL = Kernel("reference", "the definition: full square, einsum products", run)
