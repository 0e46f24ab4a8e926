"""The retrieval study's tables and heat maps, from the records that hold retrieval results.

Exact match (%) of the answers (passkey: all 5 digits; MQAR: each queried value) over every depth,
by length as a multiple of the training length; the seed spread; each method's inference-time
options. Every number comes from a record in results/field/.
"""

import collections
import statistics

from keynorm_jax.evaluation.retrieval_report import plot_heat_map
from keynorm_jax.study import plan
from keynorm_jax.study.figures import FIGURE2, needle_reach_runs


def with_retrieval(records, architecture=None, seed=None):
  return [r for r in records if r.get("retrieval")
          and (architecture is None or r["architecture"] == architecture)
          and (seed is None or r["seed"] == seed)]


def _train_length(record):
  return record["config"]["train_length"]


def find(record, task, multiple, method="none"):
  """The retrieval result of `task` at `multiple` x the training length with `method`, or None."""
  length = multiple * _train_length(record)
  for r in record["retrieval"]:
    if r["task"] == task and r["length"] == length and r["rope_scaling"] == method:
      return r
  return None


def _steps(record):
  return record.get("train", {}).get("steps", "")


def _pct(r):
  if r is None:
    return ""
  return "n/a" if r.get("accuracy") is None else f"{100 * r['accuracy']:.0f}"


def _table(head, rows):
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def by_length_table(records, architecture):
  """Rows: seed-0 runs; columns: passkey and MQAR exact match at each multiple ("none")."""
  head = ["run", "steps"] + [f"{task} {m}x" for task in plan.RETRIEVAL_TASKS
                             for m in plan.RETRIEVAL_MULTIPLES]
  rows = [[f"`{rec['label']}`", _steps(rec)] + [_pct(find(rec, task, m))
                                                 for task in plan.RETRIEVAL_TASKS
                                                 for m in plan.RETRIEVAL_MULTIPLES]
          for rec in with_retrieval(records, architecture, seed=0)]
  return _table(head, rows) if rows else "(no records yet)"


def options_table(records, architecture):
  """Passkey and MQAR exact match with each inference-time option, at each option multiple."""
  head = ["run", "steps", "method"] + [f"{task} {m}x" for task in plan.RETRIEVAL_TASKS
                                       for m in plan.RETRIEVAL_OPTION_MULTIPLES]
  rows = []
  for rec in with_retrieval(records, architecture, seed=0):
    for method in ("none", *plan.retrieval_options(rec["config"]["model"]["position"])):
      cells = [_pct(find(rec, task, m, method)) for task in plan.RETRIEVAL_TASKS
               for m in plan.RETRIEVAL_OPTION_MULTIPLES]
      rows.append([f"`{rec['label']}`", _steps(rec), method] + cells)
  return _table(head, rows) if rows else "(no records yet)"


def seed_table(records):
  """Mean ± standard deviation over seeds of exact match at each multiple, then each seed's value
  in the order of the seeds column (a run that learned a task and one that did not make a spread
  that the mean alone hides), for each label and number of training steps with 2+ seeds."""
  by_label = collections.defaultdict(list)
  for rec in with_retrieval(records):
    by_label[rec["label"], _steps(rec)].append(rec)
  rows = []
  for (label, steps), recs in sorted(by_label.items(), key=lambda item: str(item[0])):
    if len(recs) < 2:
      continue
    cells = []
    for task in plan.RETRIEVAL_TASKS:
      for m in plan.RETRIEVAL_MULTIPLES:
        results = [find(rec, task, m) for rec in recs]
        values = [r["accuracy"] for r in results
                  if r is not None and r.get("accuracy") is not None]
        each = ", ".join(_pct(r) or "-" for r in results)
        cells.append(f"{100 * statistics.mean(values):.0f} ± {100 * statistics.stdev(values):.0f}"
                     f" ({each})" if len(values) > 1 else "n/a")
    rows.append([f"`{label}`", steps, ", ".join(str(r["seed"]) for r in recs)] + cells)
  head = ["run", "steps", "seeds"] + [f"{task} {m}x" for task in plan.RETRIEVAL_TASKS
                                      for m in plan.RETRIEVAL_MULTIPLES]
  return _table(head, rows) if rows else "(No run has retrieval records for two seeds yet.)"


def heat_map_path(record, output):
  return output / "needle" / f"{record['key']}.png"


def write_plots(records, output) -> None:
  """needle/<run key>.png in `output`: each seed-0 run's heat map (depth x length, no
  inference-time method). How far the runs read: figures.FIGURE2."""
  for rec in with_retrieval(records, seed=0):
    heat_map_path(rec, output).parent.mkdir(exist_ok=True)
    plot_heat_map([r for r in rec["retrieval"] if r["rope_scaling"] == "none"],
                  heat_map_path(rec, output), title=f"{rec['label']}, no inference-time method")


def retrieval_sections(records, heading="##", link_prefix="") -> list[str]:
  """The retrieval study's part of a page (FIELD.md or RESULTS.md); link_prefix is the folder of
  the plots (write_plots) as the page sees it."""
  if not with_retrieval(records):
    return []
  parts = [f"{heading} Retrieval beyond the training length\n",
           "Exact match (%) over 10 depths x the scale's prompts per depth "
           f"({', '.join(f'{k}: {v}' for k, v in plan.RETRIEVAL_PROMPTS.items())}), each prompt "
           "with its own key: passkey_letters (all 5 letters right), passkey (all 5 digits), MQAR "
           "(each queried value; chance 10%). Runs trained for their `steps` (the plan's cpu "
           f"recipe: {plan.SCALES['cpu']['retrieval_train']['num_train_steps']}) with "
           f"{round(100 * plan.RETRIEVAL_COPY_FRACTION)}% synthetic copy windows and "
           f"{round(100 * plan.RETRIEVAL_FRACTION)}% of the others retrieval episodes "
           f"({', '.join(plan.RETRIEVAL_TASKS)}). Each seed-0 run's heat map (depth x length): "
           f"`{link_prefix}needle/<run key>.png`.\n"]
  for architecture in ("gau", "transformer"):
    if not with_retrieval(records, architecture, seed=0):
      continue
    parts += [f"\n{heading}# {architecture}: by length (seed 0)\n",
              by_length_table(records, architecture),
              f"\n{heading}# {architecture}: inference-time options\n",
              options_table(records, architecture)]
  if needle_reach_runs(records):
    parts += [f"\n![needle reach of the runs that read a key at 2x]({link_prefix}{FIGURE2})\n"]
  parts += [f"\n{heading}# Retrieval: seed-to-seed spread (mean ± standard deviation, and each "
            "seed's value)\n",
            seed_table(records)]
  return parts
