"""Independent NumPy versions of the published formulas, written from keynorm.md sections 2 and 4.

Nothing here imports keynorm_jax. RoPE is written in complex form: the pair (x[m], x[m + S/2]) is
the complex number x[m] + i x[m + S/2], and the score of RoPE-rotated q_i, k_j is
Re(sum_m zq[m] conj(zk[m]) exp(i t f_m)) with t the relative position, so ReRoPE can be written
directly from its definition (t -> min(t, w)) rather than with the two-matrix trick.
"""

import math

import numpy as np


def inv_freq_plain(d, base):
  return np.array([base**(-(2.0 * m) / d) for m in range(d // 2)])


def inv_freq_scaled(d, base, scaling, s=1.0, train_length=None, n=None):
  if scaling == "none":
    return inv_freq_plain(d, base)
  if scaling == "linear":
    return inv_freq_plain(d, base) / s
  if scaling == "ntk":
    return inv_freq_plain(d, base * s**(d / (d - 2)))
  if scaling == "dynamic_ntk":
    n = max(n, train_length)
    return inv_freq_plain(d, base * ((s * n / train_length) - (s - 1))**(d / (d - 2)))
  if scaling == "yarn":
    corr = lambda r: d * math.log(train_length / (2 * math.pi * r)) / (2 * math.log(base))
    low, high = max(math.floor(corr(32)), 0), min(math.ceil(corr(1)), d - 1)
    plain = inv_freq_plain(d, base)
    out = []
    for m in range(d // 2):
      ramp = min(max((m - low) / (high - low), 0.0), 1.0)
      out.append(plain[m] / s * ramp + plain[m] * (1 - ramp))
    return np.array(out)
  raise ValueError(scaling)


def as_complex(x):
  half = x.shape[-1] // 2
  return x[..., :half] + 1j * x[..., half:]


def rotate(x, position, inv_freq):
  """RoPE of one vector, from the complex form."""
  z = as_complex(x) * np.exp(1j * position * inv_freq)
  return np.concatenate([z.real, z.imag])


def softmax_average(scores, values):
  """sum_j softmax(scores)_j values_j for one query (the maximum subtracted before exp)."""
  scores = np.asarray(scores, dtype=np.float64)
  p = np.exp(scores - scores.max())
  return (p / p.sum()) @ values


def relative_position(t, rerope_window=None, leaky=None):
  if rerope_window is None or t < rerope_window:
    return t
  if leaky is None:
    return rerope_window
  return rerope_window + (t - rerope_window) / leaky


def attention(q, k, v, *, variant, inv_freq=None, logn_base=None, attention_factor=1.0,
              rerope_window=None, leaky=None, cosa_scale=None, posthoc_logn_length=None):
  """One sequence: q, k [T, S], v [T, E] -> o [T, E], by explicit loops over i and j."""
  T, S = q.shape
  out = np.zeros((T, v.shape[1]))
  for i in range(T):
    scores = []
    for j in range(i + 1):
      qi, kj = q[i].astype(np.float64), k[j].astype(np.float64)
      if variant in ("qna", "cosa"):
        qi = qi / np.linalg.norm(qi)
      if variant in ("kna", "cosa"):
        kj = kj / np.linalg.norm(kj)
      if inv_freq is None:
        dot = qi @ kj
      else:
        t = relative_position(i - j, rerope_window, leaky)
        dot = np.real(np.sum(as_complex(qi) * np.conj(as_complex(kj)) * np.exp(1j * t * inv_freq)))
      score = {"baseline": dot / math.sqrt(S), "qna": dot, "kna": dot,
               "cosa": (cosa_scale or 0.0) * dot}[variant]
      if logn_base is not None:
        score *= math.log(i + 1) / math.log(logn_base)
      if posthoc_logn_length is not None:
        score *= max(1.0, math.log(i + 1) / math.log(posthoc_logn_length))
      scores.append(score * attention_factor**2)
    out[i] = softmax_average(scores, v[:i + 1])
  return out
