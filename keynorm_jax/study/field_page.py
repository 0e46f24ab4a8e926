"""FIELD.md, the field study's page: its tables and plots, rebuilt from the records in
results/field/.

Every number comes from a record file; each row names its seed(s) and commit. Accuracies are
next-token accuracy (%) on non-repeated held-out text unless a table says otherwise.
"""

import collections
import pathlib
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

from keynorm_jax.study import figures, plan, plot_style, retrieval_report, run_log  # pylint: disable=g-import-not-at-top,wrong-import-position

OPTION_ORDER = ("none", "yarn", "rerope", "llama3", "alibi_interpolate", "ntk_alibi", "window",
                "streaming", "drope_temperature")


def _find(record, length, eval_set="non_repeated", method="none"):
  for r in record["records"]:
    if r["length"] == length and r["set"] == eval_set and r["rope_scaling"] == method:
      return r
  return None


def _pct(x):
  return "n/a" if x is None else f"{100 * x:.2f}"


def _name(record):
  """The run's label (plan.StudyRun.label: the config name, with its model settings, copy and
  retrieval shares)."""
  return record.get("label", record["config_name"])


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


def made_with(record) -> str:
  """The code version and the device that made a record (its commit can name a checkout's base
  with local edits; the code version is the hash of the package that ran)."""
  prov = record["provenance"]
  device = prov.get("device") or prov.get("backend") or "?"
  device = "H100" if "H100" in device else "H200" if "H200" in device else device
  return f"{(prov.get('code_version') or '?')[:8]} ({device})"


def field_table(records, architecture):
  rows = []
  for rec in sorted(_seed0(records, architecture), key=_name):
    t = _train_length(rec)
    one, eight, sixteen = (_find(rec, m * t) for m in plan.LENGTH_MULTIPLES)
    acc = lambda r: None if r is None else r.get("accuracy")
    ratio = (acc(eight) / acc(one)) if acc(eight) is not None and acc(one) else None
    within = within_window_retention(eight, t)
    rows.append([f"`{_name(rec)}`", _pct(acc(one)), _pct(acc(eight)), _pct(acc(sixteen)),
                 _pct(ratio), _pct(within), made_with(rec)])
  return _table(["config", "1x", "8x", "16x", "8x / 1x", "8x beyond / inside (same windows)",
                 "code version (device)"], rows)


def _accuracy_cells(rec):
  """1x, 8x, 8x / 1x and same-window retention of a record, formatted."""
  if rec is None:
    return [""] * 4
  t = _train_length(rec)
  one, eight = _find(rec, t), _find(rec, 8 * t)
  acc = lambda r: None if r is None else r.get("accuracy")
  ratio = (acc(eight) / acc(one)) if acc(eight) is not None and acc(one) else None
  return [_pct(acc(one)), _pct(acc(eight)), _pct(ratio), _pct(within_window_retention(eight, t))]


SIDE_BY_SIDE_NOTE = ("A row's own model settings (e.g. `gau_qk=separate+gau_heads=4`) are its GAU "
                     "run's alone; its Transformer columns are the config's Transformer run with "
                     "the same shares of copies and retrieval episodes.")
# Rows at Random Float Sampling's indices say which rule made them (positions/indices.py).
RANDOM_FLOAT_NOTE = ("Random Float Sampling rows: `indices=random_float` follows a secondary "
                     "description of the paper's Algorithm 1 (training draws from one training "
                     "length; inference at (2i - 1) / (2 max(n_train, n)) of it), not yet checked "
                     "against the paper's own text; `indices=random_float_stretched` is the "
                     "project's earlier reading of its abstract alone (draws from 8 training "
                     "lengths, an even grid over them at inference). docs/positions.md.")


def training_summary(records) -> str:
  """What the records trained, counted from their configs: e.g. '1000 steps of 8 x 512 (65 runs),
  3000 steps of 8 x 512 (40 runs)'."""
  counts = collections.Counter((r["config"]["num_train_steps"], r["config"]["batch_size"],
                                r["config"]["train_length"]) for r in records)
  return ", ".join(f"{steps} steps of {batch} x {length} ({n} run{'s' * (n != 1)})"
                   for (steps, batch, length), n in sorted(counts.items()))


def _windows(scale) -> str:
  """The evaluation windows per length multiple of `scale`, e.g. '16 at 1x, 16 at 8x, 8 at 16x'."""
  return ", ".join(f"{n} at {m}x" for m, n in plan.SCALES[scale]["windows"].items())


