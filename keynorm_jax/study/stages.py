"""A study run's finished evaluation stages, kept in its workdir beside the checkpoints.

A study stopped during a run's evaluation (preempted, killed, out of time on a lent machine)
resumes after the last stage it finished instead of evaluating the run again from the start: the
evaluation is deterministic (the same windows and prompts for every model), so a stage's saved
results are the ones it would compute again. Saved stages count only for the same checkpoint step,
plan and code version; the file is replaced atomically after each stage.
"""

import json
import pathlib
from typing import Callable

from keynorm_jax.storage.atomic import write_atomically

FILE_NAME = "study_stages.json"


class Stages:
  """`run(name, compute)` returns the saved results of stage `name`, or computes and saves them."""

  def __init__(self, workdir, identity: dict, echo: Callable[[str], None] = print):
    self.path = pathlib.Path(workdir) / FILE_NAME
    self.identity = identity
    self.done: dict[str, object] = {}
    self.resumed: list[str] = []
    if not self.path.exists():
      return
    try:
      saved = json.loads(self.path.read_text())
      stages = saved["stages"] if saved.get("identity") == identity else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
      echo(f"  {self.path} is unreadable ({type(e).__name__}); evaluating from the start")
      return
    if not isinstance(stages, dict):
      echo(f"  {self.path} holds no stages; evaluating from the start")
      return
    self.done = stages

  def run(self, name: str, compute: Callable[[], object]):
    if name in self.done:
      self.resumed.append(name)
      return self.done[name]
    result = compute()
    self.done[name] = result
    write_atomically(self.path, json.dumps({"identity": self.identity, "stages": self.done}))
    return result
