"""Rotary position embedding (RoPE) and its inference-time scalings.

Angles are always computed from positions on the fly (never looked up in a table of fixed
length), so any position works. Frequencies follow HF transformers `modeling_rope_utils.py`:

- "none":        inv_freq_i = base^(-2i/d)
- "linear":      inv_freq_i / factor                      (positions divided by the factor)
- "ntk":         base' = base * factor^(d/(d-2))
- "dynamic_ntk": base' = base * (factor * n / L_train - (factor - 1))^(d/(d-2)), n = max(seq, L_train)
- "yarn":        ramp between interpolated (inv/factor) and original frequencies over the pair index,
                 correction range from beta_fast / beta_slow; attention factor 0.1 ln(factor) + 1.
- "llama3":      HF `rope_type="llama3"`: wavelengths 2 pi / inv_freq longer than L_train / low_freq_factor
                 are divided by the factor, shorter than L_train / high_freq_factor kept, and the
                 ones between interpolated smoothly (train_length = original_max_position_embeddings).

Rotation uses the rotate-half convention: pairs (x[i], x[i + d/2]) rotate by position * inv_freq[i].
"""

import math

import jax.numpy as jnp
import numpy as np

SCALINGS = ("none", "linear", "ntk", "dynamic_ntk", "yarn", "llama3")


def _ntk_exponent(rotary_dim: int) -> float:
  if rotary_dim <= 2:
    raise ValueError(f"NTK scaling needs rotary_dim > 2, got {rotary_dim}.")
  return rotary_dim / (rotary_dim - 2)


def _require_train_length(scaling: str, train_length):
  if train_length is None or train_length <= 0:
    raise ValueError(
        f"RoPE scaling {scaling!r} needs train_length (the original training length), "
        f"got {train_length!r}.")


def yarn_correction_range(rotary_dim, base, train_length, beta_fast, beta_slow):
  """(low, high) pair indices of YaRN's ramp: floor/ceil of the correction dims, clipped."""

  def correction_dim(num_rotations):
    return (rotary_dim * math.log(train_length / (num_rotations * 2 * math.pi))
            / (2 * math.log(base)))

  low = math.floor(correction_dim(beta_fast))
  high = math.ceil(correction_dim(beta_slow))
  return max(low, 0), min(high, rotary_dim - 1)


def yarn_attention_factor(factor: float) -> float:
  """YaRN's temperature 0.1 ln(s) + 1; it multiplies cos and sin (logits by its square)."""
  return 1.0 if factor <= 1.0 else 0.1 * math.log(factor) + 1.0


