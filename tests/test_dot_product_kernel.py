"""The `xla` and `cudnn` kernels (jax.nn.dot_product_attention on pre-scaled q, k) beyond the
shared conformance test (test_kernels.py, which checks every kernel on attention_cases.CASES): here
the position registry as a model resolves it, each training method under each inference method that
applies to it (POSITION_SETTINGS), against the reference kernel in float32 at 3x the training
length (T = 24; windows of 5), with gradients for the settings a model trains with; the registry's
coverage; what they cannot express is refused; a model with model.kernel=xla; the cuDNN fallback."""

import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import positions
from keynorm_jax.attention import far, kernels
from keynorm_jax.attention.kernels import dot_product
from keynorm_jax.attention.kernels.base import Shape
from keynorm_jax.models import ModelConfig
from keynorm_jax.models.position_bias import FireBias, KerpleLogBias
from keynorm_jax.models.transformer import TransformerLM
from attention_cases import attend_options, layer_options, learned_bias, mods_of
from shapes import B, H, INV32, S

TRAIN = 8        # the training length of the position settings
T = 3 * TRAIN    # not the shared T = 37: the inference methods at a whole 3x their training length


def _inputs(seed, kv_heads=H):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(B, T, H, S)).astype(np.float32)
  k, v = (rng.normal(size=(B, T, kv_heads, S)).astype(np.float32) for _ in range(2))
  return q, k, v


def _refusal(q, k, v, kwargs, name="xla"):
  if q.ndim == 3:   # one head
    q, k, v = q[:, :, None], k[:, :, None], v[:, :, None]
  return kernels.refusal(kernels.KERNELS[name], mods_of(**kwargs), Shape.of(q, k, v))


def fused_attention(q, k, v, **kwargs):
  """The xla kernel's output, after checking that it runs the call (not a fallback)."""
  assert _refusal(q, k, v, kwargs) is None, _refusal(q, k, v, kwargs)
  return attend_options(q, k, v, kernel="xla", need_entropy=False, **kwargs)[0]


def _compare(q, k, v, kwargs, gradients=True):
  """Outputs and gradients (q, k, v) of the xla kernel and the reference kernel."""
  cotangent = jnp.asarray(np.random.default_rng(9).normal(size=q.shape[:3] + v.shape[-1:]),
                          jnp.float32)

  def loss(path, q, k, v):
    out = path(q, k, v, **kwargs)
    return jnp.sum(out * cotangent), out

  def run(path):
    if not gradients:
      return loss(path, q, k, v)[1], ()
    (_, out), grads = jax.value_and_grad(loss, argnums=(1, 2, 3), has_aux=True)(path, q, k, v)
    return out, grads

  got, got_grads = run(fused_attention)
  want, want_grads = run(lambda *a, **kw: attend_options(*a, **kw, kernel="reference")[0])
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5, rtol=2e-5)
  for g, w in zip(got_grads, want_grads):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=5e-5, rtol=5e-5)


# Not attention options (those are attention_cases.CASES) but the registry's names: training
# method -> the inference methods that apply to it, each resolved as a model resolves it
# (layer_spec, then layer_options). sinusoidal and learned give the attention nothing (their positions are on the
# embedding): nope covers them. The RoPE scalings linear and dynamic_ntk only change inv_freq, as
# ntk does.
POSITION_SETTINGS = {
    "rope": ["none", "ntk", "yarn", "llama3", "window", "posthoc_logn"],
    "xpos": ["none", "yarn", "window"],
    "p_rope": ["none", "ntk"],
    "randomized_rope": ["none", "yarn"],
    "hwfa": ["none", "window"],
    "rnope_swa": ["none"],
    "alibi": ["none", "alibi_interpolate", "ntk_alibi", "window", "posthoc_logn",
              "posthoc_ssmax", "lm_infinite"],
    "nope": ["none", "window", "streaming", "posthoc_logn", "llama4_temperature"],
    "drope": ["drope_temperature"],   # NoPE once trained
    "kerple_log": ["none", "window", "streaming"],
    "fire": ["none", "window"],
}
# The inference methods the kernels merge from two calls (forward only).
POSITION_SETTINGS["rope"] += ["leaky_rerope", "rerope", "streaming", "self_extend",
                              "yarn_temperature", "string", "lm_infinite"]
