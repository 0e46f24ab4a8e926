"""Position methods against the independent NumPy references (tests/numpy_positions_reference.py),
and the invariants each method promises. Every attention check runs full and in query blocks that
really split the queries (T = 12 in blocks of 5)."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import positions
from attention_cases import attend_options, layer_options
from keynorm_jax.models.layers import LearnedPositions, sinusoidal_embedding
from keynorm_jax.models.position_bias import FireBias, KerpleLogBias
from keynorm_jax.rope import p_rope_mask, rope_inv_freq
import numpy_positions_reference as ref
from positions_helpers import B, BLOCKS, H, INV, S, T, check, inputs, per_head_reference



@pytest.mark.parametrize("heads", [1, 2, 3, 4, 5, 6, 8, 12, 16])
def test_alibi_slopes_match_the_paper(heads):
  np.testing.assert_allclose(positions.alibi_slopes(heads), ref.alibi_slopes(heads), rtol=1e-12)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("variant", ["baseline", "kna"])
def test_alibi_attention(variant, block):
  q, k, v = inputs(1)
  slopes = np.array(positions.alibi_slopes(H), np.float32)
  got, _ = attend_options(q, k, v, variant=variant, alibi_slopes=slopes, query_block=block)
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant=variant, bias=ref.alibi_bias(T, slopes[h])))
  check(got, expected)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("opts", [
    dict(window=4), dict(window=4, rope=True), dict(window=3, sink_tokens=2, rope=True),
    dict(window=5, sink_tokens=1, alibi=0.3), dict(window=4, sink_tokens=2, rope=True, alibi=0.2),
])
def test_window_and_streaming(opts, block):
  opts = dict(opts)
  rope, alibi = opts.pop("rope", False), opts.pop("alibi", None)
  q, k, v = inputs(2)
  got, _ = attend_options(q, k, v, variant="baseline", inv_freq=INV.astype(np.float32) if rope else None,
                  alibi_slopes=alibi, query_block=block, **opts)
  bias = (lambda t, i: -alibi * t) if alibi else None
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant="baseline", inv_freq=INV if rope else None, bias=bias, **opts))
  check(got, expected)


def test_window_at_least_length_is_full_and_streaming_without_sinks_is_window():
  q, k, v = inputs(3)
  inv = INV.astype(np.float32)
  full, _ = attend_options(q, k, v, variant="kna", inv_freq=inv)
  check(attend_options(q, k, v, variant="kna", inv_freq=inv, window=T)[0], np.asarray(full), atol=1e-6)
  window, _ = attend_options(q, k, v, variant="kna", inv_freq=inv, window=4)
  check(attend_options(q, k, v, variant="kna", inv_freq=inv, window=4, sink_tokens=0)[0],
         np.asarray(window), atol=1e-6)
  assert np.abs(np.asarray(window) - np.asarray(full)).max() > 1e-3  # the window does bite


def _init_bias(module):
  return module.init(jax.random.PRNGKey(3))


@pytest.mark.parametrize("block", BLOCKS)
def test_kerple_log(block):
  q, k, v = inputs(4)
  module = KerpleLogBias(H)
  params = _init_bias(module)
  r1, r2 = (np.asarray(params["params"][n]) for n in ("r1", "r2"))
  assert (r1 > 0).all() and (r2 > 0).all() and r1.std() > 0  # random per-head init, as the paper
  bias = module.apply(params)
  got, _ = attend_options(q, k, v, variant="kna", score_bias=bias, query_block=block)
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant="kna", bias=ref.kerple_log_bias(T, max(r1[h], 1e-2), max(r2[h], 1e-2))))
  check(got, expected)


def _fire(train_length=8):
  module = FireBias(H, train_length)
  params = _init_bias(module)
  p = jax.tree.map(np.asarray, params["params"])
  # c and l as the test sets them, away from the init so a wrong formula cannot hide.
  p["c"], p["l"] = np.float32(0.3), np.float32(1.25)
  params = {"params": p}

  def f(x, h):  # the MLP 1 -> 32 (ReLU) -> H, in NumPy from its weights
    hidden = np.maximum(x * p["w_in"] + p["b_in"], 0.0)
    return float(hidden @ p["w_out"][:, h] + p["b_out"][h])

  return module, params, f, 0.3, 1.25 * train_length


@pytest.mark.parametrize("block", BLOCKS)
def test_fire(block):
  q, k, v = inputs(5)
  module, params, f, c, threshold = _fire()
  got, _ = attend_options(q, k, v, variant="baseline", score_bias=module.apply(params),
                  query_block=block)
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant="baseline", bias=ref.fire_bias(T, c, threshold, lambda x: f(x, h), eps=1e-6)))
  check(got, expected)


def test_biases_depend_only_on_relative_position():
  q, k, v = inputs(6)
  kerple = KerpleLogBias(H)
  module, params, _, _, threshold = _fire(train_length=64)  # shifts stay below L: psi(L) fixed
  biases = {"alibi": dict(alibi_slopes=np.array(positions.alibi_slopes(H), np.float32)),
            "kerple": dict(score_bias=kerple.apply(_init_bias(kerple))),
            "fire": dict(score_bias=module.apply(params))}
  assert T + 37 < threshold
  for name, kwargs in biases.items():
    a, _ = attend_options(q, k, v, variant="baseline", **kwargs)
    b, _ = attend_options(q, k, v, variant="baseline", positions=np.arange(T) + 37, **kwargs)
    check(np.asarray(b), np.asarray(a), atol=1e-5)


def test_sinusoidal_embedding():
  positions_ = np.array([[0, 1, 5, 100, 4095]])
  np.testing.assert_allclose(np.asarray(sinusoidal_embedding(positions_, 10))[0],
                             ref.sinusoidal_embedding(positions_[0].astype(float), 10),
                             atol=1e-4)  # float32 angles of up to 4095 rad


def test_learned_positions_refuse_a_sequence_past_the_table():
  module = LearnedPositions(train_length=8)
  x = jnp.zeros((1, 8, 4))
  params = module.init(jax.random.PRNGKey(0), x, jnp.arange(8)[None])
  with pytest.raises(ValueError, match="have 8 rows"):
    module.apply(params, jnp.zeros((1, 9, 4)), jnp.arange(9)[None])


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("rerope", [None, 4])
def test_xpos(block, rerope):
  """xPos, and ReRoPE on an xPos model: the decay at the distance the rotation uses (clipped)."""
  q, k, v = inputs(7, heads=1)
  got, _ = attend_options(q, k, v, variant="baseline", inv_freq=INV.astype(np.float32), xpos_gamma=0.4,
                  xpos_scale_base=8.0, query_block=block,   # a small scale base: strong decay
                  rerope_window=rerope)
  relative = None if rerope is None else (lambda i, j: min(i - j, rerope))
  expected = np.zeros_like(np.asarray(got), dtype=np.float64)
  for b in range(B):
    qb, kb = q[b, :, 0].astype(np.float64), k[b, :, 0].astype(np.float64)
    scores = ref.xpos_scores(qb, kb, INV, 0.4, 8.0, relative) / math.sqrt(S)
    # ref.attention without RoPE scores q.k / sqrt(S); the rest of the xPos score is the bias.
    expected[b, :, 0] = ref.attention(qb, kb, v[b, :, 0], variant="baseline",
                                      bias=scores - qb @ kb.T / math.sqrt(S))
  check(got, expected)


def test_xpos_scores_depend_only_on_relative_position():
  q, k, v = inputs(8)
  kwargs = dict(variant="baseline", inv_freq=INV.astype(np.float32), xpos_gamma=0.4,
                xpos_scale_base=512.0)
  a, _ = attend_options(q, k, v, **kwargs)
  b, _ = attend_options(q, k, v, positions=np.arange(T) + 3000, **kwargs)
  check(np.asarray(b), np.asarray(a), atol=5e-4)  # float32 angles of ~3000 rad


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_p_rope_frequencies(fraction):
  inv, _ = rope_inv_freq(16, base=10000.0)
  np.testing.assert_allclose(np.asarray(inv) * p_rope_mask(16, fraction),
                             ref.p_rope_inv_freq(16, 10000.0, fraction), rtol=1e-6)


def test_p_rope_ends_are_rope_and_nope():
  q, k, v = inputs(9)
  spec = lambda p: positions.AttentionSpec(rotary=positions.RotarySpec(base=100.0, fraction=p))
  run = lambda spec: attend_options(q, k, v, variant="kna", **layer_options(
      spec, rotary_dim=S, train_length=T, seq_length=T, logn_base=None))[0]
  check(run(spec(1.0)), np.asarray(run(positions.AttentionSpec(rotary=positions.RotarySpec(
      base=100.0)))), atol=1e-6)
  check(run(spec(0.0)), np.asarray(run(positions.AttentionSpec())), atol=1e-6)


@pytest.mark.parametrize("setting", [
    (8, 10000.0, 8.0, 1.0, 4.0, 1024), (128, 500000.0, 8.0, 1.0, 4.0, 8192),
    (16, 10000.0, 4.0, 2.0, 8.0, 512), (128, 10000.0, 16.0, 1.0, 4.0, 512),
])
def test_llama3_matches_hf_formula(setting):
  dim, base, factor, low, high, original = setting
  got, attention_factor = rope_inv_freq(dim, base=base, scaling="llama3", factor=factor,
                                        train_length=original, low_freq_factor=low,
                                        high_freq_factor=high)
  np.testing.assert_allclose(np.asarray(got), ref.llama3_inv_freq(dim, base, factor, low, high,
                                                                  original), rtol=2e-6)
  assert attention_factor == 1.0


def test_qk_layernorm_matches_reference():
  x = np.random.default_rng(10).normal(size=(4, 6)).astype(np.float32)
  norm = nn.LayerNorm(epsilon=1e-6)
  params = norm.init(jax.random.PRNGKey(0), x)
  gain = np.linspace(0.5, 2.0, 6).astype(np.float32)
  bias = np.linspace(-1.0, 1.0, 6).astype(np.float32)
  got = norm.apply({"params": {"scale": gain, "bias": bias}}, x)
  np.testing.assert_allclose(np.asarray(got), ref.layer_norm(x, gain, bias, 1e-6), atol=1e-5)
  assert set(params["params"]) == {"scale", "bias"}


@pytest.mark.parametrize("block", BLOCKS)
def test_ssmax(block):
  q, k, v = inputs(11)
  s = np.array([0.4, 0.9, 1.7], np.float32)
  got, _ = attend_options(q, k, v, variant="qna", ssmax_scale=s, query_block=block)
  expected = per_head_reference(q, k, v, lambda h: dict(variant="qna", ssmax_s=float(s[h])))
  check(got, expected)


def test_randomized_positions_are_sorted_distinct_and_in_range():
  method = positions.training_method("randomized_rope")
  drawn = np.asarray(method.training_positions(jax.random.PRNGKey(0), 16, 64, train_length=64))
  assert drawn.shape == (16, 64)
  assert all(ref.randomized_positions_ok(row, 64, 8 * 64) for row in drawn)
  assert len({tuple(row) for row in drawn}) == 16       # fresh per sequence
  assert drawn.max() > 4 * 64                            # they do reach far positions


def test_alibi_inference_slopes():
  slopes = positions.alibi_slopes(8)
  spec = positions.AttentionSpec(alibi_slopes=slopes)
  interpolated = positions.inference_method("alibi_interpolate").at(2048, 512).apply(spec)
  np.testing.assert_allclose(interpolated.alibi_slopes, ref.alibi_interpolated_slopes(slopes, 4))
  ntk = positions.inference_method("ntk_alibi", factor=3.0).apply(spec)
  np.testing.assert_allclose(ntk.alibi_slopes, ref.ntk_alibi_slopes(slopes, 3.0), rtol=1e-12)


def test_hwfa_layers():
  method = positions.training_method("hwfa")
  specs = [method.layer_spec(layer=i, num_layers=24, num_heads=1, rope_theta=1e4,
                             train_length=512) for i in range(24)]
  # Su's rule (w - 1)(L - 1) + 1 <= 3/4 N: w = 17 for 24 layers at 512 (he used 16).
  assert all(s.rotary is not None and s.window == 17 for s in specs[:-1])
  assert (17 - 1) * 23 + 1 <= 384 < (18 - 1) * 23 + 1
  last = specs[-1]
  assert last.rotary is None and last.window is None and last.logn is True
  assert method.default_window(4, 512) == 128


def test_skips_say_why():
  rope, alibi = positions.training_method("rope"), positions.training_method("alibi")
  assert "no RoPE" in positions.inference_method("yarn").skip_reason(alibi, 1)
  assert positions.inference_method("yarn").skip_reason(rope, 1) is None
  assert "no ALiBi" in positions.inference_method("alibi_interpolate").skip_reason(rope, 4)
  assert "several heads" in positions.inference_method("ntk_alibi").skip_reason(alibi, 1)
  assert positions.inference_method("window").skip_reason(alibi, 1) is None
  # The methods of 2025: the RoPE rewrites apply where a RoPE is, Llama 4's rule where a layer
  # has none.
  method = {n: positions.training_method(n) for n in ("fox", "cope", "drope", "scale_invariant",
                                                      "rnope_swa")}
  for name, verb in (("self_extend", "group"), ("dca", "chunk"), ("string", "shift"),
                     ("rerope", "clip")):
    inference = positions.inference_method(name)
    for position in ("fox", "cope", "drope"):
      assert f"{position} has no RoPE to {verb}" == inference.skip_reason(method[position], 4)
    assert inference.skip_reason(method["scale_invariant"], 4) is None
  llama4 = positions.inference_method("llama4_temperature")
  assert "every scale_invariant layer has RoPE" in llama4.skip_reason(method["scale_invariant"], 4)
  assert llama4.skip_reason(method["rnope_swa"], 4) is None


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
