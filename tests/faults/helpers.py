"""What the fault tests share besides train_helpers: restored state, injected damage, the CLI."""

import pathlib
import struct
import subprocess
import sys

import jax
import numpy as np
from tensorboardX.proto import event_pb2

from keynorm_jax import run_config
from keynorm_jax.storage import checkpointing
from keynorm_jax.training import loop as training


REPO = pathlib.Path(__file__).resolve().parents[2]


def all_finite(tree):
  return all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(tree)
             if np.issubdtype(np.asarray(x).dtype, np.inexact))


def restore_state(workdir, config):
  """The newest checkpoint restored as training restores it (nothing is moved)."""
  config = run_config.resolve(config)
  model = run_config.build_model(config)
  target = training.abstract_state(model, training.make_optimizer(config), config.seed,
                                   config.train_length)
  return checkpointing.RunCheckpoints(workdir, read_only=True).restore_latest(
      lambda *_: checkpointing.state_restore_args(target), with_data=True)


def flip_bytes(step_dir, count=3):
  """Flips `count` bytes in the middle of the step's largest data file; returns that file."""
  data = max((p for p in (step_dir / "state").rglob("*") if p.is_file() and "/d/" in str(p)),
             key=lambda p: p.stat().st_size)
  raw = bytearray(data.read_bytes())
  for i in range(count):
    raw[len(raw) // 2 + 7 * i] ^= 0xFF
  data.write_bytes(bytes(raw))
  return data


def cli(script, *args, cwd=REPO):
  result = subprocess.run([sys.executable, str(REPO / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
  return result.returncode, result.stdout + result.stderr


def tensorboard_events(workdir):
  """(file name, [(step, purge?, has scalars)]) per event file, in the order written."""
  out = []
  for path in sorted((workdir / "tensorboard").glob("events.out.tfevents.*")):
    data, i, events = path.read_bytes(), 0, []
    while i < len(data):
      (size,) = struct.unpack("<Q", data[i:i + 8])
      event = event_pb2.Event.FromString(data[i + 12:i + 12 + size])
      events.append((event.step, event.HasField("session_log"), bool(event.summary.value)))
      i += 12 + size + 4
    out.append((path.name, events))
  return out
