"""RESULTS.md's figures, drawn from the records with the study's shared styles (plot_style: a colour
per position method, a line style per attention variant, at most MAX_SERIES lines a panel).

Figure 1: accuracy by position at 8x of Baseline RoPE, KNA RoPE and each with a 512-token window,
one panel per architecture. Figure 2: how far the runs that read a key beyond 1x read it.
"""

import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.lines as mlines  # pylint: disable=wrong-import-position
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position

from keynorm_jax.study import plan, plot_style  # pylint: disable=wrong-import-position
from keynorm_jax.study.reading import (accuracy, find_retrieval, method_name,  # pylint: disable=wrong-import-position
                                       retrieval_runs, text_runs)

FIGURE1, FIGURE2 = "figure1_by_position.png", "figure2_needle_reach.png"
ARCHITECTURES = {"gau": "GAU", "transformer": "Transformer"}
PAIR = ("baseline_rope", "kna_rope")
WINDOW_COLOUR = "0.55"
REACH_BAR = 0.5  # Figure 2 draws the seed-0 runs at least this exact at 2x
REACH_TASK = {"transformer": "passkey", "gau": "passkey_letters"}
TASK_NAMES = {"passkey": "digit passkey", "passkey_letters": "letter key"}
REACH_COLUMNS = (("baseline", "Baseline"), ("kna", "KNA"), ("other", "other attention variants"))


def _profile(rec, method):
  length = 8 * rec["config"]["train_length"]
  for r in rec["records"]:
    if r["length"] == length and r["set"] == "non_repeated" and r["rope_scaling"] == method:
      return r["position_bucket"], r["accuracy_by_position"]
  return None


def _mean_profile(recs, method):
  found = [_profile(r, method) for r in recs]
  found = [f for f in found if f is not None]
  if not found:
    return None
  bucket = found[0][0]
  profile = [statistics.mean(values) for values in zip(*(f[1] for f in found))]
  return [bucket * (i + 0.5) for i in range(len(profile))], [100 * a for a in profile]


def _figure1_runs(records):
  runs = text_runs(records)
  return {a: [runs[a, n] for n in PAIR if (a, n) in runs] for a in ARCHITECTURES
          if all((a, n) in runs for n in PAIR)}


def plot_figure1_accuracy_by_position(records, path) -> bool:
  """Figure 1; False (nothing drawn) when an architecture lacks the pair."""
  panels = _figure1_runs(records)
  if not panels:
    return False
  fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 3.6), sharey=True,
                           squeeze=False)
  styles = plot_style.RunStyles([recs[0] for pair in panels.values() for recs in pair])
  for ax, (architecture, pair) in zip(axes[0], panels.items()):
    ceiling = []
    for recs in pair:
      style = styles.of(recs[0])
      xs, ys = _mean_profile(recs, "none")
      ax.plot(xs, ys, lw=1.3, **style)
      window = _mean_profile(recs, "window")
      if window:
        ax.plot(*window, lw=1.1, color=WINDOW_COLOUR, ls=style["ls"])
        ceiling.append(100 * statistics.mean(accuracy(r, 8, "window") for r in recs))
    train = pair[0][0]["config"]["train_length"]
    ax.axvline(train, color="black", lw=0.8, ls=":")
    if ceiling:
      ax.axhline(max(ceiling), color=WINDOW_COLOUR, lw=0.8, ls=(0, (1, 2)))
    seeds = ", ".join(f"{method_name(recs[0]['config_name'])} {len(recs)}" for recs in pair)
    ax.set_title(f"{ARCHITECTURES[architecture]} (mean over seeds: {seeds})", fontsize=10)
    ax.set_xlabel("position in the 4096-token window (trained at 512: dotted line)", fontsize=8)
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel("next-token accuracy (%)")
  handles = [mlines.Line2D([], [], color=plot_style.POSITION_COLOURS["rope"], ls=ls, lw=1.5,
                           label=name)
             for name, ls in (("Baseline RoPE", "-"), ("KNA RoPE", "--"))]
  handles += [mlines.Line2D([], [], color=WINDOW_COLOUR, ls=ls, lw=1.5, label=name)
              for name, ls in (("Baseline RoPE, 512-token window", "-"),
                               ("KNA RoPE, 512-token window", "--"))]
  handles += [mlines.Line2D([], [], color=WINDOW_COLOUR, ls=(0, (1, 2)), lw=1,
                            label="the better window's accuracy over the whole window")]
  fig.suptitle("Figure 1: accuracy by position at 8x the training length", fontsize=10)
  plot_style.legend_below(fig, handles, columns=3)
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return True


