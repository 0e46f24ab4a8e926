"""An independent NumPy reference for PaTH attention (Yang et al., NeurIPS 2025, arXiv 2505.16381)
and PaTH-FoX, written from the definition with explicit S x S matrix products (small T only).

Nothing here imports keynorm_jax. Query i, key j, 0-based, causal j <= i, float64, one loop per
pair. Query head h reads key/value head g = h // (H / G) (grouped-query attention):

  H_t  = I - beta_t w_t w_t^T                         (w_t, beta_t of head g)
  a_ij = lam x kappa_i x q_i^T (H_i H_{i-1} ... H_{j+1}) k_j + sum_{l=j+1..i} log f_l
         (the product is the identity at j = i)

with the variant's q, k and lam (keynorm.md section 2: baseline 1/sqrt(S); qna, kna: q or k divided
by its norm BEFORE the path's product, lam = 1; cosa: both, lam = its scale), kappa_i = log(i + 1) /
log(n0) for the trained log n (else 1), kept where j <= i and i - j < window, softmax over j.
The gate term is not multiplied by lam or kappa (FoX's convention).

`factors` computes the layer's w_t and beta_t from its input (fla's PaTHAttention layer: a low-rank
projection, a causal depthwise convolution with SiLU, the L2 norm per key/value head; beta_t = 2
sigmoid(x_t W_beta + b)), one position and channel at a time.

`order` and `from_key` change the definition on purpose, for the tests that must fail: order
"earliest_left" multiplies H_{j+1} ... H_i, from_key=True starts the product at H_j (so that even
a_ii has a factor).
"""

import math

import numpy as np


def householder(w, beta):
  """I - beta w w^T [S, S]."""
  return np.eye(len(w)) - beta * np.outer(w, w)


def path_product(w, beta, i, j, order="latest_left", from_key=False):
  """H_i H_{i-1} ... H_{j+1} [S, S] of one head's w [T, S], beta [T], by explicit products."""
  product = np.eye(w.shape[1])
  for t in range(j if from_key else j + 1, i + 1):
    if order == "latest_left":
      product = householder(w[t], beta[t]) @ product
    elif order == "earliest_left":
      product = product @ householder(w[t], beta[t])
    else:
      raise ValueError(order)
  return product


def _variant(q, k, variant, cosa_scale):
  """(q, k, lam) of a variant: the normalization before the path's product and the scale."""
  size = q.shape[-1]
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
  if variant == "baseline":
    return q, k, 1.0 / math.sqrt(size)
  if variant == "qna":
    return unit(q), k, 1.0
  if variant == "kna":
    return q, unit(k), 1.0
  if variant == "cosa":
    return unit(q), unit(k), cosa_scale
  raise ValueError(variant)


def scores(q, k, w, beta, *, variant="baseline", cosa_scale=None, logn_base=None,
           log_forget=None, window=None, order="latest_left", from_key=False):
  """a [B, H, T, T] float64, -inf where not kept.

  q [B, T, H, S], k, w [B, T, G, S], beta [B, T, G], log_forget [B, T, H] or None.
  """
  q, k, w, beta = (np.asarray(x, np.float64) for x in (q, k, w, beta))
  B, T, H, _ = q.shape
  G = k.shape[2]
  q, k, lam = _variant(q, k, variant, cosa_scale)
  a = np.full((B, H, T, T), -np.inf)
  for b in range(B):
    for h in range(H):
      g = h // (H // G)
      for i in range(T):
        kappa = 1.0 if logn_base is None else math.log(i + 1) / math.log(logn_base)
        for j in range(i + 1):
          if window is not None and i - j >= window:
            continue
          product = path_product(w[b, :, g], beta[b, :, g], i, j, order, from_key)
          a[b, h, i, j] = lam * kappa * (q[b, i, h] @ product @ k[b, j, g])
          if log_forget is not None:
            a[b, h, i, j] += sum(float(log_forget[b, l, h]) for l in range(j + 1, i + 1))
  return a


def attention(q, k, v, w, beta, **options):
  """(out [B, T, H, E], the softmax weights [B, H, T, T]) float64; options as `scores`."""
  a = scores(q, k, w, beta, **options)
  v = np.asarray(v, np.float64)
  B, H, T, _ = a.shape
  G = v.shape[2]
  weights = np.exp(a - a.max(axis=-1, keepdims=True))
  weights /= weights.sum(axis=-1, keepdims=True)
  out = np.zeros((B, T, H, v.shape[-1]))
  for b in range(B):
    for h in range(H):
      out[b, :, h] = weights[b, h] @ v[b, :, h // (H // G)]
  return out, weights


def factors(x, projection, beta_w, beta_b, conv=None, kv_heads=1, eps=1e-12):
  """(w [B, T, G, S], beta [B, T, G]) float64 of a layer's input x [B, T, d].

  projection: the matrices x is multiplied by in turn (W_down, W_up, or one W [d, G S]); conv:
  taps [K, G S], y_t[c] = sum_m taps[m, c] x_{t-K+1+m}[c] (zero before the first token), then
  SiLU; None: no convolution. w is then split into G heads and each divided by its norm,
  sqrt(sum of squares + eps) (the layer's eps: at a tiny model's initial scale, squared norms near
  1e-9, it moves w by 1e-4 of itself).
  """
  x = np.asarray(x, np.float64)
  z = x
  for matrix in projection:
    z = z @ np.asarray(matrix, np.float64)
  B, T, width = z.shape
  if conv is not None:
    conv = np.asarray(conv, np.float64)
    K = conv.shape[0]
    y = np.zeros_like(z)
    for b in range(B):
      for t in range(T):
        for m in range(K):
          source = t - K + 1 + m
          if source >= 0:
            y[b, t] += conv[m] * z[b, source]
    z = y / (1.0 + np.exp(-y))          # SiLU
  w = z.reshape(B, T, kv_heads, width // kv_heads)
  w = w / np.sqrt(np.sum(w * w, axis=-1, keepdims=True) + eps)
  logits = x @ np.asarray(beta_w, np.float64) + np.asarray(beta_b, np.float64)
  return w, 2.0 / (1.0 + np.exp(-logits))
