"""Attention's preparation: everything a kernel needs besides the softmax, computed once.

Scores a_ij before the causal mask (q, k after RoPE; S = head size), one head at a time:

  baseline  q_i . k_j / sqrt(S)
  qna       (q_i / ||q_i||) . k_j
  kna       q_i . (k_j / ||k_j||)
  cosa      lambda * cos(q_i, k_j)
  stickbreaking  q_i . k_j / sqrt(S), weighted by stick-breaking instead of the softmax (Tan et al.
            2025): A_ij = sigmoid(s_ij) prod_{j<k<i} (1 - sigmoid(s_ik)) over the kept keys j < i
            (the current token is not attended, as the paper's code by default; scores.py)

Per-query factors multiply every score of query i (position p_i):
  trained "log n"  log(p_i + 1) / log(n0)                (logn_base = n0)
  post-hoc log n   max(1, log(p_i + 1) / log(L_train))   (inference only; on the scores, not on q
                   as bojone/rerope does: the same for baseline and kna, not for qna and cosa,
                   whose normalization of q would cancel a factor on q)
  SSMax            s_h log(p_i + 1)                      (learnable s per head)
  YaRN             attention_factor ** 2
  temperature      logit_scale (an inference-time temperature rule: YaRN's, DroPE's)
  Llama 4          1 + a log(1 + floor((p_i + 1) / F))   (llama4_temperature = (a, F))
  post-hoc SSMax   s log(p_i + 1)                        (posthoc_ssmax = s)
Biases are added after those factors: ALiBi -m_h (p_i - p_j), or a learned bias (KERPLE, FIRE);
Scale-invariant attention turns a score S at distance t into a_t S + m_t before the biases
(scores.scale_invariant). CoPE (Golovneva et al. 2024) adds q_i . e[p_ij], its contextual position
p_ij = sum_{t=j..i} sigmoid(s_it) interpolating the learned embeddings e [S, npos] (scores.cope). FoX's forget gates (log_forget = log f_t per head) add sum_{l=j+1..i} log f_l = c_i - c_j, with
c_t = sum_{l<=t} log f_l computed here once (both sides carry c as `decay`).
Masks: causal; `window` keeps 0 <= p_i - p_j < w; `sink_tokens` k also keeps keys p_j < k.

ReRoPE (bojone/rerope): relative position t = p_i - p_j becomes w where t >= w (leaky: w + (t - w)/k),
computed as two score matrices joined with where(t < w). Self-Extend (Jin et al. 2024,
datamllab/LongLM) joins the same way, its far pair rotated at grouped positions: the query at
floor(p_i / G) + w - floor(w / G), the key at floor(p_j / G); so does STRING (An et al. 2024,
HKUNLP/STRING) with the shift S as w: distances t >= S become t - S + W (the query at p_i - S + W,
the key where it is). Dual chunk attention (An et al. 2024, the paper's eq. 2-8 with w = c - s)
chooses by chunk (size s) instead: the same chunk scores at the true positions, the next chunk with
the query at min(s + p_i mod s, c - 1) and the key at p_j mod s (far), any earlier chunk with the
query at c - 1 (farthest). Streaming (attention sinks) scores a sink
key outside the window at its position in the StreamingLLM cache, (k + w - 1) - p_j, the same way.
L2 normalization commutes with the rotation, so it is applied before RoPE. Everything in float32.

`prepare` turns q, k, v and these options into a `Prepared`: the rotated queries and keys (and
their second rotation for ReRoPE and sinks), each query's factor (the variant's scale included, so
that multiplier x q . k is the score before biases), the values, and `Mods`, the small record of
what is added or masked after the product (attention/scores.py applies it). Kernels
(attention/kernels/) take a Prepared; none of them repeats this work.
"""

import math
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from keynorm_jax.cpu.boundary import own_op
from keynorm_jax.rope import rope_table, rotate_by

VARIANTS = ("baseline", "qna", "kna", "cosa", "stickbreaking")


class Side(NamedTuple):
  """The per-position inputs of one side (queries or keys) of attention.

  near: [B, N, H, S] rotated at the positions; far: the second rotation (ReRoPE, sinks) or None;
  farthest: DCA's third rotation of the queries (inter-chunk; its keys are `far`) or None;
  positions: [B, N]; index: [N] sequence index (the causal mask); multiplier: [B, N, H] factor on
  the scores (queries only); decay: [B, N, H] FoX's cumulative log forget gate c (or None).
  """
  near: jax.Array
  far: Optional[jax.Array]
  positions: jax.Array
  index: jax.Array
  multiplier: Optional[jax.Array] = None
  decay: Optional[jax.Array] = None
  farthest: Optional[jax.Array] = None


