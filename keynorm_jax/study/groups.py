"""The study's seed groups (--group_seeds): plan entries that differ only by seed, on consecutive
seeds, trained as one seed group (training/seed_group.py) and evaluated member by member.

Member s of a group is evaluated as the single run of seed s would be: its parameters sliced from
the stacked checkpoint, its config the entry's own (seed s), its metrics its rows of the group's
metrics.jsonl; its record is the one runner.run_one writes for that entry (same key and fields),
with `group` added: the group's seeds and workdir. The records are saved once every member is
evaluated, so a stopped group forms again from the same unrecorded entries and resumes: training
from its checkpoint, each member's evaluation from the stages saved in
<group workdir>/members/<entry key>/.
"""

import dataclasses
import pathlib
import shutil
import time

from keynorm_jax.errors import ConfigError
from keynorm_jax.runs import TrainedRun, load_run
from keynorm_jax.study import plan
from keynorm_jax.study.records import RecordStore
from keynorm_jax.study.runner import evaluated_record, study_config
from keynorm_jax.training import seed_group
from keynorm_jax.training.loop import train_and_evaluate
from keynorm_jax.training.metrics_writer import read_metrics


def seed_groups(entries: list[plan.StudyRun]) -> list[list[plan.StudyRun]]:
  """`entries` gathered into groups of the same run but its seed, on consecutive seeds (a gap
  starts another group), in order of each group's first entry; a lone entry is a group of one."""
  by_run: dict[plan.StudyRun, list[plan.StudyRun]] = {}
  for entry in entries:
    by_run.setdefault(dataclasses.replace(entry, seed=0), []).append(entry)
  groups = []
  for same in by_run.values():
    same = sorted(set(same), key=lambda e: e.seed)
    groups.append([same[0]])
    for entry in same[1:]:
      if entry.seed == groups[-1][-1].seed + 1:
        groups[-1].append(entry)
      else:
        groups.append([entry])
  first = {entry: i for i, entry in reversed(list(enumerate(entries)))}
  return sorted(groups, key=lambda group: min(first[e] for e in group))


def group_key(members: list[plan.StudyRun]) -> str:
  """The group's workdir name: its members' key with `__seeds<first>-<last>` for the seed."""
  return f"{members[0].key.rsplit('__seed', 1)[0]}__seeds{members[0].seed}-{members[-1].seed}"


def load_members(workdir, members: list[plan.StudyRun], *, warn=print) -> list[TrainedRun]:
  """Each member of the seed group in `workdir` (members: its entries, seeds checked) as the
  TrainedRun its single run would be (named by its key): runs.load_run's group, split by
  TrainedRun.member. Nothing is moved or written."""
  seeds = tuple(entry.seed for entry in members)
  group = load_run(workdir, warn=warn)
  if group.member_seeds != seeds:
    raise ConfigError(f"{workdir} holds seeds {list(group.member_seeds)}, not the group "
                      f"{list(seeds)}; remove it, or pass another --runs_dir.")
  return [dataclasses.replace(group.member(i), name=entry.key) for i, entry in enumerate(members)]


def run_group(members: list[plan.StudyRun], *, scale: str, store: RecordStore, runs_dir,
              data_dir="", echo=print, keep_run=False) -> list[pathlib.Path]:
  """Trains (or resumes) `members` (one seed_groups group) as one seed group, evaluates each member
  as runner.run_one evaluates a single run, then saves their records; returns their paths."""
  seeds = [entry.seed for entry in members]
  if seeds != list(range(seeds[0], seeds[0] + len(seeds))):
    raise ValueError(f"A seed group's entries have consecutive seeds; got {seeds}.")
  config = study_config(members[0], scale, data_dir, num_seeds=len(members))
  workdir = pathlib.Path(runs_dir) / group_key(members)
  started = time.time()
  train_and_evaluate(config, workdir)
  train_seconds = round(time.time() - started, 1)  # the group's, in every member's record
  metrics = read_metrics(workdir)
  records = []
  for entry, run in zip(members, load_members(workdir, members, warn=echo)):
    echo(f"  {entry.key}: evaluating seed {entry.seed} of the group")
    stages_dir = workdir / "members" / entry.key
    stages_dir.mkdir(parents=True, exist_ok=True)
    record = evaluated_record(
        entry, run, config=study_config(entry, scale, data_dir), scale=scale, store=store,
        stages_dir=stages_dir, metrics=[m for m in metrics if m.get("seed") == entry.seed],
        train_seconds=train_seconds, eval_started=time.time(), echo=echo)
    records.append({**record, "group": {"seeds": seeds, "workdir": str(workdir)}})
  paths = [store.save(entry.key, record) for entry, record in zip(members, records)]
  if not keep_run:
    shutil.rmtree(workdir, ignore_errors=True)
  return paths
