"""Trains one study run in a scratch folder, evaluates it by the plan, and writes its record."""

import pathlib
import shutil
import time

from keynorm_jax import run_config
from keynorm_jax.evaluation.command import make_columns
from keynorm_jax.evaluation.diagnostics import run_diagnostics
from keynorm_jax.evaluation.evaluate import evaluate_run, held_out_tokens
from keynorm_jax.evaluation.retrieval import evaluate_retrieval
from keynorm_jax.runs import load_run
from keynorm_jax.study import plan
from keynorm_jax.study.provenance import code_version, provenance
from keynorm_jax.study.records import RecordStore
from keynorm_jax.study.stages import Stages
from keynorm_jax.training.loop import train_and_evaluate
from keynorm_jax.training.metrics_writer import read_metrics
from keynorm_jax.training.non_finite import NonFiniteLossError


def study_config(entry: plan.StudyRun, scale: str, data_dir: str = "", num_seeds: int = 1):
  """The resolved config that trains `entry` (num_seeds > 1: the seed group of its seed and the
  num_seeds - 1 after it)."""
  config = run_config.load_config(entry.config)
  config.update(plan.SCALES[scale]["train"])
  config.seed = entry.seed
  if num_seeds > 1:
    config.num_seeds = num_seeds
  for name, value in entry.model:
    config.model[name] = value
  config.data.copy_fraction = entry.copy_fraction
  config.data.retrieval_fraction = entry.retrieval_fraction
  if entry.retrieval_fraction:
    config.update(plan.SCALES[scale].get("retrieval_train", {}))
    config.data.retrieval_tasks = ",".join(plan.RETRIEVAL_TASKS)
  config.data.data_dir = data_dir
  return run_config.resolve(config)


def record_plan_key(entry: plan.StudyRun, scale: str) -> str:
  """The plan key that `entry`'s record is made and found under (plan.plan_key for its position)."""
  position = run_config.load_config(entry.config).model.position
  return plan.plan_key(scale, retrieval=bool(entry.retrieval_fraction), position=position,
                       preregistered=entry.preregistered)


def retrieval_records(run, scale: str, tokens, progress, stages: Stages) -> list[dict]:
  """The retrieval plan: each task at every RETRIEVAL_MULTIPLES length with "none", and with the
  run's inference-time options at RETRIEVAL_OPTION_MULTIPLES; one stage per length."""
  train_length = run.config.train_length
  columns = make_columns(["none", *plan.retrieval_options(run.config.model.position)])
  out = []
  for multiple in plan.RETRIEVAL_MULTIPLES:
    at_length = columns if multiple in plan.RETRIEVAL_OPTION_MULTIPLES else columns[:1]
    out += stages.run(f"retrieval@{multiple}x", lambda: evaluate_retrieval(
        run, tasks=plan.RETRIEVAL_TASKS, lengths=[multiple * train_length], columns=at_length,
        num_prompts=plan.RETRIEVAL_PROMPTS[scale], tokens=tokens, progress=progress,
        include_train_length=False))
  return out


def secondary_records(run, tokens, progress, stages: Stages) -> list[dict]:
  """The pre-registered test's secondary endpoint: SECONDARY_TASKS at the training length with
  "none", SECONDARY_PROMPTS prompts per depth."""
  return stages.run("secondary@1x", lambda: evaluate_retrieval(
      run, tasks=plan.SECONDARY_TASKS, lengths=[run.config.train_length],
      columns=make_columns(["none"]), num_prompts=plan.SECONDARY_PROMPTS, tokens=tokens,
      progress=progress, include_train_length=False))


def step_seconds(metrics, tokens_per_step: int) -> float:
  """Seconds spent in training steps over the whole run, across stops and resumes: each logged
  interval's tokens over its tokens_per_second (the first interval after each start holds the
  compilation; evaluation is not counted)."""
  seconds, previous = 0.0, 0
  for row in metrics:
    if row.get("tokens_per_second"):
      seconds += (row["step"] - previous) * tokens_per_step / row["tokens_per_second"]
    previous = row["step"]
  return round(seconds, 1)