def architecture_table(records):
  """GAU and Transformer side by side for every Transformer run (seed 0): beside it each GAU run
  of the same config and shares, with any GAU model settings of its own (a row each), or none."""
  by_name = {_name(rec): rec for rec in records if rec["seed"] == 0}
  prefix = "transformer_"
  gau = sorted(n for n in by_name if not n.startswith(prefix))
  rows = [[f"`{g}`"] + _accuracy_cells(by_name.get(g)) + _accuracy_cells(by_name[prefix + n])
          for n in sorted(n[len(prefix):] for n in by_name if n.startswith(prefix))
          for g in [g for g in gau if plan.without_model_changes(g) == n] or [n]]
  cells = ["1x", "8x", "8x / 1x", "same windows"]
  return _table(["config"] + [f"GAU {c}" for c in cells] + [f"Transformer {c}" for c in cells],
                rows)


def options_table(records, architecture):
  rows = []
  for rec in sorted(_seed0(records, architecture), key=_name):
    t = _train_length(rec)
    cells = []
    for option in OPTION_ORDER:
      r = _find(rec, 8 * t, method=option)
      cells.append("" if r is None else _pct(r.get("accuracy")))
    rows.append([f"`{_name(rec)}`"] + cells)
  return _table(["config (8x, non-repeated)"] + list(OPTION_ORDER), rows)


def copy_table(records, architecture):
  rows = []
  for rec in sorted(_seed0(records, architecture), key=_name):
    t = _train_length(rec)
    first, inside, _ = copy_accuracies(_find(rec, t, "repeated"), t)
    _, _, beyond = copy_accuracies(_find(rec, 8 * t, "repeated"), t)
    rows.append([f"`{_name(rec)}`", _pct(first), _pct(inside), _pct(beyond)])
  return _table(["config", "1x: first copy", "1x: later copies", "8x: copies beyond 1x"], rows)


def _mean_over_layers(layers, key):
  values = [layer["reach"].get(key) if key in layer.get("reach", {}) else layer.get(key)
            for layer in layers.values()]
  values = [v for v in values if v is not None]
  return sum(values) / len(values) if values else None


