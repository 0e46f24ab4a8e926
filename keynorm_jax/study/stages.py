"""A study run's finished evaluation stages, kept in its workdir beside the checkpoints.

A study stopped during a run's evaluation (preempted, killed, out of time on a lent machine)
resumes after the last stage it finished instead of evaluating the run again from the start: the
evaluation is deterministic (the same windows and prompts for every model), so a stage's saved
results are the ones it would compute again. Saved stages count only for the same checkpoint step,
plan, code version and device (backend, device kind, jax version, matmul precision: a record names
one); the file is replaced atomically after each stage.
"""

import json
import pathlib
from typing import Callable

from keynorm_jax.storage.atomic import write_atomically
from keynorm_jax.training import preemption

FILE_NAME = "study_stages.json"


class Stages:
  """`run(name, compute)` returns the saved results of stage `name`, or computes and saves them."""

  def __init__(self, workdir, identity: dict, echo: Callable[[str], None] = print):
    self.path = pathlib.Path(workdir) / FILE_NAME
    self.identity = identity
    self.echo = echo
    self.done: dict[str, object] = {}
    self.resumed: list[str] = []
    if self.path.exists():
      self.done = self._read()

  def _read(self) -> dict:
    """The saved stages, or {} with one line saying why none are used."""
    try:
      saved = json.loads(self.path.read_text())
      identity, stages = saved["identity"], saved["stages"]
    except (OSError, ValueError, KeyError, TypeError) as e:
      self.echo(f"  {self.path} is unreadable ({type(e).__name__}); evaluating from the start")
      return {}
    if identity != self.identity:
      self.echo(f"  {self.path} was made for {identity}, not {self.identity}; evaluating from "
                "the start")
      return {}
    if not isinstance(stages, dict) or not all(isinstance(v, (list, dict))
                                               for v in stages.values()):
      self.echo(f"  {self.path} holds no stages' results; evaluating from the start")
      return {}
    return stages

  def run(self, name: str, compute: Callable[[], object]):
    preemption.check(f"before the evaluation stage {name} of {self.path.parent.name}: its "
                     f"training and the stages before it are saved in {self.path.parent}. Run "
                     f"the same command again to go on from that stage.")
    if name in self.done:
      self.resumed.append(name)
      self.echo(f"  {name}: read back from {self.path.name}")
      return self.done[name]
    result = compute()
    self.done[name] = result
    write_atomically(self.path, json.dumps({"identity": self.identity, "stages": self.done}))
    return result
