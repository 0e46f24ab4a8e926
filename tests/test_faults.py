"""Fault injection on tiny runs: each fault a real cluster causes, the message it must give, and
that nothing is lost (checkpoints intact, losses identical to an uninterrupted run).

Tests run as root here and in CI, and chmod does not stop root: read-only folders are injected
by making the writability probe raise the error a read-only mount gives (EROFS), or by a path
under a regular file (which no user can create), never by chmod.
"""

import collections
import errno
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import sys
import time
import types

from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import downloader as tfds_downloader
from tensorboardX.proto import event_pb2

from keynorm_jax import run_config
from keynorm_jax.data import corpora
from keynorm_jax.evaluation.command import evaluate_workdir
from keynorm_jax.evaluation.command import make_columns
from keynorm_jax.evaluation.run_loading import load_run
from keynorm_jax.storage import checkpoint_writer, checkpointing, checksums, disk, workdir_lock
from keynorm_jax.training import config_changes
from keynorm_jax.training import loop as training
from keynorm_jax.training.metrics_writer import MetricsWriter, read_metrics
from train_helpers import tiny_config

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", autouse=True)
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


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="module")
def straight(tmp_path_factory, data_dir):
  """An uninterrupted 6-step run (checkpoints 3 and 6): the reference every fault must match."""
  workdir = tmp_path_factory.mktemp("straight")
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  return workdir


def _copy(run, tmp_path, *, drop_steps=()):
  """A copy of a run, as if it had been killed before checkpointing `drop_steps`."""
  workdir = tmp_path / "run"
  shutil.copytree(run, workdir)
  for step in drop_steps:
    shutil.rmtree(workdir / "checkpoints" / str(step))
  return workdir


def _losses(workdir):
  return [(m["step"], m["loss"]) for m in read_metrics(workdir)]


def _steps(workdir):
  return sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())


def _all_finite(tree):
  return all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(tree)
             if np.issubdtype(np.asarray(x).dtype, np.inexact))


def _restore_state(workdir, config):
  """The newest checkpoint restored as training restores it (nothing is moved)."""
  config = run_config.resolve(config)
  model = run_config.build_model(config)
  target = training.abstract_state(model, training.make_optimizer(config), config.seed,
                                   config.train_length)
  return checkpointing.RunCheckpoints(workdir, read_only=True).restore_latest(
      lambda *_: checkpointing.state_restore_args(target), with_data=True)


