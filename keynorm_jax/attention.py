"""Causal softmax attention variants of the KeyNorm study, as pure functions.

Scores a_ij before the causal mask (q, k after RoPE; S = qk size):

  baseline  q_i . k_j / sqrt(S)
  qna       (q_i / ||q_i||) . k_j
  kna       q_i . (k_j / ||k_j||)
  cosa      lambda * cos(q_i, k_j)

Optional per-query factors multiply every score of query i (position p_i):
  trained "log n"  log(p_i + 1) / log(n0)                (logn_base = n0)
  post-hoc log n   max(1, log(p_i + 1) / log(L_train))   (inference only)
  YaRN             attention_factor ** 2

ReRoPE (bojone/rerope): relative position t = p_i - p_j becomes w where t >= w (leaky: w + (t - w)/k),
computed as two score matrices joined with where(t < w). L2 normalization commutes with the rotation,
so it is applied before RoPE. Softmax runs in float32.
"""

import math

import jax
import jax.numpy as jnp

from keynorm_jax.rope import apply_rope

VARIANTS = ("baseline", "qna", "kna", "cosa")
_MASKED = -1e30
_FULL_ATTENTION_MAX_LENGTH = 2048  # longer sequences are processed in query blocks
_DEFAULT_QUERY_BLOCK = 512


def query_block_size(length: int) -> int:
  """Queries per block: all at once up to 2048 tokens, else blocks of 512 (bounded memory)."""
  return length if length <= _FULL_ATTENTION_MAX_LENGTH else _DEFAULT_QUERY_BLOCK


def l2_normalize(x, eps=1e-12):
  """x / ||x|| over the last axis."""
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def cosa_default_scale(train_length: int) -> float:
  """CosA's lambda = 4 log n with n = half the training length."""
  return 4.0 * math.log(train_length / 2)


def _check_options(variant, cosa_scale, rerope_window, leaky_rerope_factor, logn_base):
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


def _score_scale(variant, size, cosa_scale):
  return {"baseline": 1.0 / math.sqrt(size), "qna": 1.0, "kna": 1.0, "cosa": cosa_scale}[variant]


def _query_multiplier(positions_BxT, logn_base, posthoc_logn_length):
  """Per-query factor on the scores: trained log n times post-hoc log n (ones when neither)."""
  log_n = jnp.log(positions_BxT.astype(jnp.float32) + 1.0)
  multiplier = jnp.ones_like(log_n)
  if logn_base is not None:
    multiplier = multiplier * log_n / math.log(logn_base)
  if posthoc_logn_length is not None:
    multiplier = multiplier * jnp.maximum(1.0, log_n / math.log(posthoc_logn_length))
  return multiplier


