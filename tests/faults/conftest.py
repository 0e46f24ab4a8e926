"""The fault tests' compilation cache (their reference run, `straight_run`, is tests/conftest.py's)."""

import jax
import pytest


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
