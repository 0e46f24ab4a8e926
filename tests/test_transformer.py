"""The Transformer and one GAU layer against NumPy written from their definitions
(tests/numpy_layers_reference.py); parameter counts by hand; config checks. (Causality, of both
architectures: test_model.py.)"""

import dataclasses
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.diagnostics import run_diagnostics
from keynorm_jax.models import GAULM, ModelConfig, build_model, count_params
from keynorm_jax.models.attention_block import layer_specs
from keynorm_jax.models.gau import GAULayer
from keynorm_jax.models.transformer import TransformerBlock, TransformerLM
from keynorm_jax.positions import EvalColumn, inference_method
import numpy_layers_reference as layers_ref
import numpy_attention_reference as attention_ref
import numpy_bias_reference as bias_ref
from train_helpers import TEST_KERNEL

T, D = 10, 16


def _transformer(**changes):
  fields = dict(architecture="transformer", num_layers=2, d_model=D, num_heads=2, train_length=8)
  return ModelConfig(**{**fields, **changes})


def _random_like(params, seed):
  """Every weight replaced by a random one (gains near 1, SSMax's s positive) so that a weight
  read in the wrong place cannot go unnoticed."""
  rng = np.random.default_rng(seed)
  flat, tree = jax.tree_util.tree_flatten_with_path(params)

  def draw(path, leaf):
    name = jax.tree_util.keystr(path)
    if "scale" in name or "'s'" in name:
      return (1.0 + 0.3 * rng.uniform(-1, 1, leaf.shape)).astype(np.float32)
    fan_in = leaf.shape[0] if leaf.ndim == 2 else 1
    return (rng.normal(size=leaf.shape) / math.sqrt(fan_in)).astype(np.float32)

  return jax.tree_util.tree_unflatten(tree, [draw(p, l) for p, l in flat])


def _as_numpy(params):
  """Flax's tree as the reference reads it: kernels as (in, out) float64 matrices."""
  def convert(x):
    if isinstance(x, dict):
      return {k: (convert(v["kernel"]) if isinstance(v, dict) and set(v) == {"kernel"}
                  else convert(v)) for k, v in x.items()}
    return np.asarray(x, np.float64)
  return convert(jax.device_get(params))


