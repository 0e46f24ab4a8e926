"""Attention variants against explicit-loop NumPy references, and the invariants of the method."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attention_cases import attend_options, causal_options
from keynorm_jax.rope import rope_inv_freq
import numpy_reference as ref

B, T, S, E = 2, 12, 8, 6


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(B, T, S)).astype(np.float32),
          rng.normal(size=(B, T, S)).astype(np.float32),
          rng.normal(size=(B, T, E)).astype(np.float32))


def _reference(q, k, v, **kwargs):
  return np.stack([ref.attention(q[b], k[b], v[b], **kwargs) for b in range(len(q))])


INV = ref.inv_freq_plain(S, 100.0)
CASES = {
    "baseline_nope": dict(variant="baseline"),
    "baseline_rope": dict(variant="baseline", rope=True),
    "qna_rope": dict(variant="qna", rope=True),
    "kna_rope": dict(variant="kna", rope=True),
    "cosa_rope": dict(variant="cosa", rope=True, cosa_scale=4 * math.log(6)),
    "baseline_logn": dict(variant="baseline", rope=True, logn_base=6),
    "kna_logn": dict(variant="kna", rope=True, logn_base=6),
    "cosa_logn": dict(variant="cosa", rope=True, cosa_scale=4.0, logn_base=6),
    "qna_logn_nope": dict(variant="qna", logn_base=3),
    "yarn_factor": dict(variant="kna", rope=True, attention_factor=1.2),
    "rerope": dict(variant="baseline", rope=True, rerope_window=4),
    "rerope_kna_logn": dict(variant="kna", rope=True, rerope_window=3, logn_base=6),
    "leaky_rerope": dict(variant="cosa", rope=True, rerope_window=4, leaky=3.0, cosa_scale=3.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_variant_matches_reference(case):
  opts = dict(CASES[case])
  rope = opts.pop("rope", False)
  leaky = opts.pop("leaky", None)
  q, k, v = _inputs()
  got = causal_options(q, k, v, inv_freq=np.asarray(INV, np.float32) if rope else None,
                         leaky_rerope_factor=leaky, **opts)
  expected = _reference(q, k, v, inv_freq=INV if rope else None, leaky=leaky, **opts)
  np.testing.assert_allclose(np.asarray(got), expected, atol=2e-5, rtol=2e-5)


def test_posthoc_logn_matches_reference():
  q, k, v = _inputs(1)
  got, _ = attend_options(q, k, v, variant="baseline", inv_freq=np.asarray(INV, np.float32),
                  posthoc_logn_length=4)
  expected = _reference(q, k, v, variant="baseline", inv_freq=INV, posthoc_logn_length=4)
  np.testing.assert_allclose(np.asarray(got), expected, atol=2e-5)


def test_rope_scores_depend_only_on_relative_position():
  q, k, v = _inputs(2)
  inv = np.asarray(INV, np.float32)
  base = causal_options(q, k, v, variant="baseline", inv_freq=inv)
  shifted = causal_options(q, k, v, variant="baseline", inv_freq=inv,
                             positions=np.arange(T) + 37)
  np.testing.assert_allclose(np.asarray(base), np.asarray(shifted), atol=1e-4)


def test_rerope_with_window_at_least_length_equals_rope():
  q, k, v = _inputs(3)
  inv = np.asarray(INV, np.float32)
  rope = causal_options(q, k, v, variant="kna", inv_freq=inv)
  rerope = causal_options(q, k, v, variant="kna", inv_freq=inv, rerope_window=T)
  np.testing.assert_allclose(np.asarray(rope), np.asarray(rerope), atol=1e-6)


def test_leaky_rerope_tends_to_rerope():
  q, k, v = _inputs(4)
  inv = np.asarray(INV, np.float32)
  rerope = np.asarray(causal_options(q, k, v, variant="baseline", inv_freq=inv,
                                       rerope_window=3))
  gaps = [np.abs(np.asarray(causal_options(q, k, v, variant="baseline", inv_freq=inv,
                                             rerope_window=3, leaky_rerope_factor=f))
                 - rerope).max() for f in (2.0, 20.0, 2e4)]
  assert gaps[0] > gaps[1] > gaps[2]
  assert gaps[2] < 1e-3


def test_kna_ignores_key_scale():
  q, k, v = _inputs(5)
  scale = np.random.default_rng(0).uniform(0.1, 10.0, size=(B, T, 1)).astype(np.float32)
  inv = np.asarray(INV, np.float32)
  a = causal_options(q, k, v, variant="kna", inv_freq=inv)
  b = causal_options(q, k * scale, v, variant="kna", inv_freq=inv)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
  # Baseline does not: the check can fail.
  c = causal_options(q, k, v, variant="baseline", inv_freq=inv)
  d = causal_options(q, k * scale, v, variant="baseline", inv_freq=inv)
  assert np.abs(np.asarray(c) - np.asarray(d)).max() > 1e-2


def test_cosa_ignores_query_and_key_scale():
  q, k, v = _inputs(6)
  rng = np.random.default_rng(1)
  sq, sk = (rng.uniform(0.1, 10.0, size=(B, T, 1)).astype(np.float32) for _ in range(2))
  inv = np.asarray(INV, np.float32)
  a = causal_options(q, k, v, variant="cosa", inv_freq=inv, cosa_scale=5.0)
  b = causal_options(q * sq, k * sk, v, variant="cosa", inv_freq=inv, cosa_scale=5.0)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_causal():
  q, k, v = _inputs(7)
  inv = np.asarray(INV, np.float32)
  a = np.asarray(causal_options(q, k, v, variant="baseline", inv_freq=inv))
  k2, v2 = k.copy(), v.copy()
  k2[:, 8:] += 5.0
  v2[:, 8:] -= 3.0
  b = np.asarray(causal_options(q, k2, v2, variant="baseline", inv_freq=inv))
  np.testing.assert_allclose(a[:, :8], b[:, :8], atol=1e-6)
  assert np.abs(a[:, 8:] - b[:, 8:]).max() > 1e-3


@pytest.mark.parametrize("block", [4, 5, 7])
def test_query_blocks_equal_full_attention(block):
  q, k, v = _inputs(8)
  inv = np.asarray(INV, np.float32)
  kwargs = dict(variant="kna", inv_freq=inv, logn_base=6, rerope_window=4)
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
                                       rerope_window=5, logn_base=6)
  np.testing.assert_allclose(np.asarray(jax.jit(f)(q, k, v)), np.asarray(f(q, k, v)), atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    (dict(variant="bogus"), "Unknown attention variant"),
    (dict(variant="cosa"), "needs cosa_scale"),
    (dict(variant="kna", leaky_rerope_factor=4.0), "needs rerope_window"),
    (dict(variant="kna", logn_base=1.0), "must be > 1"),
])
def test_bad_options_raise(kwargs, message):
  q, k, v = _inputs()
  with pytest.raises(ValueError, match=message):
    causal_options(q, k, v, **kwargs)
