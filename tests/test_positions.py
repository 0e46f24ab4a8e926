"""The position registry's own rules, and the positions on the embedding: which inference method
applies to which training method (and the reason where not), the layer plans of HWFA and
RNoPE-SWA, the sinusoidal embedding against its NumPy reference
(tests/numpy_rotary_reference.py), the learned table's refusal. The attention of each kind of
method: test_positions_rotary.py, test_positions_bias.py, test_positions_scaling.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import positions
from keynorm_jax.models.layers import LearnedPositions, sinusoidal_embedding
import numpy_rotary_reference as rotary_ref


def test_sinusoidal_embedding():
  positions_ = np.array([[0, 1, 5, 100, 4095]])
  np.testing.assert_allclose(np.asarray(sinusoidal_embedding(positions_, 10))[0],
                             rotary_ref.sinusoidal_embedding(positions_[0].astype(float), 10),
                             atol=1e-4)  # float32 angles of up to 4095 rad


def test_learned_positions_refuse_a_sequence_past_the_table():
  module = LearnedPositions(train_length=8)
  x = jnp.zeros((1, 8, 4))
  params = module.init(jax.random.PRNGKey(0), x, jnp.arange(8)[None])
  with pytest.raises(ValueError, match="have 8 rows"):
    module.apply(params, jnp.zeros((1, 9, 4)), jnp.arange(9)[None])


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