class Mods(NamedTuple):
  """What a kernel adds to or masks in q . k x multiplier (static, except the arrays named)."""
  alibi_slopes: Optional[jax.Array] = None   # [H] float32: -m_h (distance) added
  score_bias: Optional[Callable] = None      # learned bias(distance [B, Q, K], query positions)
  window: Optional[int] = None               # keep 0 <= p_i - p_j < window
  sink_tokens: Optional[int] = None          # with window: also keep p_j < sink_tokens
  far_from: Optional[int] = None             # distance from which the far rotation scores
  explicit_positions: bool = False           # positions were given (not 0..T-1 by index)
  forget_gate: bool = False                  # FoX: c_i - c_j of the sides' decay added
  scale_invariant_tau: Optional[float] = None  # a_t score + m_t at distance t (scores.py)
  stick_breaking: bool = False               # stick-breaking weights instead of the softmax
  cope_embeddings: Optional[jax.Array] = None  # [S, npos]: CoPE's position embeddings
  dca_chunk: Optional[int] = None            # DCA: near within a chunk, far / farthest across


class Prepared(NamedTuple):
  """A kernel's input: queries [B, T, H, S] and keys [B, T, Hkv, S] (float32), values
  [B, T, Hkv, E] as given."""
  queries: Side
  keys: Side
  values: jax.Array
  mods: Mods


def l2_normalize(x, eps=1e-12):
  """x / ||x|| over the last axis."""
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def cosa_default_scale(train_length: int) -> float:
  """CosA's lambda = 4 log n with n = half the training length."""
  return 4.0 * math.log(train_length / 2)


def check_options(variant, cosa_scale=None, rerope_window=None, leaky_rerope_factor=None,
                  logn_base=None, window=None, sink_tokens=None, inv_freq=None, xpos_gamma=None,
                  self_extend_group=None, scale_invariant_tau=None, string_window=None):
  """Raises ValueError naming the first option that is out of range or lacks its partner."""
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
  if scale_invariant_tau is not None and not scale_invariant_tau > 0:
    raise ValueError(f"scale_invariant_tau (tau of log(1 + t / tau)) must be > 0, got "
                     f"{scale_invariant_tau}.")
  if string_window is not None:
    if rerope_window is None or leaky_rerope_factor is not None or self_extend_group is not None:
      raise ValueError("string_window needs rerope_window (STRING's shift S) and neither "
                       "leaky_rerope_factor nor self_extend_group.")
    if not 0 <= string_window <= rerope_window:
      raise ValueError(f"string_window (STRING's local window W) must be in [0, S = "
                       f"{rerope_window}] (shifted distances stay below the unshifted ones), got "
                       f"{string_window}.")
  if self_extend_group is not None:
    if rerope_window is None or leaky_rerope_factor is not None:
      raise ValueError("self_extend_group needs rerope_window (Self-Extend's neighbor window) and "
                       "no leaky_rerope_factor.")
    if self_extend_group < 1:
      raise ValueError(f"self_extend_group (Self-Extend's group size G) must be >= 1, got "
                       f"{self_extend_group}.")


def mods_of(*, variant=None, inv_freq=None, positions=None, rerope_window=None, alibi_slope=None,
            window=None, sink_tokens=None, score_bias=None, log_forget=None,
            scale_invariant_tau=None, cope_embeddings=None, dca_chunk=None, **_) -> Mods:
  """The Mods of attend's options (no array work: kernels are chosen from it before preparing)."""
  far_from = None
  if inv_freq is not None and rerope_window is not None:
    far_from = rerope_window
  elif inv_freq is not None and sink_tokens is not None:
    far_from = window     # q sits at the cache's last slot k + w - 1, a sink key at p_j
  slopes = None if alibi_slope is None else jnp.asarray(alibi_slope, jnp.float32)
  return Mods(alibi_slopes=slopes, score_bias=score_bias, window=window, sink_tokens=sink_tokens,
              far_from=far_from, explicit_positions=positions is not None,
              forget_gate=log_forget is not None,
              scale_invariant_tau=None if scale_invariant_tau is None else float(scale_invariant_tau),
              stick_breaking=variant == "stickbreaking",
              cope_embeddings=None if cope_embeddings is None else jnp.asarray(cope_embeddings),
              dca_chunk=dca_chunk if inv_freq is not None else None)