def _flip_bytes(step_dir, count=3):
  """Flips `count` bytes in the middle of the step's largest data file; returns that file."""
  data = max((p for p in (step_dir / "state").rglob("*") if p.is_file() and "/d/" in str(p)),
             key=lambda p: p.stat().st_size)
  raw = bytearray(data.read_bytes())
  for i in range(count):
    raw[len(raw) // 2 + 7 * i] ^= 0xFF
  data.write_bytes(bytes(raw))
  return data


def _cli(script, *args, cwd=REPO):
  result = subprocess.run([sys.executable, str(REPO / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
  return result.returncode, result.stdout + result.stderr


def _tensorboard_events(workdir):
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


# ---- NaN ----

OVERFLOW = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")


@OVERFLOW
def test_nan_mid_run_saves_nothing_non_finite_and_the_advice_can_be_followed(straight, tmp_path,
                                                                            data_dir):
  """Parameters overflow at step 4 while the loss and gradient norm at step 4 are still finite
  (they are computed before the update): only a check of the state catches it."""
  workdir = _copy(straight, tmp_path, drop_steps=[6])   # killed after step 6, before its save
  blown = tiny_config(data_dir=data_dir, learning_rate=1e39)
  with pytest.raises(run_config.ConfigError,
                     match=r"learning_rate \(0.003 there, 1e\+39 here\).*"
                           r"--allow_config_change=learning_rate"):
    training.train_and_evaluate(blown, workdir)
  with pytest.raises(training.NonFiniteLossError,
                     match=r"parameters or optimizer state became NaN or infinite at or before "
                           r"step 4 .*; "
                           r"nothing non-finite was saved\. The last good checkpoint \(step 3\) "
                           r"is kept.*restores finite.*--allow_config_change"):
    training.train_and_evaluate(blown, workdir, allow_config_change=["learning_rate"])
  assert _steps(workdir) == [3]
  assert _all_finite(_restore_state(workdir, tiny_config(data_dir=data_dir)).state)
  history = [json.loads(l) for l in (workdir / "config_history.jsonl").read_text().splitlines()]
  assert history[-1]["event"] == "change" and history[-1]["step"] == 3
  assert history[-1]["changed"] == {"learning_rate": [0.003, 1e39]}
  # Following the advice (here: back to the old rate) resumes from step 3, nothing lost.
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert _losses(workdir) == _losses(straight)


@OVERFLOW
def test_nan_before_any_checkpoint_says_there_is_none(tmp_path, data_dir):
  with pytest.raises(training.NonFiniteLossError,
                     match=r"at or before step 1 .*; nothing non-finite was saved\. "
                           r"No checkpoint was written "
                           r"before it.*nothing to resume"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir, learning_rate=1e39), tmp_path)
  assert not (tmp_path / "checkpoints").exists()


# ---- config changes on resume ----


def test_extending_a_run_names_num_train_steps_and_records_the_change(straight, tmp_path,
                                                                     data_dir):
  workdir = _copy(straight, tmp_path)
  longer = tiny_config(data_dir=data_dir, num_train_steps=9)
  with pytest.raises(run_config.ConfigError, match=r"other optimizer settings: num_train_steps "
                                                   r"\(6 there, 9 here\)\. .*"
                                                   r"--allow_config_change=num_train_steps") as e:
    training.train_and_evaluate(longer, workdir)
  assert "warmup_steps" not in str(e.value)  # derived from num_train_steps, never set by the user
  with pytest.raises(run_config.ConfigError, match=r"--allow_config_change=attention: only "
                                                   r"optimizer settings"):
    training.train_and_evaluate(longer, workdir, allow_config_change=["attention"])
  training.train_and_evaluate(longer, workdir, allow_config_change=["num_train_steps"])
  assert [s for s, _ in _losses(workdir)] == list(range(1, 10))
  assert _losses(workdir)[:6] == _losses(straight)
  saved = _restore_state(workdir, longer)
  assert saved.step == 9
  assert saved.history["changes"] == [{"step": 6, "changed": {"num_train_steps": [6, 9]},
                                       "time": saved.history["changes"][0]["time"]}]


def test_resume_checks_fields_as_the_user_set_them():
  saved_user = tiny_config().to_dict()
  saved = run_config.resolve(tiny_config()).to_dict()
  # The derived warmup written out explicitly is no change at all.
  same = tiny_config(warmup_steps=saved["warmup_steps"])
  assert config_changes.resume_changes(saved, {"user_config": saved_user, "changes": []},
                                       same.to_dict(), run_config.resolve(same).to_dict(), (),
                                       "W") == {}
  other = tiny_config("baseline_rope")
  with pytest.raises(run_config.ConfigError, match=r"different config: model.attention \('kna' there, "
                                                   r"'baseline' here\)"):
    config_changes.resume_changes(saved, {"user_config": saved_user, "changes": []},
                                  other.to_dict(), run_config.resolve(other).to_dict(),
                                  ["learning_rate"], "W")


# ---- two writers ----


def test_second_writer_is_refused_naming_the_holder_and_a_dead_holder_does_not_block(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]);"
       "from keynorm_jax.storage import workdir_lock\n"
       "with workdir_lock.hold(sys.argv[2]):\n  print('locked', flush=True); time.sleep(300)",
       str(REPO), str(tmp_path)], stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "locked"
    code, output = _cli("train.py", "--config=kna_rope", "--config.model_size=tiny",
                        f"--workdir={tmp_path}")
    assert code != 0 and "Traceback" not in output
    assert output.strip().splitlines()[-1] == (
        f"error: WorkdirBusyError: {tmp_path} is in use by another training process (pid "
        f"{holder.pid} on host {socket.gethostname()}, since "
        f"{json.loads((tmp_path / 'train.lock').read_text())['since']}; lock file "
        f"{tmp_path / 'train.lock'}). Wait for it to finish or stop it, or pass another --workdir.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.lock"]  # nothing else written
  finally:
    holder.kill()  # kill -9: the kernel drops its lock, and the next run is not blocked
    holder.wait()
  with workdir_lock.hold(tmp_path):
    assert json.loads((tmp_path / "train.lock").read_text())["pid"] == os.getpid()


# ---- corrupt and incomplete checkpoints ----


def test_flipped_bytes_are_detected_skipped_by_eval_and_set_aside_by_training(straight, tmp_path,
                                                                             data_dir, capsys):
  workdir = _copy(straight, tmp_path)
  flipped = _flip_bytes(workdir / "checkpoints" / "6")
  warnings = []
  run = load_run(workdir, warn=warnings.append)
  assert run.step == 3
  assert warnings == [f"WARNING: skipping checkpoint 6 of {workdir.resolve()}: {flipped.resolve()} "
                      f"does not match its checksum (corrupt bytes). Trying the one before."]
  assert _steps(workdir) == [3, 6]                                   # the evaluator moved nothing
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  out = capsys.readouterr().out
  assert f"checkpoint 6 is corrupt ({flipped.resolve()} does not match its checksum" in out
  aside = list((workdir / "corrupt_checkpoints").iterdir())
  assert len(aside) == 1 and aside[0].name.startswith("6-")          # kept, not deleted
  assert _losses(workdir) == _losses(straight)
  assert checksums.verify(workdir / "checkpoints" / "6")             # the new 6 is listed


@pytest.mark.parametrize("with_manifest", [True, False])
def test_eval_falls_back_past_a_checkpoint_without_metadata(straight, tmp_path, with_manifest):
  """The issue's reproduction (and the same for a checkpoint of an older version, which has no
  checksum manifest)."""
  workdir = _copy(straight, tmp_path)
  step_dir = workdir / "checkpoints" / "6"
  for name in ("_CHECKPOINT_METADATA", "state/_METADATA", "state/array_metadatas"):
    path = step_dir / name
    shutil.rmtree(path) if path.is_dir() else path.unlink()
  if not with_manifest:
    for manifest in (workdir / "checkpoints").glob(f"*/{checksums.MANIFEST}"):
      manifest.unlink()
  lines = []
  records, failures, _ = evaluate_workdir(workdir, lengths=[32], columns=make_columns(["none"]),
                                          num_windows=2, output=tmp_path / "eval",
                                          echo=lines.append)
  assert not failures and {r["step"] for r in records} == {3}
  assert lines[0].startswith(f"WARNING: skipping checkpoint 6 of {workdir.resolve()}: ")
  assert f"[1/1] run (step 3, trained at 32)" in lines
  assert _steps(workdir) == [3, 6] and not (workdir / "corrupt_checkpoints").exists()


def test_eval_re_lists_when_training_deletes_the_step_it_reads(straight, tmp_path, monkeypatch):
  """A running training deletes old checkpoints (max_to_keep) and adds new ones: a step that
  vanishes mid-restore is not an error, the newest one left is used."""
  workdir = _copy(straight, tmp_path)
  real = checkpointing.RunCheckpoints._restore_step
  calls = []

  def restore_while_deleted(self, step, *args):
    calls.append(step)
    if len(calls) == 1:
      shutil.rmtree(self.directory / str(step))  # the writer removes it as we read it
      raise FileNotFoundError(self.directory / str(step) / "state")
    return real(self, step, *args)

  monkeypatch.setattr(checkpointing.RunCheckpoints, "_restore_step", restore_while_deleted)
  warnings = []
  run = load_run(workdir, warn=warnings.append)
  assert calls == [6, 3] and run.step == 3 and warnings == []


@pytest.mark.filterwarnings("ignore:Sharding info not provided:UserWarning")
def test_eval_restores_parameters_only_so_any_optimizer_evaluates(tmp_path, data_dir, monkeypatch):
  monkeypatch.setattr(training, "make_optimizer", lambda config: optax.sgd(1e-3, momentum=0.9))
  training.train_and_evaluate(tiny_config(data_dir=data_dir, num_train_steps=3), tmp_path)
  run = load_run(tmp_path)                  # builds no optimizer, restores no optimizer state
  saved = ocp.PyTreeCheckpointHandler().restore(epath.Path(tmp_path) / "checkpoints/3/state")
  assert run.step == 3
  jax.tree.map(np.testing.assert_array_equal, run.params, saved["params"])


def test_healthy_restore_logs_no_metadata_warning(straight, caplog):
  with caplog.at_level("WARNING"):
    assert load_run(straight).step == 6
  assert not [r for r in caplog.records if "Metadata file does not exist" in r.getMessage()]


def test_latest_checkpoint_without_manifest_after_kill_is_restored_then_listed(straight, tmp_path,
                                                                             data_dir, capsys):
  """kill -9 between Orbax finalizing step 6 and its manifest being written."""
  workdir = _copy(straight, tmp_path)
  (workdir / "checkpoints" / "6" / checksums.MANIFEST).unlink()
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert "Note: checkpoint 6 has no checksum manifest yet" in capsys.readouterr().out
  assert _steps(workdir) == [3, 6] and checksums.verify(workdir / "checkpoints" / "6")
  assert _losses(workdir) == _losses(straight)


def test_checkpoint_of_another_model_version_is_refused_not_set_aside(tmp_path, data_dir,
                                                                     monkeypatch):
  """Same config, but the code that saved it built other parameters (here: one more)."""
  real = training.init_state

  def init_state_of_another_version(model, tx, *args):
    state = real(model, tx, *args)
    params = {**state["params"], "gain_of_another_version": jnp.ones(2)}
    return {**state, "params": params, "opt_state": tx.init(params)}

  with monkeypatch.context() as patch:
    patch.setattr(training, "init_state", init_state_of_another_version)
    training.train_and_evaluate(tiny_config(data_dir=data_dir, num_train_steps=3), tmp_path)
  with pytest.raises(run_config.ConfigError, match=r"parameters in .*checkpoints/3 do not match "
                                                   r"the model this code builds.*Resume it with "
                                                   r"the version of keynorm-jax that trained it"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir, num_train_steps=3), tmp_path)
  assert _steps(tmp_path) == [3] and not (tmp_path / "corrupt_checkpoints").exists()


