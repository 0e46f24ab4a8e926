"""Preemption signals and writer failures: a checkpoint at the signal, an exact resume, no hang."""

import errno
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from keynorm_jax.reproduce import run as reproduce_run
from keynorm_jax.storage import checkpointing, disk
from keynorm_jax.training import loop as training
from keynorm_jax.training import metrics_writer, preemption, sharding
from train_helpers import checkpoint_steps, copy_run, losses, tiny_config
from faults.helpers import REPO, reset_signals as _reset_signals


def _signal_at_step(monkeypatch, step: int, signals: tuple):
  """Sends `signals` to this process while the batch of `step` is placed (mid-run)."""
  real, calls = sharding.global_batch, []

  def global_batch(*args):
    calls.append(1)
    if len(calls) == step:
      for sig in signals:
        os.kill(os.getpid(), sig)
    return real(*args)

  monkeypatch.setattr(sharding, "global_batch", global_batch)


pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signal handlers can only be installed in the main thread")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_saves_at_the_step_in_flight_and_resumes_exactly(straight_run, tmp_path, data_dir,
                                                                monkeypatch, capfd, sig):
  config = tiny_config(data_dir=data_dir)
  handlers = {s: signal.getsignal(s) for s in preemption.SIGNALS}
  with monkeypatch.context() as patch:
    _signal_at_step(patch, 4, (sig,))
    with pytest.raises(preemption.Preempted, match=rf"^Stopped by {sig.name} after step 4: "
                                                    rf"checkpoint 4 is saved in .*checkpoints\. "
                                                    rf"Run the same command again to resume\.$"):
      training.train_and_evaluate(config, tmp_path)
  assert f"{sig.name} received: saving a checkpoint at the end of this step" in capfd.readouterr().err
  assert checkpoint_steps(tmp_path) == [3, 4]                 # the regular one and the signal's
  assert {s: signal.getsignal(s) for s in preemption.SIGNALS} == handlers  # restored
  training.train_and_evaluate(config, tmp_path)
  assert losses(tmp_path) == losses(straight_run)             # nothing redone differs


def test_cli_trains_a_bare_config_name_in_its_default_workdir_and_sigterm_exits_75(tmp_path,
                                                                                  data_dir):
  workdir = tmp_path / "runs" / "kna_rope"                        # --workdir left to its default
  process = subprocess.Popen(
      [sys.executable, str(REPO / "train.py"), "--config=kna_rope", "--config.model_size=tiny",
       "--config.train_length=32", "--config.num_train_steps=100000",
       "--config.checkpoint_every_steps=100000", "--config.log_every_steps=1",
       "--config.model.num_layers=1", f"--config.data.data_dir={data_dir}"], cwd=tmp_path,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + 120
  while not (workdir / "metrics.jsonl").is_file() or \
      (workdir / "metrics.jsonl").read_text().count("\n") < 2:   # mid-run: steps are logged
    assert process.poll() is None and time.monotonic() < deadline, process.communicate()
    time.sleep(0.1)
  process.send_signal(signal.SIGTERM)
  _, err = process.communicate(timeout=60)
  assert process.returncode == preemption.PREEMPTED_EXIT_CODE == 75, err[-2000:]
  assert "Traceback" not in err
  last = err.strip().splitlines()[-1]
  assert last.startswith("Stopped by SIGTERM after step ") and last.endswith("to resume.")
  step = int(last.split("after step ")[1].split(":")[0])
  assert step >= 2 and checkpoint_steps(workdir) == [step]
  assert [s for s, _ in losses(workdir)] == list(range(1, step + 1))


def test_after_the_first_signal_the_next_one_is_the_kernels(monkeypatch):
  """The first signal restores both default actions, so a second one stops the process at once
  even while Python waits in native code; a second one that reaches the handler re-raises."""
  raised = []
  monkeypatch.setattr(signal, "raise_signal", raised.append)
  before = {s: signal.getsignal(s) for s in preemption.SIGNALS}
  with preemption.Watch() as watch:
    assert not watch.stop_at(1)
    watch._handle(signal.SIGTERM, None)  # pylint: disable=protected-access
    assert watch.stop_at(2) and raised == []
    assert all(signal.getsignal(s) == signal.SIG_DFL for s in preemption.SIGNALS)
    watch._handle(signal.SIGINT, None)  # pylint: disable=protected-access
    assert raised == [signal.SIGINT]
  assert {s: signal.getsignal(s) for s in preemption.SIGNALS} == before   # restored on exit


@pytest.mark.parametrize("failing", ["tensorboard", "metrics"])
def test_a_failing_metrics_writer_ends_the_run_in_one_line(straight_run, tmp_path, data_dir,
                                                           monkeypatch, failing):
  """A full disk met by the TensorBoard or metrics.jsonl writer mid-run: DiskError at once (no
  thread to wait on), the checkpoint before it intact, and the run resumes exactly."""
  calls = []

  def full(*_):
    calls.append(1)
    if len(calls) >= 5:                                          # and the disk stays full
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  with monkeypatch.context() as patch:
    if failing == "tensorboard":                                 # its flush, as a full disk fails
      real_flush = metrics_writer.RecordWriter.flush
      patch.setattr(metrics_writer.RecordWriter, "flush",
                    lambda self: full() or real_flush(self))
    else:
      real_write = metrics_writer.MetricsWriter.write
      patch.setattr(metrics_writer.MetricsWriter, "write",
                    lambda self, *a: full() or real_write(self, *a))
    with pytest.raises(disk.DiskError, match=r"^The disk under .* is full .*No space left on "
                                             r"device.*the last checkpoint \(step 3\) is intact"):
      training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path)
    # The first failed write ends the run, not retried (TensorBoard's writer flushes once more as
    # it closes).
    assert len(calls) == {"tensorboard": 6, "metrics": 5}[failing]
  open_files = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                if os.path.exists(f"/proc/self/fd/{fd}")]
  assert not [f for f in open_files if f.startswith(str(tmp_path))]   # both files were closed
  assert checkpoint_steps(tmp_path) == [3]
  training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path)
  assert losses(tmp_path) == losses(straight_run)


