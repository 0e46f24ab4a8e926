"""Causal softmax attention of the KeyNorm study and its position methods, as pure functions.

Scores a_ij before the causal mask (q, k after RoPE; S = head size), one head at a time:

  baseline  q_i . k_j / sqrt(S)
  qna       (q_i / ||q_i||) . k_j
  kna       q_i . (k_j / ||k_j||)
  cosa      lambda * cos(q_i, k_j)

Per-query factors multiply every score of query i (position p_i):
  trained "log n"  log(p_i + 1) / log(n0)                (logn_base = n0)
  post-hoc log n   max(1, log(p_i + 1) / log(L_train))   (inference only; on the scores, not on q
                   as bojone/rerope does: the same for baseline and kna, not for qna and cosa,
                   whose normalization of q would cancel a factor on q)
  SSMax            s_h log(p_i + 1)                      (learnable s per head)
  YaRN             attention_factor ** 2
Biases are added after those factors: ALiBi -m_h (p_i - p_j), or a learned bias (KERPLE, FIRE).
Masks: causal; `window` keeps 0 <= p_i - p_j < w; `sink_tokens` k also keeps keys p_j < k.

ReRoPE (bojone/rerope): relative position t = p_i - p_j becomes w where t >= w (leaky: w + (t - w)/k),
computed as two score matrices joined with where(t < w). Streaming (attention sinks) scores a sink
key outside the window at its position in the StreamingLLM cache, (k + w - 1) - p_j, the same way.
L2 normalization commutes with the rotation, so it is applied before RoPE. Softmax runs in float32.
Inputs are [B, T, S] (one head) or [B, T, H, S] (keys and values may have fewer heads: GQA).
"""

import math

import jax
import jax.numpy as jnp

from keynorm_jax.attention.blocked import Side, blocked_attention
from keynorm_jax.attention.products import probs_times_values, query_key_scores
from keynorm_jax.fusion_boundary import own_op
from keynorm_jax.rope import rope_table, rotate_by
from keynorm_jax.trace_switch import TraceSwitch

VARIANTS = ("baseline", "qna", "kna", "cosa")
_MASKED = -1e30
_FULL_ATTENTION_MAX_LENGTH = 2048  # longer sequences are processed in blocks (blocked.py)
_DEFAULT_QUERY_BLOCK = 512
_DEFAULT_KEY_BLOCK = 512
_CAUSAL_QUERY_BLOCKS = TraceSwitch(4)  # query blocks of the full path (full_square(): 1)


def query_block_size(length: int) -> int:
  """Queries per block: all at once up to 2048 tokens, else blocks of 512 (bounded memory)."""
  return length if length <= _FULL_ATTENTION_MAX_LENGTH else _DEFAULT_QUERY_BLOCK


def block_sizes(length: int, query_block=None, key_block=None):
  """(queries, keys) per block of `attend`, or (None, None) for every score at once.

  Default: all at once up to 2048 tokens, else 512 x 512. Either size given alone sets the other.
  """
  if query_block is None and key_block is None:
    query_block = query_block_size(length)
    key_block = length if query_block >= length else _DEFAULT_KEY_BLOCK
  query_block = query_block or key_block
  key_block = key_block or query_block
  if query_block < 1 or key_block < 1:
    raise ValueError(f"Block sizes must be >= 1, got {query_block} queries x {key_block} keys.")
  if query_block >= length and key_block >= length:
    return None, None
  return min(query_block, length), min(key_block, length)


def l2_normalize(x, eps=1e-12):
  """x / ||x|| over the last axis."""
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def cosa_default_scale(train_length: int) -> float:
  """CosA's lambda = 4 log n with n = half the training length."""
  return 4.0 * math.log(train_length / 2)