def test_all_checkpoints_corrupt_refuses_to_start_over(straight, tmp_path, data_dir):
  workdir = _copy(straight, tmp_path)
  for step in (3, 6):
    _flip_bytes(workdir / "checkpoints" / str(step))
  metrics = (workdir / "metrics.jsonl").read_text()
  with pytest.raises(checkpointing.CheckpointError,
                     match=r"None of the checkpoints .* could be restored .*moved to .*"
                           r"corrupt_checkpoints"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  with pytest.raises(checkpointing.CheckpointError,
                     match=r"no checkpoint that restores, and its corrupt ones are in .*"
                           r"corrupt_checkpoints: starting over would overwrite"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert (workdir / "metrics.jsonl").read_text() == metrics


# ---- metrics ----


def test_torn_metrics_line_and_tensorboard_after_a_kill(straight, tmp_path, data_dir, capsys):
  workdir = _copy(straight, tmp_path, drop_steps=[6])     # killed after step 6, before its save
  with (workdir / "metrics.jsonl").open("a") as f:
    f.write('{"step": 7, "loss": 2.3')                     # ...in the middle of a write
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert (f"WARNING: {workdir.resolve() / 'metrics.jsonl'}: dropped its torn last line"
          in capsys.readouterr().out)
  assert _losses(workdir) == _losses(straight)
  (_, first), (_, second) = _tensorboard_events(workdir)
  assert [step for step, purge, _ in second if purge] == [4]          # resumed after step 3
  assert {step for step, _, scalars in second if scalars} == {4, 5, 6}
  # As TensorBoard reads them (the marker hides the first file's steps >= 4): every step's
  # scalars once, as in the uninterrupted run.
  shown = [s for s, _, scalars in first if scalars and s < 4] + [
      s for s, _, scalars in second if scalars]
  ((_, reference),) = _tensorboard_events(straight)
  assert collections.Counter(shown) == collections.Counter(s for s, _, scalars in reference
                                                           if scalars)


def test_metrics_rewrite_is_atomic(tmp_path, monkeypatch):
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n"
                                                  for s in (1, 2, 3)))
  before = (tmp_path / "metrics.jsonl").read_text()

  def crash(*_):
    raise KeyboardInterrupt  # killed after writing the new file, before renaming it

  monkeypatch.setattr(os, "replace", crash)
  with pytest.raises(KeyboardInterrupt):
    MetricsWriter(tmp_path, resume_step=2)
  assert (tmp_path / "metrics.jsonl").read_text() == before


