"""Restoring a run's Orbax checkpoints (train state, data iterator state, resolved config, config
history); checkpoint_writer.py saves them.

Every finished checkpoint gets a SHA-256 manifest (storage/checksums.py), checked before it is
restored. A checkpoint whose manifest is missing, empty or unreadable is unverified, and unusable
unless the reader is told to trust it (trust_unverified). A checkpoint that fails the check, cannot
be verified, fails to restore or holds non-finite values is unusable:
training moves it to <workdir>/corrupt_checkpoints/ (kept, not deleted) and falls back to the one
before; a read-only reader (the evaluator) skips it and moves nothing. An incomplete checkpoint
(a save cut off midway) is never listed: Orbax renames a step's folder into place only once it is
complete. A reader also tolerates a writer deleting old steps while it reads (they are re-listed).
"""

import dataclasses
import pathlib
import shutil
import time
from typing import Any, Callable

from etils import epath
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

from keynorm_jax.errors import ConfigError
from keynorm_jax.storage import checksums

_MAX_ATTEMPTS = 100  # steps tried by one restore_latest, however many a running writer adds


class CheckpointError(RuntimeError):
  """No usable checkpoint; the message says where it looked and what to do."""


class NonFiniteCheckpoint(ValueError):
  """A restored state holds NaN or infinite values."""


@dataclasses.dataclass(frozen=True)
class Restored:
  """What a checkpoint gave back. state: the train state, {"params": ...} for a params-only
  restore, or None when only the config was read. history: {"user_config": the config as the user
  set it, "changes": [allowed changes]}, or None for checkpoints of older versions."""
  step: int
  state: Any
  data_state: dict | None
  config_dict: dict
  history: dict | None


def finished_steps(directory) -> list[int]:
  """Finished steps, oldest first (Orbax names a step's folder only once it is complete)."""
  try:
    return sorted(int(p.name) for p in pathlib.Path(directory).iterdir()
                  if p.name.isdigit() and p.is_dir())
  except FileNotFoundError:
    return []


def first_line(error: BaseException) -> str:
  text = str(error).strip()
  return f"{type(error).__name__}: {text.splitlines()[0].rstrip('.') if text else ''}"


def _check_finite(state) -> None:
  for path, leaf in jax.tree_util.tree_leaves_with_path(state):
    if isinstance(leaf, jax.Array):  # each distinct part this process holds (a seed group's
      parts = {str(s.index): s.data for s in leaf.addressable_shards}.values()  # are split)
    else:
      parts = [leaf]
    for part in parts:
      value = np.asarray(part)
      if np.issubdtype(value.dtype, np.inexact) and not np.isfinite(value).all():
        raise NonFiniteCheckpoint(f"its state holds NaN or infinite values (first: "
                                  f"{jax.tree_util.keystr(path)})")


def state_restore_args(abstract_state) -> ocp.args.StandardRestore:
  """Restore args for the whole train state (shapes, dtypes and shardings of abstract_state)."""
  return ocp.args.StandardRestore(abstract_state)


def params_restore_args(abstract_params) -> ocp.args.PyTreeRestore:
  """Restore args for the "state" item that read its parameters only (the optimizer state is
  left on disk), so a run evaluates whatever optimizer it was trained with."""
  target = {"params": abstract_params}
  return ocp.args.PyTreeRestore(
      item=target, partial_restore=True,
      restore_args=jax.tree.map(lambda s: ocp.ArrayRestoreArgs(sharding=s.sharding), target))


def check_params_match(step_dir, expected_params, *, fix: str) -> None:
  """ConfigError naming the first differences between the parameters saved in a step (read
  from its metadata only) and the ones this code builds: another version's model, not a
  corrupt checkpoint. fix: what to do instead."""
  saved = ocp.PyTreeCheckpointHandler().metadata(epath.Path(step_dir) / "state").tree
  saved_shapes = {jax.tree_util.keystr(p): tuple(m.shape)
                  for p, m in jax.tree_util.tree_leaves_with_path(saved["params"])}
  expected_shapes = {jax.tree_util.keystr(p): tuple(s.shape)
                     for p, s in jax.tree_util.tree_leaves_with_path(expected_params)}
  if saved_shapes != expected_shapes:
    diff = sorted(set(saved_shapes.items()) ^ set(expected_shapes.items()))[:4]
    raise ConfigError(f"The parameters in {step_dir} do not match the model this code builds "
                      f"from its config (first differences: {diff}). {fix}")


