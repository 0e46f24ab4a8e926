"""A tiny training config shared by the training and evaluation tests."""

from keynorm_jax import run_config


def tiny_config(name="kna_rope", data_dir="", **overrides):
  config = run_config.load_config(name)
  config.model_size = "tiny"
  config.train_length = 32
  config.batch_size = 8
  config.num_train_steps = 6
  config.checkpoint_every_steps = 3
  config.log_every_steps = 1
  config.eval_windows = 4
  config.data.data_dir = data_dir
  config.update(overrides)
  return config
