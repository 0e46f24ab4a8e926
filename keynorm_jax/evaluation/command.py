"""`python eval.py`'s work: evaluate every run of a source (runs/source.py: our runs under a folder,
or a Hugging Face folder) on one request (EvalRequest) and write the tables and plots."""

import dataclasses
import datetime
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
from keynorm_jax.evaluation.outputs import MANIFEST
from keynorm_jax.evaluation.result_sets import check_set
from keynorm_jax.evaluation.evaluate import evaluate_run, evaluation_lengths, held_out_tokens
from keynorm_jax.evaluation.lengths import check_lengths, check_text_supplies
from keynorm_jax.evaluation.accuracy_tables import accuracy_caption, markdown_table, write_results
from keynorm_jax.evaluation.retrieval import NEXT_TOKEN, check_depths, evaluate_retrieval
from keynorm_jax.evaluation.retrieval_report import retrieval_caption, retrieval_table
from keynorm_jax.positions import INFERENCE_METHODS, EvalColumn, inference_method
from keynorm_jax.runs import RunSource, TrainedRun
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
  disk.check_folder_flag("workdir", workdir or "", "pass a run's folder or a folder of runs "
                         "(default runs)")
  disk.check_folder_flag("output", output, "pass a folder for the results, or leave it unset for "
                         "<workdir>/eval")
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


def check_kernel(kernel: str) -> None:
  """ConfigError for a name that is not one of attention.KERNEL_NAMES."""
  if kernel not in KERNEL_NAMES:
    raise ConfigError(f"--kernel={kernel!r} is not one of {', '.join(KERNEL_NAMES)}.")


def with_kernel(run: TrainedRun, kernel: str) -> TrainedRun:
  """`run` with its model's attention kernel set to `kernel` (a name of attention.KERNEL_NAMES)."""
  check_kernel(kernel)
  config = run.config.copy_and_resolve_references()
  config.model.kernel = kernel
  return dataclasses.replace(run, config=config)


@dataclasses.dataclass(frozen=True)
class EvalRequest:
  """What every run of a source is evaluated on, checked when made (ConfigError for an option that
  cannot be meant; tasks and depths as check_tasks and check_depths give them).

  lengths: the evaluation lengths (with each run's training length where the source says so).
  columns: the inference-time methods (make_columns). num_windows: windows per next-token set.
  batch_size: windows or prompts per batch (each member of a seed group scores them all, in one
    vmapped pass), 0 = sized to about 4 GiB (shared by a group's members).
  tasks: next_token (the repeated / non-repeated sets) and retrieval tasks (passkey, mqar), each
    at `depths` with `num_prompts` prompts per depth.
  repeat_period: the repeated set's period (None = each run's training length).
  kernel: the attention kernel (attention.KERNEL_NAMES) to evaluate with instead of each run's own
    model.kernel (the same function: e.g. `cudnn` on a GPU for runs trained on a CPU).
  diagnostics: also record key-norm spread and attention entropy per layer.
  """
  lengths: tuple[int, ...]
  columns: tuple[EvalColumn, ...]
  num_windows: int = 16
  batch_size: int = 0
  tasks: tuple[str, ...] = (NEXT_TOKEN,)
  depths: tuple[float, ...] = DEFAULT_DEPTHS
  num_prompts: int = 4
  repeat_period: int | None = None
  kernel: str | None = None
  diagnostics: bool = False

  def __post_init__(self):
    # (--factor: checked in the columns, when they are made)
    check_lengths(self.lengths)
    check_eval_options(batch_size=self.batch_size, num_prompts=self.num_prompts,
                       num_windows=self.num_windows, repeat_period=self.repeat_period)
    if self.kernel is not None:
      check_kernel(self.kernel)
    object.__setattr__(self, "lengths", tuple(self.lengths))
    object.__setattr__(self, "columns", tuple(self.columns))
    object.__setattr__(self, "tasks", tuple(check_tasks(self.tasks)))
    object.__setattr__(self, "depths", check_depths(self.depths))


def check_text(tokens, lengths, request: EvalRequest) -> None:
  """DataError where the held-out text `tokens` cannot supply one of `lengths` (a run's:
  evaluate.evaluation_lengths) for the request's tasks: before any scoring."""
  check_text_supplies(len(tokens), lengths,
                      num_windows=request.num_windows if NEXT_TOKEN in request.tasks else None,
                      prompts=any(t != NEXT_TOKEN for t in request.tasks))


class _Abort(BaseException):
  """Carries an error that ends the whole evaluation (a stop, a refusal of the asked lengths) past
  the handler that keeps a failed run from stopping the others."""

  def __init__(self, error: BaseException):
    super().__init__(str(error))
    self.error = error


