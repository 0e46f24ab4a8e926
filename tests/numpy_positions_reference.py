"""Independent NumPy references for position methods, written from the papers and the authors' code.

Nothing here imports keynorm_jax. Sources, defaults and pitfalls: /work/notes/methods.md.
Conventions: query i, key j, 0-based positions, causal j <= i, softmax over j, float64.
RoPE pair m is (x[m], x[m + S/2]) = complex z[m] = x[m] + 1j x[m + S/2], rotated by
exp(1j * pos * inv_freq[m]); inv_freq[m] = base**(-2m/S), so m = 0 is the highest frequency.
The score of rotated q_i, k_j at relative position t is Re(sum_m zq[m] conj(zk[m]) exp(1j t inv_freq[m])).
"""

import math

import numpy as np


def as_complex(x):
  half = x.shape[-1] // 2
  return x[..., :half] + 1j * x[..., half:]


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


# ----------------------------------------------------------------------------- absolute / rotary
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


def self_extend_relative(G, W):
  """Self-Extend (Jin et al. 2024, datamllab/LongLM): relative position i - j inside the neighbor
  window W; beyond it the grouped positions' difference floor(i/G) - floor(j/G) + (W - W // G)."""
  return lambda i, j: i - j if i - j < W else i // G - j // G + W - W // G


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


def sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def string_relative(S, W):
  """STRING (An et al. 2024, HKUNLP/STRING): relative position i - j below the shift S; from S on,
  i - j - S + W (the largest distances replaced by shifted, smaller ones)."""
  return lambda i, j: i - j if i - j < S else i - j - S + W


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
    logits = np.array(logits)
    w = np.exp(logits - logits.max())
    out[i] = (w / w.sum()) @ v[kept]
  return out


def dca_relative(s, c):
  """Dual chunk attention (An et al. 2024, eq. 2-8 with w = c - s): keys at j mod s; a query of the
  key's own chunk at i mod s (so i - j), of the next chunk at min(s + i mod s, c - 1), of a later
  one at c - 1."""
  def relative(i, j):
    gap = i // s - j // s
    if gap == 0:
      return i - j
    query = min(s + i % s, c - 1) if gap == 1 else c - 1
    return query - j % s
  return relative


def log_sigmoid(x):
  return -np.log1p(np.exp(-x))


