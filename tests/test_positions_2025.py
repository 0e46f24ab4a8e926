"""The methods of 2025 and the training-free extensions added beside them (Self-Extend, STRING,
DCA, the temperature rules) against the independent NumPy references
(tests/numpy_positions_reference.py), full and in query blocks that really split the queries
(T = 12 in blocks of 5)."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import positions
from attention_cases import attend_options, layer_options
import numpy_positions_reference as ref
from positions_helpers import (B, BLOCKS, E, H, INV, S, T, check, column_kwargs, inputs,
                              per_head_reference)


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


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("group, window", [(3, 4), (2, 5), (4, 1)])
def test_self_extend(group, window, block):
  """Self-Extend against the NumPy reference's grouped relative positions (LongLM's code)."""
  q, k, v = inputs(6)
  got, _ = attend_options(q, k, v, variant="kna", inv_freq=INV.astype(np.float32), rerope_window=window,
                  self_extend_group=group, query_block=block)
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant="kna", inv_freq=INV, relative=ref.self_extend_relative(group, window)))
  check(got, expected)


def test_self_extend_defaults_and_bad_knobs():
  method = positions.inference_method("self_extend").at(8192, 512)
  # W = 512 / 4 = 128; G the smallest with 128 + (8192 - 128) / G <= 2/3 x 512.
  assert (method.self_extend_window, method.self_extend_group) == (128, 38)
  assert 128 + (8192 - 128) / 38 <= 2 / 3 * 512 < 128 + (8192 - 128) / 37
  with pytest.raises(ValueError, match="self_extend_group must be at least 1"):
    positions.inference_method("self_extend", self_extend_group=0)
  q, k, v = inputs(0)
  with pytest.raises(ValueError, match="self_extend_group needs rerope_window"):
    attend_options(q, k, v, variant="kna", inv_freq=INV.astype(np.float32), self_extend_group=2)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("opts", [dict(tau=10.0), dict(tau=0.5, window=5, sink_tokens=2)])
def test_scale_invariant(opts, block):
  """Scale-invariant p-RoPE (the training method's spec) against the paper's general form."""
  opts = dict(opts)
  tau = opts.pop("tau")
  method = positions.training_method("scale_invariant", {"tau": tau})
  spec = method.layer_spec(layer=0, num_layers=1, num_heads=H, rope_theta=100.0, train_length=T)
  kwargs = layer_options(spec, rotary_dim=S, train_length=T, seq_length=T,
                                      logn_base=None)
  q, k, v = inputs(7)
  got, _ = attend_options(q, k, v, variant="baseline", query_block=block, **{**kwargs, **opts})
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant="baseline", inv_freq=ref.p_rope_inv_freq(S, 100.0, 0.5),
      logit_transform=ref.scale_invariant_logit(tau), **opts))
  check(got, expected)
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
  kwargs, _ = column_kwargs(name, at=4 * T, train_length=T, logn_base=6.0, **knobs)
  q, k, v = inputs(8)
  got, _ = attend_options(q, k, v, variant="kna", **kwargs)
  kappa = [beta * math.log(i + 1) / math.log(6.0) for i in range(T)]
  check(got, per_head_reference(q, k, v, lambda h: dict(variant="kna", inv_freq=INV,
                                                           kappa=kappa)))
  with pytest.raises(ValueError, match="drope_c must be >= 0"):
    positions.inference_method("drope_temperature", drope_c=-1.0)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("opts", [dict(), dict(window=4, rope=True)])
def test_stick_breaking(opts, block):
  """Stick-breaking attention against explicit products (the first query attends nothing)."""
  rope = opts.get("rope", False)
  q, k, v = inputs(9)
  inv = INV.astype(np.float32) if rope else None
  got, _ = attend_options(q, k, v, variant="stickbreaking", inv_freq=inv, window=opts.get("window"),
                  query_block=block)
  expected = np.zeros(q.shape[:3] + (E,))
  for b in range(B):
    for h in range(H):
      expected[b, :, h] = ref.stick_breaking_attention(q[b, :, h], k[b, :, h], v[b, :, h],
                                                       INV if rope else None, opts.get("window"))
  check(got, expected)


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
  kwargs, _ = column_kwargs("string", at=T, train_length=T, string_shift=shift,
                             string_window=window)
  q, k, v = inputs(10)
  got, _ = attend_options(q, k, v, variant="kna", query_block=block, **kwargs)
  check(got, per_head_reference(q, k, v, lambda h: dict(
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
  kwargs, column = column_kwargs(name, at=T, train_length=T // 2, rope=False, **knobs)
  q, k, v = inputs(11)
  got, _ = attend_options(q, k, v, variant="baseline", **kwargs)
  kappa = [factor(i) for i in range(T)]
  check(got, per_head_reference(q, k, v, lambda h: dict(variant="baseline", kappa=kappa)))
  rope = positions.training_method("rope")
  if name == "llama4_temperature":   # the layers with RoPE are left as they are
    assert "every rope layer has RoPE" in column.method.skip_reason(rope, H)
    rotary = positions.AttentionSpec(rotary=positions.RotarySpec())
    assert column.apply(rotary) == rotary


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("variant, npos, window", [("baseline", 16, None), ("kna", 4, 6)])
def test_cope(variant, npos, window, block):
  """CoPE against explicit sums (with the cap at npos - 1 reached in the second case)."""
  q, k, v = inputs(12)
  e = np.random.default_rng(13).normal(size=(S, npos)).astype(np.float32)
  got, _ = attend_options(q, k, v, variant=variant, cope_embeddings=e, window=window, query_block=block)
  expected = np.zeros(q.shape[:3] + (E,))
  for b in range(B):
    for h in range(H):
      expected[b, :, h] = ref.cope_attention(q[b, :, h], k[b, :, h], v[b, :, h], e, variant,
                                             window)
  check(got, expected)
  with pytest.raises(ValueError, match="cope_npos must be at least 2"):
    positions.training_method("cope", {"cope_npos": 1})


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("chunk, train", [(3, 4), (4, 6), (2, 3)])
def test_dca(chunk, train, block):
  """Dual chunk attention against the NumPy reference's chunked relative positions (queries in
  their own, the next and later chunks at T = 12)."""
  kwargs, _ = column_kwargs("dca", at=T, train_length=train, dca_chunk=chunk)
  q, k, v = inputs(14)
  got, _ = attend_options(q, k, v, variant="kna", query_block=block, **kwargs)
  check(got, per_head_reference(q, k, v, lambda h: dict(
      variant="kna", inv_freq=INV, relative=ref.dca_relative(chunk, train))))
  assert positions.inference_method("dca").at(8192, 512).dca_chunk == 384
  with pytest.raises(ValueError, match="dca_chunk 6 must be below the training length 6"):
    positions.inference_method("dca", dca_chunk=6).at(T, 6)
