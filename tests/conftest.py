"""Test set-up: 8 simulated CPU devices (for the multi-device checks), set before JAX starts."""

import os

_DEVICES_FLAG = "--xla_force_host_platform_device_count=8"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):  # xdist's workers inherit it set
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _DEVICES_FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")


import pytest  # noqa: E402  (after the environment is set)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
  """One TFDS folder for every tiny training of the session (the dataset is prepared once)."""
  return str(tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="session")
def straight_run(tmp_path_factory, data_dir):
  """An uninterrupted tiny 6-step run (checkpoints 3 and 6): the reference every resumed, sharded
  or faulted run must match. Read it or copy it; never write into it."""
  from keynorm_jax.training import loop as training
  from train_helpers import tiny_config
  workdir = tmp_path_factory.mktemp("straight")
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  return workdir