def needle_reach_runs(records) -> dict:
  """{(architecture, column): [seed-0 records]} of the runs that read their task's key at least
  REACH_BAR exact at 2x; column: 'baseline', 'kna' or 'other' (the attention variant)."""
  panels = {}
  for (architecture, name), recs in sorted(retrieval_runs(records).items()):
    rec = next((r for r in recs if r["seed"] == 0), None)
    found = rec and find_retrieval(rec, REACH_TASK[architecture], 2)
    if not found or (found.get("accuracy") or 0) < REACH_BAR:
      continue
    attention = plot_style.split_run(rec)[0]
    column = attention if attention in ("baseline", "kna") else "other"
    panels.setdefault((architecture, column), []).append(rec)
  return panels


def plot_figure2_needle_reach(records, path) -> bool:
  """Figure 2: exact match by length, a row per architecture, a column per attention group."""
  panels = needle_reach_runs(records)
  if not panels:
    return False
  rows = [a for a in ("transformer", "gau") if any(k[0] == a for k in panels)]
  fig, axes = plt.subplots(len(rows), len(REACH_COLUMNS), figsize=(12, 3.1 * len(rows)),
                           sharex=True, sharey=True, squeeze=False)
  drawn = [r for recs in panels.values() for r in recs]
  styles = plot_style.RunStyles(drawn)
  for i, architecture in enumerate(rows):
    task = REACH_TASK[architecture]
    for j, (column, title) in enumerate(REACH_COLUMNS):
      ax = axes[i][j]
      recs = panels.get((architecture, column), [])
      if len(recs) > plot_style.MAX_SERIES:
        raise ValueError(f"Figure 2: {len(recs)} lines in one panel; raise REACH_BAR")
      for rec in recs:
        points = [(m, find_retrieval(rec, task, m)) for m in plan.RETRIEVAL_MULTIPLES]
        points = [(m, 100 * r["accuracy"]) for m, r in points
                  if r and r.get("accuracy") is not None]
        ax.plot(*zip(*points), lw=1.4, marker="o", ms=3, **styles.of(rec))
      ax.axvline(1, color="black", lw=0.8, ls=":")
      ax.set_xscale("log", base=2)
      ax.set_xticks(plan.RETRIEVAL_MULTIPLES, [f"{m}x" for m in plan.RETRIEVAL_MULTIPLES])
      ax.set_ylim(-3, 103)
      ax.grid(alpha=0.3)
      ax.set_title(f"{ARCHITECTURES[architecture]}, {TASK_NAMES[task]}: {title}", fontsize=9)
      if not recs:
        ax.text(4, 50, "no run reads the key at 2x", ha="center", va="center", fontsize=9,
                color="0.4")
    axes[i][0].set_ylabel("exact match (%), 20 prompts")
  fig.suptitle("Figure 2: needle reach of the runs that read a key at 2x (seed 0, no "
               "inference-time method; dotted: the training length)", fontsize=10)
  handles = [mlines.Line2D([], [], color=c, lw=2, label=method_name(f"x_{p}").removeprefix("x "))
             for p, c in styles.colour.items()]
  handles += [mlines.Line2D([], [], color="black", ls=ls, lw=1.2,
                            label=method_name(f"{a}_rope").removesuffix(" RoPE"))
              for a, ls in styles.line_style.items()]
  plot_style.legend_below(fig, handles, columns=5, xlabel="length / training length")
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return True


def write(records, output) -> None:
  """Figures 1 and 2 into `output` (results/field/)."""
  plot_figure1_accuracy_by_position(records, output / FIGURE1)
  plot_figure2_needle_reach(records, output / FIGURE2)


def by_position_caption(records, folder) -> str:
  panels = _figure1_runs(records)
  if not panels:
    return "(Figure 1 needs Baseline and KNA RoPE records.)"
  return (f"![Figure 1: accuracy by position at 8x]({folder}{FIGURE1})\n\n"
          "**Figure 1.** Next-token accuracy by position in the 4096-token windows (buckets of 64 "
          "tokens, mean over the seeds of Table 1), colour RoPE, solid Baseline, dashed KNA; grey: "
          "the same model reading only the last 512 tokens; dotted vertical line: the training "
          "length; dotted horizontal line: the better window's accuracy at 8x (Table 1's window "
          "column).")


def reach_caption(records, folder) -> str:
  panels = needle_reach_runs(records)
  if not panels:
    return "(No run reads a key beyond 1x yet.)"
  names = {a: ", ".join(method_name(r["config_name"]) for c, _ in REACH_COLUMNS
                        for r in panels.get((a, c), []))
           for a in ARCHITECTURES}
  return (f"![Figure 2: needle reach]({folder}{FIGURE2})\n\n"
          f"**Figure 2.** Exact match by length of the seed-0 runs at least {100 * REACH_BAR:.0f}% "
          "exact at 2x (Table 2's rows, seed 0): on the Transformer (digit passkey) "
          f"{names['transformer'] or 'none'}; on the GAU layout (letter key) "
          f"{names['gau'] or 'none'}. Colour: position method; line style: attention variant.")
