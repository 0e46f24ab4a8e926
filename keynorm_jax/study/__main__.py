r"""The field study, run by run: `python -m keynorm_jax.study --scale=cpu`.

Trains and evaluates every run of keynorm_jax/study/plan.py that has no record yet under
results/field/ (skips the rest), writing each record as soon as its run is done, then rebuilds
results/field/FIELD.md, its run log (NOTES.md), the figures and the generated tables of RESULTS.md
(between their markers). Stop it any time; the next invocation continues. --runs limits it to some
run keys (e.g. kna_alibi__seed0); --max_runs to a number of new runs; --shard=i/n to every n-th run
from the i-th, so that n processes share one accelerator (README: "The field study");
--plan=preregistered to the pre-registered pairs instead of the field plan; --group_seeds trains the
runs that differ only by seed as seed groups, still one record per seed (study/groups.py);
--dtype=bfloat16 trains the plan's runs with bfloat16 products under keys of their own
(plan.in_dtype; faster than float32 only on a processor with bfloat16 units, cpu/features.py).
"""

# First of all, before the imports that take seconds: SIGTERM or Ctrl-C from now on stops the
# study at its next safe point, in one line with exit code 75 (training/preemption.py).
from keynorm_jax.training import preemption  # pylint: disable=g-bad-import-order
if __name__ == "__main__":  # (not when a test imports this file)
  preemption.install()

from absl import app, flags, logging

from keynorm_jax import cli
from keynorm_jax.data.corpora import check_data_dir
from keynorm_jax.errors import ConfigError
from keynorm_jax.models.config import DTYPES
from keynorm_jax.storage import disk
from keynorm_jax.study import plan
from keynorm_jax.study.provenance import provenance
from keynorm_jax.study.records import RESULTS_ROOT, RecordStore, reproduction_record
from keynorm_jax.study.field_page import write_field_page
from keynorm_jax.study.results_page import update_page
from keynorm_jax.study.session import run_plan

_SCALE = flags.DEFINE_enum("scale", "cpu", list(plan.SCALES), "Study scale.")
_RUNS = flags.DEFINE_list("runs", None,
                          "Only these run keys (<label>__seed<N>, e.g. kna_alibi__seed0).")
_MAX_RUNS = flags.DEFINE_integer("max_runs", 0, "Stop after this many new runs (0: all).")
_REPORT_ONLY = flags.DEFINE_bool("report_only", False, "Only rebuild the report from records.")
_RUNS_DIR = flags.DEFINE_string("runs_dir", "runs/study", "Scratch folder for training runs.")
_RESULTS = flags.DEFINE_string("results", None, "Records folder; default results/field[_<scale>].")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "TFDS data dir (default: TFDS's).")
_SHARD = flags.DEFINE_string("shard", "", "i/n (0 <= i < n): only every n-th planned run, starting "
                             "at the i-th, for n worker processes on one machine; the report is "
                             "then left to a final --report_only.")
_PLAN = flags.DEFINE_enum("plan", "field", list(plan.PLANS), "The runs to train: field (the field "
                          "study's plan) or preregistered (the pre-registered Baseline / KNA RoPE "
                          "pairs, seeds 3-10; docs/study.md).")
_GROUP_SEEDS = flags.DEFINE_bool("group_seeds", False, "Train the unrecorded runs that differ only "
                                 "by seed, on consecutive seeds, as one seed group each "
                                 "(--config.num_seeds); one record per seed all the same.")
_DTYPE = flags.DEFINE_enum("dtype", plan.DTYPE, list(DTYPES), "model.compute_dtype of every run "
                           f"(default {plan.DTYPE}); another dtype is a model setting of each run, "
                           "in its label and key (`+compute_dtype=bfloat16`).")
_KEEP_RUNS = flags.DEFINE_bool("keep_runs", False, "Keep each run's workdir (checkpoints) after "
                               "its record is written, e.g. to run more diagnostics on it.")


