"""Training metrics: JSON lines in <workdir>/metrics.jsonl and TensorBoard events.

Safe against a run being killed at any moment:
- metrics.jsonl is only appended to while a run goes (one flushed line per write). When a run
  starts or resumes, the lines up to the restored step are written to a new file that is then
  renamed over the old one (atomic), so the file reads as if the run had never stopped.
- A torn last line (a kill in the middle of a write) is dropped with a warning naming the file.
- TensorBoard events are written with tensorboardX's event-file writer (clu's metric writers import
  TensorFlow, which this project does not install), in the calling thread: tensorboardX's
  SummaryWriter writes from a thread of its own, and when that thread died of a full disk the run
  waited on its queue for good. Here a failed write raises at once, in the training loop. A
  resumed run's event file starts with a purge marker at the first step after the restored one:
  TensorBoard then hides what a killed run had logged past its checkpoint, so no step shows twice,
  and the new file holds only the steps after the restored one.
- A seed group (training/seed_group.py) writes one metrics.jsonl row per member per logged step,
  with its `seed`, and each member's TensorBoard scalars in tensorboard/seed_<seed>/.
"""

import contextlib
import json
import pathlib
import socket
import sys
import time

from keynorm_jax.storage.atomic import write_atomically


@contextlib.contextmanager
def _torch_hidden():
  """Imports in this block see no PyTorch, unless it is already loaded.

  tensorboardX's package imports torch wherever it is installed (to accept torch tensors, which
  this module never passes): 1.6-1.8 s of every training process on the project's CPU. A None in
  `sys.modules` makes `import torch` raise ImportError (Python's import system), which
  tensorboardX catches; the entry is removed afterwards, so a later `import torch` works.
  """
  hide = "torch" not in sys.modules
  if hide:
    sys.modules["torch"] = None
  try:
    yield
  finally:
    if hide and sys.modules.get("torch", 0) is None:
      del sys.modules["torch"]


with _torch_hidden():
  from tensorboardX.record_writer import RecordWriter  # pylint: disable=g-import-not-at-top
  from tensorboardX.proto.event_pb2 import Event, SessionLog  # pylint: disable=g-import-not-at-top
  from tensorboardX.summary import scalar  # pylint: disable=g-import-not-at-top


def _print(message: str) -> None:
  print(message, flush=True)


def read_metrics(workdir, *, warn=_print):
  """The logged objects of a run, in order (unreadable lines dropped, with a warning)."""
  path = pathlib.Path(workdir) / "metrics.jsonl"
  if not path.exists():
    return []
  lines = path.read_bytes().splitlines()
  records = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      records.append(json.loads(line.decode("utf-8")))
    except ValueError:  # not JSON, or not UTF-8 text (UnicodeDecodeError)
      what = ("its torn last line (a run stopped in the middle of writing it)"
              if number == len(lines) else f"unreadable line {number} (not a JSON object)")
      warn(f"WARNING: {path}: dropped {what}.")
  return records


class TensorBoardEvents:
  """Scalars in a TensorBoard event file, written and flushed in the calling thread."""

  def __init__(self, logdir: pathlib.Path, *, purge_step: int | None = None):
    logdir.mkdir(parents=True, exist_ok=True)
    name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
    self._file = RecordWriter(str(logdir / name))
    self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
    if purge_step is not None:  # what TensorBoard reads as "forget the steps from here on"
      self._write(Event(step=purge_step, file_version="brain.Event:2"))
      self._write(Event(step=purge_step, session_log=SessionLog(status=SessionLog.START)))
    self._file.flush()

  def _write(self, event: Event) -> None:
    self._file.write(event.SerializeToString())

  def write(self, step: int, scalars: dict) -> None:
    now = time.time()
    for key, value in scalars.items():
      self._write(Event(wall_time=now, step=step, summary=scalar(key, value)))
    self._file.flush()

  def close(self) -> None:
    try:
      self._file.flush()
    finally:
      self._file.close()  # even when the flush failed (a full disk): no open file is left


class MetricsWriter:
  """seeds: a seed group's member seeds (None: a single run); write() then takes the seed."""

  def __init__(self, workdir, *, resume_step: int = 0, enabled: bool = True, warn=_print,
               seeds=None):
    self.enabled = enabled
    if not enabled:
      return
    workdir = pathlib.Path(workdir)
    self.path = workdir / "metrics.jsonl"
    kept = [m for m in read_metrics(workdir, warn=warn) if m.get("step", 0) <= resume_step]
    write_atomically(self.path, "".join(json.dumps(m) + "\n" for m in kept))
    logdirs = {None: workdir / "tensorboard"} if seeds is None else {
        seed: workdir / "tensorboard" / f"seed_{seed}" for seed in seeds}
    self._file = self.path.open("a")
    self._boards = {}
    try:
      for seed, logdir in logdirs.items():
        earlier = logdir.is_dir() and any(logdir.glob("events.out.tfevents.*"))
        self._boards[seed] = TensorBoardEvents(
            logdir, purge_step=resume_step + 1 if earlier else None)
    except BaseException:
      self.close(check=False)
      raise
    self.tensorboard = self._boards.get(None)

  def write(self, step: int, scalars: dict, seed: int | None = None) -> None:
    """One row: the step (and, in a seed group, the member's seed) and the scalars."""
    if not self.enabled:
      return
    values = {k: float(v) for k, v in scalars.items()}
    row = {"step": int(step), **({} if seed is None else {"seed": int(seed)}), **values}
    self._file.write(json.dumps(row) + "\n")
    self._file.flush()
    self._boards[seed].write(int(step), values)

  def close(self, *, check: bool = True) -> None:
    """Closes every file (metrics.jsonl, then the event files); the first failure (e.g. a full
    disk) is raised only if check is True (the run is not already ending with another error)."""
    if not self.enabled:
      return
    failures = []
    for close in (self._file.close, *(board.close for board in self._boards.values())):
      try:
        close()
      except OSError as e:
        failures.append(e)
    if failures and check:
      raise failures[0]
