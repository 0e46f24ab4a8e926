"""PaTH in the attention call and in the models, against the NumPy reference written from the
definition (numpy_path_reference.py): the layer's factors w and beta from its own parameters; the
attention output of every PaTH layer of tiny GAUs (one head; two heads with separate q and k) and
tiny Transformers (grouped-query heads), PaTH and PaTH-FoX, equal to the reference computed from
the layer's own q, k, v, factors and gates, by the chunked kernel `auto` picks and by the full
square; attention.attend with a window and blocks; and the settings PaTH refuses, in one line."""

import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numpy_path_reference as ref
from attention_cases import attend_options, inputs, log_forget, mods_of, path_factors
from keynorm_jax import attention
from keynorm_jax.attention import far, kernels
from keynorm_jax.attention.kernels.base import Shape
from keynorm_jax.models import ModelConfig, build_model
from keynorm_jax.models.attention_block import PositionalAttention
from keynorm_jax.models.position_bias import ForgetGate, HouseholderFactors
from shapes import B, H, INV32, S, T

LENGTH = 12   # tokens of the model tests (their train_length: 8)
MODELS = {
    "gau_kna_logn_path": dict(architecture="gau", attention="kna", logn=True, position="path"),
    "gau_2_heads_separate_qk_path_fox": dict(architecture="gau", position="path_fox", gau_heads=2,
                                             gau_qk="separate"),
    "transformer_gqa_cosa_path_fox": dict(architecture="transformer", attention="cosa",
                                          position="path_fox", num_heads=4, num_kv_heads=2),
    "transformer_qna_path_full_rank_no_conv": dict(
        architecture="transformer", attention="qna", position="path", num_heads=2,
        position_options={"path_w_rank": 0, "path_conv_size": 0}),
}


def _config(kernel, **fields):
  shape = (dict(expansion=24, qk_size=8) if fields["architecture"] == "gau" else {})
  return ModelConfig(num_layers=2, d_model=16, train_length=8, kernel=kernel, **shape, **fields)


def _calls(cfg):
  """{layer: {module class name: (args, output)}} of every PositionalAttention, HouseholderFactors
  and ForgetGate call of one forward pass, and the parameters."""
  model = build_model(cfg)
  tokens = (jnp.arange(LENGTH)[None] * 7 + 3) % 50
  params = model.init(jax.random.PRNGKey(1), tokens)["params"]
  calls = {}

  def record(next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    module = context.module
    if context.method_name == "__call__" and isinstance(
        module, (PositionalAttention, HouseholderFactors, ForgetGate)):
      calls.setdefault(module.path[0], {})[type(module).__name__] = (args, out)
    return out

  with nn.intercept_methods(record):
    model.apply({"params": params}, tokens, deterministic=True)
  return calls, params


# Every model with the kernel `auto` picks (chunks), one with the full square too (the kernels agree
# on every case of test_kernels.py's table).
@pytest.mark.parametrize("name, kernel", [(name, "auto") for name in sorted(MODELS)]
                         + [("transformer_gqa_cosa_path_fox", "reference")])
def test_every_path_layer_is_the_definition_of_its_own_factors(name, kernel):
  cfg = _config(kernel, **MODELS[name])
  calls, params = _calls(cfg)
  assert sorted(calls) == ["layer_0", "layer_1"]
  for layer, called in calls.items():
    (q, k, v, _, x, _), out = called["PositionalAttention"]
    (x_in,), factors = called["HouseholderFactors"]
    own = params[layer]["attention"]["path"]
    projection = [own["w_down"], own["w_up"]] if "w_down" in own else [own["w_proj"]]
    w, beta = ref.factors(x_in, projection, own["beta_w"], own["beta_b"], own.get("w_conv"),
                          kv_heads=cfg.kv_heads)
    np.testing.assert_allclose(factors.w, w, atol=2e-5)
    np.testing.assert_allclose(factors.beta, beta, atol=1e-6)
    np.testing.assert_array_equal(x_in, x)
    gates = called.get("ForgetGate")
    assert (gates is not None) == (cfg.position == "path_fox")
    expected, _ = ref.attention(q, k, v, w, beta, variant=cfg.attention,
                                cosa_scale=cfg.resolved_cosa_scale,
                                logn_base=cfg.resolved_logn_base,
                                log_forget=None if gates is None else gates[1])
    np.testing.assert_allclose(out, expected, atol=3e-5, rtol=3e-5, err_msg=layer)


@pytest.mark.parametrize("kernel, blocks", [("blocked", (5, 5)), ("cpu", None),
                                            ("reference", None)])
def test_attend_with_a_window_and_gates_is_the_definition(kernel, blocks):
  """attention.attend as a layer calls it: KNA, the trained log n, a window, FoX's gates per query
  head, 4 query heads on 2 key/value heads; the blocked kernel in chunks of its query block."""
  q, k, v = inputs(21, kv_heads=2)
  factors, gates = path_factors(22), log_forget(23)
  options = dict(variant="kna", logn_base=6, window=9, path=factors, log_forget=gates,
                 kernel=kernel)
  if blocks:
    options.update(query_block=blocks[0], key_block=blocks[1])
  out, entropy = attend_options(q, k, v, **options)
  expected, weights = ref.attention(q, k, v, factors.w, factors.beta, variant="kna", logn_base=6,
                                    window=9, log_forget=gates)
  np.testing.assert_allclose(out, expected, atol=2e-5, rtol=2e-5)
  logs = np.log(np.where(weights > 0, weights, 1.0))
  np.testing.assert_allclose(entropy, np.moveaxis(-np.sum(weights * logs, -1), 1, 2), atol=2e-5)


@pytest.mark.parametrize("options, named", [
    (dict(inv_freq=INV32), "RoPE (inv_freq)"),
    (dict(window=7, sink_tokens=2, far=far.StreamingCache(2, 7)), "attention sinks (sink_tokens)"),
    (dict(alibi_slopes=0.3), "ALiBi (alibi_slopes)"),
    (dict(variant="stickbreaking"), "stick-breaking (variant)"),
    (dict(window=5, positions=np.arange(T) + 3), "a window over explicit positions"),
])
def test_what_does_not_compose_with_path_is_refused_in_one_line(options, named):
  q, k, v = inputs(24, kv_heads=2)
  with pytest.raises(ValueError, match="does not compose with") as refused:
    attend_options(q, k, v, path=path_factors(25), **options)
  assert named in str(refused.value) and "\n" not in str(refused.value)


def test_a_kernel_that_cannot_run_path_gives_way_to_the_chunks(caplog, monkeypatch):
  monkeypatch.setattr(kernels, "_warned", set())
  shape = Shape(B, T, H, 2, S, S, np.float32)
  with caplog.at_level(logging.WARNING):
    chosen = attention.select("xla", mods_of(path=path_factors(26)), shape)
  assert chosen.name == "blocked" and "PaTH's transform depends on the pair" in caplog.text
