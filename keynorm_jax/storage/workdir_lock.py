"""One training process per workdir: an exclusive flock on <workdir>/train.lock.

The lock file holds the holder's pid and host, for the refusal message. The kernel releases a
flock when its process exits, however it exits (kill -9 included), so a lock is never stale: a
file left by a dead process is simply locked again. With several processes (multi-host), process i
locks train.lock (i = 0) or train.lock.<i>, and all of them refuse if any one could not lock.
"""

import contextlib
import datetime
import fcntl
import json
import os
import pathlib
import socket

import jax
from jax.experimental import multihost_utils
import numpy as np


class WorkdirBusyError(RuntimeError):
  """Another process trains in this workdir; the message names it."""


def _lock_path(workdir: pathlib.Path) -> pathlib.Path:
  index = jax.process_index()
  return workdir / ("train.lock" if index == 0 else f"train.lock.{index}")


def _holder(path: pathlib.Path) -> str:
  try:
    info = json.loads(path.read_text())
    return f"pid {info['pid']} on host {info['host']}, since {info['since']}"
  except (OSError, ValueError, KeyError):
    return "a process that has not written its pid yet"


@contextlib.contextmanager
def hold(workdir):
  """Holds the workdir's lock for the duration of the block; WorkdirBusyError if it is taken."""
  path = _lock_path(pathlib.Path(workdir))
  try:
    f = path.open("a+")
  except OSError as e:
    raise WorkdirBusyError(f"Cannot open the lock file {path} ({e.strerror or e}): it must be a "
                           f"writable file. Remove what is there (rm -r {path}) or pass another "
                           f"--workdir.") from None
  error = None
  try:
    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    error = (f"{workdir} is in use by another training process ({_holder(path)}; lock file "
             f"{path}). Wait for it to finish or stop it, or pass another --workdir.")
  if jax.process_count() > 1:  # every process refuses if any one could not lock
    failed = multihost_utils.process_allgather(np.array(error is not None))
    if error is None and failed.any():
      error = (f"{workdir} is in use by another training process (process "
               f"{int(np.argmax(failed))} of this job found its lock taken).")
  if error is not None:
    f.close()
    raise WorkdirBusyError(error)
  try:
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since":
                        datetime.datetime.now().isoformat(timespec="seconds")}))
    f.flush()
    yield path
  finally:
    f.truncate(0)
    f.close()  # releases the flock
