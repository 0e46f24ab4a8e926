"""Zero is a value: unset is None. Every position and indices knob's 0 either builds a method that
trains (p-RoPE's fraction 0: nothing rotated; DroPE's drop_share 0: RoPE throughout, evaluated as
RoPE) or is refused in one line naming the knob; so is a value of the wrong type; and a config
saved when 0 meant "unset" reads as unset."""

import dataclasses

import numpy as np
import pytest

from keynorm_jax import positions, run_config
from keynorm_jax.errors import ConfigError
from keynorm_jax.models import ModelConfig
from keynorm_jax.runs import load_run
from keynorm_jax.training import loop as training
from train_helpers import losses, tiny_config

# The knobs whose 0 is a legal value (every other knob's 0 is refused).
LEGAL_ZEROS = {("p_rope", "fraction"), ("scale_invariant", "fraction"), ("drope", "drop_share"),
               # PaTH's w: one full projection; no short convolution.
               *((m, k) for m in ("path", "path_fox") for k in ("path_w_rank", "path_conv_size"))}
KNOBS = [(cls.name, f.name) for cls in positions.TRAINING_METHODS.classes()
         for f in dataclasses.fields(cls)]


def test_the_table_names_real_knobs():
  assert LEGAL_ZEROS <= set(KNOBS) and len(KNOBS) > len(LEGAL_ZEROS)


@pytest.mark.parametrize("position, knob", KNOBS)
def test_a_zero_builds_or_is_refused_in_one_line(position, knob):
  try:
    cfg = ModelConfig(position=position, position_options={knob: 0}, train_length=64)
  except ConfigError as e:
    assert (position, knob) not in LEGAL_ZEROS, str(e)
    assert knob in str(e) and "\n" not in str(e)
    return
  assert (position, knob) in LEGAL_ZEROS, f"{position}'s {knob}=0 is accepted"
  assert getattr(cfg.position_method, knob) == 0   # a value, not the default


@pytest.mark.parametrize("model, knob", [
    (dict(indices="random_integer", indices_options={"max_position": 0}), "max_position"),
    (dict(rope_scaling={"type": "linear", "factor": 2.0, "original_length": 0}),
     "original_length"),
    (dict(position="p_rope", position_options={"fraction": "half"}), "fraction must be a number"),
    (dict(position="hwfa", position_options={"window": 2.5}), "window must be an integer"),
])
def test_a_bad_value_is_one_line_never_a_type_error(model, knob):
  with pytest.raises(ConfigError, match=knob) as refused:
    ModelConfig(**model)
  assert "\n" not in str(refused.value)


def test_unset_is_none_and_takes_the_default():
  cfg = ModelConfig(position="p_rope", position_options={"fraction": None})
  assert cfg.position_method.fraction == 0.75
  assert run_config.load_config("kna_alibi").model.position_options.slope is None


def test_a_config_saved_with_zero_for_unset_reads_as_unset():
  """Before issue 68 a config wrote 0 for an unset knob (whose 0 is refused now)."""
  saved = run_config.load_config("kna_alibi").to_dict()
  saved["model"]["position_options"]["slope"] = 0.0
  saved["model"]["indices_options"]["max_position"] = 0
  saved["model"]["rope_scaling"]["original_length"] = 0
  config = run_config.config_from_json_dict(saved)
  assert config.model.position_options.slope is None
  assert config.model.indices_options.max_position is None
  assert config.model.rope_scaling.original_length is None
  assert saved["model"]["position_options"]["slope"] == 0.0   # the caller's dict is left alone


def test_p_rope_with_fraction_zero_trains_as_nope(tmp_path, data_dir):
  """Nothing rotated: the trained model's logits are those of its weights without positions."""
  config = tiny_config("kna_p_rope", data_dir=data_dir, num_train_steps=2,
                       checkpoint_every_steps=2, eval_windows=2)
  config.model.position_options.fraction = 0.0
  training.train_and_evaluate(config, tmp_path)
  run = load_run(tmp_path)
  assert run.config.model.position_options.fraction == 0.0
  nope = run.config.copy_and_resolve_references()
  nope.model.position, nope.model.position_options = "nope", {}
  tokens = np.arange(1, 33, dtype=np.int32)[None] % 50
  logits = lambda config: np.asarray(run_config.build_model(config).apply(
      {"params": run.params}, tokens, deterministic=True))
  np.testing.assert_array_equal(logits(run.config), logits(nope))
  assert all(np.isfinite(loss) for _, loss in losses(tmp_path))


def test_drope_with_drop_share_zero_trains_rope_throughout(tmp_path, data_dir):
  """No step without RoPE: the RoPE run's losses, and its checkpoint evaluated as RoPE."""
  # test_drope.py's settings: its RoPE run's programs are compiled once for both files (the
  # session's compilation cache), and the drop_share-0 run's RoPE phase is that model.
  settings = dict(data_dir=data_dir, num_train_steps=6, checkpoint_every_steps=2, eval_windows=2)
  config = tiny_config("transformer_baseline_drope", **settings)
  config.model.position_options.drop_share = 0.0
  training.train_and_evaluate(config, tmp_path / "drope")
  training.train_and_evaluate(tiny_config("transformer_baseline_rope", **settings),
                              tmp_path / "rope")
  assert losses(tmp_path / "drope") == losses(tmp_path / "rope")
  run = load_run(tmp_path / "drope", warn=lambda message: None)
  assert (run.step, run.config.model.position) == (6, "rope")
