"""Independent NumPy references for absolute and rotary positions and the rewrites of their
distances, written from the papers and the authors' code: sinusoidal, randomized positions, xPos,
p-RoPE, Llama 3's frequencies, Self-Extend, STRING, dual chunk attention.

Nothing here imports keynorm_jax. Sources, defaults and pitfalls: /work/notes/methods.md.
Conventions: query i, key j, 0-based positions, causal j <= i, softmax over j, float64.
RoPE pair m is (x[m], x[m + S/2]) = complex z[m] = x[m] + 1j x[m + S/2], rotated by
exp(1j * pos * inv_freq[m]); inv_freq[m] = base**(-2m/S), so m = 0 is the highest frequency.
The score of rotated q_i, k_j at relative position t is Re(sum_m zq[m] conj(zk[m]) exp(1j t inv_freq[m])).
"""

import math

import numpy as np

from numpy_reference import as_complex, rotate   # RoPE's complex form, one home


# ----------------------------------------------------------------------------- absolute positions
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


def randomized_positions_ok(positions, T, max_position):
  """Ruoss et al. 2023 (arXiv 2305.16843), google-deepmind/randomized_positional_encodings: T positions drawn
  without replacement from [0, max_position) and sorted. Checks: length T, integer, strictly increasing, in range."""
  p = np.asarray(positions)
  if p.shape != (T,) or T > max_position:
    return False
  if not np.all(np.equal(np.mod(p, 1), 0)):
    return False
  return bool(np.all(np.diff(p) > 0) and (T == 0 or (p[0] >= 0 and p[-1] < max_position)))


# ----------------------------------------------------------------------------- rotary frequencies and xPos
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


# ----------------------------------------------------------------------------- inference-time distance rewrites
def self_extend_relative(G, W):
  """Self-Extend (Jin et al. 2024, datamllab/LongLM): relative position i - j inside the neighbor
  window W; beyond it the grouped positions' difference floor(i/G) - floor(j/G) + (W - W // G)."""
  return lambda i, j: i - j if i - j < W else i // G - j // G + W - W // G


def string_relative(S, W):
  """STRING (An et al. 2024, HKUNLP/STRING): relative position i - j below the shift S; from S on,
  i - j - S + W (the largest distances replaced by shifted, smaller ones)."""
  return lambda i, j: i - j if i - j < S else i - j - S + W


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


if __name__ == "__main__":
  close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
  close(sinusoidal_embedding([1.0], 4), [[math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]])
  close(xpos_zeta(8), (np.arange(0, 8, 2) + 0.4 * 8) / (1.4 * 8))      # torchscale XPOS.scale
  close(p_rope_inv_freq(16, 10000.0, 0.25), [1.0, 10000.0**-0.125] + [0.0] * 6)
  close(llama3_inv_freq(8, 10000.0, 8.0, 1.0, 4.0, 1024), [1.0, 0.1, 0.003086760967011274, 0.000125])
  assert randomized_positions_ok([0, 5, 9], 3, 10) and not randomized_positions_ok([0, 5, 5], 3, 10)
  assert not randomized_positions_ok([0, 5, 10], 3, 10) and not randomized_positions_ok([2, 1, 3], 3, 10)
  rng = np.random.default_rng(0)
  T, S, E = 9, 8, 3
  q, k, v = rng.normal(size=(T, S)), rng.normal(size=(T, S)), rng.normal(size=(T, E))
  inv = np.array([10000.0**(-2 * m / S) for m in range(S // 2)])
  rot = lambda x, pos: rotate(x, pos, inv)
  zeta, B = xpos_zeta(S), 512
  xq = rot(q[5], 5) * np.concatenate([zeta, zeta])**(5 / B)
  xk = rot(k[2], 2) * np.concatenate([zeta, zeta])**(-2 / B)
  close(xpos_scores(q, k, inv)[5, 2], xq @ xk)                         # scaled-vector form == relative form
  print("numpy_rotary_reference self-check: OK")