class RunCheckpoints:
  """The checkpoints under <workdir>/checkpoints.

  read_only: never move or write anything (the evaluator); otherwise a checkpoint that does not
  restore is moved to <workdir>/corrupt_checkpoints/ (saving: checkpoint_writer.py).
  trust_unverified: restore a checkpoint whose checksum manifest is missing, empty or unreadable
    (with a note) instead of treating it as unusable.
  warn: where one-line warnings go (default: printed).
  """

  def __init__(self, workdir, *, read_only: bool = False, trust_unverified: bool = False,
               warn: Callable[[str], None] = None):
    self.workdir = pathlib.Path(workdir).resolve()
    self.directory = self.workdir / "checkpoints"
    self.read_only = read_only
    self.trust_unverified = trust_unverified
    self.warn = warn or (lambda message: print(message, flush=True))

  def steps(self) -> list[int]:
    return finished_steps(self.directory)

  @property
  def corrupt_directory(self) -> pathlib.Path:
    return self.workdir / "corrupt_checkpoints"

  def _restore_step(self, step: int, state_args, with_data: bool, verify: bool) -> Restored:
    step_dir = self.directory / str(step)
    if verify:
      self._verify(step_dir)
    has_history = (step_dir / "history").is_dir()
    checkpointer = ocp.Checkpointer(ocp.CompositeCheckpointHandler())
    try:
      items = {"config": ocp.args.JsonRestore()}
      if has_history:
        items["history"] = ocp.args.JsonRestore()
      found = checkpointer.restore(step_dir, args=ocp.args.Composite(**items))
      config_dict = found.config
      if not isinstance(config_dict, dict):
        raise ValueError("its config item is not a JSON object")
      history = found.history if has_history else None
      state = data_state = None
      if state_args is not None:
        items = {"state": state_args(config_dict, step_dir)}
        if with_data:
          items["data"] = ocp.args.JsonRestore()
        found = checkpointer.restore(step_dir, args=ocp.args.Composite(**items))
        state, data_state = found.state, (found.data if with_data else None)
        _check_finite(state)
    finally:
      checkpointer.close()
    return Restored(step, state, data_state, config_dict, history)

  def _verify(self, step_dir: pathlib.Path) -> None:
    try:
      checksums.verify(step_dir)
    except checksums.Unverified as e:
      if not self.trust_unverified:
        how = ("pass --trust_unverified_checkpoints to restore it" if self.read_only else
               f"move it back into {self.directory} and run again with "
               f"--trust_unverified_checkpoints")
        raise checksums.Unverified(step_dir, f"{e.problem}; if you know its bytes are sound, "
                                             f"{how}") from None
      self.warn(f"Note: {e}; restoring it unverified (--trust_unverified_checkpoints).")

  def restore_latest(self, state_args=None, *, with_data: bool = False, verify: bool = True):
    """The newest checkpoint that restores, as a `Restored`; None when there is none.

    state_args: None to read only the config (and history), else a function
      (config_dict, step_dir) -> Orbax restore args for the "state" item (it may raise
      ConfigError, which is passed on: a run of another config is not a corrupt checkpoint).
    verify: check the checksum manifest first.
    Raises CheckpointError when checkpoints exist but none restores.
    """
    tried, errors = set(), []
    for _ in range(_MAX_ATTEMPTS):
      candidates = [s for s in reversed(self.steps()) if s not in tried]
      if not candidates:
        break
      step = candidates[0]
      tried.add(step)
      try:
        restored = self._restore_step(step, state_args, with_data, verify)
      except ConfigError:
        raise
      except Exception as e:  # pylint: disable=broad-except  # any failure = unusable checkpoint
        if self._vanished(step):
          continue  # deleted by the run that writes it (it removes old checkpoints): re-list
        reason = (str(e) if isinstance(e, (checksums.ChecksumMismatch, checksums.Unverified))
                  else first_line(e))
        errors.append(f"step {step}: {reason}")
        self._set_aside(step, reason)
        continue
      return restored
    if errors:
      where = (f"; they were moved to {self.corrupt_directory}" if not self.read_only else "")
      fix = ("Retrain in a fresh --workdir, or delete that folder to start this run over"
             if not self.read_only else "Retrain it, or evaluate another run")
      raise CheckpointError(f"None of the checkpoints in {self.directory} could be restored "
                            f"({'; '.join(errors)}){where}. {fix}.")
    return None

  def _vanished(self, step: int) -> bool:
    """Whether `step` was removed (or superseded while being removed) during the attempt."""
    time.sleep(0.2)  # let a concurrent deletion finish before judging the folder
    return not (self.directory / str(step)).is_dir()

  def _set_aside(self, step: int, reason: str) -> None:
    if self.read_only:
      self.warn(f"WARNING: skipping checkpoint {step} of {self.workdir}: {reason}. Trying the "
                f"one before.")
      return
    target = self.corrupt_directory / f"{step}-{int(time.time())}"
    self.warn(f"WARNING: checkpoint {step} is unusable ({reason}); moved to {target}, falling "
              f"back to the previous one.")
    if jax.process_index() == 0:
      target.parent.mkdir(parents=True, exist_ok=True)
      shutil.move(str(self.directory / str(step)), str(target))
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices(f"keynorm_jax checkpoint {step} set aside")