REFUSED_COLUMNS = {"dca"}   # three rotations chosen by chunk: the einsum kernels


def _column(name):
  if name == "posthoc_logn":
    return positions.EvalColumn(posthoc_logn=True)
  options = {"window": 5} if name == "window" else {}
  return positions.EvalColumn(positions.inference_method(name, **options))


@pytest.mark.parametrize("method, column",
                         [(m, c) for m, cs in POSITION_SETTINGS.items() for c in cs])
def test_every_fusable_position_setting(method, column):
  """Each training method (every layer of it: HWFA's and RNoPE-SWA's window layers and their last) under the
  inference methods that apply to it, with KNA and grouped-query attention (2 kv heads)."""
  training = positions.training_method(method)
  column_name, column = column, _column(column)
  assert column.method.skip_reason(training, H) is None
  q, k, v = _inputs(1, kv_heads=2)
  column = column.at(T, TRAIN)
  for layer in ((0, 2) if method in ("hwfa", "rnope_swa") else (0,)):
    spec = column.apply(training.layer_spec(layer=layer, num_layers=3, num_heads=H,
                                            rope_theta=100.0, train_length=TRAIN), TRAIN)
    kwargs = layer_options(spec, rotary_dim=S, train_length=TRAIN, seq_length=T,
                                        logn_base=None)
    kwargs["variant"] = "kna" if layer == 0 else "baseline"
    if spec.learned_bias:
      module = {"kerple_log": KerpleLogBias(H), "fire": FireBias(H, TRAIN)}[spec.learned_bias]
      kwargs["score_bias"] = learned_bias(module)
    if training.own_indices() is not None:
      kwargs["positions"] = training.own_indices().training(jax.random.PRNGKey(2), B, T, TRAIN)
    # Gradients for the settings a model trains with (no inference method); the inference
    # methods are evaluated forward only.
    _compare(q, k, v, kwargs, gradients=column_name == "none")


def test_every_position_method_is_covered_or_refused():
  """A new position method must be added to POSITION_SETTINGS (or to the refused: FoX's
  data-dependent bias, scale-invariant attention's factors and CoPE's positions go to the einsum
  kernels, PaTH's transform of each pair to the blocked kernel)."""
  on_embedding = {"sinusoidal", "learned"}
  refused = {"fox", "scale_invariant", "cope", "path", "path_fox"}
  assert set(positions.TRAINING_METHODS.names()) == set(POSITION_SETTINGS) | on_embedding | refused
  log_forget = np.zeros((B, T, H), np.float32)
  shape = Shape(B, T, H, H, S, S, np.float32)
  assert "forget-gate" in dot_product.expressible(mods_of(log_forget=log_forget), shape)
  assert "distance" in dot_product.expressible(mods_of(scale_invariant_tau=10.0), shape)
  cope = mods_of(cope_embeddings=np.zeros((S, 4), np.float32))
  assert "whole row" in dot_product.expressible(cope, shape)
  for name in on_embedding:
    assert positions.training_method(name).layer_spec(
        layer=0, num_layers=1, num_heads=H, rope_theta=1e4, train_length=TRAIN) == \
        positions.AttentionSpec()
  covered = ({c for cs in POSITION_SETTINGS.values() for c in cs} | {"linear", "dynamic_ntk"}
             | REFUSED_COLUMNS)
  assert set(positions.INFERENCE_METHODS.names()) <= covered


def test_the_settings_that_matter_really_differ():
  """The comparisons above are not vacuous: window, ALiBi, YaRN, log n, ReRoPE and sinks change
  the output."""
  q, k, v = _inputs(3)
  plain = np.asarray(fused_attention(q, k, v, variant="kna", inv_freq=INV32))
  for extra in (dict(window=5), dict(alibi_slopes=np.float32(0.5)), dict(attention_factor=1.2),
                dict(logn_base=4.0), dict(posthoc_logn_length=4), dict(far=far.ReRoPE(3)),
                dict(window=5, sink_tokens=2, far=far.StreamingCache(2, 5))):
    changed = np.asarray(fused_attention(q, k, v, variant="kna", inv_freq=INV32, **extra))
    assert np.abs(changed - plain).max() > 1e-3, extra


