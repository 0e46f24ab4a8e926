"""What multiplies the scores or limits the keys, against the independent NumPy references
(tests/numpy_attention_reference.py): windows and StreamingLLM's sinks, SSMax, post-hoc log n, the
temperature rules (YaRN's, DroPE's, Llama 4's, post-hoc SSMax) and QK-LayerNorm. Every attention
check runs full and in query blocks that really split the queries (T = 12 in blocks of 5). The
other kinds: test_positions_rotary.py, test_positions_bias.py; the registry's rules:
test_positions.py."""

import math

import flax.linen as nn
import jax
import numpy as np
import pytest

from keynorm_jax import positions
from keynorm_jax.attention import far
from attention_cases import attend_options
import numpy_attention_reference as attention_ref
from positions_helpers import BLOCKS, H, INV, T, check, column_kwargs, inputs, per_head_reference


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("opts", [
    dict(window=4), dict(window=4, rope=True), dict(window=3, sink_tokens=2, rope=True),
    dict(window=5, sink_tokens=1, alibi=0.3), dict(window=4, sink_tokens=2, rope=True, alibi=0.2),
])
def test_window_and_streaming(opts, block):
  opts = dict(opts)
  rope, alibi = opts.pop("rope", False), opts.pop("alibi", None)
  q, k, v = inputs(2)
  cache = (far.StreamingCache(opts["sink_tokens"], opts["window"]) if "sink_tokens" in opts
           else None)   # StreamingLLM: the sinks outside the window at their cache distance
  got, _ = attend_options(q, k, v, variant="baseline",
                          inv_freq=INV.astype(np.float32) if rope else None, alibi_slopes=alibi,
                          far=cache, query_block=block, **opts)
  bias = (lambda t, i: -alibi * t) if alibi else None
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant="baseline", inv_freq=INV if rope else None, bias=bias, **opts))
  check(got, expected)


def test_window_at_least_length_is_full_and_streaming_without_sinks_is_window():
  q, k, v = inputs(3)
  inv = INV.astype(np.float32)
  full, _ = attend_options(q, k, v, variant="kna", inv_freq=inv)
  check(attend_options(q, k, v, variant="kna", inv_freq=inv, window=T)[0], np.asarray(full),
        atol=1e-6)
  window, _ = attend_options(q, k, v, variant="kna", inv_freq=inv, window=4)
  check(attend_options(q, k, v, variant="kna", inv_freq=inv, window=4, sink_tokens=0,
                       far=far.StreamingCache(0, 4))[0], np.asarray(window), atol=1e-6)
  assert np.abs(np.asarray(window) - np.asarray(full)).max() > 1e-3  # the window does bite


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("rope, alibi, knobs", [
    (True, None, dict(n_global=2)),               # the paper's n_local = L: every sink past L
    (True, None, dict(n_global=3, n_local=3)),    # sinks inside the cap (3 <= t < 5) and past it
    (False, 0.3, dict(n_global=2, n_local=4)),    # ALiBi's bias capped too (the paper's MPT code)
])
def test_lm_infinite(rope, alibi, knobs, block):
  """LM-Infinite through the inference method (a model trained at L = 5, run at T = 12) against
  the NumPy reference written from the paper: the Lambda-shaped mask and min(i - j, L)."""
  train = 5
  kwargs, column = column_kwargs("lm_infinite", at=T, train_length=train, rope=rope, **knobs)
  q, k, v = inputs(12)
  got, _ = attend_options(q, k, v, variant="baseline", query_block=block,
                          **kwargs, **({} if alibi is None else {"alibi_slopes": alibi}))
  position = attention_ref.lm_infinite_position(knobs["n_global"], column.method.n_local, train)
  check(got, per_head_reference(q, k, v, lambda h: dict(
      variant="baseline", inv_freq=INV if rope else None, position=position,
      bias=None if alibi is None else (lambda t, i: -alibi * t))))


def test_lm_infinite_defaults_and_refusals():
  """The paper's defaults: n_global = 10, n_local = the training length."""
  method = positions.inference_method("lm_infinite").at(8192, 512)
  assert (method.n_global, method.n_local) == (10, 512)
  with pytest.raises(ValueError, match="n_local must be at least 1"):
    positions.inference_method("lm_infinite", n_local=0)
  with pytest.raises(ValueError, match="n_global must be >= 0"):
    positions.inference_method("lm_infinite", n_global=-1)
  with pytest.raises(ValueError, match="n_local 9 must be at most the training length 8"):
    positions.inference_method("lm_infinite", n_local=9).at(64, 8)