def _check_options(variant, cosa_scale, rerope_window, leaky_rerope_factor, logn_base, window,
                   sink_tokens, inv_freq, xpos_gamma):
  if variant not in VARIANTS:
    raise ValueError(f"Unknown attention variant {variant!r}; choose one of {', '.join(VARIANTS)}.")
  if variant == "cosa" and cosa_scale is None:
    raise ValueError("variant 'cosa' needs cosa_scale (lambda, e.g. 4 log(train_length / 2)).")
  if leaky_rerope_factor is not None and rerope_window is None:
    raise ValueError("leaky_rerope_factor needs rerope_window (the window w).")
  if rerope_window is not None and rerope_window < 1:
    raise ValueError(f"rerope_window must be >= 1, got {rerope_window}.")
  if leaky_rerope_factor is not None and leaky_rerope_factor < 1:
    raise ValueError(f"leaky_rerope_factor must be >= 1, got {leaky_rerope_factor}.")
  if logn_base is not None and logn_base <= 1:
    raise ValueError(f"logn_base (n0) must be > 1, got {logn_base}.")
  if window is not None and window < 1:
    raise ValueError(f"window must be >= 1, got {window}.")
  if sink_tokens is not None and window is None:
    raise ValueError("sink_tokens needs window (StreamingLLM keeps the sinks plus a window).")
  if sink_tokens is not None and rerope_window is not None:
    raise ValueError("sink_tokens and rerope_window cannot be combined (both re-place far keys).")
  if xpos_gamma is not None and inv_freq is None:
    raise ValueError("xpos_gamma needs inv_freq (xPos is a RoPE).")


def _score_scale(variant, size, cosa_scale):
  return {"baseline": 1.0 / math.sqrt(size), "qna": 1.0, "kna": 1.0, "cosa": cosa_scale}[variant]


def _query_multiplier(positions_BxT, logn_base, posthoc_logn_length, ssmax_scale):
  """[B, T, H or 1] factor on the scores: trained log n x post-hoc log n x SSMax."""
  log_n = jnp.log(positions_BxT.astype(jnp.float32) + 1.0)[:, :, None]
  multiplier = jnp.ones_like(log_n)
  if logn_base is not None:
    multiplier = multiplier * log_n / math.log(logn_base)
  if posthoc_logn_length is not None:
    multiplier = multiplier * jnp.maximum(1.0, log_n / math.log(posthoc_logn_length))
  if ssmax_scale is not None:
    multiplier = multiplier * jnp.asarray(ssmax_scale, jnp.float32) * log_n
  return multiplier


def _xpos_scale(positions_BxT, inv_freq, gamma, scale_base, sign):
  """[B, T, 1, S] xPos factor zeta_m^(sign (p - c) / scale_base) on both halves of pair m.

  zeta_m = (2m/S + gamma) / (1 + gamma) over the pair index m (m = 0 the highest frequency). The
  positions are centred on c = the middle of each row's positions; q and k use the same c, so
  scores (zeta^((p_i - p_j) / scale_base)) do not change while the factors stay near 1.
  """
  pairs = inv_freq.shape[-1]
  zeta = (jnp.arange(pairs, dtype=jnp.float32) * 2 / (2 * pairs) + gamma) / (1 + gamma)
  p = positions_BxT.astype(jnp.float32)
  centre = (p.max(axis=1, keepdims=True) + p.min(axis=1, keepdims=True)) / 2
  power = sign * (p - centre) / scale_base
  scale = zeta ** power[:, :, None, None]                                    # [B, T, 1, S/2]
  return jnp.concatenate([scale, scale], axis=-1)