def reach_table(records, architecture):
  """Where attention goes at 8x (diagnostics, mean over layers and heads): inside vs beyond."""
  rows = []
  for rec in sorted(_seed0(records, architecture), key=_name):
    found = rec.get("diagnostics", {}).get(str(8 * _train_length(rec)))
    if not found or "reach" not in next(iter(found["layers"].values()), {}):
      continue
    layers = found["layers"]
    cell = lambda key, scale=1.0, digits=1: (
        "n/a" if _mean_over_layers(layers, key) is None
        else f"{scale * _mean_over_layers(layers, key):.{digits}f}")
    rows.append([f"`{_name(rec)}`",
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
    by_config[_name(rec)].append(rec)
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
  if not rows:
    return "(No config has records for two seeds yet.)"
  return _table(["config", "seeds", "1x", "8x", "8x / 1x"], rows)


def _text_only(records, architecture):
  """The seed-0 records of `architecture` trained on text alone (no copies, retrieval episodes or
  model settings of their own): what the per-method plots draw, at most a few lines a panel."""
  return [r for r in sorted(_seed0(records, architecture), key=_name)
          if r.get("label", r["config_name"]) == r["config_name"]]


def _by_position_records(records, architecture):
  """The text-only seed-0 records of `architecture` with an accuracy at 8x
  (plot_accuracy_by_position)."""
  return [r for r in _text_only(records, architecture)
          if (_find(r, 8 * _train_length(r)) or {}).get("accuracy") is not None]


def _mark_train_lengths(panels, recs) -> None:
  """A grey vertical line at each training length of a panel's runs, once per panel and length."""
  for position, length in {(plot_style.split_run(r)[1], _train_length(r)) for r in recs}:
    panels[position].axvline(length, color="grey", lw=0.8, ls=":")


def _plot_per_method(recs, draw, path, *, ylabel: str, title: str, xlabel: str) -> None:
  """Saves a figure of a panel per position method (plot_style.method_grid): draw(ax, record,
  style) draws each record in its method's panel; the training lengths marked, one legend below."""
  fig, panels, styles = plot_style.method_grid(recs, sharex=True, sharey=True)
  for rec in recs:
    draw(panels[plot_style.split_run(rec)[1]], rec, styles.of(rec))
  _mark_train_lengths(panels, recs)
  fig.supylabel(ylabel, fontsize=9)
  fig.suptitle(title, fontsize=10)
  plot_style.legend_below(fig, styles.legend_handles(), xlabel=xlabel)
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_accuracy_by_position(records, architecture, path) -> bool:
  """Accuracy by position at 8x, seed 0, trained on text alone, a panel per position method
  (plot_style.method_grid); False (nothing drawn) when no record has an 8x accuracy."""
  recs = _by_position_records(records, architecture)
  if not recs:
    return False

  def draw(ax, rec, style):
    r = _find(rec, 8 * _train_length(rec))
    xs = [r["position_bucket"] * (i + 0.5) for i in range(len(r["accuracy_by_position"]))]
    ax.plot(xs, r["accuracy_by_position"], lw=1.0, **style)

  _plot_per_method(recs, draw, path, ylabel="next-token accuracy (non-repeated)",
                   title=f"{architecture}: accuracy by position at 8x the training length, seed 0, "
                   "trained on text alone (grey vertical line: the training length)", xlabel="position")
  return True


def _reach_layers(rec):
  found = rec.get("diagnostics", {}).get(str(8 * _train_length(rec)))
  layers = (found or {}).get("layers", {})
  return layers if layers and all("reach" in l for l in layers.values()) else None


def plot_attention_by_distance(records, architecture, path) -> bool:
  """Attention mass by distance for queries beyond the training length at 8x (mean over layers),
  seed 0, a panel per position method; False (nothing drawn) when no record has the measurement."""
  recs = [r for r in _text_only(records, architecture) if _reach_layers(r)]
  if not recs:
    return False

  def draw(ax, rec, style):
    profiles = [l["reach"]["mass_by_block_distance_beyond_train"]
                for l in _reach_layers(rec).values()]
    mass = [sum(p[i] for p in profiles) / len(profiles) for i in range(len(profiles[0]))]
    bucket = rec["diagnostics"][str(8 * _train_length(rec))]["position_bucket"]
    ax.semilogy([bucket * i for i in range(len(mass))], [max(m, 1e-6) for m in mass], lw=1.0,
                **style)

  _plot_per_method(recs, draw, path, ylabel="attention mass (queries beyond train_length)",
                   title=f"{architecture}: where attention goes at 8x, mean over layers, seed 0, "
                   "trained on text alone (grey vertical line: the training length; floor 1e-6)",
                   xlabel="distance from query to key (tokens, blocks of train_length / 8)")
  return True


def write_field_page(records, output) -> pathlib.Path:
  """Writes <output>/FIELD.md and its plots, RESULTS.md's figures and the run log (NOTES.md) from
  the records; returns FIELD.md's path."""
  output = pathlib.Path(output)
  output.mkdir(parents=True, exist_ok=True)
  sections = [
      "# The field study (generated from results/field/*.json by `python -m "
      "keynorm_jax.study --report_only`)\n",
      f"{len(records)} finished runs. Accuracy in % (next-token, held-out text); `8x / 1x` divides "
      "accuracies on different windows; `beyond / inside` divides positions >= train_length by "
      "positions < train_length of the same 8x windows. Training and evaluation of each run: "
      f"`keynorm_jax/study/plan.py`; these records trained {training_summary(records)}, and were "
      "evaluated on held-out windows ("
      + "; ".join(f"{scale}: {_windows(scale)}" for scale in sorted({r["scale"] for r in records}))
      + ").\n",
  ]
  random_float = any("indices=random_float" in r.get("label", "") for r in records)
  sections += ["## GAU and Transformer side by side (seed 0)\n", SIDE_BY_SIDE_NOTE + "\n",
               *([RANDOM_FLOAT_NOTE + "\n"] if random_float else []),
               architecture_table(records), ""]
  for architecture in ("gau", "transformer"):
    if not _seed0(records, architecture):
      continue
    png = f"by_position_{architecture}.png"
    drawn = plot_accuracy_by_position(records, architecture, output / png)
    sections += [f"## {architecture}: the field table (seed 0)\n", field_table(records, architecture),
                 f"\n## {architecture}: each method's inference-time options at 8x\n",
                 options_table(records, architecture),
                 f"\n## {architecture}: the copy test (repeated, period train_length / "
                 f"{plan.REPEAT_PERIOD_FRACTION})\n", copy_table(records, architecture),
                 f"\n![accuracy by position]({png})\n" if drawn else "",
                 f"## {architecture}: where attention goes at 8x (diagnostics)\n",
                 "Mean over layers and heads of 4 non-repeated 8x windows: the mean attention "
                 "distance (tokens) of queries inside (< train_length) and beyond; the attention mass"
                 " on keys at distances never seen in training (>= train_length, at the resolution "
                 "of train_length / 8 blocks) for queries beyond; the mass on the first "
                 "train_length / 8 tokens (sink); the entropy (nats). See "
                 "keynorm_jax/evaluation/diagnostics.py."
                 "\n", reach_table(records, architecture), ""]
    png = f"reach_{architecture}.png"   # (the name of the plots already in results/field/)
    if plot_attention_by_distance(records, architecture, output / png):
      sections += [f"![where attention goes]({png})\n"]
  sections += ["## Seed-to-seed spread (mean ± standard deviation over seeds)\n",
               seed_table(records)]
  retrieval_report.write_plots(records, output)
  figures.write(records, output)
  sections += retrieval_report.retrieval_sections(records)
  page = output / "FIELD.md"
  page.write_text("\n".join(sections) + "\n")
  run_log.write(records, output / "NOTES.md")
  return page
