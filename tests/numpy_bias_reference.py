"""Independent NumPy references for positions added to the scores or folded into them, written
from the papers and the authors' code: ALiBi (and its inference-time slopes), KERPLE, FIRE, FoX's
forget gates, scale-invariant attention, stick-breaking, CoPE.

Nothing here imports keynorm_jax. Sources, defaults and pitfalls: /work/notes/methods.md.
Conventions: query i, key j, 0-based positions, causal j <= i, softmax over j, float64.
"""

import math

import numpy as np

from numpy_reference import as_complex, softmax_average


# ----------------------------------------------------------------------------- ALiBi family
def alibi_slopes(num_heads):
  """Press, Smith & Lewis 2022 (arXiv 2108.12409), Sec. 3 + get_slopes in ofirpress/attention_with_linear_biases.

  H = 2^a: slopes 2^(-8h/H), h = 1..H. Otherwise (the repo's rule): the 2^floor(log2 H) power-of-2 slopes,
  then every other slope of the 2*2^floor(log2 H) sequence (odd exponents) until H slopes.
  """
  def power_of_2(n):
    return [2.0**(-8.0 * h / n) for h in range(1, n + 1)]
  if math.log2(num_heads).is_integer():
    return np.array(power_of_2(num_heads))
  p = 2**math.floor(math.log2(num_heads))
  return np.array(power_of_2(p) + power_of_2(2 * p)[0::2][:num_heads - p])


def alibi_bias(T, slope):
  """ALiBi bias -slope * (i - j) for j <= i (Press et al. 2022, Fig. 3), 0 above the diagonal."""
  b = np.zeros((T, T))
  for i in range(T):
    for j in range(i + 1):
      b[i, j] = -slope * (i - j)
  return b


def alibi_interpolated_slopes(slopes, s):
  """Al-Khateeb et al. 2023 (arXiv 2310.13017): position interpolation = every slope divided by s = L_test/L_train."""
  return np.asarray(slopes, dtype=np.float64) / s


def ntk_alibi_slopes(slopes, s):
  """NTK-ALiBi (keezen/ntk_alibi readme): m_h / s^((h-1)/(H-1)), h = 1..H by head index.

  Head 0 kept (high-frequency extrapolation), last head divided by s (low-frequency interpolation),
  geometric in between. H = 1: 0/0 exponent taken as 0, so the single slope is unchanged (see notes).
  """
  slopes = np.asarray(slopes, dtype=np.float64)
  H = len(slopes)
  if H == 1:
    return slopes.copy()
  return np.array([slopes[h] / s**(h / (H - 1)) for h in range(H)])


# ----------------------------------------------------------------------------- learned and data-dependent biases
def kerple_log_bias(T, r1, r2):
  """KERPLE log variant, Chi et al. 2022 (arXiv 2205.09921) Eq. for the log kernel, chijames/KERPLE ParallelKerpleLog:
  -r1 * log(1 + r2 * (i - j)) for j <= i, r1, r2 > 0; 0 above the diagonal."""
  b = np.zeros((T, T))
  for i in range(T):
    for j in range(i + 1):
      b[i, j] = -r1 * math.log(1.0 + r2 * (i - j))
  return b


def fire_bias(T, c, L, f, eps=0.0):
  """FIRE, Li et al. 2023 (arXiv 2310.04418) Eq. for b(i, j) with progressive interpolation:

  b_ij = f(psi(i - j) / psi(max(L, i))), psi(x) = log(|c| x + 1), 0-based i as in the authors' listing
  (positions = arange(T); normalizer = max(positions, |L|)). At i = 0 the normalizer is psi(L) > 0 and the
  only key gives f(0). The listing adds eps = 1e-6 to the denominator; default 0 here (see notes).
  """
  psi = lambda x: math.log(abs(c) * x + 1.0)
  b = np.zeros((T, T))
  for i in range(T):
    for j in range(i + 1):
      b[i, j] = f(psi(i - j) / (psi(max(abs(L), i)) + eps))
  return b


def sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def log_sigmoid(x):
  return -np.log1p(np.exp(-x))


def fox_log_forget(x, w, b):
  """FoX (Lin et al. 2025, arXiv 2503.02130, eq. 4): per head h a scalar forget gate
  f_t = sigmoid(w_h . x_t + b_h) of the layer's input x [T, d]; returns log f [T, H] by explicit
  sums over the input's d features (w [d, H], b [H])."""
  T, d = x.shape
  out = np.zeros((T, len(b)))
  for t in range(T):
    for h in range(len(b)):
      z = sum(float(w[m, h]) * float(x[t, m]) for m in range(d)) + float(b[h])
      out[t, h] = -math.log1p(math.exp(-z))
  return out


def fox_bias(log_forget):
  """FoX (Lin et al. 2025): D[h, i, j] = sum over l = j+1 .. i of log f_l[h] for j <= i (0 on the
  diagonal), from log_forget [T, H]; explicit sums, entries above the diagonal 0 (masked anyway)."""
  T, H = log_forget.shape
  D = np.zeros((H, T, T))
  for h in range(H):
    for i in range(T):
      for j in range(i + 1):
        D[h, i, j] = sum(log_forget[l, h] for l in range(j + 1, i + 1))
  return D


