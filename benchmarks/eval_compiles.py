r"""XLA compilations and seconds of one run's evaluation: `python benchmarks/eval_compiles.py`.

Trains a tiny run in --workdir first if it holds no checkpoint (the field study's training of
--config at --scale, study/runner.study_config, in a process of its own, so that nothing it
compiled is counted), then evaluates it in this process as the study does
(study/runner.evaluated_record): the next-token sets at each multiple of the training length of
the scale's plan (plan.SCALES[--scale]["windows"]), "none" and the position method's
inference-time options (plan.inference_options) at plan.OPTION_MULTIPLES, "none" alone at the
others; with --retrieval, a run trained with the retrieval recipe and the retrieval plan; the
diagnostics at 8x. It counts XLA's backend compilations (jax.monitoring's backend-compile event, by
the name of what was compiled) and times each stage. Figures, not a test
(tests/test_eval_compiles.py holds the counts that must not grow back).

  --config=transformer_baseline_alibi   another config (default kna_rope, the GAU)
  --retrieval                           the study's retrieval recipe and plan besides
  --by_name                             also print every compiled name and its count
"""

import collections
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from absl import app, flags, logging
import jax
from jax import monitoring

_REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_REPO))

# pylint: disable=wrong-import-position
from keynorm_jax.evaluation.command import make_columns
from keynorm_jax.evaluation.diagnostics import run_diagnostics
from keynorm_jax.evaluation.evaluate import evaluate_run, held_out_tokens
from keynorm_jax.evaluation.retrieval import evaluate_retrieval
from keynorm_jax.runs import load_run
from keynorm_jax.study import plan, runner
from keynorm_jax.training.loop import train_and_evaluate

_CONFIG = flags.DEFINE_string("config", "kna_rope", "Config name of the run.")
_SCALE = flags.DEFINE_enum("scale", "tiny", list(plan.SCALES), "The study scale whose training "
                           "settings and evaluation plan are used.")
_RETRIEVAL = flags.DEFINE_bool("retrieval", False, "Train with the study's retrieval recipe and "
                                "evaluate its retrieval plan too.")
_WORKDIR = flags.DEFINE_string("workdir", None, "The run's folder (trained there if it has no "
                               "checkpoint); default a temporary folder, removed at the end.")
_TRAIN_ONLY = flags.DEFINE_bool("train_only", False, "Internal: train the run in --workdir, then "
                                "stop.")
_BY_NAME = flags.DEFINE_bool("by_name", False, "Print each compiled name with its count.")

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CompileCounter:
  """Counts XLA backend compilations (and their seconds) by the name of what was compiled."""

  def __init__(self):
    self.counts = collections.Counter()
    self.seconds = 0.0
    monitoring.register_event_duration_secs_listener(self._heard)

  def _heard(self, event, duration, **fields):
    if event == _COMPILE_EVENT:
      self.counts[fields.get("fun_name", "?")] += 1
      self.seconds += duration

  def total(self) -> int:
    return sum(self.counts.values())


def study_entry() -> plan.StudyRun:
  if _RETRIEVAL.value:
    return plan.retrieval_entry(_CONFIG.value)
  return plan.StudyRun(_CONFIG.value)


def train(workdir: pathlib.Path):
  """The study's training of the run, in a process of its own (this script with --train_only)."""
  command = [sys.executable, __file__, f"--config={_CONFIG.value}", f"--scale={_SCALE.value}",
             f"--retrieval={_RETRIEVAL.value}", f"--workdir={workdir}", "--train_only"]
  print("training:", " ".join(command[1:]), flush=True)
  subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def stages(run, tokens):
  """(name, callable) of each stage of the study's evaluation of `run` (runner.evaluated_record)."""
  train_length = run.config.train_length
  position = run.config.model.position
  columns = make_columns(["none", *plan.inference_options(position)])
  out = []
  for multiple, windows in plan.SCALES[_SCALE.value]["windows"].items():
    at_length = columns if multiple in plan.OPTION_MULTIPLES else columns[:1]
    out.append((f"next_token@{multiple}x ({len(at_length)} columns)",
                lambda m=multiple, w=windows, c=at_length: evaluate_run(
                    run, lengths=[m * train_length], columns=c, num_windows=w, tokens=tokens,
                    include_train_length=False,
                    repeat_period=train_length // plan.REPEAT_PERIOD_FRACTION)))
  if run.config.data.retrieval_fraction:
    retrieval_columns = make_columns(["none", *plan.retrieval_options(position)])
    for multiple in plan.RETRIEVAL_MULTIPLES:
      at_length = (retrieval_columns if multiple in plan.RETRIEVAL_OPTION_MULTIPLES
                   else retrieval_columns[:1])
      out.append((f"retrieval@{multiple}x ({len(at_length)} columns)",
                  lambda m=multiple, c=at_length: evaluate_retrieval(
                      run, tasks=plan.RETRIEVAL_TASKS, lengths=[m * train_length], columns=c,
                      num_prompts=plan.RETRIEVAL_PROMPTS[_SCALE.value], tokens=tokens,
                      include_train_length=False)))
  out.append(("diagnostics@8x", lambda: run_diagnostics(run, lengths=[8 * train_length],
                                                        tokens=tokens)))
  return out


def digest(found) -> str:
  """The mean loss (next-token) or answer-token accuracy (retrieval) of a stage's records: the same
  figure from two versions of the code says they computed the same results."""
  if not isinstance(found, list):
    return ""
  key = "loss" if "loss" in found[0] else "token_accuracy"
  return f"; mean {key} {sum(r[key] for r in found) / len(found):.9f} over {len(found)} records"


def measure(workdir: pathlib.Path):
  if not (workdir / "checkpoints").is_dir():
    train(workdir)
  counter = CompileCounter()
  started = time.perf_counter()
  run = load_run(workdir)
  tokens = held_out_tokens(run.config)
  loaded = counter.total()
  print(f"run: {run.name} ({run.config.model.architecture}, {run.config.model.position}, "
        f"trained at {run.config.train_length}); backend {jax.default_backend()}, "
        f"{os.cpu_count()} CPUs; loading: {loaded} compilations, "
        f"{time.perf_counter() - started:.1f} s")
  evaluation_started = time.perf_counter()
  for name, stage in stages(run, tokens):
    before, stage_started = counter.total(), time.perf_counter()
    found = stage()
    print(f"  {name}: {counter.total() - before} compilations, "
          f"{time.perf_counter() - stage_started:.1f} s{digest(found)}")
  seconds = time.perf_counter() - evaluation_started
  print(f"evaluation: {counter.total() - loaded} compilations ({counter.seconds:.1f} s compiling "
        f"in all), {seconds:.1f} s")
  if _BY_NAME.value:
    for name, count in counter.counts.most_common():
      print(f"  {count:4d}  {name}")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  if _TRAIN_ONLY.value:
    train_and_evaluate(runner.study_config(study_entry(), _SCALE.value), _WORKDIR.value)
  elif _WORKDIR.value:
    measure(pathlib.Path(_WORKDIR.value))
  else:
    with tempfile.TemporaryDirectory(prefix="eval_compiles_") as scratch:
      measure(pathlib.Path(scratch) / "run")


if __name__ == "__main__":
  app.run(main)