def test_a_signal_while_the_data_is_read_stops_before_training_leaving_nothing(
    installed, tmp_path, data_dir, monkeypatch, capfd):
  real, calls = training._tokens, []  # pylint: disable=protected-access

  def tokens(*args):
    calls.append(1)
    if len(calls) == 1:
      os.kill(os.getpid(), signal.SIGINT)      # Python's own handler raised KeyboardInterrupt here
    return real(*args)

  monkeypatch.setattr(training, "_tokens", tokens)
  with pytest.raises(preemption.Preempted, match=r"^Stopped by SIGINT before training started: "
                                                  r"there was nothing new to save\. Run the same "
                                                  r"command again to start \(or resume\)\.$"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path / "new" / "run")
  assert "SIGINT received: stopping at the next safe point" in capfd.readouterr().err
  assert not (tmp_path / "new").exists()                      # nothing left behind


def test_a_signal_during_the_restore_stops_with_the_checkpoint_intact(
    installed, straight_run, tmp_path, data_dir, monkeypatch):
  workdir = copy_run(straight_run, tmp_path, drop_steps=[6])
  real = checkpointing.RunCheckpoints.restore_latest

  def restore_latest(self, *args, **kwargs):
    if args:                                                  # the full restore, not the config's
      os.kill(os.getpid(), signal.SIGTERM)
    return real(self, *args, **kwargs)

  with monkeypatch.context() as patch:
    patch.setattr(checkpointing.RunCheckpoints, "restore_latest", restore_latest)
    with pytest.raises(preemption.Preempted, match=r"^Stopped by SIGTERM before step 4: "
                                                    r"checkpoint 3 in .*checkpoints is intact and "
                                                    r"there was nothing new to save\. Run the same "
                                                    r"command again to resume\.$"):
      training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert checkpoint_steps(workdir) == [3]
  _reset_signals()
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert losses(workdir) == losses(straight_run)


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.5, 2.0])
def test_cli_ctrl_c_in_the_first_seconds_exits_75_in_one_line(tmp_path, data_dir, delay):
  """Ctrl-C during the imports, the data or the compile: one line, 75, never a traceback nor a run
  that goes on (it was lost in a callback of XLA's garbage collection), nothing half made."""
  workdir = tmp_path / "run"
  process = subprocess.Popen(
      [sys.executable, str(REPO / "train.py"), "--config=kna_rope", "--config.model_size=tiny",
       "--config.train_length=32", "--config.num_train_steps=100000",
       "--config.checkpoint_every_steps=100000", "--config.model.kernel=reference",
       f"--config.data.data_dir={data_dir}", f"--workdir={workdir}"], cwd=tmp_path,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  time.sleep(delay)
  process.send_signal(signal.SIGINT)
  out, err = process.communicate(timeout=240)
  assert process.returncode == 75, err[-3000:]
  for noise in ("Traceback", "Exception ignored", "KeyboardInterrupt"):
    assert noise not in out + err
  last = err.strip().splitlines()[-1]
  if last.startswith("Stopped by SIGINT before training started: "):
    assert not workdir.exists()
  else:
    step = int(re.match(r"Stopped by SIGINT after step (\d+): checkpoint \1 is saved", last)[1])
    assert checkpoint_steps(workdir) == [step]


@pytest.mark.slow
def test_reproduce_stopped_while_evaluating_says_so_and_goes_on(installed, tmp_path, data_dir,
                                                                 monkeypatch, reference_kernel,
                                                                 capsys):
  """SIGTERM during the reproduction's evaluation (it exited 143 without a word): one line, 75
  from the CLI, and the rerun evaluates without training again."""
  real = reproduce_run.evaluate_run

  def signalled(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    return real(*args, **kwargs)

  # KNA + NoPE: evaluated under none at two lengths (kna_rope adds its scalings and long lengths).
  kwargs = dict(runs_dir=tmp_path / "runs", output=tmp_path / "page", variants=["kna_nope"],
                steps=4, data_dir=data_dir)
  with monkeypatch.context() as patch:
    patch.setattr(reproduce_run, "evaluate_run", signalled)
    with pytest.raises(preemption.Preempted, match=r"^Stopped by SIGTERM while evaluating "
                                                    r"kna_nope: its training is saved \(checkpoint "
                                                    r"4 in .*\) and the runs evaluated before it "
                                                    r"are kept\. Run the same command again to go "
                                                    r"on from its evaluation\.$") as stopped:
      reproduce_run.reproduce("tiny", **kwargs)
  assert stopped.value.exit_code == 75
  assert not (tmp_path / "page" / "RESULTS.md").exists()
  _reset_signals()
  capsys.readouterr()
  reproduce_run.reproduce("tiny", **kwargs)
  out = capsys.readouterr().out
  assert "kna_nope: trained, skipping" in out and "evaluating kna_nope" in out
  assert (tmp_path / "page" / "RESULTS.md").exists()
