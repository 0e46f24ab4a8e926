"""eval.py's accuracy tables (printed, results.md), results.json, results.csv and its plots
(accuracy by position, the diagnostics).

Every record names its seed; a seed group's cells (seed_summary.py) show the mean ± standard
deviation over its seeds in the tables and the mean with a shaded ± std band in the plot, and are
listed in results.json ("seed_summary", "retrieval_seed_summary") and seed_summary.csv.
"""

import csv
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from keynorm_jax.evaluation.outputs import (  # pylint: disable=wrong-import-position
    text_writer, write_files)
from keynorm_jax.evaluation.retrieval_report import (  # pylint: disable=wrong-import-position
    retrieval_caption, retrieval_table, retrieval_writers)
from keynorm_jax.evaluation.seed_summary import (  # pylint: disable=wrong-import-position
    cell_key, group_runs, run_label, seed_summaries, spread_caption)
from keynorm_jax.evaluation.table_notes import (  # pylint: disable=wrong-import-position
    not_applicable_notes, one_x_caption)

CSV_FIELDS = ("run", "seed", "config", "step", "train_length", "one_x", "length", "set",
              "rope_scaling",
              "accuracy", "accuracy_stderr", "accuracy_beyond_train", "loss", "tokens", "windows",
              "not_applicable")


def _pct(x):
  return "" if x is None else f"{100 * x:.2f}"


def markdown_table(records) -> str:
  """Rows = run x scaling; columns = length x set (accuracy %, +- standard error over windows; a
  seed group's row: mean +- standard deviation over its seeds)."""
  columns = sorted({(r["length"], r["set"]) for r in records},
                   key=lambda c: (c[0], c[1] != "repeated"))
  rows = list(dict.fromkeys((r["run"], r["rope_scaling"]) for r in records))
  groups = group_runs(records)
  by_key = {(r["run"], r["rope_scaling"], r["length"], r["set"]): r for r in records}
  summaries = {cell_key(r): r for r in seed_summaries(records)}
  head = ["run", "scaling"] + [f"{length} {s}" for length, s in columns]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for run, scaling in rows:
    cells = []
    for length, s in columns:
      if run in groups:
        cells.append(_cell(summaries.get((run, length, s, None, scaling)), "accuracy_mean",
                           "accuracy_std"))
      else:
        cells.append(_cell(by_key.get((run, scaling, length, s))))
    lines.append("| " + " | ".join([run_label(run, groups), scaling] + cells) + " |")
  notes = not_applicable_notes(records)
  return "\n".join(lines + ([""] + notes if notes else []))


def _cell(r, value="accuracy", spread="accuracy_stderr") -> str:
  """A record's (or a seed summary's: value accuracy_mean, spread accuracy_std) cell; without a
  spread (one window's record) the value alone."""
  if r is None:
    return ""
  if r.get("not_applicable"):
    return "n/a"
  if r[spread] is None:
    return _pct(r[value])
  return f"{_pct(r[value])} ± {_pct(r[spread])}"


def accuracy_caption(records) -> str:
  return ("Next-token accuracy (%), " +
          spread_caption(records, "± standard error over windows") + ". " +
          one_x_caption(records))


def plot_accuracy_by_position(records, path) -> None:
  """Accuracy against position at the longest length, one panel per set, a line per run x scaling
  (a seed group's: the mean over its seeds, shaded ± their standard deviation)."""
  longest = max(r["length"] for r in records)
  sets = ("repeated", "non_repeated")
  groups = group_runs(records)
  lines = [r for r in records if r["run"] not in groups] + [
      {**s, "accuracy_by_position": s.get("accuracy_by_position_mean")}
      for s in seed_summaries(records)]
  fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
  for ax, eval_set in zip(axes, sets):
    ax.set_prop_cycle(color=plt.cm.tab20.colors)  # more runs than the default 10 colours
    for r in lines:
      if r["length"] != longest or r["set"] != eval_set or r.get("not_applicable"):
        continue
      xs = [r["position_bucket"] * (i + 0.5) for i in range(len(r["accuracy_by_position"]))]
      style = "-" if r["rope_scaling"] == "none" else "--"
      label = f"{run_label(r['run'], groups)} ({r['rope_scaling']})"
      line, = ax.plot(xs, r["accuracy_by_position"], style, lw=1.2,
                      label=label + (", mean ± std" if r["run"] in groups else ""))
      if r["run"] in groups:
        mean, std = (np.array(r[f"accuracy_by_position_{k}"]) for k in ("mean", "std"))
        ax.fill_between(xs, mean - std, mean + std, color=line.get_color(), alpha=0.2, lw=0)
    train_lengths = {r["train_length"] for r in records}
    for t in train_lengths:
      ax.axvline(t, color="grey", lw=0.8, ls=":")
    ax.set_title(f"{eval_set}, length {longest}")
    ax.set_xlabel("position")
    ax.grid(alpha=0.3)
  axes[0].set_ylabel("next-token accuracy")
  axes[1].legend(fontsize=7, loc="best")
  fig.tight_layout()
  try:
    fig.savefig(path, dpi=110, format="png")  # (path: maybe a temporary name)
  finally:
    plt.close(fig)


