"""The GAU language model: parameter count by hand, options, jit; both architectures' causality and
the way a layer's position setting reaches its attention."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import attention, positions
from keynorm_jax.attention import far
from keynorm_jax.errors import ConfigError
from keynorm_jax.models import GAULM, ModelConfig, build_model, count_params, init_params
from keynorm_jax.models.attention_block import AS_GIVEN, LEARNED_FROM, RESOLVED, attention_spec
from keynorm_jax.models.layers import rms_norm
from keynorm_jax.models.position_bias import LEARNED
from keynorm_jax.positions import EvalColumn, UnknownMethodError, inference_method

CFG = ModelConfig(vocab_size=257, num_layers=2, d_model=16, expansion=24, qk_size=8)


def _init(cfg, length=12):
  model = build_model(cfg)
  return model, model.init(jax.random.PRNGKey(0), jnp.zeros([1, length], jnp.int32))["params"]


def _expected_params(cfg):
  d, e, s, v = cfg.d_model, cfg.expansion, cfg.qk_size, cfg.vocab_size
  per_layer = d * (2 * e + s) + e * d + 4 * s + (2 * s if cfg.qk_norm != "none" else 0)
  return v * d + cfg.num_layers * per_layer + (0 if cfg.tie_embeddings else d * v)


@pytest.mark.parametrize("changes", [{}, {"qk_norm": "rmsnorm"}, {"tie_embeddings": True}])
def test_parameter_count_by_hand(changes):
  cfg = dataclasses.replace(CFG, **changes)
  params = jax.eval_shape(lambda: GAULM(cfg).init(jax.random.PRNGKey(0),
                                                  jnp.zeros([1, 8], jnp.int32)))["params"]
  assert count_params(params) == _expected_params(cfg)


def test_seed_size_is_about_100m():
  cfg = ModelConfig(num_layers=24, d_model=768, expansion=1536, qk_size=128)
  params = jax.eval_shape(lambda: GAULM(cfg).init(jax.random.PRNGKey(0),
                                                  jnp.zeros([1, 8], jnp.int32)))["params"]
  assert 80e6 < count_params(params) < 120e6


class _Learned(nn.Module):
  """The LEARNED table's arrays of a layer with position spec `spec` (head size 8)."""
  spec: positions.AttentionSpec

  @nn.compact
  def __call__(self, x):
    return {name: build(CFG, self.spec, 8, x) for name, build in LEARNED.items()}


