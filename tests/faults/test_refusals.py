"""Refused runs leave nothing behind; odd files in the workdir get one line, never a traceback."""

import errno
import os
import pathlib

import pytest

from keynorm_jax import run_config
from keynorm_jax.data.corpora import DataError
from keynorm_jax.errors import ConfigError
from keynorm_jax.storage import disk, workdir_lock
from keynorm_jax.training import loop as training
from keynorm_jax.training import metrics_writer
from train_helpers import copy_run, losses, tiny_config
from faults.helpers import cli


@pytest.mark.parametrize("change", [
    {"grad_clip_norm": -1.0},                                      # refused by the field table
    {"data.dataset": "text_folder", "data.text_folder": "/no/such/folder"},  # by the data loader
])
def test_a_refused_run_leaves_no_workdir_behind(tmp_path, data_dir, change):
  config = tiny_config(data_dir=data_dir)
  config.update_from_flattened_dict(change)
  with pytest.raises((ConfigError, ValueError)):
    training.train_and_evaluate(config, tmp_path / "new" / "run")
  assert not (tmp_path / "new" / "run").exists()


def test_too_many_eval_windows_are_refused_naming_the_config_field_leaving_nothing(
    tmp_path, data_dir):
  """It left train.lock behind (the windows were cut after the workdir was locked), and named
  eval.py's flags."""
  with pytest.raises(DataError, match=r"cannot supply 100000 windows of 32 tokens.* Lower "
                                      r"--config\.eval_windows \(now 100000\) or "
                                      r"--config\.train_length"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir, eval_windows=100000),
                                tmp_path / "new" / "run")
  assert not (tmp_path / "new").exists()


def test_a_refusal_after_the_workdir_is_made_removes_it_and_only_it(tmp_path, data_dir,
                                                                    monkeypatch):
  def refused(*_):
    raise ConfigError("refused")

  monkeypatch.setattr(training, "initial_state", refused)     # refused with the workdir locked
  with pytest.raises(ConfigError, match="^refused$"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path / "new" / "run")
  assert not (tmp_path / "new").exists()                      # no train.lock, no folder
  (tmp_path / "mine").mkdir()                                 # a folder the user made: kept
  with pytest.raises(ConfigError, match="^refused$"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path / "mine")
  assert (tmp_path / "mine").is_dir()


def test_cli_empty_workdir_is_refused_like_the_other_commands(tmp_path):
  """`--workdir=` trained into ./runs/<config name> with exit 0; eval, reproduce and study
  refused it."""
  code, output = cli("train.py", "--config=kna_rope", "--workdir=", cwd=tmp_path)
  assert code == 1 and "Traceback" not in output
  assert output.strip().splitlines()[-1] == ("error: --workdir is empty; pass a folder, or leave "
                                             "it unset for its default.")
  assert not list(tmp_path.iterdir())                          # no runs/kna_rope


def test_cli_whitespace_workdir_is_refused(tmp_path):
  """`--workdir " "` trained into a folder named by a space."""
  code, output = cli("train.py", "--config=kna_rope", "--workdir", " ", cwd=tmp_path)
  assert code == 1 and "Traceback" not in output
  assert output.strip().splitlines()[-1] == (
      "error: --workdir=' ' is only whitespace (it would name a folder called ' '); pass a "
      "folder, or leave it unset for its default.")
  assert not list(tmp_path.iterdir())


def test_a_full_disk_under_the_write_probe_leaves_no_probe_file(tmp_path, monkeypatch):
  """The probe's file is made, then its bytes do not fit: it was left behind, 0 bytes."""
  real_open = pathlib.Path.open

  class Full:
    def __init__(self, f):
      self.f = f
    def __enter__(self):
      return self
    def __exit__(self, *exc):
      self.f.close()
    def write(self, data):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  def open_full(self, *args, **kwargs):
    f = real_open(self, *args, **kwargs)
    return Full(f) if self.name.startswith(".write-probe-") else f

  monkeypatch.setattr(pathlib.Path, "open", open_full)
  with pytest.raises(disk.DiskError, match=r"^Cannot write to the eval output folder .*out \(No "
                                           r"space left on device\); free some space there, or "
                                           r"pass a writable --output\.$"):
    disk.ensure_writable(tmp_path / "out", what="the eval output folder",
                         fix="pass a writable --output")
  assert not list((tmp_path / "out").iterdir())


