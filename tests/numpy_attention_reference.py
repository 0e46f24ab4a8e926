"""An independent NumPy reference for one head's attention, explicit loops: the variants (baseline,
QNA, KNA, CosA), RoPE, additive biases, windows and StreamingLLM's sinks, LM-Infinite, SSMax and
log n; and LayerNorm for QK-norm. The positions' own references: numpy_rotary_reference.py and
numpy_bias_reference.py.

Nothing here imports keynorm_jax. Sources, defaults and pitfalls: /work/notes/methods.md.
Conventions: query i, key j, 0-based positions, causal j <= i, softmax over j, float64.
"""

import math

import numpy as np

from numpy_bias_reference import alibi_bias
from numpy_reference import as_complex, rotate, softmax_average


# ----------------------------------------------------------------------------- windows, sinks and LM-Infinite
def effective_relative_position(i, j, window=None, sink_tokens=None):
  """None when key j is masked for query i. Window w keeps 0 <= i - j < w. With k sinks (StreamingLLM, Xiao et al.
  2023, arXiv 2309.17453) a sink j < k outside the window sits at cache slot j while the query sits at k + w - 1,
  so its relative position is (k + w - 1) - j; keys inside the window keep i - j."""
  if j > i:
    return None
  if window is None or i - j < window:
    return i - j
  if sink_tokens and j < sink_tokens:
    return sink_tokens + window - 1 - j
  return None


def lm_infinite_position(n_global, n_local, limit):
  """LM-Infinite (Han et al. 2024, arXiv 2308.16137): (i, j) -> the distance at which query i
  sees key j, or None where masked. Its Lambda-shaped mask keeps the n_global starting tokens
  and the n_local nearest ones (j < n_global or i - j < n_local, j <= i); its distance limit caps
  every distance at limit (the pretraining length): d = min(i - j, limit)."""
  def position(i, j):
    if j > i or not (j < n_global or i - j < n_local):
      return None
    return min(i - j, limit)
  return position


# ----------------------------------------------------------------------------- norms and multipliers
def layer_norm(x, gain, bias, eps):
  """LayerNorm per row (Ba et al. 2016): (x - mean)/sqrt(var + eps) * gain + bias, biased variance.
  QK-LayerNorm applies it to q and k per head (Dehghani et al. 2023, arXiv 2302.05442)."""
  x = np.asarray(x, dtype=np.float64)
  out = np.zeros_like(x)
  for r in range(x.shape[0]):
    mu = x[r].mean()
    var = ((x[r] - mu)**2).mean()
    out[r] = (x[r] - mu) / math.sqrt(var + eps) * gain + bias
  return out


def ssmax_multiplier(T, s):
  """SSMax, Nakanishi 2025 (arXiv 2501.19399) Eq. for SSMax: z -> (s log n) z with n = i + 1 keys for query i."""
  return np.array([s * math.log(i + 1) for i in range(T)])


# ----------------------------------------------------------------------------- attention
def attention(q, k, v, *, variant, inv_freq=None, kappa=None, bias=None, window=None, sink_tokens=None,
              ssmax_s=None, cosa_scale=None, relative=None, logit_transform=None, position=None):
  """One head: q, k [T, S] (before RoPE), v [T, E] -> [T, E], explicit loops.

  score_ij = kappa_i * ssmax_i * variant(q_i, k_j at effective relative position t) + bias_ij, where variant is
  baseline q.k/sqrt(S), qna (q/|q|).k, kna q.(k/|k|), cosa cosa_scale * cos(q, k) (RoPE keeps norms);
  ssmax_i = ssmax_s * log(i + 1). bias: None, [T, T] matrix read at (i, j), or callable bias(t, i).
  relative(i, j): the rotation's relative position of a kept pair instead of t (e.g. Self-Extend's).
  logit_transform(score, t): applied to the score before the bias (scale-invariant attention's).
  position(i, j): the effective relative position t of a pair, or None where masked, instead of
  effective_relative_position's (e.g. lm_infinite_position).
  """
  if sink_tokens and window is None:
    raise ValueError("sink_tokens needs window")
  T, S = q.shape
  q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
  out = np.zeros((T, v.shape[1]))
  for i in range(T):
    keys, scores = [], []
    for j in range(T):
      t = (effective_relative_position(i, j, window, sink_tokens) if position is None
           else position(i, j))
      if t is None:
        continue
      angle = t if relative is None else relative(i, j)
      if inv_freq is None:
        dot = q[i] @ k[j]
      else:
        dot = np.real(np.sum(as_complex(q[i]) * np.conj(as_complex(k[j])) * np.exp(1j * angle * inv_freq)))
      nq, nk = np.linalg.norm(q[i]), np.linalg.norm(k[j])
      score = {"baseline": lambda: dot / math.sqrt(S), "qna": lambda: dot / nq, "kna": lambda: dot / nk,
               "cosa": lambda: cosa_scale * dot / (nq * nk)}[variant]()
      if kappa is not None:
        score *= kappa[i]
      if ssmax_s is not None:
        score *= ssmax_s * math.log(i + 1)
      if logit_transform is not None:
        score = logit_transform(score, t)
      if callable(bias):
        score += bias(t, i)
      elif bias is not None:
        score += bias[i, j]
      keys.append(j)
      scores.append(score)
    out[i] = softmax_average(scores, v[keys])
  return out


if __name__ == "__main__":
  close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
  close(layer_norm(np.array([[1.0, 3.0]]), 2.0, 1.0, 0.0), [[-1.0, 3.0]])
  close(ssmax_multiplier(3, 0.5), [0.0, 0.5 * math.log(2), 0.5 * math.log(3)])
  rng = np.random.default_rng(0)
  T, S, E = 9, 8, 3
  q, k, v = rng.normal(size=(T, S)), rng.normal(size=(T, S)), rng.normal(size=(T, E))
  inv = np.array([10000.0**(-2 * m / S) for m in range(S // 2)])
  rot = lambda x, pos: rotate(x, pos, inv)
  qr, kr = np.stack([rot(q[t], t) for t in range(T)]), np.stack([rot(k[t], t) for t in range(T)])
  s = np.where(np.tril(np.ones((T, T))) > 0, qr @ kr.T / math.sqrt(S) + alibi_bias(T, 0.3), -np.inf)
  p = np.exp(s - s.max(1, keepdims=True))
  close(attention(q, k, v, variant="baseline", inv_freq=inv, bias=alibi_bias(T, 0.3)), (p / p.sum(1, keepdims=True)) @ v)
  n_sink, w, i = 2, 3, 8                                               # StreamingLLM cache for the last query
  cache = [0, 1, 6, 7, 8]                                              # sinks 0,1 then window keys 6,7,8
  cq = rot(q[i], n_sink + w - 1)
  sc = np.array([cq @ rot(k[j], slot) / math.sqrt(S) - 0.3 * (n_sink + w - 1 - slot) for slot, j in enumerate(cache)])
  pc = np.exp(sc - sc.max())
  out = attention(q, k, v, variant="baseline", inv_freq=inv, window=w, sink_tokens=n_sink, bias=lambda t, i: -0.3 * t)
  close(out[i], (pc / pc.sum()) @ v[cache])
  print("numpy_attention_reference self-check: OK")