def _per_head_kwargs(cfg, params_np, length):
  """attention_ref.attention's arguments for head h of a block of `cfg` with RoPE or ALiBi."""
  S, H = cfg.head_size, cfg.heads
  inv_freq = np.array([cfg.rope_theta**(-2.0 * m / S) for m in range(S // 2)])
  slopes = bias_ref.alibi_slopes(H)
  kappa = ([math.log(i + 1) / math.log(cfg.resolved_logn_base) for i in range(length)]
           if cfg.logn else None)

  def kwargs(h):
    out = dict(variant=cfg.attention, kappa=kappa, cosa_scale=cfg.resolved_cosa_scale)
    if cfg.position == "rope":
      out["inv_freq"] = inv_freq
    elif cfg.position == "alibi":
      out["bias"] = bias_ref.alibi_bias(length, slopes[h])
    if cfg.ssmax:
      out["ssmax_s"] = params_np["attention"]["ssmax"]["s"][h]
    return out

  return kwargs


# Transformer blocks (model settings; the attention's block sizes are shapes.BLOCKS).
TRANSFORMER_BLOCKS = [
    dict(attention="kna"),
    dict(attention="baseline", position="alibi", norm="layernorm", mlp="gelu", num_heads=4,
         num_kv_heads=2),
    dict(attention="baseline", qk_norm="rmsnorm", ssmax=True, num_kv_heads=1),
    dict(attention="cosa", logn=True, qk_norm="layernorm", head_dim=12, mlp_size=24),
    dict(attention="qna", position="alibi", num_heads=4, num_kv_heads=1, logn=True),
    dict(attention="kna", position="fox", num_heads=4, num_kv_heads=2),
    dict(attention="baseline", output_gate=True, num_heads=4, num_kv_heads=2),
]


@pytest.mark.parametrize("changes", TRANSFORMER_BLOCKS)
@pytest.mark.parametrize("kernel", ["cpu", "xla"])
def test_transformer_block_matches_numpy(changes, kernel):
  cfg = dataclasses.replace(_transformer(**changes), kernel=kernel)   # xla: where it applies
  x = np.random.default_rng(1).normal(size=(2, T, D)).astype(np.float32)
  pos = np.broadcast_to(np.arange(T), (2, T))
  block = TransformerBlock(cfg, layer_specs(cfg, EvalColumn(), T)[0])
  params = _random_like(block.init(jax.random.PRNGKey(0), x, pos, True)["params"], seed=2)
  got = np.asarray(block.apply({"params": params}, x, pos, True))
  p = _as_numpy(params)
  for b in range(2):
    expected = layers_ref.transformer_block(
        x[b].astype(np.float64), p, heads=cfg.heads, kv_heads=cfg.kv_heads, size=cfg.head_size,
        norm_kind=cfg.norm, mlp_kind=cfg.mlp,
        qk_norm=None if cfg.qk_norm == "none" else cfg.qk_norm,
        per_head_kwargs=_per_head_kwargs(cfg, p, T))
    np.testing.assert_allclose(got[b], expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("tied", [False, True])
def test_transformer_lm_matches_numpy(tied):
  cfg = _transformer(attention="kna", tie_embeddings=tied, num_kv_heads=1)
  tokens = np.random.default_rng(3).integers(0, 257, size=(1, T)).astype(np.int32)
  model = TransformerLM(cfg)
  params = _random_like(model.init(jax.random.PRNGKey(0), tokens)["params"], seed=4)
  got = np.asarray(model.apply({"params": params}, tokens))[0]
  p = _as_numpy(params)
  lm = {"embed": p["embedder"]["embed"]["embedding"], "final_norm": p["final_norm"],
        **{f"layer_{i}": p[f"layer_{i}"] for i in range(cfg.num_layers)}}
  if not tied:
    lm["head"] = p["embedder"]["head"]
  expected = layers_ref.transformer_lm(
      tokens[0], lm, num_layers=cfg.num_layers, tied=tied, heads=cfg.heads,
      kv_heads=cfg.kv_heads, size=cfg.head_size, per_head_kwargs=_per_head_kwargs(cfg, p, T))
  np.testing.assert_allclose(got, expected, atol=5e-5, rtol=5e-5)


@pytest.mark.parametrize("variant,gau_qk,heads,mlp", [
    ("baseline", "shared", 1, False), ("kna", "shared", 1, False), ("kna", "separate", 1, False),
    ("kna", "shared", 2, False), ("kna", "separate", 2, True)])
def test_gau_layer_matches_numpy(variant, gau_qk, heads, mlp):
  e, s = 24, 8
  cfg = ModelConfig(num_layers=1, d_model=D, expansion=e, qk_size=s, attention=variant,
                    train_length=8, gau_qk=gau_qk, gau_heads=heads, gau_mlp=mlp)
  x = np.random.default_rng(5).normal(size=(2, T, D)).astype(np.float32)
  pos = np.broadcast_to(np.arange(T), (2, T))
  layer = GAULayer(cfg, layer_specs(cfg, EvalColumn(), T)[0])
  params = _random_like(layer.init(jax.random.PRNGKey(0), x, pos, True)["params"], seed=6)
  got = np.asarray(layer.apply({"params": params}, x, pos, True))
  p = _as_numpy(params)
  weights = dict(wi=p["wi"], wo=p["wo"], gamma_q=p["q_scale_offset"]["gamma"],
                 beta_q=p["q_scale_offset"]["beta"], gamma_k=p["k_scale_offset"]["gamma"],
                 beta_k=p["k_scale_offset"]["beta"])
  size = s // heads   # RoPE rotates each head's own q and k
  inv_freq = np.array([10000.0**(-2.0 * m / size) for m in range(size // 2)])
  for b in range(2):
    unit = layers_ref.gau_layer(x[b].astype(np.float64), weights, e=e, s=s,
                                attention_kwargs=dict(variant=variant, inv_freq=inv_freq),
                                separate=gau_qk == "separate", heads=heads)
    expected = layers_ref.rms_norm(x[b] + unit, 1.0)              # post-norm residual (the seed's)
    if mlp:   # the feed-forward step after it, post-norm as well
      expected = layers_ref.rms_norm(expected + layers_ref.mlp("swiglu", expected, p["mlp"]), 1.0)
    np.testing.assert_allclose(got[b], expected, atol=2e-5, rtol=2e-5)


def _expected_params(cfg):
  """By hand: embedding (+ head), absolute table, final norm; per layer two norms, q/k/v/o,
  the MLP, QK-norm, and the position method's and SSMax's own parameters."""
  d, H, K, S, F, V = (cfg.d_model, cfg.heads, cfg.kv_heads, cfg.head_size,
                      cfg.resolved_mlp_size, cfg.vocab_size)
  per_layer = 2 * d + d * H * S + 2 * d * K * S + H * S * d
  per_layer += (3 if cfg.mlp == "swiglu" else 2) * d * F
  per_layer += {"none": 0, "rmsnorm": 2 * S, "layernorm": 4 * S}[cfg.qk_norm]
  per_layer += {"kerple_log": 2 * H, "fire": 32 + 32 + 32 * H + H + 2}.get(cfg.position, 0)
  per_layer += H if cfg.ssmax else 0
  total = V * d + (0 if cfg.tie_embeddings else d * V) + d + cfg.num_layers * per_layer
  return total + (cfg.train_length * d if cfg.position == "learned" else 0)


@pytest.mark.parametrize("changes", [
    {}, dict(num_kv_heads=1), dict(tie_embeddings=True), dict(mlp="gelu"),
    dict(qk_norm="layernorm", norm="layernorm"), dict(qk_norm="rmsnorm", ssmax=True),
    dict(position="kerple_log", num_heads=4), dict(position="fire", num_heads=4, num_kv_heads=2),
    dict(position="learned", head_dim=6, mlp_size=40),
])
def test_parameter_count_by_hand(changes):
  cfg = _transformer(**changes)
  assert _count(cfg) == _expected_params(cfg)


def _preset(size):
  config = run_config.load_config("transformer_kna_rope")
  config.model_size = size
  return run_config.model_config(run_config.resolve(config))


def _count(cfg):
  shapes = jax.eval_shape(lambda: build_model(cfg).init(jax.random.PRNGKey(0),
                                                         jnp.zeros([1, 8], jnp.int32)))
  return count_params(shapes["params"])


def _scanned_count(cfg):
  """_count on the scanned layout: one layer traced, its parameters stacked num_layers deep (the
  same total; test_layer_stack ties the scanned model to the loop's)."""
  return _count(dataclasses.replace(cfg, scan_layers=True))


def test_size_presets():
  presets = {size: _preset(size) for size in ("tiny", "cpu", "medium", "seed")}
  counts = {size: _scanned_count(cfg) for size, cfg in presets.items()}
  for size, count in counts.items():
    assert count == _expected_params(presets[size]), size   # reads the preset's num_layers
  for size in ("cpu", "medium"):
    gau_config = run_config.load_config("kna_rope")
    gau_config.model_size = size
    gau = _scanned_count(run_config.model_config(run_config.resolve(gau_config)))
    assert abs(counts[size] / gau - 1) < 0.05, size  # equal cost at these sizes
  # GAU medium by hand: 12 x (d (2e + s) + e d + 4 s) + 2 V d
  assert gau == 12 * (576 * (2 * 1152 + 128) + 1152 * 576 + 4 * 128) + 2 * 257 * 576
  assert 20e6 < counts["medium"] < 30e6
  seed = _preset("seed")
  assert (seed.num_layers, seed.d_model, seed.heads, seed.head_size) == (12, 768, 12, 64)
  assert 80e6 < counts["seed"] < 120e6


def test_diagnostics_are_per_head():
  cfg = _transformer(num_heads=4, num_kv_heads=2, attention="kna")
  model = TransformerLM(cfg)
  tokens = np.arange(2 * T, dtype=np.int32).reshape(2, T)
  params = model.init(jax.random.PRNGKey(0), tokens)["params"]
  _, state = model.apply({"params": params}, tokens, mutable=["intermediates"])
  found = state["intermediates"]["layer_1"]["attention"]
  assert found["attention_entropy"][0].shape == (2, T, 4)
  assert found["key_norm"][0].shape == (2, T, 2)
  entropy = np.asarray(found["attention_entropy"][0])
  assert np.allclose(entropy[:, 0], 0.0, atol=1e-6)           # the first query sees one key
  assert (entropy[:, 1:] > 0).all() and (entropy <= np.log(np.arange(1, T + 1))[None, :, None]
                                         + 1e-5).all()


def test_run_diagnostics_reports_every_head():
  config = run_config.load_config("transformer_baseline_alibi")
  config.model_size, config.train_length = "tiny", 8
  config.model.kernel = TEST_KERNEL   # the tiny runs' kernel (train_helpers.py says why)
  config.model.num_heads, config.model.num_kv_heads = 4, 2
  config = run_config.resolve(config)
  params = run_config.build_model(config).init(jax.random.PRNGKey(0),
                                               jnp.zeros([1, 8], jnp.int32))["params"]
  tokens = np.random.default_rng(0).integers(0, 256, size=400)
  run = types.SimpleNamespace(config=config, params=params)
  layer = run_diagnostics(run, lengths=[32], tokens=tokens, num_windows=2)[32]["layers"]["layer_0"]
  assert len(layer["raw_key_norm_cv_by_kv_head"]) == 2
  within, beyond = layer["entropy_within_train_by_head"], layer["entropy_beyond_train_by_head"]
  assert len(within) == len(beyond) == 4
  assert np.mean(within) == pytest.approx(layer["entropy_within_train"], rel=1e-5)
  assert np.mean(beyond) == pytest.approx(layer["entropy_beyond_train"], rel=1e-5)
  assert np.ptp(beyond) > 0.1          # ALiBi's slopes differ per head: so do the entropies


def test_bad_transformer_configs_say_what_to_change():
  with pytest.raises(ConfigError, match="pre-norm by definition.*norm_position=pre"):
    _transformer(norm_position="post")
  with pytest.raises(ConfigError, match="d_model=16 is not a multiple of model.num_heads=3"):
    _transformer(num_heads=3)
  with pytest.raises(ConfigError, match="num_heads=4 is not a multiple of model.num_kv_heads=3"):
    _transformer(num_heads=4, num_kv_heads=3)
  with pytest.raises(ConfigError, match="mlp='relu' is not one of swiglu, gelu"):
    _transformer(mlp="relu")
  with pytest.raises(ConfigError, match="num_heads must be >= 0"):
    _transformer(num_heads=-2, head_dim=8)
  assert _transformer().norm_position == "pre" and ModelConfig().norm_position == "post"
  assert isinstance(build_model(ModelConfig()), GAULM)
