"""A seed group's results over its members: per cell, the mean and standard deviation over seeds.

A cell is a run's (length, set or task, method); its members' records (evaluate.py, retrieval.py:
one per seed, `seed` naming it) differ only in what they measured. The summary row keeps the cell's
fields and, for each measured value X, `X_mean` and `X_std`: the sample standard deviation over
the seeds (ddof=1), element by element for a list (accuracy by position or by depth); `seeds`: N,
`member_seeds`: the seeds. Runs with a single seed have no summary row.
"""

import numpy as np

# What a member's record measured: summarized over seeds (the rest names the cell).
MEASURED = ("accuracy", "accuracy_beyond_train", "loss", "accuracy_by_position",   # next-token
            "token_accuracy", "accuracy_by_depth", "token_accuracy_by_depth")      # retrieval
PER_MEMBER = ("seed", "accuracy_stderr", "seconds")  # not carried into the summary row
STD = "sample standard deviation over seeds (ddof=1)"


def cell_key(record) -> tuple:
  """The cell a record belongs to: its run, length, set or task, and method."""
  return (record["run"], record["length"], record.get("set"), record.get("task"),
          record["rope_scaling"])


def group_runs(records) -> dict[str, list[int]]:
  """{run: its member seeds} of the runs that have more than one seed among `records`."""
  seeds = {}
  for r in records:
    seeds.setdefault(r["run"], [])
    if r["seed"] not in seeds[r["run"]]:
      seeds[r["run"]].append(r["seed"])
  return {run: found for run, found in seeds.items() if len(found) > 1}


def _mean_std(values):
  """(mean, sample std) over the seed axis of `values` [N] or [N, K] (lists for K), float64."""
  x = np.asarray(values, np.float64)
  mean, std = x.mean(axis=0), x.std(axis=0, ddof=1)
  if x.ndim == 1:
    return float(mean), float(std)
  return [float(v) for v in mean], [float(v) for v in std]


def summary_row(members) -> dict:
  """The summary row of one cell from its members' records (in seed order)."""
  first = members[0]
  row = {k: v for k, v in first.items() if k not in MEASURED and k not in PER_MEMBER}
  row["seeds"], row["member_seeds"] = len(members), [m["seed"] for m in members]
  if not first.get("not_applicable"):
    for key in MEASURED:
      values = [m.get(key) for m in members]
      if key in first and all(v is not None for v in values):
        row[f"{key}_mean"], row[f"{key}_std"] = _mean_std(values)
      elif key in first:
        row[f"{key}_mean"] = row[f"{key}_std"] = None
  row["std"] = STD
  return row


def seed_summaries(records) -> list[dict]:
  """A summary row per cell of each run with several seeds, in the order the cells first appear."""
  groups = group_runs(records)
  cells = {}
  for r in records:
    if r["run"] in groups:
      cells.setdefault(cell_key(r), []).append(r)
  return [summary_row(sorted(members, key=lambda m: groups[m["run"]].index(m["seed"])))
          for members in cells.values()]


def run_label(run: str, groups: dict) -> str:
  """A run's name in the tables: a seed group's with its seed count."""
  return f"{run} ({len(groups[run])} seeds)" if run in groups else run


def spread_caption(records, single: str) -> str:
  """What a table's ± means: `single` (a single run's) and/or the std over a group's seeds."""
  groups = group_runs(records)
  counts = sorted({len(seeds) for seeds in groups.values()})
  over = (f"± std over {counts[0]} seeds" if len(counts) == 1 else
          "± std over each group's seeds (their number beside the run)")
  over = f"mean {over} (sample std, ddof=1)"
  if not groups:
    return single
  if set(groups) == {r["run"] for r in records}:
    return over
  return f"{single}; a seed group's: {over}"
