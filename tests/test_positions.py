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
from keynorm_jax.attention import attend
from keynorm_jax.models.layers import LearnedPositions, sinusoidal_embedding
from keynorm_jax.models.position_bias import FireBias, KerpleLogBias
from keynorm_jax.rope import p_rope_mask, rope_inv_freq
import numpy_positions_reference as ref

B, T, H, S, E = 2, 12, 3, 8, 5
BLOCKS = (None, 5)
INV = np.array([100.0**(-2 * m / S) for m in range(S // 2)])


def _inputs(seed=0, heads=H):
  rng = np.random.default_rng(seed)
  return tuple(rng.normal(size=(B, T, heads, size)).astype(np.float32) for size in (S, S, E))


def _per_head_reference(q, k, v, per_head_kwargs):
  """ref.attention for every batch row and head; per_head_kwargs(h) -> its keyword arguments."""
  out = np.zeros(q.shape[:3] + (v.shape[-1],))
  for b in range(q.shape[0]):
    for h in range(q.shape[2]):
      out[b, :, h] = ref.attention(q[b, :, h], k[b, :, h], v[b, :, h], **per_head_kwargs(h))
  return out


def _check(got, expected, atol=3e-5):
  np.testing.assert_allclose(np.asarray(got), expected, atol=atol, rtol=atol)


def _column_kwargs(name, *, at, train_length, rope=True, logn_base=None, **knobs):
  """attend's keyword arguments of a layer (RoPE with base 100, or none) under inference method
  `name` at length `at` for a model trained at `train_length`, and the resolved column."""
  column = positions.EvalColumn(positions.inference_method(name, **knobs)).at(at, train_length)
  layer = positions.AttentionSpec(rotary=positions.RotarySpec(base=100.0) if rope else None)
  kwargs = positions.attention_kwargs(column.apply(layer), rotary_dim=S,
                                      train_length=train_length, seq_length=T, logn_base=logn_base)
  return kwargs, column


@pytest.mark.parametrize("heads", [1, 2, 3, 4, 5, 6, 8, 12, 16])
def test_alibi_slopes_match_the_paper(heads):
  np.testing.assert_allclose(positions.alibi_slopes(heads), ref.alibi_slopes(heads), rtol=1e-12)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("variant", ["baseline", "kna"])
def test_alibi_attention(variant, block):
  q, k, v = _inputs(1)
  slopes = np.array(positions.alibi_slopes(H), np.float32)
  got, _ = attend(q, k, v, variant=variant, alibi_slope=slopes, query_block=block)
  expected = _per_head_reference(q, k, v, lambda h: dict(
      variant=variant, bias=ref.alibi_bias(T, slopes[h])))
  _check(got, expected)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("opts", [
    dict(window=4), dict(window=4, rope=True), dict(window=3, sink_tokens=2, rope=True),
    dict(window=5, sink_tokens=1, alibi=0.3), dict(window=4, sink_tokens=2, rope=True, alibi=0.2),
])
def test_window_and_streaming(opts, block):
  opts = dict(opts)
  rope, alibi = opts.pop("rope", False), opts.pop("alibi", None)
  q, k, v = _inputs(2)
  got, _ = attend(q, k, v, variant="baseline", inv_freq=INV.astype(np.float32) if rope else None,
                  alibi_slope=alibi, query_block=block, **opts)
  bias = (lambda t, i: -alibi * t) if alibi else None
  expected = _per_head_reference(q, k, v, lambda h: dict(
      variant="baseline", inv_freq=INV if rope else None, bias=bias, **opts))
  _check(got, expected)


def test_window_at_least_length_is_full_and_streaming_without_sinks_is_window():
  q, k, v = _inputs(3)
  inv = INV.astype(np.float32)
  full, _ = attend(q, k, v, variant="kna", inv_freq=inv)
  _check(attend(q, k, v, variant="kna", inv_freq=inv, window=T)[0], np.asarray(full), atol=1e-6)
  window, _ = attend(q, k, v, variant="kna", inv_freq=inv, window=4)
  _check(attend(q, k, v, variant="kna", inv_freq=inv, window=4, sink_tokens=0)[0],
         np.asarray(window), atol=1e-6)
  assert np.abs(np.asarray(window) - np.asarray(full)).max() > 1e-3  # the window does bite


def _init_bias(module):
  return module.init(jax.random.PRNGKey(3))


@pytest.mark.parametrize("block", BLOCKS)
def test_kerple_log(block):
  q, k, v = _inputs(4)
  module = KerpleLogBias(H)
  params = _init_bias(module)
  r1, r2 = (np.asarray(params["params"][n]) for n in ("r1", "r2"))
  assert (r1 > 0).all() and (r2 > 0).all() and r1.std() > 0  # random per-head init, as the paper
  bias = module.apply(params)
  got, _ = attend(q, k, v, variant="kna", score_bias=bias, query_block=block)
  expected = _per_head_reference(q, k, v, lambda h: dict(
      variant="kna", bias=ref.kerple_log_bias(T, max(r1[h], 1e-2), max(r2[h], 1e-2))))
  _check(got, expected)


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
  q, k, v = _inputs(5)
  module, params, f, c, threshold = _fire()
  got, _ = attend(q, k, v, variant="baseline", score_bias=module.apply(params),
                  query_block=block)
  expected = _per_head_reference(q, k, v, lambda h: dict(
      variant="baseline", bias=ref.fire_bias(T, c, threshold, lambda x: f(x, h), eps=1e-6)))
  _check(got, expected)


def test_biases_depend_only_on_relative_position():
  q, k, v = _inputs(6)
  kerple = KerpleLogBias(H)
  module, params, _, _, threshold = _fire(train_length=64)  # shifts stay below L: psi(L) fixed
  biases = {"alibi": dict(alibi_slope=np.array(positions.alibi_slopes(H), np.float32)),
            "kerple": dict(score_bias=kerple.apply(_init_bias(kerple))),
            "fire": dict(score_bias=module.apply(params))}
  assert T + 37 < threshold
  for name, kwargs in biases.items():
    a, _ = attend(q, k, v, variant="baseline", **kwargs)
    b, _ = attend(q, k, v, variant="baseline", positions=np.arange(T) + 37, **kwargs)
    _check(np.asarray(b), np.asarray(a), atol=1e-5)


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
  q, k, v = _inputs(7, heads=1)
  got, _ = attend(q, k, v, variant="baseline", inv_freq=INV.astype(np.float32), xpos_gamma=0.4,
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
  _check(got, expected)


def test_xpos_scores_depend_only_on_relative_position():
  q, k, v = _inputs(8)
  kwargs = dict(variant="baseline", inv_freq=INV.astype(np.float32), xpos_gamma=0.4,
                xpos_scale_base=512.0)
  a, _ = attend(q, k, v, **kwargs)
  b, _ = attend(q, k, v, positions=np.arange(T) + 3000, **kwargs)
  _check(np.asarray(b), np.asarray(a), atol=5e-4)  # float32 angles of ~3000 rad


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_p_rope_frequencies(fraction):
  inv, _ = rope_inv_freq(16, base=10000.0)
  np.testing.assert_allclose(np.asarray(inv) * p_rope_mask(16, fraction),
                             ref.p_rope_inv_freq(16, 10000.0, fraction), rtol=1e-6)


def test_p_rope_ends_are_rope_and_nope():
  q, k, v = _inputs(9)
  spec = lambda p: positions.AttentionSpec(rotary=positions.RotarySpec(base=100.0, fraction=p))
  run = lambda spec: attend(q, k, v, variant="kna", **positions.attention_kwargs(
      spec, rotary_dim=S, train_length=T, seq_length=T, logn_base=None))[0]
  _check(run(spec(1.0)), np.asarray(run(positions.AttentionSpec(rotary=positions.RotarySpec(
      base=100.0)))), atol=1e-6)
  _check(run(spec(0.0)), np.asarray(run(positions.AttentionSpec())), atol=1e-6)


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
  q, k, v = _inputs(11)
  s = np.array([0.4, 0.9, 1.7], np.float32)
  got, _ = attend(q, k, v, variant="qna", ssmax_scale=s, query_block=block)
  expected = _per_head_reference(q, k, v, lambda h: dict(variant="qna", ssmax_s=float(s[h])))
  _check(got, expected)


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


def test_rnope_swa_layers_and_bad_knobs():
  """Every fourth layer (and the last) full NoPE; the others RoPE in a window of half the
  training length (or the knob's)."""
  from keynorm_jax.errors import ConfigError  # pylint: disable=g-import-not-at-top
  from keynorm_jax.models.config import ModelConfig  # pylint: disable=g-import-not-at-top

  def kinds(method, layers):
    specs = [method.layer_spec(layer=i, num_layers=layers, num_heads=1, rope_theta=1e4,
                               train_length=512) for i in range(layers)]
    return "".join("F" if s.rotary is None and s.window is None else f"W{s.window}," for s in specs)
  assert kinds(positions.training_method("rnope_swa"), 9) == "W256," * 3 + "F" + "W256," * 3 + "FF"
  assert kinds(positions.training_method("rnope_swa", {"ratio": 1, "window": 64}), 3) == "W64,FF"
  with pytest.raises(ValueError, match="ratio .* must be at least 1"):
    positions.training_method("rnope_swa", {"ratio": -2})
  with pytest.raises(ConfigError, match="window of 600 tokens is longer than the training length"):
    ModelConfig(position="rnope_swa", position_options={"window": 600}, train_length=512)


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
  q, k, v = _inputs(12, heads=1)
  got, _ = attend(q, k, v, variant="qna", posthoc_logn_length=4)
  kappa = [max(1.0, math.log(i + 1) / math.log(4)) for i in range(T)]
  expected = _per_head_reference(q, k, v, lambda h: dict(variant="qna", kappa=kappa))
  _check(got, expected)
  bojone, _ = attend(q * np.asarray(kappa, np.float32)[None, :, None, None], k, v, variant="qna")
  plain, _ = attend(q, k, v, variant="qna")
  _check(bojone, np.asarray(plain), atol=1e-6)                  # q's factor cancels for QNA
  assert np.abs(np.asarray(got) - np.asarray(plain)).max() > 1e-3


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("group, window", [(3, 4), (2, 5), (4, 1)])
def test_self_extend(group, window, block):
  """Self-Extend against the NumPy reference's grouped relative positions (LongLM's code)."""
  q, k, v = _inputs(6)
  got, _ = attend(q, k, v, variant="kna", inv_freq=INV.astype(np.float32), rerope_window=window,
                  self_extend_group=group, query_block=block)
  expected = _per_head_reference(q, k, v, lambda h: dict(
      variant="kna", inv_freq=INV, relative=ref.self_extend_relative(group, window)))
  _check(got, expected)


def test_self_extend_defaults_and_bad_knobs():
  method = positions.inference_method("self_extend").at(8192, 512)
  # W = 512 / 4 = 128; G the smallest with 128 + (8192 - 128) / G <= 2/3 x 512.
  assert (method.self_extend_window, method.self_extend_group) == (128, 38)
  assert 128 + (8192 - 128) / 38 <= 2 / 3 * 512 < 128 + (8192 - 128) / 37
  with pytest.raises(ValueError, match="self_extend_group must be at least 1"):
    positions.inference_method("self_extend", self_extend_group=0)
  q, k, v = _inputs(0)
  with pytest.raises(ValueError, match="self_extend_group needs rerope_window"):
    attend(q, k, v, variant="kna", inv_freq=INV.astype(np.float32), self_extend_group=2)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("opts", [dict(tau=10.0), dict(tau=0.5, window=5, sink_tokens=2)])
def test_scale_invariant(opts, block):
  """Scale-invariant p-RoPE (the training method's spec) against the paper's general form."""
  opts = dict(opts)
  tau = opts.pop("tau")
  method = positions.training_method("scale_invariant", {"tau": tau})
  spec = method.layer_spec(layer=0, num_layers=1, num_heads=H, rope_theta=100.0, train_length=T)
  kwargs = positions.attention_kwargs(spec, rotary_dim=S, train_length=T, seq_length=T,
                                      logn_base=None)
  q, k, v = _inputs(7)
  got, _ = attend(q, k, v, variant="baseline", query_block=block, **{**kwargs, **opts})
  expected = _per_head_reference(q, k, v, lambda h: dict(
      variant="baseline", inv_freq=ref.p_rope_inv_freq(S, 100.0, 0.5),
      logit_transform=ref.scale_invariant_logit(tau), **opts))
  _check(got, expected)
  with pytest.raises(ValueError, match="tau must be > 0"):
    positions.training_method("scale_invariant", {"tau": -1.0})


@pytest.mark.parametrize("name, knobs, beta", [
    ("yarn_temperature", {}, (0.1 * math.log(4.0) + 1.0)**2),
    ("drope_temperature", {}, 1.0 + 0.412 * math.log(4.0)),
    ("drope_temperature", {"drope_c": 0.103, "factor": 2.0}, 1.0 + 0.103 * math.log(2.0)),
])
def test_temperature_rules(name, knobs, beta):
  """The temperature rules at 4x the training length: every score times beta (NumPy: kappa_i =
  beta), on top of a trained log n's factor."""
  kwargs, _ = _column_kwargs(name, at=4 * T, train_length=T, logn_base=6.0, **knobs)
  q, k, v = _inputs(8)
  got, _ = attend(q, k, v, variant="kna", **kwargs)
  kappa = [beta * math.log(i + 1) / math.log(6.0) for i in range(T)]
  _check(got, _per_head_reference(q, k, v, lambda h: dict(variant="kna", inv_freq=INV,
                                                           kappa=kappa)))
  with pytest.raises(ValueError, match="drope_c must be >= 0"):
    positions.inference_method("drope_temperature", drope_c=-1.0)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("opts", [dict(), dict(window=4, rope=True)])
def test_stick_breaking(opts, block):
  """Stick-breaking attention against explicit products (the first query attends nothing)."""
  rope = opts.get("rope", False)
  q, k, v = _inputs(9)
  inv = INV.astype(np.float32) if rope else None
  got, _ = attend(q, k, v, variant="stickbreaking", inv_freq=inv, window=opts.get("window"),
                  query_block=block)
  expected = np.zeros(q.shape[:3] + (E,))
  for b in range(B):
    for h in range(H):
      expected[b, :, h] = ref.stick_breaking_attention(q[b, :, h], k[b, :, h], v[b, :, h],
                                                       INV if rope else None, opts.get("window"))
  _check(got, expected)


def test_stick_breaking_is_stable_at_16k_tokens():
  """The last queries of a 16,384-token sequence, scores of a wide spread: every weight finite and
  each row summing to at most 1."""
  from keynorm_jax.attention.scores import stick_breaking_with_entropy  # pylint: disable=g-import-not-at-top
  length = 16384
  scores = np.random.default_rng(0).normal(0.0, 8.0, size=(1, 2, 4, length)).astype(np.float32)
  query_index = np.arange(length - 4, length)
  keep = (query_index[:, None] > np.arange(length)[None, :])[None, None]
  weights, entropy = stick_breaking_with_entropy(jnp.asarray(scores), jnp.asarray(keep))
  weights = np.asarray(weights, np.float64)
  assert np.isfinite(weights).all() and np.isfinite(np.asarray(entropy)).all()
  assert (weights >= 0).all() and (weights.sum(-1) <= 1 + 1e-5).all()
  assert weights.sum(-1).min() > 0.5   # the mass sits on the keys, not lost to underflow


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("shift, window", [(5, 2), (4, 0), (3, 3)])
def test_string(shift, window, block):
  """STRING against the NumPy reference's shifted relative positions; its defaults and refusals."""
  kwargs, _ = _column_kwargs("string", at=T, train_length=T, string_shift=shift,
                             string_window=window)
  q, k, v = _inputs(10)
  got, _ = attend(q, k, v, variant="kna", query_block=block, **kwargs)
  _check(got, _per_head_reference(q, k, v, lambda h: dict(
      variant="kna", inv_freq=INV, relative=ref.string_relative(shift, window))))
  default = positions.inference_method("string").at(8192, 512)
  assert (default.string_shift, default.string_window) == (168, 128)
  with pytest.raises(ValueError, match="string_window W = 9 must be at most string_shift S = 4"):
    positions.inference_method("string", string_shift=4, string_window=9)


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
  kwargs, column = _column_kwargs(name, at=T, train_length=T // 2, rope=False, **knobs)
  q, k, v = _inputs(11)
  got, _ = attend(q, k, v, variant="baseline", **kwargs)
  kappa = [factor(i) for i in range(T)]
  _check(got, _per_head_reference(q, k, v, lambda h: dict(variant="baseline", kappa=kappa)))
  rope = positions.training_method("rope")
  if name == "llama4_temperature":   # the layers with RoPE are left as they are
    assert "every rope layer has RoPE" in column.method.skip_reason(rope, H)
    rotary = positions.AttentionSpec(rotary=positions.RotarySpec())
    assert column.apply(rotary) == rotary


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("variant, npos, window", [("baseline", 16, None), ("kna", 4, 6)])
def test_cope(variant, npos, window, block):
  """CoPE against explicit sums (with the cap at npos - 1 reached in the second case)."""
  q, k, v = _inputs(12)
  e = np.random.default_rng(13).normal(size=(S, npos)).astype(np.float32)
  got, _ = attend(q, k, v, variant=variant, cope_embeddings=e, window=window, query_block=block)
  expected = np.zeros(q.shape[:3] + (E,))
  for b in range(B):
    for h in range(H):
      expected[b, :, h] = ref.cope_attention(q[b, :, h], k[b, :, h], v[b, :, h], e, variant,
                                             window)
  _check(got, expected)
  with pytest.raises(ValueError, match="npos\\) must be at least 2"):
    positions.training_method("cope", {"max_position": 1})


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("chunk, train", [(3, 4), (4, 6), (2, 3)])
def test_dca(chunk, train, block):
  """Dual chunk attention against the NumPy reference's chunked relative positions (queries in
  their own, the next and later chunks at T = 12)."""
  kwargs, _ = _column_kwargs("dca", at=T, train_length=train, dca_chunk=chunk)
  q, k, v = _inputs(14)
  got, _ = attend(q, k, v, variant="kna", query_block=block, **kwargs)
  _check(got, _per_head_reference(q, k, v, lambda h: dict(
      variant="kna", inv_freq=INV, relative=ref.dca_relative(chunk, train))))
  assert positions.inference_method("dca").at(8192, 512).dca_chunk == 384
  with pytest.raises(ValueError, match="dca_chunk 6 must be below the training length 6"):
    positions.inference_method("dca", dca_chunk=6).at(T, 6)