def sinusoidal_embedding(positions, d):
  """Vaswani et al. 2017 (arXiv 1706.03762) Sec. 3.5, interleaved:
  PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
  positions = np.asarray(positions, dtype=np.float64)
  pe = np.zeros((len(positions), d))
  for t, pos in enumerate(positions):
    for i in range(d // 2):
      angle = pos / 10000.0**(2.0 * i / d)
      pe[t, 2 * i] = math.sin(angle)
      pe[t, 2 * i + 1] = math.cos(angle)
  return pe


def xpos_zeta(S, gamma=0.4):
  """xPos per-pair decay, Sun et al. 2022 (arXiv 2212.10554): zeta_m = (2m/S + gamma)/(1 + gamma), m = 0..S/2-1.
  Same pair index as the frequency: torchscale XPOS.scale = (arange(0, d, 2) + 0.4 d)/(1.4 d) is increasing in m
  while inv_freq is decreasing, so the highest frequency (m = 0) gets the smallest zeta (fastest decay)."""
  return np.array([(2.0 * m / S + gamma) / (1.0 + gamma) for m in range(S // 2)])


def xpos_scores(q, k, inv_freq, gamma=0.4, scale_base=512, relative=None):
  """Raw dot products of xPos q_i (rotated by i, pair m scaled by zeta_m^(i/B)) and k_j (rotated by j, scaled by
  zeta_m^(-j/B)), B = scale_base. Written as Re(sum_m zq zk* e^{1j (i-j) theta_m}) zeta_m^((i-j)/B), which equals
  the product of the scaled vectors exactly (torchscale's centring min_pos = -(T // 2) cancels). All (i, j) filled.
  relative(i, j): the distance both the rotation and the decay use instead of i - j (ReRoPE's
  clipped one, for an inference method on an xPos model)."""
  T, S = q.shape
  zeta = xpos_zeta(S, gamma)
  zq, zk = as_complex(q.astype(np.float64)), as_complex(k.astype(np.float64))
  out = np.zeros((T, T))
  for i in range(T):
    for j in range(T):
      t = i - j if relative is None else relative(i, j)
      out[i, j] = np.sum(np.real(zq[i] * np.conj(zk[j]) * np.exp(1j * t * inv_freq)) * zeta**(t / scale_base))
  return out


def p_rope_inv_freq(S, base, p):
  """p-RoPE, Barbero et al. 2024 (arXiv 2410.06205) Sec. 6; code google-deepmind/gemma apply_rope(rope_proportion):
  keep the n = int(p * S // 2) highest frequencies (pairs m < n, exponent still 2m/S of the full S), set the lowest
  S/2 - n to 0 (timescale inf, no rotation). Rounding: floor, as int(p * S // 2) in the reference code."""
  n = int(p * S // 2)
  return np.array([base**(-2.0 * m / S) if m < n else 0.0 for m in range(S // 2)])


def llama3_inv_freq(S, base, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings):
  """HF transformers modeling_rope_utils._compute_llama3_parameters (Llama 3.1): with wavelen = 2 pi / inv_freq,
  wavelen < N/high_freq_factor: kept; wavelen > N/low_freq_factor: / factor; otherwise
  (1 - s) inv/factor + s inv with s = (N / wavelen - low_freq_factor)/(high_freq_factor - low_freq_factor)."""
  N = original_max_position_embeddings
  out = []
  for m in range(S // 2):
    inv = base**(-2.0 * m / S)
    wavelen = 2.0 * math.pi / inv
    if wavelen < N / high_freq_factor:
      out.append(inv)
    elif wavelen > N / low_freq_factor:
      out.append(inv / factor)
    else:
      s = (N / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
      out.append((1.0 - s) * inv / factor + s * inv)
  return np.array(out)


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


def randomized_positions_ok(positions, T, max_position):
  """Ruoss et al. 2023 (arXiv 2305.16843), google-deepmind/randomized_positional_encodings: T positions drawn
  without replacement from [0, max_position) and sorted. Checks: length T, integer, strictly increasing, in range."""
  p = np.asarray(positions)
  if p.shape != (T,) or T > max_position:
    return False
  if not np.all(np.equal(np.mod(p, 1), 0)):
    return False
  return bool(np.all(np.diff(p) > 0) and (T == 0 or (p[0] >= 0 and p[-1] < max_position)))


# ----------------------------------------------------------------------------- attention
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
    scores = np.array(scores)
    p = np.exp(scores - scores.max())
    out[i] = (p / p.sum()) @ v[keys]
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
  close([fb[0, 0], fb[3, 0]], [0.0, 1.0])                              # i = 0 -> f(0); i >= L: i - j = i -> 1
  close(fb[1, 0], math.log(1.1) / math.log(1.2))                       # i = 1 < L = 2: normalised by psi(L)
  close(sinusoidal_embedding([1.0], 4), [[math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]])
  close(xpos_zeta(8), (np.arange(0, 8, 2) + 0.4 * 8) / (1.4 * 8))      # torchscale XPOS.scale
  close(p_rope_inv_freq(16, 10000.0, 0.25), [1.0, 10000.0**-0.125] + [0.0] * 6)
  close(llama3_inv_freq(8, 10000.0, 8.0, 1.0, 4.0, 1024), [1.0, 0.1, 0.003086760967011274, 0.000125])
  close(layer_norm(np.array([[1.0, 3.0]]), 2.0, 1.0, 0.0), [[-1.0, 3.0]])
  close(ssmax_multiplier(3, 0.5), [0.0, 0.5 * math.log(2), 0.5 * math.log(3)])
  assert randomized_positions_ok([0, 5, 9], 3, 10) and not randomized_positions_ok([0, 5, 5], 3, 10)
  assert not randomized_positions_ok([0, 5, 10], 3, 10) and not randomized_positions_ok([2, 1, 3], 3, 10)
  rng = np.random.default_rng(0)
  T, S, E = 9, 8, 3
  q, k, v = rng.normal(size=(T, S)), rng.normal(size=(T, S)), rng.normal(size=(T, E))
  inv = np.array([10000.0**(-2 * m / S) for m in range(S // 2)])
  rot = lambda x, pos: np.concatenate([(as_complex(x) * np.exp(1j * pos * inv)).real,
                                       (as_complex(x) * np.exp(1j * pos * inv)).imag])
  zeta, B = xpos_zeta(S), 512
  xq = rot(q[5], 5) * np.concatenate([zeta, zeta])**(5 / B)
  xk = rot(k[2], 2) * np.concatenate([zeta, zeta])**(-2 / B)
  close(xpos_scores(q, k, inv)[5, 2], xq @ xk)                         # scaled-vector form == relative form
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
  print("numpy_positions_reference self-check: OK")
