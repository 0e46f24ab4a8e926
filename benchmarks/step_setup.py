"""The training step the benchmarks time: a config at a model size, resolved, and the model,
optimizer, first state and batch of random tokens its step takes (seed 0 for both)."""

import numpy as np

from keynorm_jax import run_config
from keynorm_jax.training.loop import init_state
from keynorm_jax.training.optimizer import make_optimizer


def config_at(name: str, size: str, kernel=None, dtype=None):
  """The config `name` at model size `size`, resolved (model.kernel and model.compute_dtype set
  where given)."""
  config = run_config.load_config(name)
  config.model_size = size
  if kernel is not None:
    config.model.kernel = kernel
  if dtype is not None:
    config.model.compute_dtype = dtype
  return run_config.resolve(config)


def random_tokens(rows: int, length: int):
  """[rows, length + 1] random byte tokens (int32): windows of `length` and each next token."""
  return np.random.default_rng(0).integers(0, 256, size=(rows, length + 1), dtype=np.int32)


def step_inputs(config):
  """(model, tx, state, batch) of a resolved config: seed 0's state and one training batch."""
  model, tx = run_config.build_model(config), make_optimizer(config)
  state = init_state(model, tx, 0, config.train_length)
  return model, tx, state, random_tokens(config.batch_size, config.train_length)
