"""Orbax checkpoints of a run: train state, the data iterator's state and the resolved config.

A latest checkpoint that is incomplete is ignored by Orbax (it never finalized); one that is
corrupt fails to restore, is moved to <workdir>/corrupt_checkpoints/ (kept, not deleted) with a
warning, and the one before it is used.
"""

import pathlib
import shutil
import time

from absl import logging
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
  """No usable checkpoint; the message says where it looked and what to do."""


class RunCheckpoints:
  """The checkpoints under <workdir>/checkpoints."""

  def __init__(self, workdir, *, max_to_keep: int = 3, create: bool = True):
    self.workdir = pathlib.Path(workdir).resolve()
    self.directory = self.workdir / "checkpoints"
    if not create and not self.directory.is_dir():
      raise CheckpointError(f"No checkpoints in {self.workdir}: train a model there first "
                            f"(python train.py --config=NAME --workdir={self.workdir}).")
    self._max_to_keep = max_to_keep
    self._open()

  def _open(self):
    options = ocp.CheckpointManagerOptions(max_to_keep=self._max_to_keep, create=True,
                                           enable_async_checkpointing=True)
    self.manager = ocp.CheckpointManager(self.directory, item_names=("state", "data", "config"),
                                         options=options)

  def steps(self):
    return sorted(self.manager.all_steps())

  def save(self, step: int, state, data_state: dict, config_dict: dict) -> None:
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state),
        config=ocp.args.JsonSave(config_dict)))

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()

  def _quarantine(self, step: int, error: Exception) -> None:
    target = self.workdir / "corrupt_checkpoints" / f"{step}-{int(time.time())}"
    logging.warning("Checkpoint %d in %s failed to restore (%s: %s); moved it to %s and trying "
                    "the one before.", step, self.directory, type(error).__name__,
                    str(error).splitlines()[0] if str(error) else "", target)
    print(f"WARNING: checkpoint {step} is corrupt ({type(error).__name__}); moved to {target}, "
          f"falling back to the previous one.", flush=True)
    self.manager.close()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(self.directory / str(step)), str(target))
    self._open()

  def restore_latest(self, abstract_state=None, *, read_only=False):
    """(step, state, data_state, config_dict) of the newest checkpoint that restores, or None.

    With abstract_state None only the config is read (state and data_state come back None).
    read_only: skip a checkpoint that fails (with a warning) instead of moving it aside.
    Raises CheckpointError when checkpoints exist but none restores.
    """
    tried, errors = self.steps(), []
    for step in reversed(tried):
      items = dict(config=ocp.args.JsonRestore())
      if abstract_state is not None:
        items.update(state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore())
      try:
        restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        config_dict = restored.config
        if not isinstance(config_dict, dict):
          raise ValueError("config item is not a JSON object")
      except Exception as e:  # pylint: disable=broad-except
        errors.append(f"step {step}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        if read_only:
          logging.warning("Checkpoint %d in %s failed to restore: %s", step, self.directory, e)
        else:
          self._quarantine(step, e)
        continue
      if abstract_state is None:
        return step, None, None, config_dict
      return step, restored.state, restored.data, config_dict
    if tried:
      where = "" if read_only else f" (moved to {self.workdir / 'corrupt_checkpoints'})"
      raise CheckpointError(f"None of the checkpoints {tried} in {self.directory} could be "
                            f"restored{where}: {'; '.join(errors)}. Retrain in a fresh workdir.")
    return None
