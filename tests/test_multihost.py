"""Two processes joined by jax.distributed (two "hosts" on one machine) train like one process."""

import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

from keynorm_jax.training.metrics_writer import read_metrics

pytestmark = pytest.mark.slow

WORKER = pathlib.Path(__file__).resolve().parent / "multihost_worker.py"


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_hosts_give_the_losses_of_one(tmp_path, straight_run):
  """Two processes of one CPU device each train the straight run (one process, 8 devices)."""
  data_dir = str(tmp_path / "tfds")
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = " ".join(  # the tests' compiler settings, but one CPU device per process
      f for f in env.get("XLA_FLAGS", "").split()
      if not f.startswith("--xla_force_host_platform_device_count"))
  port = _free_port()
  workers = [subprocess.Popen([sys.executable, str(WORKER), str(port), str(i),
                               str(tmp_path / "two_hosts"), data_dir], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
  outputs = [w.communicate(timeout=300)[0] for w in workers]
  for w, out in zip(workers, outputs):
    assert w.returncode == 0, out[-3000:]
  two = [m["loss"] for m in read_metrics(tmp_path / "two_hosts")]
  one = [m["loss"] for m in read_metrics(straight_run)]
  assert len(two) == 6
  np.testing.assert_allclose(two, one, rtol=1e-5)
  assert sorted(p.name for p in (tmp_path / "two_hosts" / "checkpoints").iterdir()
                if p.name.isdigit()) == ["3", "6"]
