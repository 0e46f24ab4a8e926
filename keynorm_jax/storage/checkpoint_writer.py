"""Saving a run's Orbax checkpoints (in the background) and listing each in a checksum manifest.

The manifest (checksums.py) is written once Orbax has renamed the finished step into place, at
the first `poll()` after that (called every training step), so a kill -9 can leave at most the
newest checkpoint unlisted; the restore then sets it aside as unverified and uses the one before.
A disk too full for another checkpoint stops the run before the save starts; a save that fails
anyway (a full disk included) is reported in one line, the previous checkpoint intact.
"""

import pathlib
import shutil

import jax
from jax.experimental import multihost_utils
import orbax.checkpoint as ocp

from keynorm_jax.storage import checksums, disk
from keynorm_jax.storage.checkpointing import CheckpointError, finished_steps, first_line

ITEMS = ("state", "data", "config", "history")


class CheckpointWriter:
  """Saves the checkpoints of the run whose checkpoints folder is `directory`."""

  def __init__(self, directory, *, max_to_keep: int):
    """Creates the checkpoints folder and removes saves that were cut off midway (killed, or
    a full disk), which Orbax never lists, to give their space back. Only the one process that
    holds the workdir's lock writes here, so none of them can be a save in progress."""
    self.directory = pathlib.Path(directory)
    self._pending = None      # a step whose save was started but not yet listed in a manifest
    self._saving = None       # the step whose save is in progress, if any
    if jax.process_index() == 0 and self.directory.is_dir():
      for partial in self.directory.glob("*.orbax-checkpoint-tmp*"):
        shutil.rmtree(partial, ignore_errors=True)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices("keynorm_jax partial checkpoints removed")
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                           enable_async_checkpointing=True)
    self._manager = ocp.CheckpointManager(self.directory, item_names=ITEMS, options=options)

  def save(self, step: int, state, data_state: dict, config_dict: dict, history: dict) -> None:
    """Starts saving `step` in the background (the previous save is finished first).

    A save is not started when the disk has less room than the last checkpoint took: the run
    stops with DiskError before a write fails midway.
    """
    self.wait()
    self._check_room(step)
    self._saving = step
    try:
      self._manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state),
          config=ocp.args.JsonSave(config_dict), history=ocp.args.JsonSave(history)))
    except Exception as e:  # pylint: disable=broad-except
      self._raise_save_error(e)
    self._pending = step

  def _check_room(self, step: int) -> None:
    steps = finished_steps(self.directory)
    if not steps:
      return
    needed = sum(p.stat().st_size for p in (self.directory / str(steps[-1])).rglob("*")
                 if p.is_file())
    free = shutil.disk_usage(self.directory).free
    if free < needed:
      raise disk.DiskError(
          f"The disk is full: {free / 2**20:.2f} MiB are free under {self.directory}, less than "
          f"checkpoint {step} needs (about {needed / 2**20:.2f} MiB), so it was not saved; the "
          f"previous checkpoint (step {steps[-1]}) is intact. Free some space (or lower "
          f"--config.max_checkpoints_to_keep) and run the same command again to resume.")

  def poll(self) -> None:
    """Lists a finished save in its checksum manifest (cheap to call after every step)."""
    step = self._pending
    if step is not None and (self.directory / str(step)).is_dir():
      self._pending = None
      if jax.process_index() == 0:
        try:
          checksums.write_manifest(self.directory / str(step))
        except OSError as e:
          full = "the disk is full" if disk.is_disk_full(e) else first_line(e)
          raise (disk.DiskError if disk.is_disk_full(e) else CheckpointError)(
              f"Checkpoint {step} in {self.directory} is complete, but its checksum manifest "
              f"could not be written ({full}), so it cannot be verified and a resume will set it "
              f"aside and use the one before. Free some space and run the same command again to "
              f"resume.") from None

  def wait(self) -> None:
    """Blocks until the save in progress is finished (and listed); raises if it failed."""
    if self._manager is None:
      return
    try:
      self._manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      self._raise_save_error(e)
    self._saving = None
    self.poll()

  def close(self, *, check: bool = True) -> None:
    """Finishes the save in progress (raising if it failed, unless check is False: the run is
    already ending with another error) and removes the checkpoints folder if it stayed empty."""
    if self._manager is None:
      return
    try:
      self.wait()
    except Exception:  # pylint: disable=broad-except
      if check:
        raise
    finally:
      try:
        self._manager.close()
      except Exception:  # pylint: disable=broad-except  # reported by wait(), or not asked for
        pass
      self._manager = None
      if jax.process_index() == 0 and self.directory.is_dir() and not any(
          self.directory.iterdir()):
        self.directory.rmdir()

  def _raise_save_error(self, error: Exception):
    step = self._saving if self._saving is not None else self._pending
    self._saving = self._pending = None
    kept = [s for s in finished_steps(self.directory) if s != step]
    previous = (f"the previous checkpoint (step {kept[-1]}) is intact" if kept else
                "no earlier checkpoint exists")
    if disk.is_disk_full(error):
      raise disk.DiskError(
          f"The disk is full: saving checkpoint {step} to {self.directory} failed (No space left "
          f"on device); {previous}. Free some space (or lower "
          f"--config.max_checkpoints_to_keep) and run the same command again to resume.") from None
    raise CheckpointError(f"Saving checkpoint {step} to {self.directory} failed "
                          f"({first_line(error)}); {previous}.") from error
