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
p_ij = sum_{t=j..i} sigmoid(s_it) interpolating the learned embeddings e [S, npos] (scores.cope).
FoX's forget gates (log_forget = log f_t per head) add sum_{l=j+1..i} log f_l = c_i - c_j, with
c_t = sum_{l<=t} log f_l computed here once (both sides carry c as `decay`).
PaTH (Yang et al. 2025) puts the layer's Householder factors between q and k: multiplier_i x
q_i^T H_i ... H_{j+1} k_j (attention/path.py), with q and k as the variant normalizes them here
(before the product) and no rotation; the factors ride in `Prepared.path` to the kernels.
Masks: causal; `window` keeps 0 <= p_i - p_j < w; `sink_tokens` k also keeps keys p_j < k.

Far rotations (attention/far.py: ReRoPE, Self-Extend, STRING, dual chunk attention, StreamingLLM's
cache): the layer's one far rule says at which positions the far side is rotated; here q and k
are rotated there once (Side.far, and DCA's Side.farthest), and scores.py joins the near and the
far products per pair, as the rule says. L2 normalization commutes with the rotation, so it is
applied before RoPE. Everything in float32.

`prepare` turns q, k, v and these options into a `Prepared`: the rotated queries and keys (and
their far rotation), each query's factor (the variant's scale included, so that multiplier x q . k
is the score before biases), the values, and `Mods`, the small record of what is added or masked
after the product (attention/scores.py applies it). Kernels (attention/kernels/) take a Prepared;
none of them repeats this work.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from keynorm_jax.attention.spec import Learned, Mods, PathFactors, Spec
from keynorm_jax.cpu.boundary import own_op
from keynorm_jax.cpu.rows import by_rows
from keynorm_jax.rope import rope_table, rotate_by


class Side(NamedTuple):
  """The per-position inputs of one side (queries or keys) of attention.

  near: [B, N, H, S] rotated at the positions; far: the far rule's rotation (attention/far.py) or
  None;
  farthest: DCA's third rotation of the queries (inter-chunk; its keys are `far`) or None;
  positions: [B, N]; index: [N] sequence index (the causal mask); multiplier: [B, N, H] factor on
  the scores (queries only); decay: [B, N, H] FoX's cumulative log forget gate c (or None).
  """
  near: jax.Array
  far: jax.Array | None
  positions: jax.Array
  index: jax.Array
  multiplier: jax.Array | None = None
  decay: jax.Array | None = None
  farthest: jax.Array | None = None


class Prepared(NamedTuple):
  """A kernel's input: queries [B, T, H, S] and keys [B, T, Hkv, S] (float32), values
  [B, T, Hkv, E] as given, and PaTH's factors (or None)."""
  queries: Side
  keys: Side
  values: jax.Array
  mods: Mods
  path: PathFactors | None = None


def l2_normalize(x, eps=1e-12):
  """x / ||x|| over the last axis."""
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


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


def prepare(q, k, v, spec: Spec, learned: Learned, mods: Mods, *, positions=None,
            cpu_layout=False) -> Prepared:
  """q [B, T, H, S], k [B, T, Hkv, S], v [B, T, Hkv, E], the call's Spec, Learned arrays and Mods
  (spec.mods(learned, ...), derived once by the caller) -> Prepared. positions: [T] or [B, T]
  positions (None: 0..T-1, the sequence index).

  cpu_layout: the `cpu` kernel's layout for XLA's CPU backend: RoPE's cos and sin computed once as
    an op of their own (cpu.boundary.own_op; XLA would otherwise recompute them inside every fusion
    that rotates), and the norms of q and k without their size-1 axes (cpu.rows.by_rows; YNNPACK
    reduces a single head's [B, T, 1, S] slowly). The numbers are the same either way (the
    gradients within float32 rounding).
  """
  batch, length, heads, size = q.shape
  if heads % k.shape[2]:
    raise ValueError(f"{heads} query heads cannot share {k.shape[2]} key/value heads evenly.")
  decay_BxTxH = None
  if learned.log_forget is not None:
    if learned.log_forget.shape != (batch, length, heads):
      raise ValueError(f"log_forget must be [B, T, H] = {(batch, length, heads)} (one forget gate "
                       f"per query head and position), got {tuple(learned.log_forget.shape)}.")
    decay_BxTxH = jnp.cumsum(learned.log_forget.astype(jnp.float32), axis=1)
  q, k = q.astype(jnp.float32), k.astype(jnp.float32)
  if positions is None:
    positions = jnp.arange(length)
  positions_BxT = jnp.broadcast_to(positions, (batch, length))
  normalize = (lambda x: by_rows(l2_normalize, x)) if cpu_layout else l2_normalize
  if spec.variant in ("qna", "cosa"):
    q = normalize(q)
  if spec.variant in ("kna", "cosa"):
    k = normalize(k)
  multiplier_BxTxH = jnp.broadcast_to(
      spec.score_scale(size) * _query_multiplier(
          positions_BxT, spec.logn_base, spec.posthoc_logn_length, learned.ssmax_scale,
          spec.llama4_temperature, spec.posthoc_ssmax),
      (batch, length, heads))
  inv_freq = None if spec.inv_freq is None else jnp.asarray(spec.inv_freq, jnp.float32)
  xpos_gamma, xpos_scale_base = spec.xpos_gamma, spec.xpos_scale_base

  if xpos_gamma is not None:   # one centre for every rotation of the call: the true positions'
    true_positions = positions_BxT.astype(jnp.float32)
    xpos_centre = (true_positions.max(axis=1, keepdims=True)
                   + true_positions.min(axis=1, keepdims=True)) / 2

  def rotate(x, positions_at, sign, table=None):
    if table is None:
      table = rope_table(positions_at[:, :, None], inv_freq)
    x = rotate_by(x, table)
    if xpos_gamma is not None:
      x = x * _xpos_scale(positions_at, xpos_centre, inv_freq, xpos_gamma, xpos_scale_base, sign)
    return x

  q_near, k_near, q_far, k_far, q_farthest = q, k, None, None, None
  if inv_freq is not None:
    # q and k at their own positions share one table, over the positions as given ([T] or
    # [B, T]) rather than broadcast to the batch.
    make_table = lambda p: rope_table(p, inv_freq)
    at = jnp.asarray(positions)[..., None]
    near_table = own_op(make_table, at) if cpu_layout else make_table(at)
    q_near = rotate(q, positions_BxT, 1.0, near_table)
    k_near = rotate(k, positions_BxT, -1.0, near_table)
    if spec.far is not None:
      far_at = spec.far.positions(positions_BxT)
      q_far = rotate(q, far_at.query, 1.0)
      k_far = k_near if far_at.key is None else rotate(k, far_at.key, -1.0)
      if far_at.farthest is not None:
        q_farthest = rotate(q, far_at.farthest, 1.0)
  index = jnp.arange(length)
  return Prepared(Side(q_near, q_far, positions_BxT, index, multiplier_BxTxH, decay_BxTxH,
                       q_farthest),
                  Side(k_near, k_far, positions_BxT, index, decay=decay_BxTxH), v, mods,
                  learned.path)
