"""The fused path (jax.nn.dot_product_attention on pre-scaled q, k) against the einsum reference
path: the same outputs and gradients (q, k, v, SSMax's s) in float32, for every variant and every
position setting it can express, at 3x the settings' training length (T = 24; windows of 5; the
variants also against einsum in query blocks of 7); the settings it cannot express are refused;
the dispatch in the model; the cuDNN fallback."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import positions
from keynorm_jax.attention import attend
from keynorm_jax.attention import fused
from keynorm_jax.models import ModelConfig
from keynorm_jax.models import attention_block
from keynorm_jax.models.transformer import TransformerLM

B, T, H, S = 2, 24, 4, 8
TRAIN = 8   # training length of the position settings: T is 3x it


def _inputs(seed, kv_heads=H):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(B, T, H, S)).astype(np.float32)
  k, v = (rng.normal(size=(B, T, kv_heads, S)).astype(np.float32) for _ in range(2))
  return q, k, v


def _compare(q, k, v, kwargs, ssmax=None, blocks=(None,)):
  """Outputs and gradients of both paths (the einsum one in each of `blocks`)."""
  cotangent = jnp.asarray(np.random.default_rng(9).normal(size=q.shape[:3] + v.shape[-1:]),
                          jnp.float32)

  def loss(path, q, k, v, s):
    extra = {} if s is None else {"ssmax_scale": s}
    out = path(q, k, v, **kwargs, **extra)
    return jnp.sum(out * cotangent), out

  def run(path):
    argnums = (1, 2, 3) if ssmax is None else (1, 2, 3, 4)
    (_, out), grads = jax.value_and_grad(loss, argnums=argnums, has_aux=True)(path, q, k, v,
                                                                              ssmax)
    return out, grads

  got, got_grads = run(fused.fused_attention)
  for block in blocks:
    want, want_grads = run(lambda *a, **kw: attend(*a, **kw, query_block=block)[0])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5, rtol=2e-5)
    for g, w in zip(got_grads, want_grads):
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=5e-5, rtol=5e-5)


@pytest.mark.parametrize("variant", ["baseline", "qna", "kna", "cosa"])
@pytest.mark.parametrize("logn, ssmax", [(False, False), (True, True)])
def test_every_variant_with_rope_and_log_n(variant, logn, ssmax):
  q, k, v = _inputs(0)
  inv_freq, _ = positions.spec.rotary_inv_freq(positions.RotarySpec(base=100.0), rotary_dim=S,
                                               train_length=TRAIN, seq_length=T)
  kwargs = dict(variant=variant, inv_freq=inv_freq, logn_base=TRAIN / 2 if logn else None,
                cosa_scale=3.0 if variant == "cosa" else None)
  s = jnp.asarray([0.3, 0.7, 1.1, 1.9], jnp.float32) if ssmax else None
  _compare(q, k, v, kwargs, ssmax=s, blocks=(7,))


# Training method -> the inference methods that apply to it. sinusoidal and learned give the
# attention nothing (their positions are on the embedding): nope covers them. The RoPE scalings
# linear, dynamic_ntk and llama3 only change inv_freq, as ntk does.
SETTINGS = {
    "rope": ["none", "ntk", "yarn", "llama3", "window", "posthoc_logn"],
    "xpos": ["none", "yarn", "window"],
    "p_rope": ["none", "ntk"],
    "randomized_rope": ["none", "yarn"],
    "hwfa": ["none", "window"],
    "alibi": ["none", "alibi_interpolate", "ntk_alibi", "window", "posthoc_logn"],
    "nope": ["none", "window", "posthoc_logn"],
}


def _column(name):
  if name == "posthoc_logn":
    return positions.EvalColumn(posthoc_logn=True)
  options = {"window": 5} if name == "window" else {}
  return positions.EvalColumn(positions.inference_method(name, **options))


@pytest.mark.parametrize("method, column", [(m, c) for m, cs in SETTINGS.items() for c in cs])
def test_every_fusable_position_setting(method, column):
  """Each training method (every layer of it: HWFA's window layers and its last) under the
  inference methods that apply to it, with KNA and grouped-query attention (2 kv heads)."""
  training = positions.training_method(method)
  column = _column(column)
  assert column.method.skip_reason(training, H) is None
  q, k, v = _inputs(1, kv_heads=2)
  column = column.at(T, TRAIN)
  for layer in ((0, 2) if method == "hwfa" else (0,)):
    spec = column.apply(training.layer_spec(layer=layer, num_layers=3, num_heads=H,
                                            rope_theta=100.0, train_length=TRAIN))
    kwargs = positions.attention_kwargs(spec, rotary_dim=S, train_length=TRAIN, seq_length=T,
                                        logn_base=None)
    kwargs["variant"] = "kna" if layer == 0 else "baseline"
    if training.random_positions:
      kwargs["positions"] = training.training_positions(jax.random.PRNGKey(2), B, T, TRAIN)
    assert fused.can_fuse(kwargs), kwargs
    _compare(q, k, v, kwargs)


def test_every_position_method_is_covered_or_refused():
  """A new position method must be added to SETTINGS or be refused by can_fuse."""
  on_embedding = {"sinusoidal", "learned"}
  refused = {"kerple_log", "fire"}
  assert set(positions.TRAINING_METHODS.names()) == set(SETTINGS) | on_embedding | refused
  for name in on_embedding:
    assert positions.training_method(name).layer_spec(
        layer=0, num_layers=1, num_heads=H, rope_theta=1e4, train_length=TRAIN) == \
        positions.AttentionSpec()
  covered = {c for cs in SETTINGS.values() for c in cs} | {"linear", "dynamic_ntk"}
  assert set(positions.INFERENCE_METHODS.names()) - covered == {"rerope", "leaky_rerope",
                                                                 "streaming"}


def test_the_settings_that_matter_really_differ():
  """The comparisons above are not vacuous: window, ALiBi, YaRN and log n change the output."""
  q, k, v = _inputs(3)
  inv = np.array([100.0**(-2 * m / S) for m in range(S // 2)], np.float32)
  plain = np.asarray(fused.fused_attention(q, k, v, variant="kna", inv_freq=inv))
  for extra in (dict(window=5), dict(alibi_slope=np.float32(0.5)), dict(attention_factor=1.2),
                dict(logn_base=4.0), dict(posthoc_logn_length=4)):
    changed = np.asarray(fused.fused_attention(q, k, v, variant="kna", inv_freq=inv, **extra))
    assert np.abs(changed - plain).max() > 1e-3, extra


def test_single_head_layout():
  q, k, v = (x[:, :, 0] for x in _inputs(4))
  got = fused.fused_attention(q, k, v, variant="baseline")
  want, _ = attend(q, k, v, variant="baseline")
  assert got.shape == (B, T, S)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("kwargs, reason", [
    (dict(rerope_window=4), "ReRoPE"), (dict(window=4, sink_tokens=2), "sinks"),
    (dict(score_bias=lambda d, p: 0.0 * d[:, None]), "learned score bias"),
    (dict(window=4, positions=np.arange(T)), "explicit positions"),
])
def test_what_it_cannot_express_is_refused(kwargs, reason):
  assert not fused.can_fuse(kwargs) and reason in fused.fuse_refusal(kwargs)
  q, k, v = _inputs(5)
  inv = np.ones(S // 2, np.float32)
  with pytest.raises(fused.CannotFuse, match=reason):
    fused.fused_attention(q, k, v, variant="baseline", inv_freq=inv, **kwargs)


def test_shapes_it_cannot_express_are_refused():
  q, k, v = _inputs(6)
  with pytest.raises(fused.CannotFuse, match="values of size 5"):      # the GAU: v wider than q
    fused.fused_attention(q, k, v[..., :5], variant="baseline")
  with pytest.raises(fused.CannotFuse, match="all 24 x 24 pairs"):     # XLA past a query block
    fused.fused_attention(q, k, v, variant="baseline", query_block=8)


def test_cudnn_refusal_falls_back_to_xla_with_a_log_line(monkeypatch, caplog):
  q, k, v = (jnp.asarray(x, jnp.bfloat16) for x in _inputs(7))
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")           # as on a GPU, in bf16
  monkeypatch.setattr(fused, "_logged", set())
  real = jax.nn.dot_product_attention
  calls = []

  def refusing(*args, implementation=None, **kwargs):
    calls.append(implementation)
    if implementation == "cudnn":
      raise NotImplementedError("The head dim must be <= 256 and a multiple of 8, but got 7.")
    return real(*args, implementation=implementation, **kwargs)

  monkeypatch.setattr(jax.nn, "dot_product_attention", refusing)
  with caplog.at_level(logging.WARNING):
    got = fused.fused_attention(q, k, v, variant="kna", window=5)
  assert calls == ["cudnn", "xla"]
  assert "cuDNN attention refused" in caplog.text and "using XLA instead" in caplog.text
  want = fused.fused_attention(q, k, v, variant="kna", window=5, implementation="xla")
  np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
  with pytest.raises(fused.CannotFuse, match="cuDNN refused"):          # too long for XLA
    fused.fused_attention(q, k, v, variant="kna", query_block=8)


def test_model_dispatch_fuses_where_worth_it_and_never_for_diagnostics(monkeypatch):
  cfg = ModelConfig(architecture="transformer", num_layers=2, d_model=16, num_heads=2,
                    attention="kna", position="alibi", train_length=8)
  model = TransformerLM(cfg)
  tokens = np.arange(24, dtype=np.int32).reshape(2, 12)
  params = model.init(jax.random.PRNGKey(0), tokens)["params"]
  calls = []
  real = attention_block.fused_attention
  monkeypatch.setattr(attention_block, "fused_attention",
                      lambda *a, **kw: calls.append(1) or real(*a, **kw))
  einsum_out = np.asarray(model.apply({"params": params}, tokens))
  assert not calls                                  # float32 on CPU: XLA's kernel, not worth it
  monkeypatch.setattr(fused, "FUSE_ON_XLA", True)
  fused_out = np.asarray(model.apply({"params": params}, tokens))
  assert len(calls) == 2                            # one per layer
  np.testing.assert_allclose(fused_out, einsum_out, atol=1e-5, rtol=1e-5)
  _, state = model.apply({"params": params}, tokens, mutable=["intermediates"])
  assert len(calls) == 2 and "attention_entropy" in state["intermediates"]["layer_0"]["attention"]
  monkeypatch.setattr(fused, "FUSE_ON_XLA", False)
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert fused.worth_fusing(jnp.bfloat16) and not fused.worth_fusing(jnp.float32)
