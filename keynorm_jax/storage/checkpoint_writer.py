"""Saving a run's Orbax checkpoints (in the background) and listing each in a checksum manifest.

A step's folder appears under its final name only with its checksum manifest (checksums.py) in
it: Orbax writes the step into a temporary folder and renames it into place once complete; here
that rename goes through a staging name, so the manifest is written over the finished bytes
before the step becomes visible (`_ListedOnCommit`). A kill -9 at any moment therefore leaves
either a listed, verifiable step or a temporary folder that no reader lists (removed at the next
start). A disk too full for another checkpoint stops the run before the save starts; a save that
fails anyway (a full or read-only disk included) ends the run in one line, the previous
checkpoint intact, with no Orbax thread left waiting.
"""

import asyncio
import errno
import functools
import logging
import os
import pathlib
import shutil
import sys

import jax
from jax.experimental import multihost_utils
import orbax.checkpoint as ocp
from orbax.checkpoint._src.metadata import array_metadata_store
from orbax.checkpoint._src.path import atomicity

from keynorm_jax.storage import checksums, disk
from keynorm_jax.storage.checkpointing import CheckpointError, finished_steps, first_line

ITEMS = ("state", "data", "config", "history")
STAGING = ".orbax-checkpoint-tmp-listing"  # Orbax's temporary suffix, so it is never listed
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class _ListedOnCommit(atomicity.AtomicRenameTemporaryPath):
  """Orbax's atomic rename of a finished step, with the checksum manifest written in between:
  the temporary folder is renamed to `<step>.orbax-checkpoint-tmp-listing`, listed, then renamed
  to `<step>`. (Orbax's own finalize last updates the step's metadata file, so the manifest
  cannot be written before it.) Runs in Orbax's background thread, on the primary process."""

  async def finalize(self):
    final = self._final_path
    if not final.name.isdigit():  # an item's folder inside a step: Orbax's own
      return await super().finalize()
    staging = final.parent / f"{final.name}{STAGING}"
    self._final_path = staging
    try:
      await super().finalize()
    finally:
      self._final_path = final
    await asyncio.to_thread(checksums.write_manifest, staging)
    await asyncio.to_thread(os.rename, staging, final)


