"""Two processes joined by jax.distributed (two "hosts" on one machine) train like one process."""

import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

from keynorm_jax.training import loop as training
from keynorm_jax.training.metrics_writer import read_metrics
from train_helpers import tiny_config

pytestmark = pytest.mark.slow

WORKER = pathlib.Path(__file__).resolve().parent / "multihost_worker.py"


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_hosts_give_the_losses_of_one(tmp_path):
  data_dir = str(tmp_path / "tfds")
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device per process
  env["JAX_PLATFORMS"] = "cpu"
  port = _free_port()
  workers = [subprocess.Popen([sys.executable, str(WORKER), str(port), str(i),
                               str(tmp_path / "two_hosts"), data_dir], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
  outputs = [w.communicate(timeout=300)[0] for w in workers]
  for w, out in zip(workers, outputs):
    assert w.returncode == 0, out[-3000:]
  training.train_and_evaluate(tiny_config(data_dir=data_dir, num_devices=1), tmp_path / "one")
  two = [m["loss"] for m in read_metrics(tmp_path / "two_hosts")]
  one = [m["loss"] for m in read_metrics(tmp_path / "one")]
  assert len(two) == 6
  np.testing.assert_allclose(two, one, rtol=1e-5)
  assert sorted(p.name for p in (tmp_path / "two_hosts" / "checkpoints").iterdir()
                if p.name.isdigit()) == ["3", "6"]
