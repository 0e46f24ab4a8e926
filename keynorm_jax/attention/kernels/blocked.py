"""Key-blocked attention with an online softmax (flash-style, in JAX), for long sequences.

attention/prepare.py prepares q and k (normalization, RoPE, ReRoPE's far rotations, per-query
factors) and attention/scores.py scores a block of queries against a block of keys: every score,
bias and mask is computed by the same code as in the reference kernel. Here the queries go in
blocks and, for each, a loop runs over only the key blocks that can hold a kept key:

  from the first block a window (or the sinks) can reach up to the block of the last query (causal),
  so the blocks above the diagonal, and with a window the blocks below it, are never scored.

Forward: per query it keeps, in float32, the running maximum m, l = sum exp(s - m), the
unnormalized output sum exp(s - m) v and c = sum exp(s - m) (s - m); at the end o = acc / l and
the entropy (nats) of the attention distribution is log l - c / l (= -sum p log p, with
p = exp(s - m) / l). Scores never exist wider than one block: memory is O(block x block) per query
block and the work is the kept triangle (or band) only.

Backward (a custom VJP, as FlashAttention's): it keeps only the inputs, o, the entropy and
lse = m + log l per query, and recomputes each block's scores through `block_scores` (jax.vjp, so
the gradients of learned biases and SSMax come from the same code), with
p = exp(s - lse), dv += p^T do, ds = p (do . v - do . o - dH (log p + H)) for the output and the
entropy H. Memory O(T) instead of the T x T probabilities reverse mode would keep.

The products (q . k, p v and the backward's) take their inputs in the values' dtype as given (the
model's compute dtype) and sum in float32 (keynorm_jax/precision.py); m, l, c, the output and every
gradient accumulate in float32.

PaTH (Prepared.path) runs path.py's chunked attention (pair_run: kernels/path_runs.py's by_chunks,
the same online softmax, its products in float32) in chunks of the query block, at most
path.DEFAULT_CHUNK (64).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from keynorm_jax.attention.kernels import path_runs
from keynorm_jax.attention.kernels.base import Kernel
from keynorm_jax.attention.prepare import Side
from keynorm_jax.attention.scores import (block_scores, grouped_probs_times_values, grouped_scores,
                                          grouped_values_grad, needs_whole_rows)

DEFAULT_BLOCK = 512   # queries and keys per block unless told


class _Blocks(NamedTuple):
  """The static settings of one blocked call."""
  query_block: int
  key_block: int
  length: int                 # real (unpadded) sequence length
  window: float | None
  sink_tokens: int | None
  dtype: object = jnp.float32  # the products' inputs (the compute dtype); sums in float32


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
              multiplier=_pad_to(side.multiplier, size, "edge"),
              decay=_pad_to(side.decay, size, "edge"),
              farthest=_pad_to(side.farthest, size, "constant"))


def _slice(x, start, size: int):
  """Positions [start, start + size) of an array, a Side or a tuple of them (start may be traced)."""
  def take(a):
    return jax.lax.dynamic_slice_in_dim(a, start, size, axis=0 if a.ndim == 1 else 1)
  return jax.tree.map(take, x)


def _add_at(buffer, start, update):
  """buffer with `update` added at positions [start, start + len) of axis 1 (pytrees alike)."""
  def add(b, u):
    return jax.lax.dynamic_update_slice_in_dim(b, _slice(b, start, u.shape[1]) + u, start, axis=1)
  return jax.tree.map(add, buffer, update)


def _floats(side: Side):
  """The differentiable parts of a side: (near, far, multiplier, decay, farthest)."""
  return side.near, side.far, side.multiplier, side.decay, side.farthest


def _side(floats, positions, index) -> Side:
  near, far, multiplier, decay, farthest = floats
  return Side(near, far, positions, index, multiplier, decay, farthest)


def _zeros_like(x, reference):
  """Zeros shaped like x, computed from `reference` (an array of this call), not a constant: XLA
  shares one constant between the layers of a model and copies it for each layer's loop at the
  start of the program, all alive at once (measured: 128 MiB a layer at 65,536 tokens)."""
  zero = reference.reshape(-1)[0].astype(jnp.float32) * 0.0
  return jax.tree.map(lambda a: jnp.broadcast_to(zero.astype(a.dtype), a.shape), x)


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


def _over_blocks(static: _Blocks, queries: Side, keys: Side, per_query_block, init):
  """Runs per_query_block(block index, queries of the block, key-block loop, carry) -> carry over
  the query blocks; the key-block loop(body, carry) runs body(key start, carry) over the key blocks
  these queries can reach (a while loop: its trip count depends on the block)."""
  batch, padded_keys = keys.positions.shape
  num_key_blocks = padded_keys // static.key_block
  block_positions = keys.positions.reshape(batch, num_key_blocks, static.key_block)
  key_bounds = (block_positions.min(axis=(0, 2)), block_positions.max(axis=(0, 2)))

  def one_query_block(block, carry):
    start = block * static.query_block
    q = _slice(queries, start, static.query_block)
    sinks_end, window_start, causal_end = _key_block_ranges(
        q, key_bounds, query_stop=jnp.minimum(start + static.query_block, static.length),
        key_block=static.key_block, num_key_blocks=num_key_blocks, window=static.window,
        sink_tokens=static.sink_tokens)
    count = sinks_end + jnp.maximum(causal_end - window_start, 0)   # key blocks to score

    def over_keys(body, inner):
      def step(t, inner):
        block_index = jnp.where(t < sinks_end, t, t - sinks_end + window_start)
        return body(block_index * static.key_block, inner)
      return jax.lax.fori_loop(0, count, step, inner)

    return per_query_block(block, q, over_keys, carry)

  num_query_blocks = queries.positions.shape[1] // static.query_block
  return jax.lax.fori_loop(0, num_query_blocks, one_query_block, init)


def _forward(static, scores_fn, q_floats, q_ints, k_floats, k_ints, values, consts):
  """(out [B, Tq, H, E], entropy [B, Tq, H], lse [B, Tq, H]) over the padded queries."""
  queries, keys = _side(q_floats, *q_ints), _side(k_floats, *k_ints)
  batch, padded_queries = queries.positions.shape
  heads, size_e = queries.near.shape[2], values.shape[3]
  q_len = static.query_block

  def per_query_block(block, q, over_keys, outputs):
    def body(key_start, carry):
      m_BxHxQ, l_BxHxQ, c_BxHxQ, acc_BxQxHxE = carry
      scores_BxHxQxK, keep_Bx1xQxK = scores_fn(q, _slice(keys, key_start, static.key_block),
                                               *consts)
      m_new = jnp.maximum(m_BxHxQ, scores_BxHxQxK.max(axis=-1))
      shifted = scores_BxHxQxK - m_new[..., None]
      p_BxHxQxK = jnp.where(keep_Bx1xQxK, jnp.exp(shifted), 0.0)
      rescale = jnp.exp(m_BxHxQ - m_new)
      # c = sum p (s - m): moving m to m_new subtracts (m_new - m) from every kept term.
      # (Masked terms: p = 0 and shifted finite, so they add 0.)
      c_new = (rescale * (c_BxHxQ - (m_new - m_BxHxQ) * l_BxHxQ)
               + jnp.sum(p_BxHxQxK * shifted, axis=-1))
      l_new = rescale * l_BxHxQ + p_BxHxQxK.sum(axis=-1)
      v_BxKxGxE = _slice(values, key_start, static.key_block)
      acc_new = (acc_BxQxHxE * jnp.moveaxis(rescale, 1, 2)[..., None]
                 + grouped_probs_times_values(p_BxHxQxK, v_BxKxGxE, static.dtype))
      return m_new, l_new, c_new, acc_new

    # The lowest float, not -inf: (m_new - m) l stays 0 (not inf x 0) until a key is kept.
    stats = jnp.full((batch, heads, q_len), jnp.finfo(jnp.float32).min, jnp.float32)
    init = (stats, jnp.zeros_like(stats), jnp.zeros_like(stats),
            jnp.zeros((batch, q_len, heads, size_e), jnp.float32))
    m_BxHxQ, l_BxHxQ, c_BxHxQ, acc = over_keys(body, init)
    l_BxHxQ = jnp.where(l_BxHxQ > 0, l_BxHxQ, 1.0)   # (only padded queries can have no key)
    log_l = jnp.log(l_BxHxQ)
    found = (acc / jnp.moveaxis(l_BxHxQ, 1, 2)[..., None],
             jnp.moveaxis(log_l - c_BxHxQ / l_BxHxQ, 1, 2),
             jnp.moveaxis(m_BxHxQ + log_l, 1, 2))
    return tuple(jax.lax.dynamic_update_slice_in_dim(buffer, x, block * q_len, axis=1)
                 for buffer, x in zip(outputs, found))

  outputs = _zeros_like((jax.ShapeDtypeStruct((batch, padded_queries, heads, size_e), jnp.float32),
                         jax.ShapeDtypeStruct((batch, padded_queries, heads), jnp.float32),
                         jax.ShapeDtypeStruct((batch, padded_queries, heads), jnp.float32)),
                        values)
  return _over_blocks(static, queries, keys, per_query_block, outputs)


def _backward(static, scores_fn, residuals, cotangents):
  """Cotangents of (q floats, q ints, k floats, k ints, values, consts), block by block."""
  q_floats, q_ints, k_floats, k_ints, values, consts, out, entropy, lse = residuals
  d_out, d_entropy = cotangents
  queries, keys = _side(q_floats, *q_ints), _side(k_floats, *k_ints)
  # sum_j p_j dp_j = do . o: the softmax's own term of ds.
  do_dot_o = jnp.sum(d_out * out, axis=-1)                                   # [B, Tq, H]
  q_len, k_len = static.query_block, static.key_block
  to_bhq = lambda x: jnp.moveaxis(x, 1, 2)[..., None]                         # [B,Q,H] -> [B,H,Q,1]

  def per_query_block(block, q, over_keys, grads):
    start = block * q_len
    do_i = _slice(d_out, start, q_len)
    lse_i, entropy_i, d_entropy_i, do_dot_o_i = (
        to_bhq(_slice(x, start, q_len)) for x in (lse, entropy, d_entropy, do_dot_o))
    q_ints_i = (q.positions, q.index)

    def body(key_start, inner):
      dq_i, dk, dv, dconsts = inner
      k_floats_j = _slice(k_floats, key_start, k_len)
      k_ints_j = _slice(k_ints, key_start, k_len)
      scores_of = lambda qf, kf, cs: scores_fn(_side(qf, *q_ints_i), _side(kf, *k_ints_j), *cs)
      scores_BxHxQxK, vjp, keep_Bx1xQxK = jax.vjp(scores_of, _floats(q), k_floats_j, consts,
                                                  has_aux=True)
      log_p = scores_BxHxQxK - lse_i
      p_BxHxQxK = jnp.where(keep_Bx1xQxK, jnp.exp(log_p), 0.0)
      v_j = _slice(values, key_start, k_len)
      dp_BxHxQxK = grouped_scores(do_i, v_j, static.dtype)
      # d/ds_j of the output: p_j (dp_j - do . o); of the entropy H: -p_j (log p_j + H).
      ds = p_BxHxQxK * (dp_BxHxQxK - do_dot_o_i - d_entropy_i * (log_p + entropy_i))
      dq_j, dk_j, dconsts_j = vjp(ds)
      return (jax.tree.map(jnp.add, dq_i, dq_j), _add_at(dk, key_start, dk_j),
              _add_at(dv, key_start,
                      grouped_values_grad(p_BxHxQxK, do_i, v_j.shape[2], static.dtype)),
              jax.tree.map(jnp.add, dconsts, dconsts_j))

    dq, dk, dv, dconsts = grads
    dq_i, dk, dv, dconsts = over_keys(body, (_zeros_like(_floats(q), do_i), dk, dv, dconsts))
    dq = jax.tree.map(lambda b, x: jax.lax.dynamic_update_slice_in_dim(b, x, start, axis=1),
                      dq, dq_i)
    return dq, dk, dv, dconsts

  grads = _zeros_like((q_floats, k_floats, values, consts), d_out)
  dq, dk, dv, dconsts = _over_blocks(static, queries, keys, per_query_block, grads)
  return dq, None, dk, None, dv, dconsts


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _attention(static, scores_fn, q_floats, q_ints, k_floats, k_ints, values, consts):
  out, entropy, _ = _forward(static, scores_fn, q_floats, q_ints, k_floats, k_ints, values, consts)
  return out, entropy


def _attention_fwd(static, scores_fn, q_floats, q_ints, k_floats, k_ints, values, consts):
  out, entropy, lse = _forward(static, scores_fn, q_floats, q_ints, k_floats, k_ints, values,
                               consts)
  return (out, entropy), (q_floats, q_ints, k_floats, k_ints, values, consts, out, entropy, lse)


_attention.defvjp(_attention_fwd, _backward)


def blocked_attention(block_scores, queries: Side, keys: Side, values_BxTxGxE, *, query_block: int,
                      key_block: int, window=None, sink_tokens=None, dtype=jnp.float32):
  """Attention of all queries over the key blocks they can reach, with an online softmax.

  block_scores(query Side block, key Side block) -> (scores [B, H, Q, K] with masked entries at a
    large negative value, keep [B, 1, Q, K]). Arrays it closes over (learned biases) get their
    gradients too.
  window, sink_tokens: as in Mods (used only to bound the key blocks; the mask is
    block_scores').
  dtype: probabilities x values (and its backward products) take their inputs in it, summed in
    float32 (keynorm_jax/precision.py); block_scores rounds q and k itself. Every running sum and
    gradient accumulates in float32 whatever it is.

  Returns (out [B, T, H, E] float32, entropy [B, T, H]).
  """
  length = queries.positions.shape[1]
  queries = _padded(queries, -(-length // query_block) * query_block)
  keys = _padded(keys, -(-length // key_block) * key_block)
  values = _pad_to(values_BxTxGxE, keys.positions.shape[1], "constant")
  # The arrays block_scores closes over become explicit inputs of the custom VJP.
  scores_fn, consts = jax.closure_convert(block_scores, _slice(queries, 0, query_block),
                                          _slice(keys, 0, key_block))
  static = _Blocks(query_block, key_block, length, window, sink_tokens, jnp.dtype(dtype))
  out, entropy = _attention(static, scores_fn, _floats(queries), (queries.positions, queries.index),
                            _floats(keys), (keys.positions, keys.index), values, consts)
  return out[:, :length], entropy[:, :length]


def run(prepared, blocks=None):
  """The kernel: blocks = (queries, keys) per block, default DEFAULT_BLOCK each. The products take
  their inputs in the values' dtype (the model's compute dtype)."""
  dtype = prepared.values.dtype
  p = prepared._replace(values=prepared.values.astype(jnp.float32))
  length = p.values.shape[1]
  query_block, key_block = (min(b, length) for b in (blocks or (DEFAULT_BLOCK, DEFAULT_BLOCK)))
  product = functools.partial(grouped_scores, dtype=dtype)
  return blocked_attention(lambda queries, keys: block_scores(p.mods, queries, keys, product),
                           p.queries, p.keys, p.values, query_block=query_block,
                           key_block=key_block, window=p.mods.window,
                           sink_tokens=p.mods.sink_tokens, dtype=dtype)


KERNEL = Kernel("blocked", "query and key blocks with an online softmax, skipping empty blocks "
                "(bounded memory at any length)", run,
                refusal=lambda mods, shape: needs_whole_rows(mods),
                pair_run=path_runs.by_chunks)