def run_one(entry: plan.StudyRun, *, scale: str, store: RecordStore, runs_dir, data_dir="",
            echo=print, keep_run=False) -> pathlib.Path:
  """Trains (or resumes) and evaluates `entry`, then saves its record; returns the record's path.
  The evaluation resumes too: stages finished before a stop are read back from the workdir."""
  config = study_config(entry, scale, data_dir)
  workdir = pathlib.Path(runs_dir) / entry.key
  started = time.time()
  try:
    train_and_evaluate(config, workdir)
  except NonFiniteLossError as e:
    if not entry.preregistered:
      raise
    # The pre-registered rule counts such a run, never reruns it: its record says what happened.
    path = store.save(entry.key, failed_record(entry, config=config, scale=scale, store=store,
                                               error=str(e), metrics=read_metrics(workdir)))
    echo(f"  {entry.key}: training went non-finite; recorded as failed ({e})")
    return path
  train_seconds = round(time.time() - started, 1)
  run = load_run(workdir, warn=echo)
  record = evaluated_record(entry, run, config=config, scale=scale, store=store,
                            stages_dir=workdir, metrics=read_metrics(workdir),
                            train_seconds=train_seconds, eval_started=started + train_seconds,
                            echo=echo)
  path = store.save(entry.key, record)
  if not keep_run:
    shutil.rmtree(workdir, ignore_errors=True)
  return path


def _train_summary(config, metrics: list[dict], train_seconds) -> dict:
  """seconds: this process (a run trained before a stop counts only its restore here);
  step_seconds: the training steps of the whole run, from its metrics log."""
  return {"steps": config.num_train_steps, "seconds": train_seconds,
          "step_seconds": step_seconds(metrics, config.batch_size * config.train_length),
          "final_loss": metrics[-1]["loss"] if metrics else None,
          "final_eval_accuracy": next((m["eval_accuracy"] for m in reversed(metrics)
                                       if "eval_accuracy" in m), None)}


def _record_head(entry: plan.StudyRun, *, config, scale: str, store: RecordStore) -> dict:
  return {"study": store.directory.name, "key": entry.key, "config_name": entry.config,
          "label": entry.label, "copy_fraction": entry.copy_fraction,
          "retrieval_fraction": entry.retrieval_fraction, "seed": entry.seed, "scale": scale,
          "plan_key": record_plan_key(entry, scale),
          "architecture": config.model.architecture}


def failed_record(entry: plan.StudyRun, *, config, scale: str, store: RecordStore, error: str,
                  metrics: list[dict]) -> dict:
  """The record of a pre-registered run whose training went non-finite: no evaluation, `failed`
  the error, its training metrics up to the last finite log."""
  return {**_record_head(entry, config=config, scale=scale, store=store),
          "failed": error, "checkpoint_step": None,
          "train": _train_summary(config, metrics, None),
          "config": config.to_dict(), "provenance": provenance(),
          "records": [], "retrieval": [], "secondary": [], "diagnostics": {}}


def evaluated_record(entry: plan.StudyRun, run, *, config, scale: str, store: RecordStore,
                     stages_dir, metrics: list[dict], train_seconds: float, eval_started: float,
                     echo=print) -> dict:
  """`entry`'s record: its trained model `run` (a runs.TrainedRun) evaluated by the plan, stage by
  stage (saved in, and read back from, `stages_dir`), with its config (study_config), training
  metrics (its rows of metrics.jsonl) and seconds spent training in this process."""
  tokens = held_out_tokens(run.config)
  train_length = config.train_length
  # From the model as evaluated (run.config), as the retrieval columns are.
  columns = make_columns(["none", *plan.inference_options(run.config.model.position)])
  progress = lambda what: echo(f"  evaluating {what}")
  plan_key = record_plan_key(entry, scale)
  made_on = {k: provenance()[k] for k in ("backend", "device", "jax", "matmul_precision")}
  stages = Stages(stages_dir, {"checkpoint_step": run.step, "plan_key": plan_key,
                               "code_version": code_version(), **made_on}, echo=echo)
  records = []
  for multiple, windows in plan.SCALES[scale]["windows"].items():
    at_length = columns if multiple in plan.OPTION_MULTIPLES else columns[:1]  # "none" only
    records += stages.run(f"next_token@{multiple}x", lambda: evaluate_run(
        run, lengths=[multiple * train_length], columns=at_length, num_windows=windows,
        tokens=tokens, progress=progress, include_train_length=False,
        repeat_period=train_length // plan.REPEAT_PERIOD_FRACTION))
  retrieval = (retrieval_records(run, scale, tokens, progress, stages)
               if entry.retrieval_fraction else [])
  secondary = secondary_records(run, tokens, progress, stages) if entry.preregistered else None
  diagnostics = stages.run("diagnostics", lambda: run_diagnostics(
      run, lengths=[8 * train_length], tokens=tokens))
  return {
      **_record_head(entry, config=config, scale=scale, store=store),
      "checkpoint_step": run.step,
      "train": _train_summary(config, metrics, train_seconds),
      "eval_seconds": round(time.time() - eval_started, 1),
      "resumed_stages": stages.resumed,  # evaluated before a stop: not in eval_seconds
      "config": config.to_dict(), "provenance": provenance(),
      "records": records, "retrieval": retrieval, "diagnostics": diagnostics,
      **({"secondary": secondary} if secondary is not None else {}),
  }
