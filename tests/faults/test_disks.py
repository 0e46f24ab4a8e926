"""Read-only, unwritable and full disks: refused before work, or the previous checkpoint kept."""

import errno
import os
import types

import orbax.checkpoint as ocp
import pytest

from keynorm_jax.evaluation.command import EvalRequest, evaluate_runs, make_columns
from keynorm_jax.runs import workdir_source
from keynorm_jax.storage import checkpoint_writer, checksums, disk
from keynorm_jax.training import loop as training
from train_helpers import checkpoint_steps, copy_run, losses, tiny_config
from faults.helpers import cli


def test_read_only_output_folder_and_workdir_are_refused_before_any_work(straight_run, tmp_path,
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
    evaluate_runs(workdir_source(straight_run, warn=lines.append),
                  EvalRequest(lengths=[32], columns=make_columns(["none"]), num_windows=2),
                  output=tmp_path / "ro" / "out", echo=lines.append)
  assert lines == []                                                  # nothing evaluated
  with pytest.raises(disk.DiskError, match=r"Cannot write to the workdir .*ro/run \(Read-only "
                                           r"file system\); choose a writable --workdir"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path / "ro" / "run")


def test_cli_unwritable_output_is_one_line(straight_run, tmp_path):
  """A path under a regular file: no user, root included, can create it."""
  (tmp_path / "file").write_text("")
  code, output = cli("eval.py", f"--workdir={straight_run}", "--length=64",
                      f"--output={tmp_path / 'file' / 'out'}")
  assert code != 0 and "Traceback" not in output
  assert output.strip().splitlines()[-1] == (
      f"error: Cannot write to the eval output folder {tmp_path / 'file' / 'out'} (Not a "
      f"directory); pass a writable --output.")


def test_full_disk_during_a_save_keeps_the_previous_checkpoint(straight_run, tmp_path, data_dir,
                                                               monkeypatch):
  workdir = copy_run(straight_run, tmp_path, drop_steps=[6])
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
  assert checkpoint_steps(workdir) == [3]
  checksums.verify(workdir / "checkpoints" / "3")
  monkeypatch.undo()
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)  # space freed: resume
  assert losses(workdir) == losses(straight_run)
  assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["3", "6"]  # no partial


def test_too_little_room_for_a_checkpoint_stops_before_writing(straight_run, tmp_path, data_dir,
                                                               monkeypatch):
  workdir = copy_run(straight_run, tmp_path, drop_steps=[6])
  monkeypatch.setattr(checkpoint_writer.shutil, "disk_usage",
                      lambda path: types.SimpleNamespace(total=10**9, used=10**9, free=1000))
  with pytest.raises(disk.DiskError, match=r"0.00 MiB are free under .*, less than checkpoint 6 "
                                           r"needs .* the previous checkpoint \(step 3\) is intact"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["3"]
