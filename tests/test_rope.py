"""RoPE frequencies and scalings against the published formulas and hand-worked values."""

import math

import numpy as np
import pytest

from keynorm_jax.rope import apply_rope, rope_inv_freq
import numpy_reference as ref


def test_plain_frequencies_by_hand():
  inv, factor = rope_inv_freq(4, base=10000.0)
  np.testing.assert_allclose(inv, [1.0, 0.01], rtol=1e-6)
  assert factor == 1.0


def test_ntk_by_hand():
  # d = 4: base' = 10000 * 4^(4/2) = 160000; inv = [1, 160000^(-1/2)] = [1, 0.0025].
  inv, _ = rope_inv_freq(4, base=10000.0, scaling="ntk", factor=4.0)
  np.testing.assert_allclose(inv, [1.0, 0.0025], rtol=1e-6)


def test_linear_divides_by_factor_by_hand():
  inv, _ = rope_inv_freq(4, base=10000.0, scaling="linear", factor=8.0)
  np.testing.assert_allclose(inv, [0.125, 0.00125], rtol=1e-6)


@pytest.mark.parametrize("scaling", ["none", "linear", "ntk", "dynamic_ntk", "yarn"])
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_every_scaling_matches_reference(scaling, factor):
  d, base, train, n = 64, 10000.0, 512, 3000
  inv, _ = rope_inv_freq(d, base=base, scaling=scaling, factor=factor, train_length=train,
                         seq_length=n)
  expected = ref.inv_freq_scaled(d, base, scaling, s=factor, train_length=train, n=n)
  np.testing.assert_allclose(np.asarray(inv), expected, rtol=2e-6)


@pytest.mark.parametrize("scaling", ["linear", "ntk", "dynamic_ntk", "yarn"])
def test_factor_one_is_plain_rope(scaling):
  plain, _ = rope_inv_freq(32, base=500.0)
  scaled, attention_factor = rope_inv_freq(32, base=500.0, scaling=scaling, factor=1.0,
                                           train_length=128, seq_length=128)
  np.testing.assert_allclose(scaled, plain, rtol=1e-6)
  assert attention_factor == 1.0


def test_dynamic_ntk_by_hand():
  # HF: base' = base * (s * n / L - (s - 1))^(d/(d-2)); d = 4, s = 2, n = 1024, L = 512: 3^2 = 9.
  inv, _ = rope_inv_freq(4, base=100.0, scaling="dynamic_ntk", factor=2.0, train_length=512,
                         seq_length=1024)
  np.testing.assert_allclose(inv, [1.0, 900.0**-0.5], rtol=1e-6)
  # Below the training length the base is unchanged up to n = L: (2 - 1)^2 = 1.
  inv_short, _ = rope_inv_freq(4, base=100.0, scaling="dynamic_ntk", factor=2.0,
                               train_length=512, seq_length=100)
  np.testing.assert_allclose(inv_short, [1.0, 0.1], rtol=1e-6)


def test_yarn_by_hand():
  # d = 128, base 1e4, L = 512: corr_dim(32) = 6.49 -> low 6; corr_dim(1) = 30.58 -> high 31.
  d, s = 128, 8.0
  inv, attention_factor = rope_inv_freq(d, scaling="yarn", factor=s, train_length=512)
  plain, _ = rope_inv_freq(d)
  inv, plain = np.asarray(inv), np.asarray(plain)
  np.testing.assert_allclose(inv[:7], plain[:7], rtol=1e-6)            # high frequencies untouched
  np.testing.assert_allclose(inv[31:], plain[31:] / s, rtol=1e-6)      # lowest interpolated
  ramp = (np.arange(7, 31) - 6) / (31 - 6)
  np.testing.assert_allclose(inv[7:31], plain[7:31] * (1 - ramp + ramp / s), rtol=1e-6)
  assert attention_factor == pytest.approx(0.1 * math.log(8) + 1, rel=1e-9)  # 1.2079


@pytest.mark.parametrize("kwargs, message", [
    (dict(scaling="bogus"), "Unknown RoPE scaling"),
    (dict(scaling="ntk", factor=0.5), "factor must be >= 1"),
    (dict(scaling="yarn", factor=2.0), "train_length"),
])
def test_bad_arguments_raise(kwargs, message):
  with pytest.raises(ValueError, match=message):
    rope_inv_freq(16, **kwargs)


def test_rotation_matches_complex_form():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(5, 8)).astype(np.float32)
  inv = ref.inv_freq_plain(8, 10000.0)
  positions = np.array([0, 3, 17, 400, 5000])
  got = np.asarray(apply_rope(x, positions, np.asarray(inv, np.float32)))
  expected = np.stack([ref.rotate(x[i], positions[i], inv) for i in range(5)])
  np.testing.assert_allclose(got, expected, atol=2e-5)


def test_angles_come_from_positions_at_any_length():
  # Positions far beyond any training length rotate exactly as the formula says (no table).
  x = np.ones((1, 4), np.float32)
  inv, _ = rope_inv_freq(4)
  got = np.asarray(apply_rope(x, np.array([100_000]), inv))
  expected = ref.rotate(x[0], 100_000, ref.inv_freq_plain(4, 10000.0))
  np.testing.assert_allclose(got[0], expected, atol=2e-3)
