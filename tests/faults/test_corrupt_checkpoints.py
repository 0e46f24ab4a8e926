"""Corrupt, incomplete and foreign checkpoints: detected, skipped or set aside, never lost."""

import shutil

from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from keynorm_jax import run_config
from keynorm_jax.evaluation.command import EvalRequest, evaluate_runs, make_columns
from keynorm_jax.runs import load_run, workdir_source
from keynorm_jax.storage import checkpointing, checksums
from keynorm_jax.training import loop as training
from train_helpers import checkpoint_steps, copy_run, losses, tiny_config
from faults.helpers import flip_bytes


def test_flipped_bytes_are_detected_skipped_by_eval_and_set_aside_by_training(
    straight_run, tmp_path, data_dir, capsys):
  workdir = copy_run(straight_run, tmp_path)
  flipped = flip_bytes(workdir / "checkpoints" / "6")
  warnings = []
  run = load_run(workdir, warn=warnings.append)
  assert run.step == 3
  assert warnings == [f"WARNING: skipping checkpoint 6 of {workdir.resolve()}: {flipped.resolve()} "
                      f"does not match its checksum (corrupt bytes). Trying the one before."]
  assert checkpoint_steps(workdir) == [3, 6]                                   # the evaluator moved nothing
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  out = capsys.readouterr().out
  assert f"checkpoint 6 is unusable ({flipped.resolve()} does not match its checksum" in out
  aside = list((workdir / "corrupt_checkpoints").iterdir())
  assert len(aside) == 1 and aside[0].name.startswith("6-")          # kept, not deleted
  assert losses(workdir) == losses(straight_run)
  checksums.verify(workdir / "checkpoints" / "6")                   # the new 6 is listed


@pytest.mark.parametrize("with_manifest", [True, False])
def test_eval_falls_back_past_a_checkpoint_without_metadata(straight_run, tmp_path, with_manifest):
  """The issue's reproduction (and the same for a checkpoint of an older version, which has no
  checksum manifest)."""
  workdir = copy_run(straight_run, tmp_path)
  step_dir = workdir / "checkpoints" / "6"
  for name in ("_CHECKPOINT_METADATA", "state/_METADATA", "state/array_metadatas"):
    path = step_dir / name
    shutil.rmtree(path) if path.is_dir() else path.unlink()
  if not with_manifest:
    (step_dir / checksums.MANIFEST).unlink()
  lines = []
  records, failures, _ = evaluate_runs(
      workdir_source(workdir, warn=lines.append),
      EvalRequest(lengths=[32], columns=make_columns(["none"]), num_windows=2),
      output=tmp_path / "eval", echo=lines.append)
  assert not failures and {r["step"] for r in records} == {3}
  assert lines[0].startswith(f"WARNING: skipping checkpoint 6 of {workdir.resolve()}: ")
  assert "[1/1] run (step 3, 1x = 32 tokens: the training length)" in lines
  assert checkpoint_steps(workdir) == [3, 6] and not (workdir / "corrupt_checkpoints").exists()


def test_eval_re_lists_when_training_deletes_the_step_it_reads(straight_run, tmp_path, monkeypatch):
  """A running training deletes old checkpoints (max_to_keep) and adds new ones: a step that
  vanishes mid-restore is not an error, the newest one left is used."""
  workdir = copy_run(straight_run, tmp_path)
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


def test_healthy_restore_logs_no_metadata_warning(straight_run, caplog):
  with caplog.at_level("WARNING"):
    assert load_run(straight_run).step == 6
  assert not [r for r in caplog.records if "Metadata file does not exist" in r.getMessage()]


@pytest.mark.parametrize("manifest", ["deleted", "emptied", "unreadable"])
def test_checkpoint_without_a_usable_manifest_is_not_trusted(straight_run, tmp_path, data_dir,
                                                             capsys, manifest):
  """The issue's reproduction: step 6's manifest deleted (also what a kill -9 between Orbax
  finalizing a step and listing it leaves), emptied or unreadable, and its data bytes flipped.
  Eval skips it, training sets it aside and resumes exactly from step 3, no manifest is written
  over its bytes; --trust_unverified_checkpoints restores it."""
  workdir = copy_run(straight_run, tmp_path)
  step_dir = workdir / "checkpoints" / "6"
  listing = step_dir / checksums.MANIFEST
  {"deleted": listing.unlink, "emptied": lambda: listing.write_text(""),
   "unreadable": lambda: listing.write_bytes(b"\xff\xfe")}[manifest]()
  flip_bytes(step_dir)
  warnings = []
  assert load_run(workdir, warn=warnings.append).step == 3
  problem = {"deleted": "it has no checksum manifest", "emptied": "its checksum manifest is empty",
             "unreadable": "its checksum manifest is unreadable"}[manifest]
  assert warnings[0].startswith(f"WARNING: skipping checkpoint 6 of {workdir.resolve()}: "
                                f"{step_dir.resolve()} cannot be verified: {problem}")
  assert warnings[0].endswith("pass --trust_unverified_checkpoints to restore it. Trying the one "
                              "before.")
  trusted = checkpointing.RunCheckpoints(workdir, read_only=True, trust_unverified=True,
                                         warn=warnings.append).restore_latest()
  assert trusted.step == 6 and "restoring it unverified" in warnings[-1]
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  out = capsys.readouterr().out
  assert f"checkpoint 6 is unusable ({step_dir.resolve()} cannot be verified: {problem}" in out
  assert (f"move it back into {(workdir / 'checkpoints').resolve()} and run again with "
          f"--trust_unverified_checkpoints") in out
  (aside,) = (workdir / "corrupt_checkpoints").iterdir()
  assert aside.name.startswith("6-")
  kept = aside / checksums.MANIFEST                                  # not rewritten over its bytes
  assert (kept.read_bytes() if kept.exists() else None) == {
      "deleted": None, "emptied": b"", "unreadable": b"\xff\xfe"}[manifest]
  assert losses(workdir) == losses(straight_run)
  checksums.verify(workdir / "checkpoints" / "6")                   # the new 6 is listed
  shutil.rmtree(step_dir)             # the advice, followed for a sound step 6 without manifest
  shutil.copytree(straight_run / "checkpoints" / "6", step_dir)
  (step_dir / checksums.MANIFEST).unlink()
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir, trust_unverified=True)
  assert "restoring it unverified (--trust_unverified_checkpoints)" in capsys.readouterr().out
  assert checkpoint_steps(workdir) == [3, 6] and len(list(aside.parent.iterdir())) == 1
  assert not (step_dir / checksums.MANIFEST).exists()                # still not listed


def test_a_file_left_out_of_the_manifest_is_a_mismatch(straight_run, tmp_path):
  workdir = copy_run(straight_run, tmp_path)
  listing = workdir / "checkpoints" / "6" / checksums.MANIFEST
  lines = listing.read_text().splitlines()
  listing.write_text("\n".join(lines[1:]) + "\n")
  with pytest.raises(checksums.ChecksumMismatch, match="is not listed in its checksum manifest"):
    checksums.verify(listing.parent)


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
  assert checkpoint_steps(tmp_path) == [3] and not (tmp_path / "corrupt_checkpoints").exists()


def test_all_checkpoints_corrupt_refuses_to_start_over(straight_run, tmp_path, data_dir):
  workdir = copy_run(straight_run, tmp_path)
  for step in (3, 6):
    flip_bytes(workdir / "checkpoints" / str(step))
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
