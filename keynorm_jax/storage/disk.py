"""Disk faults: folders that cannot be written, and a disk that fills up mid-run.

Both are checked or recognised here so that the run ends with one line that names the folder and
what to do, before any work is lost.
"""

import contextlib
import errno
import os
import pathlib
import uuid

from keynorm_jax.errors import ConfigError


class DiskError(RuntimeError):
  """A folder cannot be written, or the disk under it is full; the message says what to do."""


def check_folder_flag(name: str, value, fix: str = "pass a folder, or leave it unset for its "
                                                   "default") -> None:
  """ConfigError for a folder flag --name given empty (`--name=`, which would mean "here") or as
  whitespace only (`--name " "`, a folder named by a space); None (not given) passes. fix: what
  to pass instead."""
  if value is None:
    return
  if str(value) == "":
    raise ConfigError(f"--{name} is empty; {fix}.")
  if not str(value).strip():
    raise ConfigError(f"--{name}={str(value)!r} is only whitespace (it would name a folder "
                      f"called {str(value)!r}); {fix}.")


def _probe(folder: pathlib.Path) -> None:
  """Creates and removes a small file in `folder` (raises OSError if it cannot)."""
  probe = folder / f".write-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
  try:
    with probe.open("wb") as f:
      f.write(b"ok")
      f.flush()
      os.fsync(f.fileno())  # a full disk may only say so here
  finally:
    try:
      probe.unlink()
    except FileNotFoundError:  # never made
      pass


def ensure_writable(folder, *, what: str, fix: str) -> pathlib.Path:
  """Creates `folder` if needed and checks a file can be written in it; DiskError otherwise.

  what: how the user knows the folder ("the workdir"); fix: what to do, e.g. "pass another
  --workdir". A real write is tried (not os.access), so read-only mounts, full disks and
  permissions are all caught, as are paths under a regular file.
  """
  folder = pathlib.Path(folder)
  if folder.exists() and not folder.is_dir():
    raise DiskError(f"Cannot write to {what} {folder}: it is a file, not a folder; {fix}.")
  try:
    folder.mkdir(parents=True, exist_ok=True)
    _probe(folder)
  except OSError as e:
    reason = e.strerror or type(e).__name__
    if is_disk_full(e):
      fix = f"free some space there, or {fix}"
    raise DiskError(f"Cannot write to {what} {folder} ({reason}); {fix}.") from None
  return folder


def is_disk_full(error: BaseException) -> bool:
  """Whether `error` (or an error it was raised from) is "no space left on device"."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
      return True
    if "No space left on device" in str(error) or "Disk quota exceeded" in str(error):
      return True
    error = error.__cause__ or error.__context__
  return False


def missing_folders(folder) -> list[pathlib.Path]:
  """`folder` and those of its parents that do not exist yet, deepest first (absolute): what
  ensure_writable would create, for remove_empty to take back after a refusal."""
  folder, missing = pathlib.Path(folder).absolute(), []
  while not folder.exists() and folder != folder.parent:
    missing.append(folder)
    folder = folder.parent
  return missing


def remove_empty(folders) -> None:
  """Removes each of `folders` (deepest first) that is an empty folder; leaves the rest."""
  for folder in folders:
    try:
      folder.rmdir()
    except OSError:  # not empty, gone, or not removable: left as it is
      pass


@contextlib.contextmanager
def removed_if_refused(*folders):
  """Within the block, the folders among `folders` (and their parents) that did not exist before
  it are removed again, if still empty, when it raises: a refused command leaves no folder."""
  made = [m for folder in folders if folder for m in missing_folders(folder)]
  try:
    yield
  except BaseException:
    remove_empty(sorted(set(made), key=lambda p: len(p.parts), reverse=True))
    raise