def attend(q, k, v, *, variant, inv_freq=None, positions=None, logn_base=None,
           attention_factor=1.0, rerope_window=None, leaky_rerope_factor=None, cosa_scale=None,
           posthoc_logn_length=None, query_block=None):
  """Causal attention; returns (o [B, T, E], attention entropy [B, T] in nats).

  Same arguments as `causal_attention`, plus `posthoc_logn_length` (L_train of the inference-only
  log n) and `query_block` (queries per block; default: all at once up to 2048 tokens, else 512).
  """
  _check_options(variant, cosa_scale, rerope_window, leaky_rerope_factor, logn_base)
  batch, length, size = q.shape
  q, k = q.astype(jnp.float32), k.astype(jnp.float32)
  if positions is None:
    positions = jnp.arange(length)
  positions_BxT = jnp.broadcast_to(positions, (batch, length))
  if variant in ("qna", "cosa"):
    q = l2_normalize(q)
  if variant in ("kna", "cosa"):
    k = l2_normalize(k)
  scale = _score_scale(variant, size, cosa_scale) * attention_factor**2
  multiplier_BxT = scale * _query_multiplier(positions_BxT, logn_base, posthoc_logn_length)

  q_near, k_near, q_far, k_far = q, k, None, None
  if inv_freq is not None:
    q_near, k_near = apply_rope(q, positions_BxT, inv_freq), apply_rope(k, positions_BxT, inv_freq)
    if rerope_window is not None:
      w, leak = float(rerope_window), float(leaky_rerope_factor or math.inf)
      # q at p_i / leak + w (1 - 1/leak) against k at p_j / leak: relative w + (t - w) / leak.
      q_far = apply_rope(q, positions_BxT / leak + w * (1 - 1 / leak), inv_freq)
      k_far = apply_rope(k, positions_BxT / leak, inv_freq)
  key_index = jnp.arange(length)

  def one_block(q_near_BxQxS, q_far_BxQxS, positions_BxQ, multiplier_BxQ, query_index_Q):
    scores_BxQxT = jnp.einsum("bqs,bks->bqk", q_near_BxQxS, k_near)
    if q_far_BxQxS is not None:
      far_BxQxT = jnp.einsum("bqs,bks->bqk", q_far_BxQxS, k_far)
      relative_BxQxT = positions_BxQ[:, :, None] - positions_BxT[:, None, :]
      scores_BxQxT = jnp.where(relative_BxQxT < rerope_window, scores_BxQxT, far_BxQxT)
    scores_BxQxT = scores_BxQxT * multiplier_BxQ[:, :, None]
    causal_QxT = query_index_Q[:, None] >= key_index[None, :]
    scores_BxQxT = jnp.where(causal_QxT, scores_BxQxT, _MASKED)
    probs_BxQxT = jax.nn.softmax(scores_BxQxT, axis=-1)
    out_BxQxE = jnp.einsum("bqk,bke->bqe", probs_BxQxT, v.astype(jnp.float32))
    log_probs = jnp.where(causal_QxT, jax.nn.log_softmax(scores_BxQxT, axis=-1), 0.0)
    entropy_BxQ = -jnp.sum(probs_BxQxT * log_probs, axis=-1)
    return out_BxQxE, entropy_BxQ

  if query_block is None:
    query_block = query_block_size(length)
  if query_block >= length:
    out, entropy = one_block(q_near, q_far, positions_BxT, multiplier_BxT, key_index)
    return out.astype(v.dtype), entropy

  num_blocks = -(-length // query_block)
  pad = num_blocks * query_block - length

  def to_blocks(x):  # [B, T, ...] -> [num_blocks, B, query_block, ...]
    if x is None:
      return None
    x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    x = x.reshape((batch, num_blocks, query_block) + x.shape[2:])
    return jnp.moveaxis(x, 1, 0)

  query_index = jnp.arange(num_blocks * query_block).reshape(num_blocks, query_block)
  blocks = (to_blocks(q_near), to_blocks(q_far), to_blocks(positions_BxT),
            to_blocks(multiplier_BxT), query_index)
  out_NxBxQxE, entropy_NxBxQ = jax.lax.map(lambda xs: one_block(*xs), blocks)
  out = jnp.moveaxis(out_NxBxQxE, 0, 1).reshape(batch, -1, v.shape[-1])[:, :length]
  entropy = jnp.moveaxis(entropy_NxBxQ, 0, 1).reshape(batch, -1)[:, :length]
  return out.astype(v.dtype), entropy


def causal_attention(q, k, v, *, variant, inv_freq=None, positions=None, logn_base=None,
                     attention_factor=1.0, rerope_window=None, leaky_rerope_factor=None,
                     cosa_scale=None):
  """Causal softmax attention of one variant.

  Args:
    q, k: [B, T, S] queries and keys before RoPE.
    v: [B, T, E] values.
    variant: "baseline", "qna", "kna" or "cosa".
    inv_freq: [S // 2] RoPE inverse frequencies (see rope.rope_inv_freq); None for NoPE.
    positions: [T] or [B, T] position ids; default 0..T-1.
    logn_base: n0 of the trained log n factor log(p_i + 1) / log(n0); None turns it off.
    attention_factor: every score is multiplied by attention_factor ** 2 (YaRN).
    rerope_window: ReRoPE window w; relative positions >= w are clipped to w.
    leaky_rerope_factor: k of leaky ReRoPE: t -> w + (t - w) / k beyond the window.
    cosa_scale: CosA's lambda; required for "cosa".

  Returns:
    o: [B, T, E].
  """
  out, _ = attend(q, k, v, variant=variant, inv_freq=inv_freq, positions=positions,
                  logn_base=logn_base, attention_factor=attention_factor,
                  rerope_window=rerope_window, leaky_rerope_factor=leaky_rerope_factor,
                  cosa_scale=cosa_scale)
  return out
