"""The field study's tables and plots, rebuilt from the records in results/field/.

Every number comes from a record file; each row names its seed(s) and commit. Accuracies are
next-token accuracy (%) on non-repeated held-out text unless a table says otherwise.
"""

import collections
import pathlib
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

from keynorm_jax.study import plan  # pylint: disable=g-import-not-at-top,wrong-import-position

OPTION_ORDER = ("none", "yarn", "rerope", "llama3", "alibi_interpolate", "ntk_alibi", "window",
                "streaming")


def _find(record, length, eval_set="non_repeated", method="none"):
  for r in record["records"]:
    if r["length"] == length and r["set"] == eval_set and r["rope_scaling"] == method:
      return r
  return None


def _pct(x):
  return "n/a" if x is None else f"{100 * x:.2f}"


def _train_length(record):
  return record["config"]["train_length"]


def within_window_retention(r, train_length):
  """Accuracy at positions >= train_length over positions < train_length, same windows."""
  if r is None or r.get("accuracy") is None:
    return None
  buckets = r["accuracy_by_position"]
  per = train_length // r["position_bucket"]
  inside, beyond = buckets[:per], buckets[per:]
  if not beyond or not inside:
    return None
  return (sum(beyond) / len(beyond)) / max(sum(inside) / len(inside), 1e-12)


def copy_accuracies(r, train_length):
  """(first copy, later copies inside train_length, later copies beyond) of a repeated result."""
  if r is None or r.get("accuracy") is None:
    return None, None, None
  bucket, buckets, period = r["position_bucket"], r["accuracy_by_position"], r["repeat_period"]
  mean = lambda xs: sum(xs) / len(xs) if xs else None
  first = mean([a for i, a in enumerate(buckets) if i * bucket < period])
  inside = mean([a for i, a in enumerate(buckets) if period <= i * bucket < train_length])
  beyond = mean([a for i, a in enumerate(buckets) if i * bucket >= train_length])
  return first, inside, beyond


def _seed0(records, architecture):
  return [r for r in records if r["seed"] == 0 and r["architecture"] == architecture]


def _table(head, rows):
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def field_table(records, architecture):
  rows = []
  for rec in sorted(_seed0(records, architecture), key=lambda r: r["config_name"]):
    t = _train_length(rec)
    one, eight, sixteen = (_find(rec, m * t) for m in plan.LENGTH_MULTIPLES)
    acc = lambda r: None if r is None else r.get("accuracy")
    ratio = (acc(eight) / acc(one)) if acc(eight) is not None and acc(one) else None
    within = within_window_retention(eight, t)
    rows.append([f"`{rec['config_name']}`", _pct(acc(one)), _pct(acc(eight)), _pct(acc(sixteen)),
                 _pct(ratio), _pct(within), (rec["provenance"]["commit"] or "?")[:8]])
  return _table(["config", "1x", "8x", "16x", "8x / 1x", "8x beyond / inside (same windows)",
                 "commit"], rows)


def options_table(records, architecture):
  rows = []
  for rec in sorted(_seed0(records, architecture), key=lambda r: r["config_name"]):
    t = _train_length(rec)
    cells = []
    for option in OPTION_ORDER:
      r = _find(rec, 8 * t, method=option)
      cells.append("" if r is None else _pct(r.get("accuracy")))
    rows.append([f"`{rec['config_name']}`"] + cells)
  return _table(["config (8x, non-repeated)"] + list(OPTION_ORDER), rows)


def copy_table(records, architecture):
  rows = []
  for rec in sorted(_seed0(records, architecture), key=lambda r: r["config_name"]):
    t = _train_length(rec)
    first, inside, _ = copy_accuracies(_find(rec, t, "repeated"), t)
    _, _, beyond = copy_accuracies(_find(rec, 8 * t, "repeated"), t)
    rows.append([f"`{rec['config_name']}`", _pct(first), _pct(inside), _pct(beyond)])
  return _table(["config", "1x: first copy", "1x: later copies", "8x: copies beyond 1x"], rows)


def _mean_over_layers(layers, key):
  values = [layer["reach"].get(key) if key in layer.get("reach", {}) else layer.get(key)
            for layer in layers.values()]
  values = [v for v in values if v is not None]
  return sum(values) / len(values) if values else None


