"""`python eval.py`: evaluate every run under a folder and write the tables and plots."""

import dataclasses
import datetime
import functools
import json
import pathlib
import platform
import sys
import time
import traceback

import jax

from keynorm_jax.attention import KERNEL_NAMES
from keynorm_jax.data.retrieval import DEFAULT_DEPTHS
from keynorm_jax.data.retrieval import tasks as retrieval_tasks
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.diagnostics import run_diagnostics
from keynorm_jax.evaluation.evaluate import evaluate_run, held_out_tokens
from keynorm_jax.evaluation.report import markdown_table, write_results
from keynorm_jax.evaluation.retrieval import NEXT_TOKEN, check_depths, evaluate_retrieval
from keynorm_jax.evaluation.retrieval_report import retrieval_table
from keynorm_jax.evaluation.run_loading import TrainedRun, find_runs, load_run
from keynorm_jax.huggingface.run import hf_run
from keynorm_jax.positions import INFERENCE_METHODS, EvalColumn, inference_method
from keynorm_jax.storage import disk


def make_columns(names, *, posthoc_logn=False, **knobs):
  """EvalColumns for method names, each once (and also with post-hoc log n when asked); knobs left
  None take each method's default at the evaluated length. ConfigError names an unknown method, an
  empty list, or a knob out of its range (checked for every method that has it, asked or not)."""
  names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
  choices = ", ".join(INFERENCE_METHODS.names())
  if not names:
    raise ConfigError(f"--methods names no method; choose from {choices} (comma-separated).")
  unknown = [n for n in names if n not in INFERENCE_METHODS.names()]
  if unknown:
    raise ConfigError(f"Unknown --methods {', '.join(unknown)}; choose from {choices} "
                      f"(comma-separated).")
  methods = {name: _method(name, knobs) for name in INFERENCE_METHODS.names()}
  return [EvalColumn(methods[name], posthoc)
          for name in names for posthoc in ([False, True] if posthoc_logn else [False])]


def _method(name, knobs):
  """inference_method(name, **knobs); its knob checks' ValueError as a ConfigError naming the flag
  (each check's message starts with the knob's name, which is its flag's name in eval.py)."""
  try:
    return inference_method(name, **knobs)
  except ValueError as e:
    raise ConfigError(f"--{e}") from None


def check_eval_options(*, factor=None, batch_size=0, num_prompts=1, num_windows=1,
                       repeat_period=None, workdir="runs", output=None):
  """ConfigError for an option that cannot be meant: --factor, --batch_size, --num_prompts,
  --num_windows, --repeat_period, or an empty --workdir or --output."""
  if not str(workdir or ""):
    raise ConfigError("--workdir is empty; pass a run's folder or a folder of runs (default "
                      "runs).")
  if output is not None and not str(output):
    raise ConfigError("--output is empty; pass a folder for the results, or leave it unset for "
                      "<workdir>/eval.")
  if num_windows < 1:
    raise ConfigError(f"--num_windows must be at least 1 (windows per set), got {num_windows}.")
  if repeat_period is not None and repeat_period < 1:
    raise ConfigError(f"--repeat_period must be at least 1 (tokens), or left unset for the "
                      f"training length; got {repeat_period}.")
  if num_prompts < 1:
    raise ConfigError(f"--num_prompts must be at least 1 (prompts per task, length and depth), "
                      f"got {num_prompts}.")
  if factor is not None and not factor >= 1:
    raise ConfigError(f"--factor must be at least 1 (or left unset for the default, length / "
                      f"train_length), got {factor:g}.")
  if batch_size < 0:
    raise ConfigError(f"--batch_size must be at least 1 (or 0 to size batches to about 4 GiB), "
                      f"got {batch_size}.")


def check_tasks(names) -> list[str]:
  """--tasks: next_token and the retrieval tasks, each known and named once."""
  return retrieval_tasks.check_tasks(names, "--tasks", also=(NEXT_TOKEN,))


def with_kernel(run: TrainedRun, kernel: str) -> TrainedRun:
  """`run` with its model's attention kernel set to `kernel` (a name of attention.KERNEL_NAMES)."""
  if kernel not in KERNEL_NAMES:
    raise ConfigError(f"--kernel={kernel!r} is not one of {', '.join(KERNEL_NAMES)}.")
  config = run.config.copy_and_resolve_references()
  config.model.kernel = kernel
  return dataclasses.replace(run, config=config)


def _load_hf_folder(hf_checkpoint, **options) -> TrainedRun:
  """The TrainedRun of --hf_checkpoint's folder; ConfigError for an empty flag or a non-folder."""
  if not str(hf_checkpoint):
    raise ConfigError("--hf_checkpoint is empty; pass the folder of a Hugging Face model "
                      "(config.json, *.safetensors, tokenizer.json), or leave it unset.")
  folder = pathlib.Path(hf_checkpoint)
  if not folder.is_dir():
    raise ConfigError(f"--hf_checkpoint={hf_checkpoint} is not a folder: pass the folder of a "
                      "Hugging Face model (config.json, *.safetensors, tokenizer.json).")
  return hf_run(folder, **options)


