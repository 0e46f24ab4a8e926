"""Where the evaluator's runs come from: a RunSource names each run and loads it when its turn
comes, so a run that fails to load is reported and does not stop the others. `workdir_source`:
our trained runs under a folder; huggingface/run.py's `folder_source`: a Hugging Face model folder.
"""

import dataclasses
import functools
import pathlib
from typing import Callable

from keynorm_jax.runs.loading import TrainedRun, find_runs, load_run


@dataclasses.dataclass(frozen=True)
class RunSource:
  runs: tuple[tuple[str, Callable[[], TrainedRun]], ...]  # (name, load), in order
  default_output: pathlib.Path  # where the results go unless the caller says otherwise
  at_train_length: bool = True  # also evaluated at each run's own training length


def workdir_source(workdir, *, warn=print, trust_unverified=False) -> RunSource:
  """The runs under `workdir` (find_runs: the run itself or its subfolders that hold checkpoints),
  each restored by load_run (`warn`: told about each checkpoint skipped; trust_unverified: see
  load_run); results default to <workdir>/eval. CheckpointError where there is no run."""
  workdir = pathlib.Path(workdir)
  runs = tuple((run_dir.name, functools.partial(load_run, run_dir, warn=warn,
                                                trust_unverified=trust_unverified))
               for run_dir in find_runs(workdir))
  return RunSource(runs, workdir / "eval")

