"""Training metrics: JSON lines in <workdir>/metrics.jsonl and TensorBoard events.

TensorBoard events are written with tensorboardX (clu's metric writers import TensorFlow, which this
project does not install). On resume, lines logged after the restored step are dropped first, so
the file reads as if the run had never stopped.
"""

import json
import pathlib

import tensorboardX


def read_metrics(workdir):
  """The logged objects of a run, in order."""
  path = pathlib.Path(workdir) / "metrics.jsonl"
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricsWriter:

  def __init__(self, workdir, *, resume_step: int = 0, enabled: bool = True):
    self.enabled = enabled
    if not enabled:
      return
    workdir = pathlib.Path(workdir)
    self.path = workdir / "metrics.jsonl"
    kept = [m for m in read_metrics(workdir) if m.get("step", 0) <= resume_step]
    self.path.write_text("".join(json.dumps(m) + "\n" for m in kept))
    self.tensorboard = tensorboardX.SummaryWriter(str(workdir / "tensorboard"))

  def write(self, step: int, scalars: dict) -> None:
    if not self.enabled:
      return
    record = {"step": int(step), **{k: float(v) for k, v in scalars.items()}}
    with self.path.open("a") as f:
      f.write(json.dumps(record) + "\n")
    for key, value in scalars.items():
      self.tensorboard.add_scalar(key, float(value), int(step))

  def close(self) -> None:
    if self.enabled:
      self.tensorboard.close()