class CheckpointWriter:
  """Saves the checkpoints of the run whose checkpoints folder is `directory`."""

  def __init__(self, directory, *, max_to_keep: int):
    """Creates the checkpoints folder and removes saves that were cut off midway (killed, or
    a full disk), which Orbax never lists, to give their space back. Only the one process that
    holds the workdir's lock writes here, so none of them can be a save in progress."""
    self.directory = pathlib.Path(directory)
    self._saving = None       # the step whose save is in progress, if any
    if jax.process_index() == 0 and self.directory.is_dir():
      for partial in self.directory.glob("*.orbax-checkpoint-tmp*"):
        shutil.rmtree(partial, ignore_errors=True)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices("keynorm_jax partial checkpoints removed")
    # Folders are made before save() returns: made in the background, a folder that cannot be
    # made (a read-only disk) left Orbax's writer threads waiting for it for ever, and the
    # process with them at exit.
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=True, enable_async_checkpointing=True,
        async_options=ocp.AsyncOptions(create_directories_asynchronously=False),
        temporary_path_class=_ListedOnCommit)
    self._manager = ocp.CheckpointManager(self.directory, item_names=ITEMS, options=options)
    _ignore_abandoned_writes()  # (the writes of a failed save may end after the run's line)
    _whole_arrays_on_the_cpu()

  def save(self, step: int, state, data_state: dict, config_dict: dict, history: dict) -> None:
    """Starts saving `step` in the background (the previous save is finished first).

    A save is not started when the disk has less room than the last checkpoint took (for the
    first one, than the state's bytes): the run stops with DiskError before a write fails midway.
    """
    self.wait()
    self._check_room(step, state)
    self._saving = step
    try:
      self._manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state),
          config=ocp.args.JsonSave(config_dict), history=ocp.args.JsonSave(history)))
    except Exception as e:  # pylint: disable=broad-except
      self._raise_save_error(e)

  def _check_room(self, step: int, state) -> None:
    steps = finished_steps(self.directory)
    if steps:
      needed = sum(p.stat().st_size for p in (self.directory / str(steps[-1])).rglob("*")
                   if p.is_file())
    else:  # the arrays, and room for Orbax's metadata
      needed = sum(x.nbytes for x in jax.tree.leaves(state) if hasattr(x, "nbytes")) + 2**16
    free = shutil.disk_usage(self.directory).free
    if free < needed:
      raise disk.DiskError(
          f"The disk is full: {free / 2**20:.2f} MiB are free under {self.directory}, less than "
          f"checkpoint {step} needs (about {needed / 2**20:.2f} MiB), so it was not saved; "
          f"{self._previous(step)}. Free some space (or lower --config.max_checkpoints_to_keep) "
          f"and run the same command again to {self._again(step)}.")

  def _previous(self, step: int) -> str:
    kept = [s for s in finished_steps(self.directory) if s != step]
    return (f"the previous checkpoint (step {kept[-1]}) is intact" if kept else
            "no earlier checkpoint exists")

  def _again(self, step: int) -> str:
    """What running the same command again does."""
    return "resume" if [s for s in finished_steps(self.directory) if s != step] else "start over"

  def wait(self) -> None:
    """Blocks until the save in progress is finished (and listed); raises if it failed."""
    if self._manager is None:
      return
    try:
      self._manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      self._raise_save_error(e)
    self._saving = None

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
      if jax.process_index() == 0:
        try:  # (a read-only mount point cannot be removed, nor needs to be)
          if self.directory.is_dir() and not any(self.directory.iterdir()):
            self.directory.rmdir()
        except OSError:
          pass

  def _raise_save_error(self, error: Exception):
    step = self._saving
    self._saving = None
    if jax.process_index() == 0:  # give the space of the cut-off save back
      for partial in self.directory.glob(f"{step}.orbax-checkpoint-tmp*"):
        shutil.rmtree(partial, ignore_errors=True)
    previous, again = self._previous(step), self._again(step)
    if disk.is_disk_full(error):
      raise disk.DiskError(
          f"The disk is full: saving checkpoint {step} to {self.directory} failed (No space left "
          f"on device); {previous}. Free some space (or lower "
          f"--config.max_checkpoints_to_keep) and run the same command again to {again}.") from None
    unwritable = _unwritable(error)
    if unwritable is not None:
      raise disk.DiskError(
          f"Cannot write checkpoint {step} to {self.directory} ({unwritable.strerror}); "
          f"{previous}. Make {self.directory} writable (or pass another --workdir) and run the "
          f"same command again to {again}.") from None
    raise CheckpointError(f"Saving checkpoint {step} to {self.directory} failed "
                          f"({first_line(error)}); {previous}.") from error


def _unwritable(error: BaseException):
  """The OSError (read-only, permission denied) that `error` was raised from, or None."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in _UNWRITABLE:
      return error
    error = error.__cause__ or error.__context__
  return None


@functools.cache  # once a process: the backend does not change
def _whole_arrays_on_the_cpu() -> None:
  """On CPU devices, Orbax saves each replicated array whole from its first replica, as it does on
  GPUs. By default (outside GPUs) it cuts the array into one slice per replica, each written from
  its own device, which spreads the copies to host memory over a TPU's chips; the CPU's devices
  share that memory, so on 8 of them every array cost 8 slices, each a program compiled for its
  shape (40 compiles in a tiny run's first save). The values saved are the same."""
  if jax.default_backend() == "cpu":
    ocp.type_handlers.register_type_handler(jax.Array, ocp.type_handlers.ArrayHandler(
        array_metadata_store=array_metadata_store.Store(), use_replica_parallel=False),
        override=True)


def _ignore_abandoned_writes() -> None:
  """When a save fails (a full disk), the writes it abandoned may still end in TensorStore's
  threads and try to wake the event loop of the save, closed by then: Python printed a traceback
  for each ("Event loop is closed"; 2-38 of them), and asyncio a "Task exception was never
  retrieved", around the run's one line. Those are dropped; any other unraisable error is
  printed as before."""
  previous = sys.unraisablehook
  if getattr(previous, "keynorm_abandoned_writes", False):
    return

  def hook(unraisable):
    if not (isinstance(unraisable.exc_value, RuntimeError)
            and str(unraisable.exc_value) == "Event loop is closed"):
      previous(unraisable)

  hook.keynorm_abandoned_writes = True
  sys.unraisablehook = hook
  logging.getLogger("asyncio").addFilter(_NeverRetrieved())


class _NeverRetrieved(logging.Filter):
  """asyncio's "Task exception was never retrieved" for the abandoned writes' tasks."""

  def filter(self, record):
    return "exception was never retrieved" not in record.getMessage()