# ---- disks ----


def test_read_only_output_folder_and_workdir_are_refused_before_any_work(straight, tmp_path,
                                                                        monkeypatch, data_dir):
  """Read-only is injected as the EROFS a read-only mount gives (chmod does not stop root)."""
  real = disk._probe

  def read_only(folder):
    if "ro" in folder.parts:
      raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(folder))
    real(folder)

  monkeypatch.setattr(disk, "_probe", read_only)
  lines = []
  with pytest.raises(disk.DiskError, match=r"Cannot write to the eval output folder .*ro/out "
                                           r"\(Read-only file system\); pass a writable --output"):
    evaluate_workdir(straight, lengths=[32], columns=make_columns(["none"]), num_windows=2,
                     output=tmp_path / "ro" / "out", echo=lines.append)
  assert lines == []                                                  # nothing evaluated
  with pytest.raises(disk.DiskError, match=r"Cannot write to the workdir .*ro/run \(Read-only "
                                           r"file system\); choose a writable --workdir"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path / "ro" / "run")


def test_cli_unwritable_output_is_one_line(straight, tmp_path):
  """A path under a regular file: no user, root included, can create it."""
  (tmp_path / "file").write_text("")
  code, output = _cli("eval.py", f"--workdir={straight}", "--length=64",
                      f"--output={tmp_path / 'file' / 'out'}")
  assert code != 0 and "Traceback" not in output
  assert output.strip().splitlines()[-1] == (
      f"error: Cannot write to the eval output folder {tmp_path / 'file' / 'out'} (Not a "
      f"directory); pass a writable --output.")


