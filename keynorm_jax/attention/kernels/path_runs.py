"""PaTH's two computations of a Prepared (attention/path.py has the math), for the kernels that take
PaTH's factors (Prepared.path):

  by_chunks    path_attention: chunks of the sequence, an online softmax over the earlier chunks,
               autodiff's backward rematerialized per query chunk: memory linear in T (the paper's
               way). The `cpu` and `blocked` kernels, and so `auto` at every length.
  full_square  path_scores and the softmax over every pair at once (T x T): the `reference`
               kernel, which the chunked one is tested against.

prepare.py has done the rest: the variant's normalization of q and k (before the product), each
query's factor (the variant's scale included, so path.py's scale is 1) and FoX's c (`decay`). A
window is counted by sequence index (path.py). Everything in float32.
"""

from keynorm_jax.attention import path
from keynorm_jax.attention.scores import (bias_and_keep, grouped_probs_times_values,
                                          normalized_with_entropy)


def _options(prepared):
  return dict(decay=prepared.queries.decay, scale=1.0, multiplier=prepared.queries.multiplier,
              window=prepared.mods.window)


def by_chunks(prepared, blocks=None):
  """(out [B, T, H, E] float32, entropy [B, T, H]) by path_attention's chunks: of
  path.DEFAULT_CHUNK positions, or of the query block (blocks[0]) where it is smaller."""
  chunk = path.DEFAULT_CHUNK if blocks is None else min(blocks[0], path.DEFAULT_CHUNK)
  p = prepared
  return path.path_attention(p.queries.near, p.keys.near, p.values, p.path.w, p.path.beta,
                             chunk=chunk, **_options(p))


def full_square(prepared, blocks=None):  # pylint: disable=unused-argument
  """(out [B, T, H, E] float32, entropy [B, T, H]) from every score at once (path_scores; the kept
  pairs from attention/scores.py's mask)."""
  p = prepared
  scores_BxHxTxT = path.path_scores(p.queries.near, p.keys.near, p.path.w, p.path.beta,
                                    **_options(p))
  _, keep_Bx1xTxT = bias_and_keep(p.mods, p.queries, p.keys, p.queries.near.shape[2])
  probs, entropy = normalized_with_entropy(p.mods, scores_BxHxTxT, keep_Bx1xTxT)
  return grouped_probs_times_values(probs, p.values), entropy