def rope_inv_freq(rotary_dim, *, base=10000.0, scaling="none", factor=1.0, train_length=None,
                  seq_length=None, beta_fast=32.0, beta_slow=1.0, low_freq_factor=1.0,
                  high_freq_factor=4.0):
  """Inverse frequencies [rotary_dim // 2] (float32) and the attention factor of a scaling.

  Args:
    rotary_dim: number of rotated dimensions (even).
    base: RoPE base (rope_theta).
    scaling: one of SCALINGS.
    factor: scaling factor s >= 1 (L_test / L_train for the static scalings).
    train_length: original training length; needed by "dynamic_ntk" and "yarn".
    seq_length: current sequence length, for "dynamic_ntk".
    beta_fast, beta_slow: YaRN's rotation counts bounding the ramp.
    low_freq_factor, high_freq_factor: llama3's wavelength bounds (L_train / factor).

  Returns:
    (inv_freq, attention_factor): inv_freq a NumPy array; attention_factor 1.0 except for YaRN.
  """
  if scaling not in SCALINGS:
    raise ValueError(f"Unknown RoPE scaling {scaling!r}; choose one of {', '.join(SCALINGS)}.")
  if rotary_dim <= 0 or rotary_dim % 2:
    raise ValueError(f"rotary_dim must be a positive even number, got {rotary_dim}.")
  if not factor >= 1.0:
    raise ValueError(f"RoPE scaling factor must be >= 1, got {factor}.")
  exponents = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
  inv_freq = 1.0 / base**exponents
  attention_factor = 1.0
  if scaling == "linear":
    inv_freq = inv_freq / factor
  elif scaling == "ntk":
    inv_freq = 1.0 / (base * factor**_ntk_exponent(rotary_dim))**exponents
  elif scaling == "dynamic_ntk":
    _require_train_length(scaling, train_length)
    n = train_length if seq_length is None else max(seq_length, train_length)
    new_base = base * (factor * n / train_length - (factor - 1))**_ntk_exponent(rotary_dim)
    inv_freq = 1.0 / new_base**exponents
  elif scaling == "yarn":
    _require_train_length(scaling, train_length)
    low, high = yarn_correction_range(rotary_dim, base, train_length, beta_fast, beta_slow)
    if low == high:
      high += 0.001  # avoid a zero-width ramp, as HF does
    ramp = np.clip((np.arange(rotary_dim // 2) - low) / (high - low), 0.0, 1.0)
    inv_freq = inv_freq / factor * ramp + inv_freq * (1.0 - ramp)
    attention_factor = yarn_attention_factor(factor)
  elif scaling == "llama3":
    _require_train_length(scaling, train_length)
    inv_freq = _llama3_inv_freq(inv_freq, factor, train_length, low_freq_factor, high_freq_factor)
  # NumPy, not JAX: computed outside a trace (models.given_specs), a JAX conversion would compile.
  return np.asarray(inv_freq, dtype=np.float32), float(attention_factor)


def _llama3_inv_freq(inv_freq, factor, train_length, low_freq_factor, high_freq_factor):
  if not high_freq_factor > low_freq_factor > 0:
    raise ValueError(f"llama3 needs high_freq_factor > low_freq_factor > 0, got "
                     f"{high_freq_factor} and {low_freq_factor}.")
  wavelength = 2 * math.pi / inv_freq
  low_freq_wavelength = train_length / low_freq_factor
  high_freq_wavelength = train_length / high_freq_factor
  smooth = (train_length / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
  interpolated = (1 - smooth) * inv_freq / factor + smooth * inv_freq
  return np.where(wavelength > low_freq_wavelength, inv_freq / factor,
                  np.where(wavelength < high_freq_wavelength, inv_freq, interpolated))


def p_rope_mask(rotary_dim: int, fraction: float):
  """[rotary_dim // 2] ones for the floor(fraction * pairs) highest frequencies, zeros after
  (p-RoPE, Barbero et al. 2024, rounded as google-deepmind/gemma's rope_proportion: the lowest
  frequencies are left unrotated)."""
  if not 0.0 <= fraction <= 1.0:
    raise ValueError(f"p-RoPE fraction must be in [0, 1], got {fraction}.")
  pairs = rotary_dim // 2
  return (np.arange(pairs) < int(fraction * pairs)).astype(np.float64)


def apply_rope(x, positions, inv_freq):
  """Rotates x [..., T, S] at positions [..., T] by angles positions * inv_freq (rotate-half)."""
  return rotate_by(x, rope_table(positions, inv_freq))


def rope_table(positions, inv_freq):
  """(cos, sin) [..., T, S/2] float32 of the angles positions [..., T] * inv_freq [S/2]."""
  angles = positions[..., None].astype(jnp.float32) * inv_freq
  return jnp.cos(angles), jnp.sin(angles)


def rotate_by(x, table):
  """Rotates x [..., T, S] by a rope_table (cos, sin) [..., T, S/2] that broadcasts against it:
  each pair (x[i], x[i + S/2]) by its angle (rotate-half)."""
  cos, sin = table
  half = x.shape[-1] // 2
  if cos.shape[-1] != half:
    raise ValueError(f"inv_freq has {cos.shape[-1]} entries; x of size {x.shape[-1]} "
                     f"needs {half}.")
  cos, sin = cos.astype(x.dtype), sin.astype(x.dtype)
  x1, x2 = x[..., :half], x[..., half:]
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