# ----------------------------------------------------------------------------- scores transformed or replaced
def scale_invariant_logit(tau):
  """Scale-invariant attention (Anson, Wang & Aitchison 2025): L_t = a_t S_t + m_t with
  a_t = sqrt(2 [log(t / tau + 1) - log alpha + beta / alpha]) and m_t = -a_t^2 + beta / alpha (eq. 14
  and 16), alpha = beta = e^(1/2) so that a_0^2 = 1 and m_0 = 0 (the paper's boundary condition)."""
  alpha = beta = math.exp(0.5)

  def transform(score, t):
    a_squared = 2.0 * (math.log(t / tau + 1.0) - math.log(alpha) + beta / alpha)
    return math.sqrt(a_squared) * score - a_squared + beta / alpha
  return transform


def stick_breaking_attention(q, k, v, inv_freq=None, window=None):
  """Stick-breaking attention (Tan et al. 2025), one head, explicit products: z_ij = q_i . k_j /
  sqrt(S) (RoPE'd at relative position i - j when inv_freq is given), and for the kept keys j < i
  (0 < i - j, and < window when set) A_ij = sigmoid(z_ij) prod over kept k, j < k < i, of
  (1 - sigmoid(z_ik)); o_i = sum_j A_ij v_j (the current token is not attended)."""
  T, S = q.shape
  q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
  sigmoid = lambda x: 1.0 / (1.0 + math.exp(-x))
  out = np.zeros((T, v.shape[1]))
  for i in range(T):
    kept = [j for j in range(i) if window is None or i - j < window]
    z = {}
    for j in kept:
      if inv_freq is None:
        dot = q[i] @ k[j]
      else:
        dot = np.real(np.sum(as_complex(q[i]) * np.conj(as_complex(k[j]))
                             * np.exp(1j * (i - j) * inv_freq)))
      z[j] = dot / math.sqrt(S)
    for j in kept:
      weight = sigmoid(z[j])
      for m in kept:
        if j < m:
          weight *= 1.0 - sigmoid(z[m])
      out[i] += weight * v[j]
  return out


def cope_attention(q, k, v, e, variant="baseline", window=None):
  """CoPE (Golovneva et al. 2024), one head, explicit sums: s_ij = the variant's q_i . k_j score
  (baseline: / sqrt(S); kna: k_j / |k_j|) over the kept keys j <= i (i - j < window when set);
  gates g_it = sigmoid(s_it); p_ij = min(sum over kept t, j <= t <= i, of g_it, npos - 1);
  z = q_i . e[:, p] at the integers around p_ij, interpolated (p - floor p) z[ceil] + (1 - ...)
  z[floor]; o_i = softmax_j(s_ij + that) v_j."""
  T, S = q.shape
  npos = e.shape[1]
  q, k, v, e = (np.asarray(a, dtype=np.float64) for a in (q, k, v, e))
  out = np.zeros((T, v.shape[1]))
  for i in range(T):
    kept = [j for j in range(i + 1) if window is None or i - j < window]
    s = {j: (q[i] @ k[j] / math.sqrt(S) if variant == "baseline"
             else q[i] @ k[j] / np.linalg.norm(k[j])) for j in kept}
    logits = []
    for j in kept:
      p = min(sum(1.0 / (1.0 + math.exp(-s[t])) for t in kept if t >= j), npos - 1)
      low, high = math.floor(p), math.ceil(p)
      logits.append(s[j] + (p - low) * (q[i] @ e[:, high]) + (1 - (p - low)) * (q[i] @ e[:, low]))
    out[i] = softmax_average(logits, v[kept])
  return out


if __name__ == "__main__":
  close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
  close(alibi_slopes(8), [2.0**-h for h in range(1, 9)])               # paper: 1/2^1 .. 1/2^8
  close(alibi_slopes(16), [2.0**(-h / 2) for h in range(1, 17)])       # paper: 1/2^0.5 .. 1/2^8
  close(alibi_slopes(12), [2.0**-h for h in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5])
  close(alibi_slopes(1), [2.0**-8])
  close(ntk_alibi_slopes(alibi_slopes(8), 2.0)[[0, 7]], [0.5, 2.0**-8 / 2.0])
  close(ntk_alibi_slopes([0.25], 4.0), [0.25])
  close(alibi_bias(3, 0.5), [[0, 0, 0], [-0.5, 0, 0], [-1.0, -0.5, 0]])
  close(kerple_log_bias(3, 2.0, 0.5)[2], [-2 * math.log(2.0), -2 * math.log(1.5), 0.0])
  fb = fire_bias(4, 0.1, 2.0, lambda x: x)
  close(fb[1, 0], math.log(1.1) / math.log(1.2))                       # i = 1 < L = 2: normalised by psi(L)
  print("numpy_bias_reference self-check: OK")