def _score_scale(variant, size, cosa_scale):
  return {"baseline": 1.0 / math.sqrt(size), "qna": 1.0, "kna": 1.0, "cosa": cosa_scale,
          "stickbreaking": 1.0 / math.sqrt(size)}[variant]


def _query_multiplier(positions_BxT, logn_base, posthoc_logn_length, ssmax_scale,
                      llama4_temperature=None, posthoc_ssmax=None):
  """[B, T, H or 1] factor on the scores: trained log n x post-hoc log n x SSMax x the post-hoc
  temperature rules of Llama 4 and SSMax."""
  log_n = jnp.log(positions_BxT.astype(jnp.float32) + 1.0)[:, :, None]
  multiplier = jnp.ones_like(log_n)
  if llama4_temperature is not None:
    scale, floor_scale = llama4_temperature
    steps = jnp.floor((positions_BxT.astype(jnp.float32) + 1.0) / floor_scale)[:, :, None]
    multiplier = multiplier * (1.0 + scale * jnp.log1p(steps))
  if posthoc_ssmax is not None:
    multiplier = multiplier * posthoc_ssmax * log_n
  if logn_base is not None:
    multiplier = multiplier * log_n / math.log(logn_base)
  if posthoc_logn_length is not None:
    multiplier = multiplier * jnp.maximum(1.0, log_n / math.log(posthoc_logn_length))
  if ssmax_scale is not None:
    multiplier = multiplier * jnp.asarray(ssmax_scale, jnp.float32) * log_n
  return multiplier


def _xpos_scale(positions_BxT, centre_Bx1, inv_freq, gamma, scale_base, sign):
  """[B, T, 1, S] xPos factor zeta_m^(sign (p - c) / scale_base) on both halves of pair m.

  zeta_m = (2m/S + gamma) / (1 + gamma) over the pair index m (m = 0 the highest frequency). The
  positions are centred on c = the middle of each row's true positions, one c for every rotation
  of a call (the far ones of ReRoPE, sinks, Self-Extend, STRING and DCA too), so that a score
  decays as zeta^((p_i - p_j) / scale_base) at the distance its rotations place it at, while the
  factors stay near 1.
  """
  pairs = inv_freq.shape[-1]
  zeta = (jnp.arange(pairs, dtype=jnp.float32) * 2 / (2 * pairs) + gamma) / (1 + gamma)
  p = positions_BxT.astype(jnp.float32)
  power = sign * (p - centre_Bx1) / scale_base
  scale = zeta ** power[:, :, None, None]                                    # [B, T, 1, S/2]
  return jnp.concatenate([scale, scale], axis=-1)