def test_every_position_setting_reaches_the_attention():
  """A layer's positions.AttentionSpec reaches its attention whole: each field is an
  attention.Spec field of the same name (AS_GIVEN, taken by name), resolved with the model's
  settings (RESOLVED) or the source of a learned array (LEARNED_FROM); none is dropped."""
  assert set(AS_GIVEN) | set(RESOLVED) | set(LEARNED_FROM) == {
      f.name for f in dataclasses.fields(positions.AttentionSpec)}
  assert set(AS_GIVEN) <= {f.name for f in dataclasses.fields(attention.Spec)}
  given = dict(far=far.ReRoPE(3, 2.0), window=9, sink_tokens=1, scale_invariant_tau=3.0,
               logit_scale=1.5, llama4_temperature=(0.1, 8.0), posthoc_ssmax=0.5)
  assert set(given) == set(AS_GIVEN)   # a new field: give it a value here
  spec = positions.AttentionSpec(rotary=positions.RotarySpec(), alibi_slopes=(0.5,), logn=True,
                                 posthoc_logn=True, **given)
  resolved = attention_spec(CFG, spec, 16)
  assert {name: getattr(resolved, name) for name in given} == given
  assert resolved.inv_freq.shape == (CFG.head_size // 2,)
  assert (resolved.logn_base, resolved.posthoc_logn_length) == (CFG.train_length / 2,
                                                                CFG.train_length)
  np.testing.assert_array_equal(resolved.alibi_slopes, np.float32([0.5]))
  x = jnp.ones((1, 4, CFG.d_model))
  learned = lambda spec: _Learned(spec).init_with_output(jax.random.PRNGKey(0), x)[0]
  assert all(v is None for v in learned(positions.AttentionSpec()).values())
  for name, value in dict(learned_bias="fire", forget_gate=True, cope_positions=5,
                          path=positions.PathSpec()).items():
    built = learned(positions.AttentionSpec(**{name: value}))
    assert sum(v is not None for v in built.values()) == 1, name


def test_rms_norm_by_hand():
  x = np.array([[3.0, 4.0]], np.float32)  # mean square 12.5
  np.testing.assert_allclose(np.asarray(rms_norm(x, eps=0.0)), x / np.sqrt(12.5), rtol=1e-6)


# Each architecture's settings, each under "none" and under one inference-time column in turn (a
# window, ReRoPE with post-hoc log n, YaRN, streaming's sinks, LM-Infinite's), so that every column
# meets several settings.
CAUSAL_SETTINGS = {
    "gau": [dict(attention="baseline"), dict(attention="kna", logn=True), dict(attention="cosa"),
            dict(attention="qna", position="nope"), dict(qk_norm="rmsnorm", norm_position="pre"),
            dict(qk_norm="layernorm", ssmax=True), dict(position="alibi"),
            dict(position="sinusoidal"), dict(position="learned", train_length=12),
            dict(position="xpos"), dict(position="kerple_log"), dict(position="fire"),
            dict(position="randomized_rope"), dict(position="p_rope"),
            dict(position="hwfa", attention="kna")],
    "transformer": [dict(attention="kna"), dict(position="alibi", num_heads=4, num_kv_heads=2),
                    dict(position="xpos", qk_norm="layernorm"), dict(position="hwfa", ssmax=True),
                    dict(position="fire"),
                    dict(position="randomized_rope", attention="cosa", logn=True)],
}
COLUMNS = [EvalColumn(inference_method("window", window=5)),
           EvalColumn(inference_method("rerope", rerope_window=3), True),
           EvalColumn(inference_method("yarn", factor=2.0)),
           EvalColumn(inference_method("streaming", window=4, sink_tokens=2)),
           EvalColumn(inference_method("lm_infinite", n_global=2, n_local=4))]


def _causal_config(architecture, changes):
  fields = dict(architecture=architecture, num_layers=2, d_model=16, train_length=8)
  fields.update(dict(expansion=24, qk_size=8) if architecture == "gau" else dict(num_heads=2))
  return ModelConfig(**{**fields, **changes})


def _causal_cases():
  """(architecture, changes, column): each setting under "none" and under the next column (in
  turn) that applies to it."""
  cases, turn = [], 0
  for architecture, settings in CAUSAL_SETTINGS.items():
    for changes in settings:
      cfg = _causal_config(architecture, changes)
      applies = [c for c in COLUMNS[turn:] + COLUMNS[:turn]
                 if c.method.skip_reason(cfg.position_method, cfg.heads) is None]
      turn = (COLUMNS.index(applies[0]) + 1) % len(COLUMNS)
      cases += [(architecture, changes, EvalColumn()), (architecture, changes, applies[0])]
  return cases


@pytest.mark.parametrize("architecture, changes, column", _causal_cases(), ids=lambda x: (
    ",".join(f"{k}={v}" for k, v in x.items()) or "-" if isinstance(x, dict)
    else x.label if isinstance(x, EvalColumn) else x))
def test_the_models_are_causal(architecture, changes, column):
  """A token changed at position 7 changes no logit before it, and some logit from it on."""
  cfg = _causal_config(architecture, changes)
  _, params = _init(cfg)
  model = build_model(cfg, column)
  tokens = np.random.default_rng(0).integers(0, 256, size=(2, 12)).astype(np.int32)
  changed = tokens.copy()
  changed[:, 7] = (changed[:, 7] + 1) % 256
  a = np.asarray(model.apply({"params": params}, tokens))
  b = np.asarray(model.apply({"params": params}, changed))
  np.testing.assert_array_equal(a[:, :7], b[:, :7])
  assert np.abs(a[:, 7:] - b[:, 7:]).max() > 0


# The seed's GAU; a Transformer with GQA and PaTH-FoX's learned parts (low-rank projection,
# convolution, forget gates), which model.init under jit rounds differently. One layer each (the
# eager init is the test's time). (All 73 tiny configs of the field agreed when this changed.)
LAZY_INIT_CASES = [dataclasses.replace(CFG, num_layers=1),
                   ModelConfig(architecture="transformer", num_layers=1, d_model=16, num_heads=4,
                               num_kv_heads=2, position="path_fox", attention="kna")]


@pytest.mark.parametrize("cfg", LAZY_INIT_CASES, ids=lambda c: f"{c.architecture}-{c.position}")
def test_init_params_are_flax_init_bit_for_bit(cfg):
  """init_params traces the forward pass instead of computing it: the same numbers as model.init
  (outside jit, as a one-device run initializes), bit for bit."""
  model = build_model(cfg)
  # Two tokens: the parameters do not depend on the length, and model.init computes the forward
  # pass op by op.
  expected = model.init(jax.random.PRNGKey(3), jnp.zeros([1, 2], jnp.int32))["params"]
  expected = jax.tree.map(lambda p: p.astype(cfg.param_dtype), expected)
  got = init_params(model, 3, 2)
  assert jax.tree.structure(got) == jax.tree.structure(expected)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_jit_equals_eager_and_bfloat16_runs():
  model, params = _init(CFG)
  tokens = np.arange(24, dtype=np.int32).reshape(2, 12)
  eager = model.apply({"params": params}, tokens)
  jitted = jax.jit(lambda p, t: model.apply({"params": p}, t))(params, tokens)
  np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), atol=1e-5)
  bf16 = GAULM(dataclasses.replace(CFG, compute_dtype="bfloat16"))
  logits = bf16.apply({"params": params}, tokens)
  assert logits.dtype == jnp.float32 and np.isfinite(np.asarray(logits)).all()


def test_dropout_only_in_training():
  cfg = dataclasses.replace(CFG, dropout=0.5)
  model, params = _init(cfg)
  tokens = np.arange(24, dtype=np.int32).reshape(2, 12)
  a = model.apply({"params": params}, tokens, deterministic=True)
  b = model.apply({"params": params}, tokens, deterministic=True)
  c = model.apply({"params": params}, tokens, deterministic=False,
                  rngs={"dropout": jax.random.PRNGKey(1)})
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert np.abs(np.asarray(a) - np.asarray(c)).max() > 1e-3


def test_bad_model_config_raises():
  with pytest.raises(ConfigError, match="attention='flash' is not one of"):
    ModelConfig(attention="flash")
  with pytest.raises(ConfigError, match="Unknown position 'rotary'; choose one of nope, rope"):
    ModelConfig(position="rotary")
  with pytest.raises(ConfigError, match="has no knob bogus"):
    ModelConfig(position="alibi", position_options={"bogus": 1})
  with pytest.raises(UnknownMethodError, match="Unknown inference method 'ntk-by-parts'"):
    inference_method("ntk-by-parts")
  with pytest.raises(ValueError, match="factor must be >= 1"):
    inference_method("yarn", factor=0.5)
