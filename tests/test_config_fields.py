"""Every config field has its type and range (config_fields.py), and bad values are refused."""

import math

import pytest

from configs import base
from keynorm_jax import config_fields, positions, run_config
from keynorm_jax.errors import ConfigError


def test_every_field_of_the_base_config_has_its_check():
  for position in positions.TRAINING_METHODS.names():
    keys = set(config_fields.checked_leaves(base.get_config(position=position)))
    assert keys == set(config_fields.fields()), position


def test_an_unchecked_field_is_refused_by_name():
  config = base.get_config()
  config.new_setting = 3
  with pytest.raises(ConfigError, match="'new_setting' has no entry in keynorm_jax/config_fields"):
    config_fields.check(config)


# The settings that trained a broken model (or stopped at step 1), and their neighbours.
BAD = [
    ("grad_clip_norm", -1.0, "grad_clip_norm (the global gradient norm gradients are clipped to) "
                             "must be a finite number > 0"),
    ("grad_clip_norm", 0.0, "must be a finite number > 0"),
    ("end_learning_rate_ratio", -1.0, "must be a finite number >= 0 and <= 1"),
    ("warmup_steps", -10, "warmup_steps (steps of linear warmup; 0 = 5% of num_train_steps) must "
                          "be an integer >= 0"),
    ("weight_decay", -1.0, "must be a finite number >= 0"),
    ("model.dropout", 1.5, "model.dropout (the dropout rate) must be a finite number >= 0 and < 1"),
    ("learning_rate", math.nan, "learning_rate=nan is not allowed"),
    ("learning_rate", math.inf, "learning_rate=inf is not allowed"),
    ("learning_rate", -1e-3, "must be a finite number >= 0"),
    ("model.rope_theta", -1.0, "model.rope_theta (the RoPE base) must be a finite number > 1"),
    ("max_checkpoints_to_keep", 0, "max_checkpoints_to_keep (checkpoints kept on disk) must be an "
                                   "integer >= 1"),
    ("max_checkpoints_to_keep", -1, "must be an integer >= 1"),
    ("train_length", 0, "train_length (tokens per training window) must be an integer >= 1"),
    ("data.copy_fraction", 1.5, "must be a finite number >= 0 and <= 1"),
    ("model.attention", "kn", "model.attention must be one of baseline, qna, kna, cosa"),
    ("model.logn", 1, "model.logn must be true or false"),
    ("seed", 1.5, "seed must be an integer >= 0"),
    ("data.dataset", "", "data.dataset (kjv, text_folder or a TFDS name) must be a non-empty"),
]


@pytest.mark.parametrize("key, value, message", BAD, ids=[f"{k}={v}" for k, v, _ in BAD])
def test_bad_setting_is_refused_in_one_line_naming_it(key, value, message):
  config = base.get_config()
  *parents, leaf = key.split(".")
  section = config
  for parent in parents:
    section = section[parent]
  with section.ignore_type():
    section[leaf] = value
  with pytest.raises(ConfigError) as e:
    run_config.validate(run_config.resolve(config), 1)
  assert str(e.value).startswith(f"--config.{key}={value!r} is not allowed: ")
  assert message in str(e.value) and "\n" not in str(e.value)


def test_valid_edges_pass():
  config = base.get_config()
  config.update(end_learning_rate_ratio=1.0, weight_decay=0.0, warmup_steps=0, learning_rate=0.0)
  config.model.dropout = 0.0
  run_config.validate(run_config.resolve(config), 1)


def test_symbol_copies_without_copies_are_refused():
  config = base.get_config()
  config.data.copy_symbols = 0.5
  with pytest.raises(ConfigError, match="data.copy_symbols is a share of the synthetic copies, and "
                                        "there are none: set data.copy_fraction > 0"):
    run_config.validate(run_config.resolve(config), 1)
  config.data.copy_fraction = 0.5
  run_config.validate(run_config.resolve(config), 1)


def test_text_folder_dataset_without_a_folder_is_refused():
  config = base.get_config()
  config.data.dataset = "text_folder"
  with pytest.raises(ConfigError, match="data.text_folder, which is not set: add "
                                        "--config.data.text_folder=DIR"):
    run_config.validate(run_config.resolve(config), 1)