def test_single_head_layout():
  q, k, v = (x[:, :, 0] for x in _inputs(4))
  got = fused_attention(q, k, v, variant="baseline")
  want, _ = attend_options(q, k, v, variant="baseline")
  assert got.shape == (B, T, S)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("kwargs, reason", [
    (dict(window=4, positions=np.arange(T)), "not by explicit positions"),
    (dict(far=far.ReRoPE(4), positions=np.arange(T)), "not by explicit positions"),
    (dict(far=far.ReRoPE(4), window=6), "ReRoPE with a window"),
    (dict(far=far.ReRoPE(4), window=6, sink_tokens=2), "from inside the sinks' window"),
])
def test_what_it_cannot_express_is_refused(kwargs, reason):
  q, k, v = _inputs(5)
  kwargs = dict(kwargs, variant="baseline", inv_freq=np.ones(S // 2, np.float32))
  assert reason in _refusal(q, k, v, kwargs)


def test_shapes_it_cannot_express_are_refused():
  long = Shape(B, 4096, H, H, S, S, np.float32)
  assert "all 4096 x 4096 pairs" in dot_product.XLA.refusal(mods_of(), long)
  q, k, v = _inputs(6)
  assert "values of size 5 are not a multiple" in _refusal(q, k, v[..., :5], {})
  if jax.default_backend() != "gpu":
    assert "GPU only" in _refusal(q, k, v, {}, name="cudnn")


def test_cudnn_refusal_falls_back_to_xla_with_a_log_line(monkeypatch, caplog):
  q, k, v = (jnp.asarray(x, jnp.bfloat16) for x in _inputs(7))
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")           # as on a GPU, in bf16
  monkeypatch.setattr(dot_product, "_logged", set())
  real = jax.nn.dot_product_attention
  calls = []

  def refusing(*args, implementation=None, **kwargs):
    calls.append(implementation)
    if implementation == "cudnn":
      raise NotImplementedError("The head dim must be <= 256 and a multiple of 8, but got 7.")
    return real(*args, implementation=implementation, **kwargs)

  monkeypatch.setattr(jax.nn, "dot_product_attention", refusing)
  run = lambda name: attend_options(q, k, v, variant="kna", window=5, kernel=name, need_entropy=False)[0]
  with caplog.at_level(logging.WARNING):
    got = run("cudnn")
  assert calls == ["cudnn", "xla"]
  assert "cuDNN attention refused" in caplog.text and "using XLA instead" in caplog.text
  np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(run("xla"), np.float32))
  # Longer than XLA's kernel may score whole: the blocked kernel computes the attention instead.
  monkeypatch.setattr(dot_product, "FULL_SQUARE_MAX_LENGTH", 8)
  calls.clear()
  with caplog.at_level(logging.WARNING):
    long = run("cudnn")
  assert calls == ["cudnn"] and "using the blocked kernel instead" in caplog.text
  np.testing.assert_allclose(np.asarray(long, np.float32), np.asarray(
      attend_options(q, k, v, variant="kna", window=5, kernel="reference")[0], np.float32), atol=2e-2)


def test_a_model_with_the_xla_kernel_and_its_diagnostics(monkeypatch):
  cfg = ModelConfig(architecture="transformer", num_layers=2, d_model=16, num_heads=2,
                    attention="kna", position="alibi", train_length=8)
  tokens = np.arange(24, dtype=np.int32).reshape(2, 12)
  params = TransformerLM(cfg).init(jax.random.PRNGKey(0), tokens)["params"]
  calls = []
  real = jax.nn.dot_product_attention
  monkeypatch.setattr(jax.nn, "dot_product_attention",
                      lambda *a, **kw: calls.append(1) or real(*a, **kw))
  model = lambda name: TransformerLM(dataclasses.replace(cfg, kernel=name))
  logits = {name: np.asarray(model(name).apply({"params": params}, tokens))
            for name in ("reference", "xla")}
  assert len(calls) == 2                            # one per layer, with the xla kernel only
  np.testing.assert_allclose(logits["xla"], logits["reference"], atol=1e-5, rtol=1e-5)
  _, state = model("xla").apply({"params": params}, tokens, mutable=["intermediates"])
  assert len(calls) == 2 and "attention_entropy" in state["intermediates"]["layer_0"]["attention"]