def evaluate_runs(source: RunSource, request: EvalRequest, *, output=None, echo=print,
                  stop=None):
  """Evaluates every run of `source` (runs/source.py: our workdir's runs, or a Hugging Face
  folder's) on `request`; returns (records, failures, paths), records being the next-token records
  followed by the retrieval records: one per seed (a seed group's members, runs/loading.py, each
  give theirs; `seed` names it), the groups' means and standard deviations over seeds in the
  tables and files (accuracy_tables.py).

  output: the results folder, default the source's (<workdir>/eval for our runs).
  A run that fails to load or evaluate is reported in `failures` ({run: message}) and does not
  stop the others; lengths the held-out text cannot supply are that run's failure before any of
  its scoring, and the whole evaluation's refusal (raised) before any scoring at all. The output
  folder is checked to be writable before any work; the tables are printed before the files are
  written, all or nothing (accuracy_tables.write_results: OutputError says what was and was not written).
  stop: called at each safe point (before each run, each scoring, and the files, and after the
    files) with what was done, as the end of a sentence; it raises to stop the evaluation (eval.py:
    training.preemption.check), and what it raises is never taken for a run's failure. A stop
    leaves no file and no folder the evaluation made.
  """
  check_eval_options(output=output)
  output = pathlib.Path(output) if output else source.default_output
  made = disk.missing_folders(output)
  disk.ensure_writable(output, what="the eval output folder", fix="pass a writable --output")
  try:
    found = _evaluate_runs(source, request, output, echo, stop or (lambda _: None))
  except _Abort as abort:
    disk.remove_empty(made)  # nothing was written
    raise abort.error from None
  except BaseException:
    disk.remove_empty(made)
    raise
  if not found[2]:
    disk.remove_empty(made)  # made by the writability check, and nothing to put in it
  return found


_NOTHING = ("nothing was written (the results are written all at once, at the end). Run the same "
            "command again to evaluate.")


def _evaluate_runs(source, request, output, echo, stop):
  """evaluate_runs' work, once the output folder is made: _Abort ends it."""
  tasks, depths, lengths, columns = request.tasks, request.depths, request.lengths, request.columns
  retrieval_names = [t for t in tasks if t != NEXT_TOKEN]
  loaders = source.runs
  records, retrieval, failures, found_diagnostics = [], [], {}, {}
  tokens_by_data = {}
  started = time.perf_counter()

  def safe_point(what):
    try:
      stop(what)
    except BaseException as e:  # pylint: disable=broad-except
      raise _Abort(e) from None

  for index, (name, load) in enumerate(loaders, 1):
    safe_point(f"before evaluating {name} (run {index} of {len(loaders)}): {_NOTHING}")
    try:
      run = load()
      if request.kernel is not None:
        run = with_kernel(run, request.kernel)
      key = json.dumps(run.config.data.to_dict(), sort_keys=True)
      if key not in tokens_by_data:
        tokens_by_data[key] = held_out_tokens(run.config)
      tokens = tokens_by_data[key]
      try:
        check_text(tokens, evaluation_lengths(run, lengths, source.at_train_length), request)
      except ValueError as e:  # the asked lengths' fault: before any scoring, the command's
        if not (records or retrieval or found_diagnostics):
          raise _Abort(e) from None
        raise
      group = (f", a seed group of {len(run.seeds)}: seeds {', '.join(map(str, run.seeds))}"
               if run.seeds is not None else "")
      echo(f"[{index}/{len(loaders)}] {run.name} (step {run.step}, 1x = "
           f"{run.config.train_length} tokens: {run.one_x}{group})")

      def progress(what, name=name):
        safe_point(f"while evaluating {name} ({what}): {_NOTHING}")
        echo(f"  evaluating {what}")

      if retrieval_names:
        retrieval += evaluate_retrieval(run, tasks=retrieval_names, lengths=lengths,
                                        columns=columns, num_prompts=request.num_prompts,
                                        depths=depths, batch_size=request.batch_size,
                                        tokens=tokens, progress=progress,
                                        include_train_length=source.at_train_length)
      if NEXT_TOKEN in tasks:
        records += evaluate_run(run, lengths=lengths, columns=columns,
                                num_windows=request.num_windows, batch_size=request.batch_size,
                                tokens=tokens, repeat_period=request.repeat_period,
                                progress=progress, include_train_length=source.at_train_length)
      if request.diagnostics:  # a seed group's members one after the other, keyed by seed
        safe_point(f"before the diagnostics of {name}: {_NOTHING}")
        for i, seed in enumerate(run.member_seeds):
          label = run.name if run.seeds is None else f"{run.name} (seed {seed})"
          found_diagnostics[label] = run_diagnostics(run.member(i), lengths=lengths, tokens=tokens)
    except Exception as e:  # pylint: disable=broad-except
      failures[name] = f"{type(e).__name__}: {e}"
      echo(f"  FAILED {name}: {type(e).__name__}: {e}")
      if not isinstance(e, (ValueError, RuntimeError)):
        traceback.print_exc(file=sys.stderr)
  if records:
    echo("\n" + accuracy_caption(records))
    echo(markdown_table(records) + "\n")
  if retrieval:
    echo("\n" + retrieval_caption(retrieval))
    echo(retrieval_table(retrieval) + "\n")
  if failures:  # each reason was printed where it happened
    echo(f"Not evaluated: {', '.join(failures)} (the reasons are above).")
  paths = {}
  if records or retrieval:  # printed first: a disk that cannot take the files loses no result
    safe_point(f"before writing the results: {_NOTHING}")
    meta = {
        "command": " ".join(sys.argv), "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "jax": jax.__version__, "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()], "machine": platform.platform(),
        "python": platform.python_version(), "num_windows": request.num_windows,
        "tasks": list(tasks), "depths": list(depths), "num_prompts": request.num_prompts,
        "seconds": round(time.perf_counter() - started, 1), "failures": failures,
    }
    paths = write_results(records, output, meta=meta,
                          diagnostics=found_diagnostics if request.diagnostics else None,
                          retrieval=retrieval)
    check_set(output)  # what it says it wrote is one whole set (result_sets.py)
    echo("Wrote " + ", ".join(str(p) for p in paths.values()))
    safe_point(f"after the results were written in full to {output} (one set: "
               f"{output}/{MANIFEST}); nothing is left to do.")
  return records + retrieval, failures, paths
