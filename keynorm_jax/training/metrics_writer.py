"""Training metrics: JSON lines in <workdir>/metrics.jsonl and TensorBoard events.

Safe against a run being killed at any moment:
- metrics.jsonl is only appended to while a run goes (one flushed line per write). When a run
  starts or resumes, the lines up to the restored step are written to a new file that is then
  renamed over the old one (atomic), so the file reads as if the run had never stopped.
- A torn last line (a kill in the middle of a write) is dropped with a warning naming the file.
- TensorBoard events are written with tensorboardX (clu's metric writers import TensorFlow, which
  this project does not install). A resumed run's event file starts with a purge marker at the
  first step after the restored one: TensorBoard then hides what a killed run had logged past its
  checkpoint, so no step shows twice, and the new file holds only the steps after the restored one.
"""

import json
import os
import pathlib

import tensorboardX


def _print(message: str) -> None:
  print(message, flush=True)


def read_metrics(workdir, *, warn=_print):
  """The logged objects of a run, in order (unreadable lines dropped, with a warning)."""
  path = pathlib.Path(workdir) / "metrics.jsonl"
  if not path.exists():
    return []
  lines = path.read_text().splitlines()
  records = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      records.append(json.loads(line))
    except ValueError:
      what = "its torn last line" if number == len(lines) else f"unreadable line {number}"
      warn(f"WARNING: {path}: dropped {what} (a run stopped in the middle of writing it).")
  return records


class MetricsWriter:

  def __init__(self, workdir, *, resume_step: int = 0, enabled: bool = True, warn=_print):
    self.enabled = enabled
    if not enabled:
      return
    workdir = pathlib.Path(workdir)
    self.path = workdir / "metrics.jsonl"
    kept = [m for m in read_metrics(workdir, warn=warn) if m.get("step", 0) <= resume_step]
    partial = workdir / "metrics.jsonl.partial"
    with partial.open("w") as f:
      f.write("".join(json.dumps(m) + "\n" for m in kept))
      f.flush()
      os.fsync(f.fileno())
    os.replace(partial, self.path)
    self._file = self.path.open("a")
    logdir = workdir / "tensorboard"
    earlier = logdir.is_dir() and any(logdir.glob("events.out.tfevents.*"))
    self.tensorboard = tensorboardX.SummaryWriter(
        str(logdir), purge_step=resume_step + 1 if earlier else None)

  def write(self, step: int, scalars: dict) -> None:
    if not self.enabled:
      return
    record = {"step": int(step), **{k: float(v) for k, v in scalars.items()}}
    self._file.write(json.dumps(record) + "\n")
    self._file.flush()
    for key, value in scalars.items():
      self.tensorboard.add_scalar(key, float(value), int(step))

  def close(self, *, check: bool = True) -> None:
    """Closes both files; a failure (e.g. a full disk) is raised only if check is True (the run is
    not already ending with another error)."""
    if not self.enabled:
      return
    try:
      try:
        self._file.close()
      finally:
        self._close_tensorboard()
    except OSError:
      if check:
        raise

  def _close_tensorboard(self) -> None:
    try:
      self.tensorboard.close()
    except OSError:
      # Its final flush failed (a full disk): stop its writer thread and mark it closed, or its
      # exit hook tries again and prints tracebacks after the run's one-line error.
      for writer in self.tensorboard.all_writers.values():
        events = writer.event_writer
        events._closed = True  # pylint: disable=protected-access
        try:
          events._worker.stop()  # pylint: disable=protected-access
        except Exception:  # pylint: disable=broad-except
          pass
      raise
