"""The CPU backend's kernel: the reference's numbers, laid out for XLA's CPU backend.

- Causal query blocks: the queries in QUERY_BLOCKS equal blocks, each against the keys up to its
  last query (the keys after it are masked for all of its queries, so leaving them out changes no
  number; 4 blocks skip 3/8 of the T x T square).
- Both products through cpu/products.py (row-major, with row-major backward passes), each rounding
  its inputs to the values' dtype (the model's compute dtype) itself and summing in float32
  (keynorm_jax/precision.py), so the query blocks' gradients of one key or value add in float32.
- RoPE's cos and sin computed once as an op of their own, and the norms of q and k and the softmax
  without their size-1 axes (prepare's cpu_layout; cpu/rows.by_rows).
- PaTH (Prepared.path): path.py's chunked attention (pair_run: kernels/path_runs.py's by_chunks),
  as the blocked kernel runs it (the query blocks above are not its chunks).
Measured on the CPU only (benchmarks/PROFILE_NOTES.md); the same numbers within float32 rounding.
"""

import jax
import jax.numpy as jnp

from keynorm_jax.attention.kernels import path_runs
from keynorm_jax.attention.kernels.base import Kernel, longer_than_full_square
from keynorm_jax.attention.scores import block_scores, head_by_head, normalized_with_entropy
from keynorm_jax.cpu import products
from keynorm_jax.cpu.rows import by_rows

QUERY_BLOCKS = 4


def query_blocks(length: int) -> list:
  """[(start, stop)] of QUERY_BLOCKS equal query blocks (fewer for shorter lengths)."""
  blocks = max(1, min(QUERY_BLOCKS, length))
  bounds = [length * i // blocks for i in range(blocks + 1)]
  return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _positions_slice(x, start: int, stop: int):
  """Positions [start, stop) of a Side's array: axis 0 of an index, else axis 1."""
  return x[start:stop] if x.ndim == 1 else x[:, start:stop]


def run(prepared, blocks=None):  # pylint: disable=unused-argument
  dtype = prepared.values.dtype   # the products' inputs: the compute dtype
  scores_product = lambda q, k: products.query_key_scores(q, k, dtype)
  p = head_by_head(prepared)
  # The blocks read overlapping keys and values, in float32 here (head_by_head widens the
  # values), and each product rounds its inputs itself (cpu/backward.rounding_inside): so the
  # blocks' gradients of a key or a value add in float32.
  pieces = []
  for start, stop in query_blocks(p.values.shape[1]):
    queries = jax.tree.map(lambda x, a=start, b=stop: _positions_slice(x, a, b), p.queries)
    keys = jax.tree.map(lambda x, b=stop: _positions_slice(x, 0, b), p.keys)
    scores, keep = block_scores(p.mods, queries, keys, scores_product)
    probs_BxHxQxK, entropy_BxQxH = normalized_with_entropy(p.mods, scores, keep, by_rows)
    pieces.append((products.probs_times_values(probs_BxHxQxK, p.values[:, :stop], dtype),
                   entropy_BxQxH))
  if len(pieces) == 1:
    return pieces[0]
  return tuple(jnp.concatenate(parts, axis=1) for parts in zip(*pieces))


KERNEL = Kernel("cpu", "the reference laid out for XLA's CPU backend (causal query blocks, "
                "row-major products)", run, refusal=lambda mods, shape: longer_than_full_square(shape),
                cpu_layout=True, pair_run=path_runs.by_chunks)
