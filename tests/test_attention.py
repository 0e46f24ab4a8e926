"""The attention variants against the explicit-loop NumPy reference (numpy_reference.py, written
from keynorm.md): every case of the shared table (attention_cases.py) that the reference can
express; and the invariants of the method, in the single-head layout [B, T, S]."""

import jax
import numpy as np
import pytest

from attention_cases import CASES, attend_options, causal_options, inputs
from keynorm_jax.attention import far
from keynorm_jax.rope import rope_inv_freq
import numpy_reference as ref
from shapes import B, INV32, S, T

# An option of the case table -> its keyword in ref.attention (a far rule: ReRoPE's window and
# leak); the cases with no other option.
NUMPY_OPTIONS = {"variant": "variant", "inv_freq": "inv_freq", "logn_base": "logn_base",
                 "attention_factor": "attention_factor", "cosa_scale": "cosa_scale",
                 "posthoc_logn_length": "posthoc_logn_length"}
NUMPY_CASES = sorted(c for c, options in CASES.items()
                     if set(options) - {"far"} <= set(NUMPY_OPTIONS)
                     and isinstance(options.get("far", far.ReRoPE(1)), far.ReRoPE))


def _numpy_kwargs(options):
  kwargs = {NUMPY_OPTIONS[name]: np.asarray(value, np.float64) if name == "inv_freq" else value
            for name, value in options.items() if name != "far"}
  if "far" in options:
    kwargs.update(rerope_window=options["far"].window, leaky=options["far"].leak)
  return kwargs


def _inputs(seed=0):
  """q, k [B, T, S], v [B, T, E]: one head of the case table's inputs."""
  return tuple(x[:, :, 0] for x in inputs(seed))


@pytest.mark.parametrize("case", NUMPY_CASES)
def test_variant_matches_reference(case):
  q, k, v = inputs(NUMPY_CASES.index(case))
  got, _ = attend_options(q, k, v, **CASES[case])
  kwargs = _numpy_kwargs(CASES[case])
  expected = np.zeros(got.shape)
  for b in range(q.shape[0]):
    for h in range(q.shape[2]):
      expected[b, :, h] = ref.attention(q[b, :, h], k[b, :, h], v[b, :, h], **kwargs)
  np.testing.assert_allclose(np.asarray(got), expected, atol=2e-5, rtol=2e-5)


def test_rope_scores_depend_only_on_relative_position():
  q, k, v = _inputs(2)
  base = causal_options(q, k, v, variant="baseline", inv_freq=INV32)
  shifted = causal_options(q, k, v, variant="baseline", inv_freq=INV32,
                             positions=np.arange(T) + 37)
  np.testing.assert_allclose(np.asarray(base), np.asarray(shifted), atol=1e-4)


def test_rerope_with_window_at_least_length_equals_rope():
  q, k, v = _inputs(3)
  rope = causal_options(q, k, v, variant="kna", inv_freq=INV32)
  rerope = causal_options(q, k, v, variant="kna", inv_freq=INV32, far=far.ReRoPE(T))
  np.testing.assert_allclose(np.asarray(rope), np.asarray(rerope), atol=1e-6)


def test_leaky_rerope_tends_to_rerope():
  q, k, v = _inputs(4)
  rerope = np.asarray(causal_options(q, k, v, variant="baseline", inv_freq=INV32,
                                     far=far.ReRoPE(3)))
  gaps = [np.abs(np.asarray(causal_options(q, k, v, variant="baseline", inv_freq=INV32,
                                           far=far.ReRoPE(3, f)))
                 - rerope).max() for f in (2.0, 20.0, 2e4)]
  assert gaps[0] > gaps[1] > gaps[2]
  assert gaps[2] < 1e-3


def test_kna_ignores_key_scale():
  q, k, v = _inputs(5)
  scale = np.random.default_rng(0).uniform(0.1, 10.0, size=(B, T, 1)).astype(np.float32)
  a = causal_options(q, k, v, variant="kna", inv_freq=INV32)
  b = causal_options(q, k * scale, v, variant="kna", inv_freq=INV32)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
  # Baseline does not: the check can fail.
  c = causal_options(q, k, v, variant="baseline", inv_freq=INV32)
  d = causal_options(q, k * scale, v, variant="baseline", inv_freq=INV32)
  assert np.abs(np.asarray(c) - np.asarray(d)).max() > 1e-2


def test_cosa_ignores_query_and_key_scale():
  q, k, v = _inputs(6)
  rng = np.random.default_rng(1)
  sq, sk = (rng.uniform(0.1, 10.0, size=(B, T, 1)).astype(np.float32) for _ in range(2))
  a = causal_options(q, k, v, variant="cosa", inv_freq=INV32, cosa_scale=5.0)
  b = causal_options(q * sq, k * sk, v, variant="cosa", inv_freq=INV32, cosa_scale=5.0)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_causal():
  q, k, v = _inputs(7)
  a = np.asarray(causal_options(q, k, v, variant="baseline", inv_freq=INV32))
  k2, v2 = k.copy(), v.copy()
  k2[:, 8:] += 5.0
  v2[:, 8:] -= 3.0
  b = np.asarray(causal_options(q, k2, v2, variant="baseline", inv_freq=INV32))
  np.testing.assert_allclose(a[:, :8], b[:, :8], atol=1e-6)
  assert np.abs(a[:, 8:] - b[:, 8:]).max() > 1e-3


@pytest.mark.parametrize("block", [4, 5, 7])
def test_query_blocks_equal_full_attention(block):
  q, k, v = _inputs(8)
  kwargs = dict(variant="kna", inv_freq=INV32, logn_base=6, far=far.ReRoPE(4))
  full, full_entropy = attend_options(q, k, v, **kwargs)
  blocked, blocked_entropy = attend_options(q, k, v, query_block=block, **kwargs)
  np.testing.assert_allclose(np.asarray(full), np.asarray(blocked), atol=1e-6)
  np.testing.assert_allclose(np.asarray(full_entropy), np.asarray(blocked_entropy), atol=1e-6)


def test_entropy_of_uniform_attention_is_log_count():
  # Zero queries give equal scores: query i attends uniformly to i + 1 keys.
  _, k, v = _inputs(9)
  _, entropy = attend_options(np.zeros_like(k), k, v, variant="baseline")
  np.testing.assert_allclose(np.asarray(entropy)[0], np.log(np.arange(1, T + 1)), atol=1e-5)


def test_jit_equals_eager():
  q, k, v = _inputs(10)
  inv, _ = rope_inv_freq(S, scaling="yarn", factor=4.0, train_length=6)
  f = lambda q, k, v: causal_options(q, k, v, variant="cosa", inv_freq=inv, cosa_scale=3.0,
                                     far=far.ReRoPE(5), logn_base=6)
  np.testing.assert_allclose(np.asarray(jax.jit(f)(q, k, v)), np.asarray(f(q, k, v)), atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    (dict(variant="bogus"), "Unknown attention variant"),
    (dict(variant="cosa"), "needs cosa_scale"),
    (dict(variant="kna", far=far.ReRoPE(4)), "needs inv_freq"),
    (dict(variant="kna", logn_base=1.0), "must be > 1"),
])
def test_bad_options_raise(kwargs, message):
  q, k, v = _inputs()
  with pytest.raises(ValueError, match=message):
    causal_options(q, k, v, **kwargs)
