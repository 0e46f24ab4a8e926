"""The reproduction's results page: the seed's tables with our numbers beside them (the comparison),
and plots."""

import json
import pathlib

from keynorm_jax.evaluation.outputs import text_writer, write_files
from keynorm_jax.evaluation.accuracy_tables import plot_accuracy_by_position, plot_diagnostics
from keynorm_jax.seed_results import (EXTRA_VARIANTS, NO_SCALING, WITH_SCALING, label,
                                                seed_name)


def _index(records):
  return {(r["config"], r["length"], r["set"], r["rope_scaling"]): r for r in records}


def _acc(found, config, length, eval_set, scaling="none"):
  r = found.get((config, length, eval_set, scaling))
  return None if r is None else 100 * r["accuracy"]


def _fmt(x, stderr=None):
  if x is None:
    return "–"
  return f"{x:.2f}" if stderr is None else f"{x:.2f} ± {100 * stderr:.2f}"


def _table(head, rows):
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  lines += ["| " + " | ".join(row) + " |" for row in rows]
  return "\n".join(lines)


def tables(records, diagnostics, train_length):
  """The page's markdown tables, keyed by name."""
  found = _index(records)
  long = 8 * train_length
  configs = list(dict.fromkeys(r["config"] for r in records))
  stderr = lambda c, l, s, sc="none": found.get((c, l, s, sc), {}).get("accuracy_stderr")
  main_rows, ratio = [], {}
  for c in configs:
    train = _acc(found, c, train_length, "non_repeated")
    rep, non = _acc(found, c, long, "repeated"), _acc(found, c, long, "non_repeated")
    ratio[c] = None if not train or non is None else non / train
    seed = NO_SCALING.get(seed_name(c))
    main_rows.append([
        label(c), _fmt(train, stderr(c, train_length, "non_repeated")),
        _fmt(rep, stderr(c, long, "repeated")), _fmt(non, stderr(c, long, "non_repeated")),
        _fmt(None if ratio[c] is None else 100 * ratio[c]),
        *( [f"{seed[1]:.2f}", f"{seed[2]:.2f}", f"{seed[3]:.2f}", f"{100 * seed[3] / seed[1]:.1f}"]
           if seed else ["", "", "", ""])])
  scaling_rows = []
  for c in configs:
    if seed_name(c) not in WITH_SCALING and seed_name(c) not in EXTRA_VARIANTS:
      continue
    row = [label(c)]
    for s in ("ntk", "yarn", "rerope"):
      ours = (_acc(found, c, long, "repeated", s), _acc(found, c, long, "non_repeated", s))
      seed = WITH_SCALING.get(seed_name(c), {}).get(s)
      row += [f"{_fmt(ours[0])} / {_fmt(ours[1])}",
              f"{seed[0]:.2f} / {seed[1]:.2f}" if seed else ""]
    scaling_rows.append(row)
  lengths = sorted({r["length"] for r in records})
  long_rows = [[label(c)] + [f"{_fmt(_acc(found, c, l, 'repeated'))} / "
                             f"{_fmt(_acc(found, c, l, 'non_repeated'))}" for l in lengths]
               for c in configs if any((c, l, "non_repeated", "none") in found
                                       for l in lengths if l > long)]
  diag_rows = []
  for c in configs:
    by_length = diagnostics.get(c, {})
    at_long = by_length.get(str(long)) or by_length.get(long)
    if not at_long:
      continue
    layers = list(at_long["layers"].values())
    mean = lambda key: sum(l[key] for l in layers) / len(layers)
    diag_rows.append([label(c), f"{mean('raw_key_norm_cv'):.3f}", f"{mean('key_norm_cv'):.3f}",
                      f"{mean('entropy_within_train'):.2f}", f"{mean('entropy_beyond_train'):.2f}"])
  x = long // train_length
  return {
      "main": _table(["variant", f"{train_length} (train)", f"{long} repeated",
                      f"{long} non-repeated", f"{x}x / train (%)", "seed 512", "seed 4096 rep.",
                      "seed 4096 non-rep.", "seed ratio (%)"], main_rows),
      "scaling": _table(["variant", "NTK (ours)", "NTK (seed)", "YaRN (ours)", "YaRN (seed)",
                         "ReRoPE (ours)", "ReRoPE (seed)"], scaling_rows),
      "long": _table(["variant"] + [f"{l} rep. / non-rep." for l in lengths], long_rows)
              if long_rows else "",
      "diagnostics": _table(["variant", "raw ‖k‖ spread (std/mean)", "‖k‖ spread in attention",
                             f"entropy, positions < {train_length}",
                             f"entropy, positions {train_length}..{long}"], diag_rows),
      "ratio": ratio,
  }


def write_page(records, diagnostics, meta, output) -> pathlib.Path:
  """Writes results.json, the plots and RESULTS.md into `output`, all or nothing
  (evaluation.outputs); returns the page's path."""
  output = pathlib.Path(output)
  output.mkdir(parents=True, exist_ok=True)
  train_length = min(r["train_length"] for r in records)
  long = 8 * train_length
  results = json.dumps({"meta": meta, "results": records, "diagnostics": diagnostics}, indent=1)
  unscaled = [r for r in records if r["length"] == long and r["rope_scaling"] == "none"]
  with_scalings = [r for r in records if r["length"] == long and seed_name(r["config"])
                   in ("baseline_rope", "kna_rope")]
  writers = {"results.json": text_writer(results),
             "accuracy_by_position.png": lambda path: plot_accuracy_by_position(unscaled, path)}
  if with_scalings:  # only when those variants were run
    writers["scalings_by_position.png"] = (
        lambda path: plot_accuracy_by_position(with_scalings, path))
  writers["diagnostics.png"] = lambda path: plot_diagnostics(
      {c: d for c, d in diagnostics.items() if d}, path)
  t = tables(records, diagnostics, train_length)
  keeps = {c: r for c, r in t["ratio"].items() if r is not None}
  verdict = ", ".join(f"{label(c)} {100 * r:.1f}%" for c, r in keeps.items())
  beside = ("; each Transformer row stands beside the seed's (GAU) row of the same variant"
            if meta.get("architecture") == "transformer" else "")
  page = f"""# Reproduction at scale `{meta['scale']}` ({meta.get('architecture', 'gau')})

Trained at {train_length} tokens, evaluated at {long} ({long // train_length}x) with unchanged
weights. Next-token accuracy (%) ± standard error over windows; "repeated" / "non-repeated" as in
the seed (keynorm.md §5). Seed numbers: GAU ~100M, 512 -> 4096 (kexue.fm/archives/9859){beside}.

## Without inference-time scaling

{t['main']}

Non-repeated accuracy at {long // train_length}x as a share of in-length accuracy: {verdict}.

## With inference-time scaling at {long} (repeated / non-repeated)

{t['scaling']}

## Longer still (no scaling)

{t['long'] or '(not evaluated)'}

## Diagnostics at {long} (mean over layers)

{t['diagnostics']}

![accuracy by position](accuracy_by_position.png)
{"![scalings by position](scalings_by_position.png)" if with_scalings else ""}
![diagnostics](diagnostics.png)

## Run

```
{json.dumps(meta, indent=1)}
```
"""
  writers["RESULTS.md"] = text_writer(page)
  return write_files(output, writers, fix="pass another --output")["RESULTS.md"]