def selected_runs(entries, keys, shard: str, dtype: str = plan.DTYPE) -> list:
  """The planned entries in --dtype (plan.in_dtype) named by --runs (all when unset) in --shard;
  ConfigError for an empty --runs, a key the plan does not have, a bad --shard or one that holds no
  run, or a dtype the plan cannot take."""
  try:
    entries = plan.in_dtype(entries, dtype)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  if keys is not None:
    if not keys:
      raise ConfigError("--runs is empty; name run keys (<label>__seed<N>, comma-separated), or "
                        "leave it unset for every planned run.")
    planned = {e.key for e in entries}
    unknown = [k for k in keys if k not in planned]
    if unknown:
      raise ConfigError(f"--runs: {', '.join(unknown)} is not a run of the study's plan; keys are "
                        f"<label>__seed<N>, e.g. {entries[0].key} (keynorm_jax/study/plan.py).")
    entries = [e for e in entries if e.key in keys]
  try:
    chosen = plan.shard_of(entries, shard)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  if not chosen:  # i >= the number of runs: "done" with no run, rc 0, was said before
    count = len(entries)
    raise ConfigError(f"--shard={shard} holds no run: {count} run(s) are selected, so only "
                      f"shards i < {count} hold one; split them into at most {count} shards "
                      f"(--shard=0/{count} .. --shard={count - 1}/{count}).")
  return chosen


def check_options(*, max_runs: int, runs_dir: str, results) -> None:
  """ConfigError for a negative --max_runs or an empty --runs_dir or --results."""
  if max_runs < 0:
    raise ConfigError(f"--max_runs must be at least 1, or 0 for every planned run; got "
                      f"{max_runs}.")
  cli.check_folder_flags(runs_dir=runs_dir, results=results)


def check_paths(store: RecordStore, *, runs_dir: str, data_dir: str, train: bool) -> None:
  """DiskError or DataError, naming the flag, for a folder that cannot be written or read: checked
  before any training, so that no run is lost at the end for want of a place to record it."""
  if train:
    check_data_dir(data_dir, flag="--data_dir")
  # (a refused --runs_dir must not leave the records folder made just before it)
  with disk.removed_if_refused(store.directory, runs_dir if train else None):
    disk.ensure_writable(store.directory, what="the records folder",
                         fix="pass a writable --results")
    if train:
      disk.ensure_writable(runs_dir, what="the runs folder", fix="pass a writable --runs_dir")


def _checked_options(study: str):
  """(the record store, the selected entries) once every option is checked, before any work."""
  check_options(max_runs=_MAX_RUNS.value, runs_dir=_RUNS_DIR.value, results=_RESULTS.value)
  store = RecordStore(study) if _RESULTS.value is None else RecordStore(study, root=_RESULTS.value)
  entries = selected_runs(plan.PLANS[_PLAN.value](), _RUNS.value, _SHARD.value, _DTYPE.value)
  check_paths(store, runs_dir=_RUNS_DIR.value, data_dir=_DATA_DIR.value,
              train=not _REPORT_ONLY.value)
  return store, entries


def main(argv):
  cli.refuse_arguments(argv)
  logging.set_verbosity(logging.WARNING)
  study = "field" if _SCALE.value == "cpu" else f"field_{_SCALE.value}"
  store, entries = cli.run_or_exit(lambda: _checked_options(study))
  provenance()  # the code this process runs, read before any run starts
  if not _REPORT_ONLY.value:  # as train.py (preemption: exit 75)
    cli.run_or_exit(lambda: run_plan(entries, store, scale=_SCALE.value, runs_dir=_RUNS_DIR.value,
                                     data_dir=_DATA_DIR.value, max_runs=_MAX_RUNS.value,
                                     keep_runs=_KEEP_RUNS.value, group_seeds=_GROUP_SEEDS.value))
  if _SHARD.value and not _REPORT_ONLY.value:
    print(f"Shard {_SHARD.value} done; when every shard is, rebuild the report with --report_only.")
    return
  records = store.all()
  page = write_field_page(records, store.directory)
  print(f"Report: {page}")
  if study == "field" and _RESULTS.value is None:
    results_page = RESULTS_ROOT.parent / "RESULTS.md"
    if update_page(records, cli.run_or_exit(reproduction_record), results_page):
      print(f"Updated the generated tables of {results_page}")


if __name__ == "__main__":
  app.run(main)
