"""tools/accelerator_session.py: every step end to end at the tiny size, its markers and outputs,
a second call that skips what is done, and the deadline (SIGTERM, then the exit code 75 kept)."""

import importlib.util
import json
import os
import subprocess
import sys
import tarfile

import pytest

from faults.helpers import REPO

_spec = importlib.util.spec_from_file_location("accelerator_session",
                                               REPO / "tools" / "accelerator_session.py")
session = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(session)

# One step of each kind (the others are the same commands with another config or architecture):
# the suite's time.
STEPS = ["b_train_kna_rope", "b_eval_kna_rope", "c_long_context_gau", "d_seed_groups_gau"]
assert set(STEPS) <= {step for step, _, _ in session.STEPS}


def _env():
  """The test's environment without conftest's 8 simulated devices (a group of 3 on one)."""
  env = dict(os.environ)
  env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                              if "device_count" not in f)
  return env


def _call(tmp_path, data_dir, *flags):
  command = [sys.executable, str(REPO / "tools" / "accelerator_session.py"), "--size=tiny",
             f"--work={tmp_path / 'work'}", f"--results={tmp_path / 'results'}",
             f"--out={tmp_path / 'out'}", f"--data_dir={data_dir}", *flags]
  return subprocess.run([*command, f"--only={','.join(STEPS)}"], cwd=REPO, capture_output=True,
                        text=True, check=False, env=_env(), timeout=1800)


def _markers(tmp_path):
  return {step: json.loads((tmp_path / "results" / "markers" / f"{step}.json").read_text())
          for step in STEPS}


@pytest.mark.slow
def test_every_step_at_the_tiny_size_then_a_second_call_skips_them(tmp_path, data_dir):
  first = _call(tmp_path, data_dir, "--deadline_s=1500")
  assert first.returncode == 0, first.stdout + first.stderr
  markers = _markers(tmp_path)
  results = tmp_path / "results"
  for step, marker in markers.items():
    log = results / "logs" / f"{step}.log"
    assert log.is_file(), step
    assert marker["status"] == "done", (step, marker, log.read_text()[-2000:])
    assert marker["exit_codes"] == [0] * len(marker["commands"])
  assert (tmp_path / "work" / "b" / "kna_rope" / "config.json").is_file()
  assert any((results / "b_eval" / "kna_rope").iterdir())
  figures = json.loads((results / "d_seed_groups" / "gau.json").read_text())
  assert [row["num_seeds"] for row in figures["rows"]] == [1, 2]
  assert "s/window" in (results / "logs" / "c_long_context_gau.log").read_text()
  summary = (tmp_path / "out" / "summary.md").read_text()
  assert all(f"| {step} | {markers[step]['status']} |" in summary for step in STEPS)
  with tarfile.open(tmp_path / "out" / "accelerator_session.tgz") as tar:
    packed = set(tar.getnames())
  assert {f"results/markers/{step}.json" for step in STEPS} <= packed
  assert not any("checkpoints" in name for name in packed)

  second = _call(tmp_path, data_dir, "--deadline_s=1500")
  assert second.returncode == 0, second.stdout + second.stderr
  for step in STEPS:
    assert f"{step}: skipped" in second.stdout, second.stdout
  assert _markers(tmp_path) == markers


def test_a_step_past_the_deadline_gets_sigterm_and_is_marked_stopped(tmp_path, monkeypatch):
  """A process that saves and exits 75 on SIGTERM (as the study and train.py do) is stopped at the
  deadline, its exit code kept; one that ignores SIGTERM is killed after the grace."""
  monkeypatch.setattr(session, "GRACE_S", 1)   # the shortest grace _run gives
  polite = (f"{sys.executable} -c \"import signal, sys, time; "
            f"signal.signal(signal.SIGTERM, lambda *_: sys.exit(75)); time.sleep(60)\"")
  stubborn = (f"{sys.executable} -c \"import signal, time; "
              f"signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)\"")
  codes, stopped = session._run([polite, stubborn], tmp_path / "log", 1)  # pylint: disable=protected-access
  assert stopped and codes[0] == 75 and codes[1] == -9   # neither slept its 60 s out
  assert "$ " in (tmp_path / "log").read_text()


def test_no_step_starts_without_the_time_for_it(tmp_path):
  done = subprocess.run([sys.executable, str(REPO / "tools" / "accelerator_session.py"),
                         "--size=tiny", "--deadline_s=30", f"--work={tmp_path / 'work'}",
                         f"--results={tmp_path / 'results'}", f"--out={tmp_path / 'out'}"],
                        cwd=REPO, capture_output=True, text=True, check=False, timeout=120)
  assert done.returncode == 0, done.stderr
  assert all(f"{step}: not started" in done.stdout for step in STEPS)
  assert not (tmp_path / "results" / "markers").exists()
  assert "| b_train_baseline_rope | not started |" in (
      tmp_path / "out" / "summary.md").read_text()
  assert "preregistered" not in done.stdout   # they run on the CPU (docs/study.md)
