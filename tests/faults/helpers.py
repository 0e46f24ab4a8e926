"""What the fault tests share besides train_helpers: restored state, injected damage, the CLI."""

import pathlib
import signal
import struct
import subprocess
import sys

import jax
import numpy as np
from keynorm_jax import run_config
from keynorm_jax.storage import checkpointing
from keynorm_jax.training import loop as training
from keynorm_jax.training import preemption
from keynorm_jax.training.metrics_writer import Event


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
      event = Event.FromString(data[i + 12:i + 12 + size])
      events.append((event.step, event.HasField("session_log"), bool(event.summary.value)))
      i += 12 + size + 4
    out.append((path.name, events))
  return out


def reset_signals():
  """What a new process starts with: no signal received yet, the handlers installed."""
  preemption._received = None  # pylint: disable=protected-access
  preemption.install()


# Writes results.json, results.csv and results.md (text(n): "new <name>", or that as a JSON
# string) into argv[1] and is killed (SIGKILL) in its second rename: results.json renamed, the
# others still temporary files.
_KILLED_WRITER = """
import json, os, signal, sys
sys.path.insert(0, {repo!r})
from keynorm_jax.evaluation import outputs
real, calls = os.replace, []
def replace(src, dst):
  calls.append(dst)
  if str(dst).endswith("results.csv"):
    os.kill(os.getpid(), signal.SIGKILL)
  real(src, dst)
os.replace = replace
text = (lambda n: json.dumps("new " + n)) if {as_json} else (lambda n: "new " + n)
outputs.write_files(sys.argv[1], {{n: outputs.text_writer(text(n)) for n in
                                  ("results.json", "results.csv", "results.md")}}, fix="-")
"""


def killed_mid_swap(folder, as_json=False):
  """`folder` as an evaluation killed between the renames of its set leaves it: its results.json
  new (the text "new results.json", or that as a JSON string), results.csv and results.md from
  before, the new ones in temporary files, the journal in place."""
  from keynorm_jax.evaluation import outputs  # pylint: disable=g-import-not-at-top
  for name in ("results.json", "results.csv", "results.md", "accuracy_by_position.png"):
    (folder / name).write_text(f"previous {name}")
  script = _KILLED_WRITER.format(repo=str(REPO), as_json=as_json)
  killed = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True,
                          text=True, timeout=60)
  assert killed.returncode == -signal.SIGKILL, killed.stderr
  new = "new results.json"
  assert (folder / "results.json").read_text() == (f'"{new}"' if as_json else new)  # the mixed
  assert (folder / "results.csv").read_text() == "previous results.csv"   # set the issue found
  assert len(list(folder.glob(f".*{outputs.PARTIAL}"))) == 2
  assert (folder / outputs.JOURNAL).exists()