def test_a_refusal_in_an_existing_workdir_keeps_it(straight_run, tmp_path, data_dir):
  workdir = copy_run(straight_run, tmp_path)
  before = sorted(p.relative_to(workdir) for p in workdir.rglob("*"))
  config = tiny_config(data_dir=data_dir, seed=1)       # refused after the workdir is locked
  with pytest.raises(ConfigError, match="holds a run with a different config: seed"):
    training.train_and_evaluate(config, workdir)
  assert sorted(p.relative_to(workdir) for p in workdir.rglob("*")) == before


def test_lock_file_that_is_a_folder_is_one_line(tmp_path, data_dir):
  (tmp_path / "train.lock").mkdir()
  with pytest.raises(workdir_lock.WorkdirBusyError,
                     match=r"^Cannot open the lock file .*train.lock \(Is a directory\): it must "
                           r"be a writable file\. Remove what is there"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path)


def test_read_only_tensorboard_folder_is_one_line(tmp_path, data_dir, monkeypatch):
  """Read-only is injected as the EROFS a read-only mount gives (chmod does not stop root)."""
  real = metrics_writer.RecordWriter.__init__

  def read_only(self, path, *args):
    if "tensorboard" in path:
      raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
    real(self, path, *args)

  monkeypatch.setattr(metrics_writer.RecordWriter, "__init__", read_only)
  with pytest.raises(disk.DiskError, match=r"^Cannot write .*tensorboard/events.out.tfevents\S* "
                                           r"\(Read-only file "
                                           r"system\); no checkpoint was written yet\. Make "
                                           r"it writable"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path)


def test_non_utf8_metrics_line_is_dropped_with_a_warning(straight_run, tmp_path, data_dir, capsys):
  workdir = copy_run(straight_run, tmp_path, drop_steps=[6])
  lines = (workdir / "metrics.jsonl").read_bytes().splitlines(keepends=True)
  lines[1] = b'{"step": 2, "loss": \xff}\n'                       # a flipped byte in line 2
  (workdir / "metrics.jsonl").write_bytes(b"".join(lines))
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert (f"WARNING: {workdir.resolve() / 'metrics.jsonl'}: dropped unreadable line 2 (not a JSON "
          f"object)." in capsys.readouterr().out)
  assert losses(workdir) == [s for s in losses(straight_run) if s[0] != 2]


def test_config_file_whose_get_config_returns_a_dict_is_one_line(tmp_path):
  path = tmp_path / "mine.py"
  path.write_text("def get_config():\n  return {'name': 'x'}\n")
  with pytest.raises(ConfigError, match=r"mine.py: get_config\(\) returned a dict, not an "
                                        r"ml_collections.ConfigDict"):
    run_config.load_config(str(path))


def test_a_file_where_a_folder_is_wanted_is_named_as_such(tmp_path):
  (tmp_path / "afile").write_text("")
  with pytest.raises(disk.DiskError, match=r"^Cannot write to the workdir .*afile: it is a file, "
                                           r"not a folder; choose a writable --workdir\.$"):
    disk.ensure_writable(tmp_path / "afile", what="the workdir", fix="choose a writable --workdir")


@pytest.mark.parametrize("resumed", [False, True])
def test_a_read_only_checkpoint_folder_is_refused_before_the_first_step(straight_run, tmp_path,
                                                                       data_dir, monkeypatch,
                                                                       resumed):
  """It was found only at the first save, checkpoint_every_steps into the run (10 steps of work
  lost). Read-only is injected as the EROFS a read-only mount gives (chmod does not stop root);
  tests/faults/test_disks.py has the real read-only mount."""
  if resumed:
    workdir = copy_run(straight_run, tmp_path, drop_steps=[6])
  else:
    workdir = tmp_path / "run"
    (workdir / "checkpoints").mkdir(parents=True)
  before = losses(workdir)
  real = disk._probe  # pylint: disable=protected-access

  def probe(folder):
    if folder.name == "checkpoints":
      raise OSError(errno.EROFS, os.strerror(errno.EROFS))
    real(folder)

  monkeypatch.setattr(disk, "_probe", probe)
  steps = []
  monkeypatch.setattr(training, "make_train_step", lambda *a: steps.append(1))
  with pytest.raises(disk.DiskError, match=r"^Cannot write to the checkpoint folder "
                                           r".*checkpoints \(Read-only file system\); make it "
                                           r"writable \(or pass another --workdir\) and run the "
                                           r"same command again\.$"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert not steps and losses(workdir) == before          # not a step taken, nothing rewritten
