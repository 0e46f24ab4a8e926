"""The fault tests' shared fixtures: one compilation cache and one uninterrupted reference run for
the whole package."""

import jax
import pytest

from keynorm_jax.training import loop as training
from train_helpers import tiny_config


@pytest.fixture(scope="package", autouse=True)
def compilation_cache(tmp_path_factory):
  """Every fault re-runs a tiny training, whose jit compiles dominate its time: cache them."""
  keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
          "jax_persistent_cache_min_entry_size_bytes")
  saved = {key: getattr(jax.config, key) for key in keys}
  for key, value in zip(keys, (str(tmp_path_factory.mktemp("jax_cache")), 0, 0)):
    jax.config.update(key, value)
  yield
  for key, value in saved.items():
    jax.config.update(key, value)


@pytest.fixture(scope="package")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="package")
def straight(tmp_path_factory, data_dir):
  """An uninterrupted 6-step run (checkpoints 3 and 6): the reference every fault must match."""
  workdir = tmp_path_factory.mktemp("straight")
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  return workdir