def plot_diagnostics(diagnostics, path) -> None:
  """Attention entropy by position (mean over layers) and key-norm spread per layer, per run."""
  fig, (ax_entropy, ax_norm) = plt.subplots(1, 2, figsize=(13, 4.5))
  for ax in (ax_entropy, ax_norm):
    ax.set_prop_cycle(color=plt.cm.tab20.colors)
  for run, by_length in diagnostics.items():
    longest = max(by_length, key=int)
    found = by_length[longest]
    layers = list(found["layers"].values())
    entropy = [sum(col) / len(col) for col in zip(*(l["entropy_by_position"] for l in layers))]
    xs = [found["position_bucket"] * (i + 0.5) for i in range(len(entropy))]
    ax_entropy.plot(xs, entropy, lw=1.2, label=run)
    ax_norm.plot(range(len(layers)), [l["raw_key_norm_cv"] for l in layers], "o-", label=run)
    shortest = min(by_length, key=int)
    if int(shortest) < int(longest):
      ax_entropy.axvline(int(shortest), color="grey", lw=0.8, ls=":")  # the training length
  ax_entropy.set_title("attention entropy (nats), mean over layers")
  ax_entropy.set_xlabel("query position")
  ax_norm.set_title("spread of raw key norms ||k_j|| (std / mean)")
  ax_norm.set_xlabel("layer")
  ax_norm.xaxis.get_major_locator().set_params(integer=True)
  for ax in (ax_entropy, ax_norm):
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  fig.tight_layout()
  try:
    fig.savefig(path, dpi=110, format="png")  # (path: maybe a temporary name)
  finally:
    plt.close(fig)


def results_writers(records, *, meta, diagnostics=None, retrieval=None) -> dict:
  """{file name: writer(path)} of results.{json,md} and, for next-token records, results.csv and the
  plots; for retrieval records, retrieval.csv and the heat maps."""
  payload = {"meta": meta, "results": records}
  summaries, retrieval_summaries = seed_summaries(records), seed_summaries(retrieval or [])
  if summaries:
    payload["seed_summary"] = summaries
  if retrieval:
    payload["retrieval"] = retrieval
  if retrieval_summaries:
    payload["retrieval_seed_summary"] = retrieval_summaries
  if diagnostics is not None:
    payload["diagnostics"] = diagnostics
  writers = {"results.json": text_writer(json.dumps(payload, indent=1))}
  sections = []
  if records:
    writers["results.csv"] = lambda path: write_csv(records, path)
    sections.append(accuracy_caption(records) + "\n\n" + markdown_table(records))
    writers["accuracy_by_position.png"] = lambda path: plot_accuracy_by_position(records, path)
  if retrieval:
    sections.append(retrieval_caption(retrieval, over_depths=True) + "\n\n" +
                    retrieval_table(retrieval))
    writers.update(retrieval_writers(retrieval))
  writers["results.md"] = text_writer("\n\n".join(sections) + "\n")
  if summaries or retrieval_summaries:
    writers["seed_summary.csv"] = lambda path: write_summary_csv(
        summaries + retrieval_summaries, path)
  if diagnostics:
    writers["diagnostics.png"] = lambda path: plot_diagnostics(diagnostics, path)
  return writers


def write_csv(records, path) -> None:
  with pathlib.Path(path).open("w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(records)


SUMMARY_CSV_FIELDS = ("run", "seeds", "config", "step", "train_length", "one_x", "length", "set",
                      "task",
                      "rope_scaling", "accuracy_mean", "accuracy_std", "loss_mean", "loss_std",
                      "token_accuracy_mean", "token_accuracy_std", "not_applicable")


def write_summary_csv(summaries, path) -> None:
  """A row per seed group's cell: mean and sample standard deviation over its seeds."""
  with pathlib.Path(path).open("w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=SUMMARY_CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(summaries)


def write_results(records, output, *, meta, diagnostics=None, retrieval=None) -> dict:
  """Writes results_writers' files into `output`, all or nothing (outputs.write_files); returns
  their paths. OutputError (one line: what was and was not written) if they cannot be."""
  output = pathlib.Path(output)
  output.mkdir(parents=True, exist_ok=True)
  return write_files(output, results_writers(records, meta=meta, diagnostics=diagnostics,
                                             retrieval=retrieval),
                     fix="pass another --output")
