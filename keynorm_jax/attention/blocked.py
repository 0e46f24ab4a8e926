"""Key-blocked attention with an online softmax (flash-style, in JAX), for long sequences.

einsum.attend prepares q and k (normalization, RoPE, ReRoPE's far rotations, per-query factors)
and hands over `block_scores`, its own function of a block of queries and a block of keys: every
score, bias and mask is computed by the same code as on the full path. Here the queries go in
blocks (lax.map) and, for each, a loop runs over only the key blocks that can hold a kept key:

  from the first block a window (or the sinks) can reach up to the block of the last query (causal),
  so the blocks above the diagonal, and with a window the blocks below it, are never scored.

Per query it keeps, in float32, the running maximum m, l = sum exp(s - m), the unnormalized output
sum exp(s - m) v and c = sum exp(s - m) (s - m); at the end o = acc / l and the entropy (nats) of
the attention distribution is log l - c / l (= -sum p log p, with p = exp(s - m) / l). Scores,
softmax and entropy never exist wider than one block: memory is O(block x block) per query block
and the work is the kept triangle (or band) only.

The key loop is a lax.scan over the key blocks whose body is a lax.cond: a block outside the
ranges costs one predicate, not its scores (as fast as a while loop with a data-dependent trip
count, measured), and unlike such a loop it can be differentiated in reverse mode (training).
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp


class Side(NamedTuple):
  """The per-position inputs of one side (queries or keys) of attention, as einsum.attend uses them.

  near: [B, N, H, S] rotated at the positions; far: the second rotation (ReRoPE, sinks) or None;
  positions: [B, N]; index: [N] sequence index (the causal mask); multiplier: [B, N, H] factor on
  the scores (queries only).
  """
  near: jax.Array
  far: Optional[jax.Array]
  positions: jax.Array
  index: jax.Array
  multiplier: Optional[jax.Array] = None


def _pad_to(x, size, mode):
  """Pads axis 1 of x (or axis 0 of a 1-d index) to `size`."""
  if x is None:
    return None
  axis = 0 if x.ndim == 1 else 1
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, pad, mode=mode)


def _padded(side: Side, size: int) -> Side:
  """Padded to `size` positions: zeros for the vectors, the last position repeated (so that the
  windows' block bounds are unchanged) and indices counting on (so causality excludes padded keys).
  """
  return Side(near=_pad_to(side.near, size, "constant"),
              far=_pad_to(side.far, size, "constant"),
              positions=_pad_to(side.positions, size, "edge"),
              index=jnp.arange(size, dtype=side.index.dtype),
              multiplier=_pad_to(side.multiplier, size, "edge"))


def _slice(side: Side, start, size: int) -> Side:
  """Positions [start, start + size) of a side (start may be traced)."""
  def take(x):
    if x is None:
      return None
    return jax.lax.dynamic_slice_in_dim(x, start, size, axis=0 if x.ndim == 1 else 1)

  return Side(*(take(x) for x in side))


def _key_block_ranges(queries: Side, key_bounds, *, query_stop, key_block, num_key_blocks, window,
                      sink_tokens):
  """(sinks_end, window_start, causal_end): the key blocks [0, sinks_end) and
  [window_start, causal_end) can hold a kept key for these queries; every other block is masked
  throughout for all of them (so skipping it changes nothing). Traced int32 scalars."""
  causal_end = jnp.minimum((query_stop - 1) // key_block + 1, num_key_blocks)   # by index
  if window is None:
    return jnp.int32(0), jnp.int32(0), causal_end
  key_min, key_max = key_bounds
  # A key of block b is within the window of some query iff min_i p_i - max_j p_j < window:
  # the same relative distance, computed the same way, as the mask.
  lowest_query = jnp.min(queries.positions)
  reachable = (lowest_query - key_max).astype(jnp.float32) < window
  window_start = jnp.argmax(reachable)   # the first reachable block (the diagonal one always is)
  if sink_tokens is None:
    return jnp.int32(0), window_start, causal_end
  holds_sink = key_min < sink_tokens       # blocks up to the last one holding a sink key
  last_sink = jnp.where(jnp.any(holds_sink), num_key_blocks - jnp.argmax(holds_sink[::-1]), 0)
  sinks_end = jnp.minimum(last_sink, causal_end)
  return sinks_end, jnp.maximum(window_start, sinks_end), causal_end


def blocked_attention(block_scores, queries: Side, keys: Side, values_BxTxHxE, *, query_block: int,
                      key_block: int, window=None, sink_tokens=None):
  """Attention of all queries over the key blocks they can reach, with an online softmax.

  block_scores(query Side block, key Side block) -> (scores [B, H, Q, K] with masked entries at a
    large negative value, keep [B, 1, Q, K]).
  window, sink_tokens: as in einsum.attend (used only to bound the key blocks; the mask is
    block_scores').

  Returns (out [B, T, H, E] float32, entropy [B, T, H]).
  """
  batch, length = queries.positions.shape
  heads, size_e = values_BxTxHxE.shape[2], values_BxTxHxE.shape[3]
  num_query_blocks = -(-length // query_block)
  num_key_blocks = -(-length // key_block)
  keys = _padded(keys, num_key_blocks * key_block)
  values = _pad_to(values_BxTxHxE, num_key_blocks * key_block, "constant")
  block_positions = keys.positions.reshape(batch, num_key_blocks, key_block)
  key_bounds = (block_positions.min(axis=(0, 2)), block_positions.max(axis=(0, 2)))
  queries = _padded(queries, num_query_blocks * query_block)

  def one_query_block(block):
    query_start = block * query_block
    q = _slice(queries, query_start, query_block)
    sinks_end, window_start, causal_end = _key_block_ranges(
        q, key_bounds, query_stop=jnp.minimum(query_start + query_block, length),
        key_block=key_block,
        num_key_blocks=num_key_blocks, window=window, sink_tokens=sink_tokens)
    count = sinks_end + jnp.maximum(causal_end - window_start, 0)   # key blocks to score

    def step(t, carry):
      m_BxHxQ, l_BxHxQ, c_BxHxQ, acc_BxQxHxE = carry
      start = jnp.where(t < sinks_end, t, t - sinks_end + window_start) * key_block
      scores_BxHxQxK, keep_Bx1xQxK = block_scores(q, _slice(keys, start, key_block))
      m_new = jnp.maximum(m_BxHxQ, scores_BxHxQxK.max(axis=-1))
      shifted = scores_BxHxQxK - m_new[..., None]
      p_BxHxQxK = jnp.where(keep_Bx1xQxK, jnp.exp(shifted), 0.0)
      rescale = jnp.exp(m_BxHxQ - m_new)
      # c = sum p (s - m): moving m to m_new subtracts (m_new - m) from every kept term.
      # (Masked terms: p = 0 and shifted finite, so they add 0.)
      c_new = (rescale * (c_BxHxQ - (m_new - m_BxHxQ) * l_BxHxQ)
               + jnp.sum(p_BxHxQxK * shifted, axis=-1))
      l_new = rescale * l_BxHxQ + p_BxHxQxK.sum(axis=-1)
      v_BxKxHxE = jax.lax.dynamic_slice_in_dim(values, start, key_block, axis=1)
      acc_new = (acc_BxQxHxE * jnp.moveaxis(rescale, 1, 2)[..., None]
                 + jnp.einsum("bhqk,bkhe->bqhe", p_BxHxQxK, v_BxKxHxE))
      return m_new, l_new, c_new, acc_new

    # The lowest float, not -inf: (m_new - m) l stays 0 (not inf x 0) until a key is kept.
    stats = jnp.full((batch, heads, query_block), jnp.finfo(jnp.float32).min, jnp.float32)
    init = (stats, jnp.zeros_like(stats), jnp.zeros_like(stats),
            jnp.zeros((batch, query_block, heads, size_e), jnp.float32))

    def scan_step(carry, t):
      return jax.lax.cond(t < count, lambda: step(t, carry), lambda: carry), None

    (_, l_BxHxQ, c_BxHxQ, acc), _ = jax.lax.scan(scan_step, init, jnp.arange(num_key_blocks))
    l_BxHxQ = jnp.where(l_BxHxQ > 0, l_BxHxQ, 1.0)
    out = acc / jnp.moveaxis(l_BxHxQ, 1, 2)[..., None]
    entropy = jnp.moveaxis(jnp.log(l_BxHxQ) - c_BxHxQ / l_BxHxQ, 1, 2)
    return out, entropy

  def write_query_block(block, outputs):
    out, entropy = one_query_block(block)
    start = block * query_block
    return tuple(jax.lax.dynamic_update_slice_in_dim(buffer, x, start, axis=1)
                 for buffer, x in zip(outputs, (out, entropy)))

  # The output buffers start as zeros computed from this call's values (v x 0; every entry is
  # overwritten), not as a constant: XLA shares one constant between the layers of a model and
  # copies it for each layer's loop at the start of the program, all alive at once (measured:
  # 128 MiB a layer at 65,536 tokens, which is what lax.map's stacked outputs did).
  zero = values[0, 0, 0, 0] * 0.0
  padded_length = num_query_blocks * query_block
  outputs = (jnp.broadcast_to(zero, (batch, padded_length, heads, size_e)),
             jnp.broadcast_to(zero, (batch, padded_length, heads)))
  out, entropy = jax.lax.fori_loop(0, num_query_blocks, write_query_block, outputs)
  return out[:, :length], entropy[:, :length]