def attend(q, k, v, *, variant, inv_freq=None, positions=None, logn_base=None,
           attention_factor=1.0, rerope_window=None, leaky_rerope_factor=None, cosa_scale=None,
           posthoc_logn_length=None, alibi_slope=None, window=None, sink_tokens=None,
           xpos_gamma=None, xpos_scale_base=512.0, score_bias=None, ssmax_scale=None,
           query_block=None, key_block=None):
  """Causal attention; returns (o, attention entropy in nats).

  Same arguments as `causal_attention`, plus:
    posthoc_logn_length: L_train of the inference-only log n.
    xpos_gamma, xpos_scale_base: xPos decay on top of RoPE (needs inv_freq).
    score_bias: callable(relative [B, Q, K] float32, query positions [B, Q]) -> bias broadcastable
      to [B, H, Q, K] (learned biases: KERPLE, FIRE); relative is the key's (cache) distance.
    ssmax_scale: SSMax's s, a scalar or [H].
    query_block, key_block: queries and keys per block (default: block_sizes'). In blocks, the
      online softmax of blocked.py skips every key block that the causal mask, the window or the
      sinks leave empty; the numbers are the same.

  Returns:
    o with v's layout ([B, T, E] or [B, T, H, E]); entropy [B, T] (or [B, T, H]).
  """
  _check_options(variant, cosa_scale, rerope_window, leaky_rerope_factor, logn_base, window,
                 sink_tokens, inv_freq, xpos_gamma)
  single_head = q.ndim == 3
  if single_head:
    q, k, v = q[:, :, None], k[:, :, None], v[:, :, None]
  batch, length, heads, size = q.shape
  if heads % k.shape[2]:
    raise ValueError(f"{heads} query heads cannot share {k.shape[2]} key/value heads evenly.")
  if k.shape[2] != heads:  # (a repeat by 1 would still copy: 128 MiB of v at 65,536 tokens)
    k, v = (jnp.repeat(x, heads // x.shape[2], axis=2) for x in (k, v))
  v32 = v.astype(jnp.float32)
  q, k = q.astype(jnp.float32), k.astype(jnp.float32)
  if positions is None:
    positions = jnp.arange(length)
  positions_BxT = jnp.broadcast_to(positions, (batch, length))
  if variant in ("qna", "cosa"):
    q = l2_normalize(q)
  if variant in ("kna", "cosa"):
    k = l2_normalize(k)
  scale = _score_scale(variant, size, cosa_scale) * attention_factor**2
  multiplier_BxTxH = jnp.broadcast_to(
      scale * _query_multiplier(positions_BxT, logn_base, posthoc_logn_length, ssmax_scale),
      (batch, length, heads))

  def rotate(x, positions_at, sign, table=None):
    if inv_freq is None:
      return x
    if table is None:
      table = rope_table(positions_at[:, :, None], inv_freq)
    x = rotate_by(x, table)
    if xpos_gamma is not None:
      x = x * _xpos_scale(positions_at, inv_freq, xpos_gamma, xpos_scale_base, sign)
    return x

  # q and k at their own positions share one table, over the positions as given ([T] or [B, T])
  # rather than broadcast to the batch. On the full path (training) it is computed once as its own
  # op (fusion_boundary: XLA's CPU backend would otherwise recompute cos and sin inside every fusion
  # that rotates); in blocks (long evaluation) XLA may fuse it: it is read once, and a table of its
  # own would add its size to the temporaries (0.09 GiB for the `cpu` GAU at 65,536 tokens).
  query_block, key_block = block_sizes(length, query_block, key_block)
  near_table = None
  if inv_freq is not None:
    make_table = lambda p: rope_table(p, inv_freq)
    at = jnp.asarray(positions)[..., None]
    near_table = own_op(make_table, at) if query_block is None else make_table(at)
  q_near = rotate(q, positions_BxT, 1.0, near_table)
  k_near = rotate(k, positions_BxT, -1.0, near_table)
  q_far = k_far = None
  far_from = None       # relative distance from which a key is scored by the far matrices
  if inv_freq is not None and rerope_window is not None:
    w, leak = float(rerope_window), float(leaky_rerope_factor or math.inf)
    # q at p_i / leak + w (1 - 1/leak) against k at p_j / leak: relative w + (t - w) / leak.
    far_from = rerope_window
    q_far = rotate(q, positions_BxT / leak + w * (1 - 1 / leak), 1.0)
    k_far = rotate(k, positions_BxT / leak, -1.0)
  elif inv_freq is not None and sink_tokens is not None:
    far_from = window     # q sits at the cache's last slot k + w - 1, a sink key at p_j
    q_far = rotate(q, jnp.full_like(positions_BxT, sink_tokens + window - 1), 1.0)
    k_far = k_near
  bias_slopes = None if alibi_slope is None else jnp.asarray(alibi_slope, jnp.float32)

  def block_scores(queries: Side, keys: Side):
    """Scores [B, H, Q, K] of a block of queries against a block of keys, masked with _MASKED
    where keep [B, 1, Q, K] is False (causal by index; window, sinks by position)."""
    scores_BxHxQxK = query_key_scores(queries.near, keys.near)
    relative_BxQxK = (queries.positions[:, :, None]
                      - keys.positions[:, None, :]).astype(jnp.float32)
    if queries.far is not None:
      far_BxHxQxK = query_key_scores(queries.far, keys.far)
      scores_BxHxQxK = jnp.where((relative_BxQxK < far_from)[:, None], scores_BxHxQxK,
                                 far_BxHxQxK)
    scores_BxHxQxK = scores_BxHxQxK * jnp.moveaxis(queries.multiplier, 2, 1)[..., None]
    distance_BxQxK = relative_BxQxK
    if sink_tokens is not None:
      cache_distance = (sink_tokens + window - 1) - keys.positions[:, None, :].astype(jnp.float32)
      distance_BxQxK = jnp.where(relative_BxQxK < window, relative_BxQxK, cache_distance)
    if bias_slopes is not None:
      slopes_H = jnp.broadcast_to(bias_slopes, (heads,))
      scores_BxHxQxK = scores_BxHxQxK - slopes_H[None, :, None, None] * distance_BxQxK[:, None]
    if score_bias is not None:
      scores_BxHxQxK = scores_BxHxQxK + score_bias(distance_BxQxK, queries.positions)
    keep_QxK = queries.index[:, None] >= keys.index[None, :]
    keep_BxQxK = jnp.broadcast_to(keep_QxK, relative_BxQxK.shape)
    if window is not None:
      near = relative_BxQxK < window
      if sink_tokens is not None:
        near = near | (keys.positions[:, None, :] < sink_tokens)
      keep_BxQxK = keep_BxQxK & near
    keep_Bx1xQxK = keep_BxQxK[:, None]
    return jnp.where(keep_Bx1xQxK, scores_BxHxQxK, _MASKED), keep_Bx1xQxK

  index = jnp.arange(length)
  queries = Side(q_near, q_far, positions_BxT, index, multiplier_BxTxH)
  keys = Side(k_near, k_far, positions_BxT, index)
  if query_block is None:
    out, entropy = _full(block_scores, queries, keys, v32)
  else:
    out, entropy = blocked_attention(block_scores, queries, keys, v32, query_block=query_block,
                                     key_block=key_block, window=window, sink_tokens=sink_tokens)
  out = out.astype(v.dtype)
  if single_head:
    return out[:, :, 0], entropy[:, :, 0]
  return out, entropy


def causal_query_blocks(length: int) -> list:
  """[(start, stop)] of the query blocks of the full path: on the CPU backend
  _CAUSAL_QUERY_BLOCKS.value equal blocks (fewer for lengths shorter than that), elsewhere one (the
  blocks were measured on the CPU only; accelerators run the fused path where they can)."""
  wanted = _CAUSAL_QUERY_BLOCKS.value if jax.default_backend() == "cpu" else 1  # measured on CPU
  blocks = max(1, min(wanted, length))
  bounds = [length * i // blocks for i in range(blocks + 1)]
  return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def full_square():
  """Within: `attend` traced scores every query against every key in one block (the reference
  for the causal query blocks, for tests and A/B timings)."""
  return _CAUSAL_QUERY_BLOCKS.set_to(1)


def _full(block_scores, queries, keys, values_BxTxHxE):
  """Every query against every key it can see, in a few query blocks, each against the keys up to
  its last query (the keys after it are masked for all of its queries by causality, so leaving
  them out changes no number; it skips 3/8 of the T x T square with 4 blocks)."""
  pieces = []
  for start, stop in causal_query_blocks(values_BxTxHxE.shape[1]):
    block_queries = jax.tree.map(lambda x, a=start, b=stop: _positions_slice(x, a, b), queries)
    block_keys = jax.tree.map(lambda x, b=stop: _positions_slice(x, 0, b), keys)
    pieces.append(_full_block(block_scores, block_queries, block_keys,
                              values_BxTxHxE[:, :stop]))
  if len(pieces) == 1:
    return pieces[0]
  return tuple(jnp.concatenate(parts, axis=1) for parts in zip(*pieces))


def _positions_slice(x, start: int, stop: int):
  """Positions [start, stop) of a Side's array: axis 0 of an index, else axis 1."""
  return x[start:stop] if x.ndim == 1 else x[:, start:stop]


def _full_block(block_scores, queries, keys, values_BxTxHxE):
  """Every query against every key at once: the reference softmax and entropy."""
  scores_BxHxQxT, keep_Bx1xQxT = block_scores(queries, keys)
  probs_BxHxQxT = jax.nn.softmax(scores_BxHxQxT, axis=-1)
  out_BxQxHxE = probs_times_values(probs_BxHxQxT, values_BxTxHxE)
  log_probs = jnp.where(keep_Bx1xQxT, jax.nn.log_softmax(scores_BxHxQxT, axis=-1), 0.0)
  entropy_BxQxH = jnp.moveaxis(-jnp.sum(probs_BxHxQxT * log_probs, axis=-1), 1, 2)
  return out_BxQxHxE, entropy_BxQxH


def causal_attention(q, k, v, *, variant, inv_freq=None, positions=None, logn_base=None,
                     attention_factor=1.0, rerope_window=None, leaky_rerope_factor=None,
                     cosa_scale=None, alibi_slope=None, window=None, sink_tokens=None):
  """Causal softmax attention of one variant.

  Args:
    q, k: [B, T, S] queries and keys before RoPE ([B, T, H, S] for several heads).
    v: [B, T, E] values ([B, T, H, E]).
    variant: "baseline", "qna", "kna" or "cosa".
    inv_freq: [S // 2] RoPE inverse frequencies (see rope.rope_inv_freq); None for NoPE.
    positions: [T] or [B, T] position ids; default 0..T-1.
    logn_base: n0 of the trained log n factor log(p_i + 1) / log(n0); None turns it off.
    attention_factor: every score is multiplied by attention_factor ** 2 (YaRN).
    rerope_window: ReRoPE window w; relative positions >= w are clipped to w.
    leaky_rerope_factor: k of leaky ReRoPE: t -> w + (t - w) / k beyond the window.
    cosa_scale: CosA's lambda; required for "cosa".
    alibi_slope: ALiBi slope m (a float, or [H] per head): -m (i - j) is added to the scores
      after the variant's scale.
    window: keep only keys with 0 <= i - j < window.
    sink_tokens: with window, also keep keys j < sink_tokens; a sink key outside the window sits
      at relative position (sink_tokens + window - 1) - j, its place in the StreamingLLM cache.

  Returns:
    o: [B, T, E] ([B, T, H, E]).
  """
  out, _ = attend(q, k, v, variant=variant, inv_freq=inv_freq, positions=positions,
                  logn_base=logn_base, attention_factor=attention_factor,
                  rerope_window=rerope_window, leaky_rerope_factor=leaky_rerope_factor,
                  cosa_scale=cosa_scale, alibi_slope=alibi_slope, window=window,
                  sink_tokens=sink_tokens)
  return out
