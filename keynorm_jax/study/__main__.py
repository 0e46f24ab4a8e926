r"""The field study, run by run: `python -m keynorm_jax.study --scale=cpu`.

Trains and evaluates every run of keynorm_jax/study/plan.py that has no record yet under
results/field/ (skips the rest), writing each record as soon as its run is done, then rebuilds
results/field/FIELD.md and the field-study block of RESULTS.md (between its markers). Stop it any
time; the next invocation continues. --runs limits it to some
run keys (e.g. kna_alibi__seed0); --max_runs to a number of new runs; --shard=i/n to every n-th run
from the i-th, so that n processes share one accelerator (README: "The field study").
"""

from keynorm_jax import host_memory  # first of all: see host_memory

host_memory.keep_freed_memory()

# pylint: disable=wrong-import-position
from absl import app, flags, logging

from keynorm_jax.study import plan
from keynorm_jax.study.provenance import provenance
from keynorm_jax.study.records import RESULTS_ROOT, RecordStore
from keynorm_jax.study.report import update_results_page, write_report
from keynorm_jax.study.runner import run_one

_SCALE = flags.DEFINE_enum("scale", "cpu", list(plan.SCALES), "Study scale.")
_RUNS = flags.DEFINE_list("runs", None, "Only these run keys (config__seedN).")
_MAX_RUNS = flags.DEFINE_integer("max_runs", 0, "Stop after this many new runs (0: all).")
_REPORT_ONLY = flags.DEFINE_bool("report_only", False, "Only rebuild the report from records.")
_RUNS_DIR = flags.DEFINE_string("runs_dir", "runs/study", "Scratch folder for training runs.")
_RESULTS = flags.DEFINE_string("results", None, "Records folder; default results/field[_<scale>].")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "TFDS data dir (default: TFDS's).")
_SHARD = flags.DEFINE_string("shard", "", "i/n (0 <= i < n): only every n-th planned run, starting "
                             "at the i-th, for n worker processes on one machine; the report is "
                             "then left to a final --report_only.")
_KEEP_RUNS = flags.DEFINE_bool("keep_runs", False, "Keep each run's workdir (checkpoints) after "
                               "its record is written, e.g. to run more diagnostics on it.")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  provenance()  # the code this process runs, read before any run starts
  study = "field" if _SCALE.value == "cpu" else f"field_{_SCALE.value}"
  store = RecordStore(study) if _RESULTS.value is None else RecordStore(
      study, root=_RESULTS.value)
  entries = plan.field_runs()
  if _RUNS.value:
    entries = [e for e in entries if e.key in _RUNS.value]
  try:
    entries = plan.shard_of(entries, _SHARD.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  done = 0
  for index, entry in enumerate(entries, 1):
    if _REPORT_ONLY.value or (_MAX_RUNS.value and done >= _MAX_RUNS.value):
      break
    if store.find(entry.key, plan.plan_key(_SCALE.value, bool(entry.retrieval_fraction))):
      print(f"[{index}/{len(entries)}] {entry.key}: recorded, skipping", flush=True)
      continue
    print(f"[{index}/{len(entries)}] {entry.key}: training and evaluating", flush=True)
    path = run_one(entry, scale=_SCALE.value, store=store, runs_dir=_RUNS_DIR.value,
                   data_dir=_DATA_DIR.value, keep_run=_KEEP_RUNS.value)
    print(f"  recorded {path}", flush=True)
    done += 1
  if _SHARD.value and not _REPORT_ONLY.value:
    print(f"Shard {_SHARD.value} done; when every shard is, rebuild the report with --report_only.")
    return
  records = store.all()
  page = write_report(records, store.directory)
  print(f"Report: {page}")
  if study == "field" and _RESULTS.value is None:
    results_page = RESULTS_ROOT.parent / "RESULTS.md"
    if update_results_page(records, results_page):
      print(f"Updated the field-study block of {results_page}")


if __name__ == "__main__":
  app.run(main)