@pytest.mark.parametrize("block", BLOCKS)
def test_ssmax(block):
  q, k, v = inputs(11)
  s = np.array([0.4, 0.9, 1.7], np.float32)
  got, _ = attend_options(q, k, v, variant="qna", ssmax_scale=s, query_block=block)
  expected = per_head_reference(q, k, v, lambda h: dict(variant="qna", ssmax_s=float(s[h])))
  check(got, expected)


def test_posthoc_logn_scales_scores_not_q():
  """Post-hoc log n multiplies the scores (as Qwen's use_logn_attn), not q before RoPE as
  bojone/rerope does. For QNA the two differ: normalizing q would cancel bojone's factor."""
  q, k, v = inputs(12, heads=1)
  got, _ = attend_options(q, k, v, variant="qna", posthoc_logn_length=4)
  kappa = [max(1.0, math.log(i + 1) / math.log(4)) for i in range(T)]
  expected = per_head_reference(q, k, v, lambda h: dict(variant="qna", kappa=kappa))
  check(got, expected)
  bojone, _ = attend_options(q * np.asarray(kappa, np.float32)[None, :, None, None], k, v, variant="qna")
  plain, _ = attend_options(q, k, v, variant="qna")
  check(bojone, np.asarray(plain), atol=1e-6)                  # q's factor cancels for QNA
  assert np.abs(np.asarray(got) - np.asarray(plain)).max() > 1e-3


@pytest.mark.parametrize("name, knobs, beta", [
    ("yarn_temperature", {}, (0.1 * math.log(4.0) + 1.0)**2),
    ("drope_temperature", {}, 1.0 + 0.412 * math.log(4.0)),
    ("drope_temperature", {"drope_c": 0.103, "factor": 2.0}, 1.0 + 0.103 * math.log(2.0)),
])
def test_temperature_rules(name, knobs, beta):
  """The temperature rules at 4x the training length: every score times beta (NumPy: kappa_i =
  beta), on top of a trained log n's factor."""
  kwargs, _ = column_kwargs(name, at=4 * T, train_length=T, logn_base=6.0, **knobs)
  q, k, v = inputs(8)
  got, _ = attend_options(q, k, v, variant="kna", **kwargs)
  kappa = [beta * math.log(i + 1) / math.log(6.0) for i in range(T)]
  check(got, per_head_reference(q, k, v, lambda h: dict(variant="kna", inv_freq=INV,
                                                           kappa=kappa)))
  with pytest.raises(ValueError, match="drope_c must be >= 0"):
    positions.inference_method("drope_temperature", drope_c=-1.0)


@pytest.mark.parametrize("name, knobs, factor", [
    ("llama4_temperature", {"llama4_floor_scale": 3},
     lambda i: 1.0 + 0.1 * math.log(1.0 + math.floor((i + 1) / 3))),
    ("llama4_temperature", {"llama4_attn_scale": 0.5},   # F = the training length, T / 2 here
     lambda i: 1.0 + 0.5 * math.log(1.0 + math.floor((i + 1) / (T // 2)))),
    ("posthoc_ssmax", {}, lambda i: math.log(i + 1) / math.log(T // 2)),
])
def test_query_temperature_rules(name, knobs, factor):
  """Llama 4's temperature tuning (on a layer without RoPE) and post-hoc SSMax: query i's scores
  times the rule's factor (NumPy: kappa_i)."""
  kwargs, column = column_kwargs(name, at=T, train_length=T // 2, rope=False, **knobs)
  q, k, v = inputs(11)
  got, _ = attend_options(q, k, v, variant="baseline", **kwargs)
  kappa = [factor(i) for i in range(T)]
  check(got, per_head_reference(q, k, v, lambda h: dict(variant="baseline", kappa=kappa)))
  rope = positions.training_method("rope")
  if name == "llama4_temperature":   # the layers with RoPE are left as they are
    assert "every rope layer has RoPE" in column.method.skip_reason(rope, H)
    rotary = positions.AttentionSpec(rotary=positions.RotarySpec())
    assert column.apply(rotary, 512) == rotary


def test_qk_layernorm_matches_reference():
  x = np.random.default_rng(10).normal(size=(4, 6)).astype(np.float32)
  norm = nn.LayerNorm(epsilon=1e-6)
  params = norm.init(jax.random.PRNGKey(0), x)
  gain = np.linspace(0.5, 2.0, 6).astype(np.float32)
  bias = np.linspace(-1.0, 1.0, 6).astype(np.float32)
  got = norm.apply({"params": {"scale": gain, "bias": bias}}, x)
  np.testing.assert_allclose(np.asarray(got), attention_ref.layer_norm(x, gain, bias, 1e-6), atol=1e-5)
  assert set(params["params"]) == {"scale", "bias"}
