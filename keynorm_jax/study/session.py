"""One study session: the plan's entries without a record trained, evaluated and recorded, one by
one (runner.run_one) or, with group_seeds, those that differ only by seed as seed groups
(groups.run_group). Kept apart from __main__ (its flags) so that tests call it in-process."""

from keynorm_jax.study import groups
from keynorm_jax.study.records import RecordStore
from keynorm_jax.study.runner import record_plan_key, run_one


def run_plan(entries, store: RecordStore, *, scale: str, runs_dir, data_dir="", max_runs=0,
             keep_runs=False, group_seeds=False) -> None:
  """Trains, evaluates and records each entry without a record (up to max_runs new ones); with
  group_seeds, those that differ only by seed as seed groups (groups.seed_groups)."""
  if group_seeds:
    _run_groups(entries, store, scale=scale, runs_dir=runs_dir, data_dir=data_dir,
                max_runs=max_runs, keep_runs=keep_runs)
    return
  done = 0
  for index, entry in enumerate(entries, 1):
    if max_runs and done >= max_runs:
      break
    if store.find(entry.key, record_plan_key(entry, scale)):
      print(f"[{index}/{len(entries)}] {entry.key}: recorded, skipping", flush=True)
      continue
    print(f"[{index}/{len(entries)}] {entry.key}: training and evaluating", flush=True)
    path = run_one(entry, scale=scale, store=store, runs_dir=runs_dir, data_dir=data_dir,
                   keep_run=keep_runs)
    print(f"  recorded {path}", flush=True)
    done += 1


def _run_groups(entries, store: RecordStore, *, scale, runs_dir, data_dir, max_runs,
                keep_runs) -> None:
  """run_plan's --group_seeds: the first max_runs unrecorded entries (all for 0), gathered into
  seed groups, each trained once; a group of one is a single run."""
  todo = []
  for index, entry in enumerate(entries, 1):
    if store.find(entry.key, record_plan_key(entry, scale)):
      print(f"[{index}/{len(entries)}] {entry.key}: recorded, skipping", flush=True)
    else:
      todo.append(entry)
  todo = todo[:max_runs] if max_runs else todo
  found = groups.seed_groups(todo)
  for index, members in enumerate(found, 1):
    if len(members) == 1:
      print(f"[group {index}/{len(found)}] {members[0].key}: training and evaluating", flush=True)
      paths = [run_one(members[0], scale=scale, store=store, runs_dir=runs_dir,
                       data_dir=data_dir, keep_run=keep_runs)]
    else:
      print(f"[group {index}/{len(found)}] {groups.group_key(members)}: training "
            f"{len(members)} seeds as one group, evaluating each", flush=True)
      paths = groups.run_group(members, scale=scale, store=store, runs_dir=runs_dir,
                               data_dir=data_dir, keep_run=keep_runs)
    for path in paths:
      print(f"  recorded {path}", flush=True)