def prepare(q, k, v, *, variant, inv_freq=None, positions=None, logn_base=None,
            attention_factor=1.0, rerope_window=None, leaky_rerope_factor=None, cosa_scale=None,
            posthoc_logn_length=None, alibi_slope=None, window=None, sink_tokens=None,
            xpos_gamma=None, xpos_scale_base=512.0, score_bias=None, ssmax_scale=None,
            log_forget=None, self_extend_group=None, string_window=None, scale_invariant_tau=None,
            logit_scale=1.0, llama4_temperature=None, posthoc_ssmax=None, cope_embeddings=None,
            dca_chunk=None, dca_length=None, rope_table_op=False) -> Prepared:
  """q [B, T, H, S], k [B, T, Hkv, S], v [B, T, Hkv, E] and the options (attend's) -> Prepared.

  rope_table_op: compute RoPE's cos and sin once as an op of their own (cpu.boundary.own_op; the
    `cpu` kernel's choice: XLA's CPU backend would otherwise recompute them inside every fusion
    that rotates). The numbers are the same either way.
  """
  check_options(variant, cosa_scale, rerope_window, leaky_rerope_factor, logn_base, window,
                sink_tokens, inv_freq, xpos_gamma, self_extend_group, scale_invariant_tau,
                string_window)
  batch, length, heads, size = q.shape
  if heads % k.shape[2]:
    raise ValueError(f"{heads} query heads cannot share {k.shape[2]} key/value heads evenly.")
  mods = mods_of(variant=variant, inv_freq=inv_freq, positions=positions, rerope_window=rerope_window,
                 alibi_slope=alibi_slope, window=window, sink_tokens=sink_tokens,
                 score_bias=score_bias, log_forget=log_forget,
                 scale_invariant_tau=scale_invariant_tau, cope_embeddings=cope_embeddings,
                 dca_chunk=dca_chunk)
  decay_BxTxH = None
  if log_forget is not None:
    if log_forget.shape != (batch, length, heads):
      raise ValueError(f"log_forget must be [B, T, H] = {(batch, length, heads)} (one forget gate "
                       f"per query head and position), got {tuple(log_forget.shape)}.")
    decay_BxTxH = jnp.cumsum(log_forget.astype(jnp.float32), axis=1)
  q, k = q.astype(jnp.float32), k.astype(jnp.float32)
  if positions is None:
    positions = jnp.arange(length)
  positions_BxT = jnp.broadcast_to(positions, (batch, length))
  if variant in ("qna", "cosa"):
    q = l2_normalize(q)
  if variant in ("kna", "cosa"):
    k = l2_normalize(k)
  scale = _score_scale(variant, size, cosa_scale) * attention_factor**2 * logit_scale
  multiplier_BxTxH = jnp.broadcast_to(
      scale * _query_multiplier(positions_BxT, logn_base, posthoc_logn_length, ssmax_scale,
                                llama4_temperature, posthoc_ssmax),
      (batch, length, heads))

  if xpos_gamma is not None:   # one centre for every rotation of the call: the true positions'
    true_positions = positions_BxT.astype(jnp.float32)
    xpos_centre = (true_positions.max(axis=1, keepdims=True)
                   + true_positions.min(axis=1, keepdims=True)) / 2

  def rotate(x, positions_at, sign, table=None):
    if inv_freq is None:
      return x
    if table is None:
      table = rope_table(positions_at[:, :, None], inv_freq)
    x = rotate_by(x, table)
    if xpos_gamma is not None:
      x = x * _xpos_scale(positions_at, xpos_centre, inv_freq, xpos_gamma, xpos_scale_base, sign)
    return x

  # q and k at their own positions share one table, over the positions as given ([T] or [B, T])
  # rather than broadcast to the batch.
  near_table = None
  if inv_freq is not None:
    make_table = lambda p: rope_table(p, inv_freq)
    at = jnp.asarray(positions)[..., None]
    near_table = own_op(make_table, at) if rope_table_op else make_table(at)
  q_near = rotate(q, positions_BxT, 1.0, near_table)
  k_near = rotate(k, positions_BxT, -1.0, near_table)
  q_far = k_far = None
  q_farthest = None
  if dca_chunk is not None and (dca_length is None or not 1 <= dca_chunk < dca_length
                                or rerope_window is not None or sink_tokens is not None):
    raise ValueError(f"dca_chunk (DCA's chunk size s) needs dca_length (the pretraining length c) "
                     f"with 1 <= s < c and no rerope_window or sink_tokens; got s = {dca_chunk}, "
                     f"c = {dca_length}.")
  if inv_freq is not None and dca_chunk is not None:
    in_chunk = jnp.remainder(positions_BxT, dca_chunk)
    k_far = rotate(k, in_chunk, -1.0)
    q_far = rotate(q, jnp.minimum(dca_chunk + in_chunk, dca_length - 1), 1.0)
    q_farthest = rotate(q, jnp.full_like(positions_BxT, dca_length - 1), 1.0)
  elif inv_freq is not None and string_window is not None:
    q_far = rotate(q, positions_BxT - (rerope_window - string_window), 1.0)
    k_far = k_near
  elif inv_freq is not None and self_extend_group is not None:
    w, g = rerope_window, self_extend_group
    grouped = jnp.floor_divide(positions_BxT, g)
    q_far = rotate(q, grouped + (w - w // g), 1.0)
    k_far = rotate(k, grouped, -1.0)
  elif inv_freq is not None and rerope_window is not None:
    w, leak = float(rerope_window), float(leaky_rerope_factor or math.inf)
    # q at p_i / leak + w (1 - 1/leak) against k at p_j / leak: relative w + (t - w) / leak.
    q_far = rotate(q, positions_BxT / leak + w * (1 - 1 / leak), 1.0)
    k_far = rotate(k, positions_BxT / leak, -1.0)
  elif inv_freq is not None and sink_tokens is not None:
    q_far = rotate(q, jnp.full_like(positions_BxT, sink_tokens + window - 1), 1.0)
    k_far = k_near
  index = jnp.arange(length)
  return Prepared(Side(q_near, q_far, positions_BxT, index, multiplier_BxTxH, decay_BxTxH,
                       q_farthest),
                  Side(k_near, k_far, positions_BxT, index, decay=decay_BxTxH), v, mods)