def evaluate_workdir(workdir, *, lengths, columns, num_windows=16, batch_size=0, output=None,
                     diagnostics=False, echo=print, repeat_period=None, tasks=(NEXT_TOKEN,),
                     depths=DEFAULT_DEPTHS, num_prompts=4, trust_unverified=False, kernel=None,
                     hf_checkpoint=None, data_dir="", hf_dtype="auto"):
  """Evaluates every run found under `workdir`; returns (records, failures, paths), records being
  the next-token records followed by the retrieval records.

  tasks: next_token (the repeated / non-repeated sets) and retrieval tasks (passkey, mqar), each
    at `depths` with `num_prompts` prompts per depth.
  trust_unverified: also evaluate a checkpoint whose checksum manifest is missing, empty or
    unreadable (skipped otherwise, like a corrupt one).
  kernel: the attention kernel (attention.KERNEL_NAMES) to evaluate with instead of each run's own
    model.kernel (the same function: e.g. `cudnn` on a GPU for runs trained on a CPU).
  hf_checkpoint: instead of our runs, a local Hugging Face Llama-family folder (huggingface/), at
    `lengths` only (not its training length), on the held-out text in its own tokens (TFDS data
    in `data_dir`), in `hf_dtype` (huggingface.run.resolve_dtype); loaded and checked before any
    work (a folder that cannot be loaded is a ConfigError: nothing is written); its results go to
    `output`, default <workdir>/hf_<folder name>/eval (beside our runs' results).
  A run that fails to load or evaluate is reported in `failures` ({run: message}) and does not
  stop the others. The output folder is checked to be writable before any work; the tables are
  printed before the files are written, all or nothing (report.write_results: OutputError says
  what was and was not written).
  """
  # (--factor: checked in the columns, when they are made)
  check_eval_options(batch_size=batch_size, num_prompts=num_prompts, num_windows=num_windows,
                     repeat_period=repeat_period, workdir=workdir, output=output)
  tasks = check_tasks(tasks)
  depths = check_depths(depths)
  retrieval_names = [t for t in tasks if t != NEXT_TOKEN]
  workdir = pathlib.Path(workdir)
  if hf_checkpoint is not None:
    folder_run = _load_hf_folder(hf_checkpoint, data_dir=data_dir, dtype=hf_dtype)
    sources = [(folder_run.name, lambda: folder_run)]
    default_output = workdir / f"hf_{folder_run.name}" / "eval"
  else:
    sources = [(run_dir.name, functools.partial(load_run, run_dir, warn=echo,
                                                trust_unverified=trust_unverified))
               for run_dir in find_runs(workdir)]
    default_output = workdir / "eval"
  output = pathlib.Path(output) if output else default_output
  output_existed = output.is_dir()
  disk.ensure_writable(output, what="the eval output folder", fix="pass a writable --output")
  records, retrieval, failures, found_diagnostics = [], [], {}, {}
  tokens_by_data = {}
  started = time.perf_counter()
  for index, (name, load) in enumerate(sources, 1):
    try:
      run = load()
      if kernel is not None:
        run = with_kernel(run, kernel)
      key = json.dumps(run.config.data.to_dict(), sort_keys=True)
      if key not in tokens_by_data:
        tokens_by_data[key] = held_out_tokens(run.config)
      tokens = tokens_by_data[key]
      echo(f"[{index}/{len(sources)}] {run.name} (step {run.step}, trained at "
           f"{run.config.train_length})")
      progress = lambda what: echo(f"  evaluating {what}")
      if retrieval_names:  # first: it checks its lengths before any work
        retrieval += evaluate_retrieval(run, tasks=retrieval_names, lengths=lengths,
                                        columns=columns, num_prompts=num_prompts, depths=depths,
                                        batch_size=batch_size, tokens=tokens, progress=progress,
                                        include_train_length=not hf_checkpoint)
      if NEXT_TOKEN in tasks:
        records += evaluate_run(run, lengths=lengths, columns=columns, num_windows=num_windows,
                                batch_size=batch_size, tokens=tokens, repeat_period=repeat_period,
                                progress=progress, include_train_length=not hf_checkpoint)
      if diagnostics:
        found_diagnostics[run.name] = run_diagnostics(run, lengths=lengths, tokens=tokens)
    except Exception as e:  # pylint: disable=broad-except
      failures[name] = f"{type(e).__name__}: {e}"
      echo(f"  FAILED {name}: {type(e).__name__}: {e}")
      if not isinstance(e, (ValueError, RuntimeError)):
        traceback.print_exc(file=sys.stderr)
  if records:
    echo("\n" + markdown_table(records) + "\n")
  if retrieval:
    echo("\nRetrieval: exact match % (per-token %)\n" + retrieval_table(retrieval) + "\n")
  if failures:  # each reason was printed where it happened
    echo(f"Not evaluated: {', '.join(failures)} (the reasons are above).")
  paths = {}
  if records or retrieval:  # printed first: a disk that cannot take the files loses no result
    meta = {
        "command": " ".join(sys.argv), "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "jax": jax.__version__, "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()], "machine": platform.platform(),
        "python": platform.python_version(), "num_windows": num_windows,
        "tasks": tasks, "depths": list(depths), "num_prompts": num_prompts,
        "seconds": round(time.perf_counter() - started, 1), "failures": failures,
    }
    paths = write_results(records, output, meta=meta,
                          diagnostics=found_diagnostics if diagnostics else None,
                          retrieval=retrieval)
    echo("Wrote " + ", ".join(str(p) for p in paths.values()))
  elif not output_existed and not any(output.iterdir()):
    output.rmdir()  # created by the writability check, and nothing to put in it
  return records + retrieval, failures, paths
