"""Retrieval results as a table (exact match by length), a CSV by depth, and the needle heat map;
a seed group's cells as the mean (± standard deviation) over its seeds (seed_summary.py)."""

import csv
import pathlib
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from keynorm_jax.evaluation.seed_summary import (  # pylint: disable=wrong-import-position
    cell_key, group_runs, run_label, seed_summaries, spread_caption)
from keynorm_jax.evaluation.table_notes import (  # pylint: disable=wrong-import-position
    not_applicable_notes, one_x_caption)

CSV_FIELDS = ("run", "seed", "config", "step", "train_length", "one_x", "task", "length",
              "rope_scaling",
              "depth", "accuracy", "token_accuracy", "prompts", "chance", "not_applicable")


def _pct(x):
  return "n/a" if x is None else f"{100 * x:.1f}"


def retrieval_caption(records, over_depths: bool = False) -> str:
  """What retrieval_table's cells are (over_depths: says they pool every depth)."""
  groups = group_runs(records)
  caption = "Retrieval: exact match % (per-token %)" + (", over every depth" if over_depths else "")
  if groups:
    over = spread_caption([r for r in records if r["run"] in groups], "")
    caption += f"; a seed group's: exact match {over} (per-token: the mean)"
  return f"{caption}. {one_x_caption(records)}"


def retrieval_table(records) -> str:
  """Rows = run x method x task; columns = lengths; cells = exact match % (per-token %); a seed
  group's: mean +- standard deviation over its seeds (per-token mean)."""
  lengths = sorted({r["length"] for r in records})
  rows = list(dict.fromkeys((r["run"], r["rope_scaling"], r["task"]) for r in records))
  groups = group_runs(records)
  by_key = {(r["run"], r["rope_scaling"], r["task"], r["length"]): r for r in records}
  summaries = {cell_key(r): r for r in seed_summaries(records)}
  head = ["run", "method", "task"] + [str(length) for length in lengths]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for run, method, task_name in rows:
    cells = []
    for length in lengths:
      if run in groups:
        r = summaries.get((run, length, None, task_name, method))
        text = lambda r: (f"{_pct(r['accuracy_mean'])} ± {_pct(r['accuracy_std'])} "
                          f"({_pct(r['token_accuracy_mean'])})")
      else:
        r = by_key.get((run, method, task_name, length))
        text = lambda r: f"{_pct(r['accuracy'])} ({_pct(r['token_accuracy'])})"
      cells.append("" if r is None else "n/a" if r.get("not_applicable") else text(r))
    lines.append("| " + " | ".join([run_label(run, groups), method, task_name, *cells]) + " |")
  notes = not_applicable_notes(records)
  return "\n".join(lines + ([""] + notes if notes else []))


def write_retrieval_csv(records, path) -> None:
  """One row per record and depth (and one with depth "all" for the whole record)."""
  with pathlib.Path(path).open("w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for r in records:
      writer.writerow({**r, "depth": "all"})
      for depth, exact, tokens in zip(r["depths"], r.get("accuracy_by_depth") or [],
                                      r.get("token_accuracy_by_depth") or []):
        writer.writerow({**r, "depth": depth, "accuracy": exact, "token_accuracy": tokens})


def heat_map_name(run: str, method: str) -> str:
  return "needle_" + re.sub(r"[^A-Za-z0-9._-]+", "_", f"{run}__{method}") + ".png"


def plot_heat_map(records, path, *, title: str) -> None:
  """Exact match by depth (rows) x length (columns), one panel per task, for one run and method,
  with a colour bar and the number of prompts behind each cell in the panel's title."""
  tasks = list(dict.fromkeys(r["task"] for r in records))
  fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 4.4), squeeze=False)
  for ax, task_name in zip(axes[0], tasks):
    found = sorted((r for r in records if r["task"] == task_name), key=lambda r: r["length"])
    lengths = [r["length"] for r in found]
    depths = found[0]["depths"]
    grid = np.full([len(depths), len(lengths)], np.nan)
    for j, r in enumerate(found):
      if r.get("accuracy_by_depth"):
        grid[:, j] = r["accuracy_by_depth"]
    image = ax.imshow(100 * grid, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto",
                      origin="upper")
    fig.colorbar(image, ax=ax, label="exact match (%)", fraction=0.06, pad=0.03)
    for (i, j), value in np.ndenumerate(grid):
      ax.text(j, i, "n/a" if np.isnan(value) else f"{100 * value:.0f}", ha="center", va="center",
              fontsize=7)
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set_yticks(range(len(depths)), [f"{d:.2f}" for d in depths])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("needle depth (0 = start)")
    trained, prompts = found[0]["train_length"], found[0].get("prompts")
    count = (f"{prompts} prompts per cell, {prompts * len(depths)} per length; "
             if prompts else "")
    ax.set_title(f"{task_name}: exact match %, chance {100 * found[0]['chance']:.2g}%\n"
                 f"({count}trained at {trained})", fontsize=9)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  try:
    fig.savefig(path, dpi=110, format="png")  # (path: maybe a temporary name)
  finally:
    plt.close(fig)


def retrieval_writers(records) -> dict:
  """{file name: writer(path)} of retrieval.csv and one heat map per run x method (a seed group's:
  the mean exact match over its seeds)."""
  writers = {"retrieval.csv": lambda path: write_retrieval_csv(records, path)}
  groups = group_runs(records)
  cells = [r for r in records if r["run"] not in groups] + [
      {**s, "accuracy_by_depth": s.get("accuracy_by_depth_mean")} for s in seed_summaries(records)]
  for run, method in dict.fromkeys((r["run"], r["rope_scaling"]) for r in records):
    found = [r for r in cells if r["run"] == run and r["rope_scaling"] == method]
    title = (f"{run}, inference: {method}" +
             (f", mean over {len(groups[run])} seeds" if run in groups else ""))
    writers[heat_map_name(run, method)] = (
        lambda path, found=found, title=title: plot_heat_map(found, path, title=title))
  return writers