def reach_table(records, architecture):
  """Where attention goes at 8x (diagnostics, mean over layers and heads): inside vs beyond."""
  rows = []
  for rec in sorted(_seed0(records, architecture), key=lambda r: r["config_name"]):
    found = rec.get("diagnostics", {}).get(str(8 * _train_length(rec)))
    if not found or "reach" not in next(iter(found["layers"].values()), {}):
      continue
    layers = found["layers"]
    cell = lambda key, scale=1.0, digits=1: (
        "n/a" if _mean_over_layers(layers, key) is None
        else f"{scale * _mean_over_layers(layers, key):.{digits}f}")
    rows.append([f"`{rec['config_name']}`",
                 cell("mean_distance_within_train", digits=0),
                 cell("mean_distance_beyond_train", digits=0),
                 cell("far_mass_beyond_train", 100),
                 cell("sink_mass_within_train", 100), cell("sink_mass_beyond_train", 100),
                 cell("entropy_within_train", digits=2), cell("entropy_beyond_train", digits=2)])
  return _table(["config", "mean distance inside", "mean distance beyond",
                 "mass at unseen distances beyond (%)", "sink mass inside (%)",
                 "sink mass beyond (%)", "entropy inside", "entropy beyond"], rows)


def seed_table(records):
  by_config = collections.defaultdict(list)
  for rec in records:
    by_config[rec["config_name"]].append(rec)
  rows = []
  for name, recs in sorted(by_config.items()):
    if len(recs) < 2:
      continue
    t = _train_length(recs[0])
    def stat(values):
      values = [v for v in values if v is not None]
      if len(values) < 2:
        return "n/a"
      return f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values):.2f}"
    one = [(_find(r, t) or {}).get("accuracy") for r in recs]
    eight = [(_find(r, 8 * t) or {}).get("accuracy") for r in recs]
    ratio = [e / o if e is not None and o else None for e, o in zip(eight, one)]
    rows.append([f"`{name}`", ", ".join(str(r["seed"]) for r in sorted(recs, key=lambda r: r["seed"])),
                 stat(one), stat(eight), stat(ratio)])
  return _table(["config", "seeds", "1x", "8x", "8x / 1x"], rows)


def plot_by_position(records, architecture, path):
  recs = sorted(_seed0(records, architecture), key=lambda r: r["config_name"])
  fig, ax = plt.subplots(figsize=(11, 5))
  ax.set_prop_cycle(color=plt.cm.tab20.colors + plt.cm.tab20b.colors)
  for rec in recs:
    r = _find(rec, 8 * _train_length(rec))
    if r is None or r.get("accuracy") is None:
      continue
    xs = [r["position_bucket"] * (i + 0.5) for i in range(len(r["accuracy_by_position"]))]
    style = "-" if "kna" in rec["config_name"] else "--"
    ax.plot(xs, r["accuracy_by_position"], style, lw=1.1, label=rec["config_name"])
  if recs:
    ax.axvline(_train_length(recs[0]), color="grey", lw=0.8, ls=":")
  ax.set_xlabel("position")
  ax.set_ylabel("next-token accuracy (non-repeated)")
  ax.set_title(f"{architecture}: accuracy by position at 8x the training length (solid: KNA)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=6, ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def write_report(records, output) -> pathlib.Path:
  """Writes <output>/FIELD.md and its plots from the records; returns the page's path."""
  output = pathlib.Path(output)
  output.mkdir(parents=True, exist_ok=True)
  sections = [
      "# The field study (generated from results/field/*.json by `python -m "
      "keynorm_jax.study --report_only`)\n",
      f"{len(records)} finished runs. Accuracy in % (next-token, held-out text); `8x / 1x` divides "
      "accuracies on different windows; `beyond / inside` divides positions >= train_length by "
      "positions < train_length of the same 8x windows. Training and evaluation of each run: "
      "`keynorm_jax/study/plan.py` (cpu: 1000 steps of 8 x 512; 16 windows at 1x and 8x, 8 at "
      "16x).\n",
  ]
  for architecture in ("gau", "transformer"):
    if not _seed0(records, architecture):
      continue
    png = f"by_position_{architecture}.png"
    plot_by_position(records, architecture, output / png)
    sections += [f"## {architecture}: the field table (seed 0)\n", field_table(records, architecture),
                 f"\n## {architecture}: each method's inference-time options at 8x\n",
                 options_table(records, architecture),
                 f"\n## {architecture}: the copy test (repeated, period train_length / "
                 f"{plan.REPEAT_PERIOD_FRACTION})\n", copy_table(records, architecture),
                 f"\n![accuracy by position]({png})\n",
                 f"## {architecture}: where attention goes at 8x (diagnostics)\n",
                 "Mean over layers and heads of 4 non-repeated 8x windows: the mean attention "
                 "distance (tokens) of queries inside (< train_length) and beyond; the attention mass"
                 " on keys at distances never seen in training (>= train_length, at the resolution "
                 "of train_length / 8 blocks) for queries beyond; the mass on the first "
                 "train_length / 8 tokens (sink); the entropy (nats). See "
                 "keynorm_jax/evaluation/diagnostics.py."
                 "\n", reach_table(records, architecture), ""]
  sections += ["## Seed-to-seed spread (mean ± standard deviation over seeds)\n",
               seed_table(records)]
  page = output / "FIELD.md"
  page.write_text("\n".join(sections) + "\n")
  return page