def test_full_disk_during_a_save_keeps_the_previous_checkpoint(straight, tmp_path, data_dir,
                                                               monkeypatch):
  workdir = _copy(straight, tmp_path, drop_steps=[6])
  real = ocp.handlers.JsonCheckpointHandler._save_fn

  async def disk_full_at_6(self, item, directory):
    if directory.parent.name.startswith("6."):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))
    return await real(self, item, directory)

  monkeypatch.setattr(ocp.handlers.JsonCheckpointHandler, "_save_fn", disk_full_at_6)
  with pytest.raises(disk.DiskError, match=r"^The disk is full: saving checkpoint 6 to .* failed "
                                           r"\(No space left on device\); the previous checkpoint "
                                           r"\(step 3\) is intact\. Free some space"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert _steps(workdir) == [3] and checksums.verify(workdir / "checkpoints" / "3")
  monkeypatch.undo()
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)  # space freed: resume
  assert _losses(workdir) == _losses(straight)
  assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["3", "6"]  # no partial


def test_too_little_room_for_a_checkpoint_stops_before_writing(straight, tmp_path, data_dir,
                                                               monkeypatch):
  workdir = _copy(straight, tmp_path, drop_steps=[6])
  monkeypatch.setattr(checkpoint_writer.shutil, "disk_usage",
                      lambda path: types.SimpleNamespace(total=10**9, used=10**9, free=1000))
  with pytest.raises(disk.DiskError, match=r"0.00 MiB are free under .*, less than checkpoint 6 "
                                           r"needs .* the previous checkpoint \(step 3\) is intact"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["3"]


# ---- data and small ones ----


def test_offline_dataset_fails_fast_in_one_line(tmp_path, monkeypatch):
  """No network here is simulated by the probe answering "unreachable" (TFDS itself would retry
  for minutes before failing, in 160 lines)."""
  probed = []
  monkeypatch.setattr(corpora, "network_reachable", lambda hosts: probed.append(hosts) or False)

  def no_network(*args, **kwargs):
    raise ConnectionError("the test reached TFDS's real download")

  monkeypatch.setattr(tfds_downloader._Downloader, "_sync_download", no_network)
  data = run_config.load_config("kna_rope").data
  data.update(dataset="imdb_reviews", data_dir=str(tmp_path))
  started = time.perf_counter()
  with pytest.raises(corpora.DataError) as e:
    corpora.load_documents(data, "train")
  assert time.perf_counter() - started < 5
  assert probed == [[("ai.stanford.edu", 80), ("storage.googleapis.com", 443)]]  # its own URLs
  message = str(e.value)
  assert "\n" not in message
  assert message.startswith(f"TFDS dataset 'imdb_reviews' is not prepared in {tmp_path}")
  assert "cannot be reached (ai.stanford.edu:80, storage.googleapis.com:443)" in message
  assert "--config.data.data_dir=" in message


def test_network_probe_says_unreachable_quickly(monkeypatch):
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    closed_port = s.getsockname()[1]  # nothing listens once it is closed
  started = time.perf_counter()
  assert not corpora.network_reachable([("127.0.0.1", closed_port), ("no-such-host.invalid", 443)])
  assert time.perf_counter() - started < 5


def test_data_error_leaves_no_checkpoints_folder(tmp_path, data_dir):
  config = tiny_config(data_dir=data_dir)
  config.data.update(dataset="text_folder", text_folder=str(tmp_path / "missing"))
  with pytest.raises(corpora.DataError, match="does not exist"):
    training.train_and_evaluate(config, tmp_path / "run")
  assert not (tmp_path / "run" / "checkpoints").exists()


def test_config_file_errors_name_the_file_and_line(tmp_path):
  (tmp_path / "noget.py").write_text("x = 1\n")
  with pytest.raises(run_config.ConfigError, match=r"noget.py defines no get_config\(\)"):
    run_config.load_config(str(tmp_path / "noget.py"))
  (tmp_path / "bad.py").write_text("from configs import base\ndef get_config(:\n  return 1\n")
  code, output = _cli("train.py", f"--config={tmp_path / 'bad.py'}")
  assert code != 0 and "Traceback" not in output
  assert output.strip().splitlines()[-1] == (f"error: {tmp_path / 'bad.py'}:2: syntax error in "
                                             f"config file: invalid syntax.")


def test_eval_refuses_factor_zero_and_negative_batch_size(straight, tmp_path):
  code, output = _cli("eval.py", f"--workdir={straight}", "--factor=0", "--rope_scaling=linear")
  assert code != 0 and output.strip().splitlines()[-1] == (
      "error: --factor must be at least 1 (or left unset for the default, length / "
      "train_length), got 0.")
  with pytest.raises(ValueError, match="factor must be >= 1"):
    make_columns(["linear"], factor=0.0)
  with pytest.raises(ValueError, match=r"--batch_size must be at least 1 \(or 0 to size"):
    evaluate_workdir(straight, lengths=[32], columns=make_columns(["none"]), batch_size=-1,
                     output=tmp_path, echo=lambda _: None)
