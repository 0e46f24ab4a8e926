"""RESULTS.md's generated parts: Tables 1-3 and the captions of Figures 1-2, from the records.

Each part sits between markers (`<!-- table1 -->` ... `<!-- /table1 -->`) that `update_page`
rewrites; the page's hand-written frame around them (the question, the answers, how to reproduce)
is left as it is. The full tables are FIELD.md's (report.py); this page shows a few.
"""

import pathlib
import statistics

from keynorm_jax.seed_results import NO_SCALING
from keynorm_jax.study import figures, plan, preregistered, window_control
from keynorm_jax.study.stats import sign_test, wilson
from keynorm_jax.study.reading import (KEY_BAR, accuracy, find_retrieval, learned, method_name,
                                       retrieval_runs, text_runs)

BLOCKS = ("table1", "table2", "table3", "table3b", "figure1", "figure2", "answer_keynorm",
          "answer_window", "answer_pre_registered")
# Table 1's rows besides the best at 8x: the seed's variants the field trained, QK-norm, NoPE, and
# the methods with seeds.
TABLE1_ROWS = ("baseline_rope", "kna_rope", "cosa_logn_rope", "qknorm_rope", "qkln_rope",
               "baseline_nope", "kna_nope", "baseline_alibi", "kna_alibi", "baseline_kerple_log",
               "baseline_scale_invariant", "kna_scale_invariant")
TABLE1_BEST = 5  # and the best this many at 8x on each architecture
RETRIEVAL_TASK = figures.REACH_TASK
TASK_NAMES = figures.TASK_NAMES


def _table(head, rows):
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


# --- next-token accuracy ------------------------------------------------------------------------


def spread(values, digits=1) -> str:
  """'mean ± sd' over seeds in %, the mean alone for one value, '' for none."""
  values = [100 * v for v in values if v is not None]
  if not values:
    return ""
  if len(values) == 1:
    return f"{values[0]:.{digits}f}"
  return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _cells(recs):
  """seeds, 1x, 8x, 8x / 1x and the 512-token window at 8x of one config's records."""
  if not recs:
    return ["–"] * 5
  ratio = [accuracy(r, 8) / accuracy(r, 1) if accuracy(r, 8) is not None else None for r in recs]
  return [str(len(recs)), spread([accuracy(r, 1) for r in recs]),
          spread([accuracy(r, 8) for r in recs]), spread(ratio),
          spread([accuracy(r, 8, "window") for r in recs])]


def _seed_article(name):
  if name not in NO_SCALING:
    return ""
  _, train, _, eight = NO_SCALING[name]
  return f"{train:.2f} → {eight:.2f} ({100 * eight / train:.1f})"


def best_at_8x(runs, architecture, count=TABLE1_BEST) -> list[str]:
  """The `count` configs of `architecture` with the highest mean 8x accuracy."""
  means = {name: statistics.mean(accuracy(r, 8) for r in recs)
           for (arch, name), recs in runs.items()
           if arch == architecture and all(accuracy(r, 8) is not None for r in recs)}
  return sorted(means, key=means.get, reverse=True)[:count]


def table1(records, reproduction=None) -> str:
  """Next-token accuracy at 1x and 8x, GAU and Transformer side by side: TABLE1_ROWS and the best
  at 8x on each architecture, then the seed's other variants from the reproduction's record."""
  runs = text_runs(records)
  names = list(TABLE1_ROWS)
  for architecture in ("gau", "transformer"):
    names += [n for n in best_at_8x(runs, architecture) if n not in names]
  names = [n for n in names if ("gau", n) in runs or ("transformer", n) in runs]
  rows = [[method_name(n)] + _cells(runs.get(("gau", n))) + _cells(runs.get(("transformer", n)))
          + [_seed_article(n)] for n in names]
  for name in NO_SCALING:
    if name in names or reproduction is None:
      continue
    found = [r for r in reproduction["results"] if r["config"] == name and r["set"] == "non_repeated"
             and r["rope_scaling"] == "none"]
    acc = {r["length"] // r["train_length"]: r["accuracy"] for r in found}
    if 1 in acc and 8 in acc:
      rows.append([f"{method_name(name)} (reproduction)", "1", spread([acc[1]]),
                   spread([acc[8]]), spread([acc[8] / acc[1]]), "–"] + ["–"] * 5
                  + [_seed_article(name)])
  head = ["method", "GAU seeds", "GAU 1x", "GAU 8x", "GAU 8x / 1x", "GAU 512-token window at 8x",
          "Transformer seeds", "Transformer 1x", "Transformer 8x", "Transformer 8x / 1x",
          "Transformer 512-token window at 8x", "seed article (GAU ~100 M): 512 → 4096 (8x / 1x)"]
  return ("Next-token accuracy (%) on held-out text, trained at 512 (1x), evaluated at 4096 (8x) "
          "with the same weights; **mean ± standard deviation over the seeds** where a row has 2 or "
          "more, the one run's value where it has 1 (no spread measured). \"8x / 1x\" (%) divides "
          "the two; \"512-token window\" is the same model reading only the last 512 tokens at 8x. "
          "Rows: the seed's variants the field trained, QK-norm, NoPE, the methods with seeds, and "
          f"the {TABLE1_BEST} best at 8x on each architecture (records in `results/field/`); "
          "\"(reproduction)\": the seed's other variants from the reproduction's record "
          "(`results/cpu/results.json`: GAU only, one seed, an earlier code version, no window "
          "evaluated). –: not run.\n\n" + _table(head, rows))


# --- retrieval ----------------------------------------------------------------------------------


def _pct(r):
  if r is None:
    return ""
  return "n/a" if r.get("accuracy") is None else f"{100 * r['accuracy']:.0f}"


def prompts_per_cell(recs, task) -> set:
  """The prompts behind each exact-match cell of `task` (per depth x depths) in these records."""
  return {r["prompts"] * len(r["depths"]) for rec in recs for r in rec["retrieval"]
          if r["task"] == task and "prompts" in r}


def table2(records) -> str:
  """Exact match by length, methods as rows, for the runs of each architecture's task that learned
  it at 1x in some seed, and Baseline and KNA RoPE."""
  runs = retrieval_runs(records)
  if not runs:
    return "(No retrieval records yet.)"
  parts = []
  for part, architecture in (("a", "transformer"), ("b", "gau")):
    task = RETRIEVAL_TASK[architecture]
    mine = {n: recs for (a, n), recs in runs.items() if a == architecture}
    if not mine:
      continue
    shown = [n for n, recs in mine.items()
             if any(learned(r, (task,)) for r in recs) or n in ("baseline_rope", "kna_rope")]
    reach = lambda n: sum((find_retrieval(mine[n][0], task, m) or {}).get("accuracy") or 0
                          for m in plan.RETRIEVAL_MULTIPLES)
    shown.sort(key=lambda n: (-reach(n), n))
    rows = []
    for name in shown:
      recs = mine[name]
      cell = lambda m, method="none": " / ".join(_pct(find_retrieval(r, task, m, method))
                                                 for r in recs).strip(" /")
      rows.append([method_name(name), ", ".join(str(r["seed"]) for r in recs)]
                  + [cell(m) for m in plan.RETRIEVAL_MULTIPLES]
                  + [cell(8, "yarn"), cell(8, "rerope"), cell(8, "window")])
    none = sorted(method_name(n) for n in mine if n not in shown)
    counts = prompts_per_cell([r for recs in mine.values() for r in recs], task)
    where = "the Transformer" if architecture == "transformer" else (
        "the GAU with separate q and k in 4 heads per layer")
    head = ["method", "seeds"] + [f"{m}x" for m in plan.RETRIEVAL_MULTIPLES] + [
        "YaRN 8x", "ReRoPE 8x", "512-token window 8x"]
    parts += [f"**Table 2{part}: {TASK_NAMES[task]} on {where}** "
              f"({', '.join(map(str, sorted(counts)))} prompts per cell).\n",
              _table(head, rows),
              f"\nLearned no {TASK_NAMES[task]} (under {100 * KEY_BAR:.0f}% at 1x in every seed): "
              + ", ".join(none) + ".\n"]
  n = min(prompts_per_cell([r for recs in runs.values() for r in recs], "passkey"))
  intervals = ", ".join(f"{100 * k // n}% [{100 * lo:.0f}–{100 * hi:.0f}]"
                        for k in (0, n // 20, n // 4, n // 2, 3 * n // 4, n)
                        for lo, hi in [wilson(k, n)])
  return ("Exact match (%) of the whole key (5 characters), needles at 10 depths x 2 prompts, each "
          "prompt its own key; one value per seed, separated by /; YaRN, ReRoPE (rotary methods "
          "only) and the window are applied at inference with the same weights; n/a: no positions "
          "beyond 1x (learned positions); blank: not evaluated. Each cell is one "
          f"run's count of {n} prompts: **its 95% interval (Wilson) is wide**: {intervals}. "
          "Rows: the methods that learned the table's key at 1x (at least "
          f"{100 * KEY_BAR:.0f}% exact) in some seed, and Baseline and KNA RoPE.\n\n"
          + "\n".join(parts))


# --- Baseline / KNA pairs -----------------------------------------------------------------------

def gau_pairs(records) -> list[tuple[dict, dict]]:
  """(Baseline, KNA) records of the GAU layout with the same position method and seed."""
  runs = retrieval_runs(records)
  pairs = []
  for (architecture, name), recs in sorted(runs.items()):
    if architecture != "gau" or not name.startswith("baseline_"):
      continue
    twin = {r["seed"]: r for r in runs.get(("gau", "kna_" + name.removeprefix("baseline_")), [])}
    pairs += [(r, twin[r["seed"]]) for r in recs if r["seed"] in twin]
  return pairs


def _provenance(rec):
  prov = rec["provenance"]
  device = prov.get("device") or "?"
  device = "H200" if "H200" in device else "H100" if "H100" in device else device
  return (prov.get("commit") or "?")[:7], device


def _key_cell(rec):
  letters, digits = (find_retrieval(rec, t, 1) for t in ("passkey_letters", "passkey"))
  return f"{'yes' if learned(rec) else 'no'} ({_pct(letters)} / {_pct(digits)})"


def pair_summary(records) -> dict:
  """The counts Table 3's test line states: pairs, disagreeing pairs and their direction, p values,
  pairs on different commits or devices, pairs where KNA ended at the lower training loss."""
  pairs = gau_pairs(records)
  disagree = [(b, k) for b, k in pairs if learned(b) != learned(k)]
  kna_way = sum(learned(k) for _, k in disagree)
  one, two = sign_test(kna_way, len(disagree) - kna_way)
  lower = lambda b, k: k["train"]["final_loss"] < b["train"]["final_loss"]
  return {"pairs": len(pairs), "disagree": len(disagree), "kna_way": kna_way,
          "p_one": one, "p_two": two,
          "confounded": sum(_provenance(b) != _provenance(k) for b, k in pairs),
          "kna_lower_loss": sum(lower(b, k) for b, k in pairs),
          "kna_lower_loss_disagree": sum(lower(b, k) for b, k in disagree)}


def table3(records) -> str:
  if not gau_pairs(records):
    return "(No Baseline/KNA pairs of the GAU layout yet.)"
  rows = []
  for base, kna in gau_pairs(records):
    name = method_name(base["config_name"]).removeprefix("Baseline ")
    b_commit, b_device = _provenance(base)
    k_commit, k_device = _provenance(kna)
    rows.append([name, base["seed"], _key_cell(base), _key_cell(kna),
                 f"{b_commit}, {b_device}", f"{k_commit}, {k_device}",
                 f"{base['train']['final_loss']:.3f} / {kna['train']['final_loss']:.3f}"])
  s = pair_summary(records)
  head = ["position method", "seed", "Baseline learned a key (letters / digits % at 1x)",
          "KNA learned a key", "Baseline: commit, device", "KNA: commit, device",
          "final training loss, Baseline / KNA"]
  return ("The GAU layout's same-seed Baseline/KNA pairs (separate q and k in 4 heads per layer, "
          f"3000 steps); a key is learned when a passkey is at least {100 * KEY_BAR:.0f}% exact at "
          "1x with no inference-time method.\n\n" + _table(head, rows) + "\n\n"
          f"**Sign test:** of {s['pairs']} pairs, {s['disagree']} disagree, {s['kna_way']} of them "
          f"KNA's way: exact sign test p = {s['p_one']:.2g} one-sided ({s['p_two']:.2g} "
          "two-sided). **Caveats:** the pairs were counted after the fact, most methods have one "
          f"seed, {s['confounded']} of the {s['pairs']} pairs ran Baseline and KNA on different "
          "commits or devices, and KNA ended at the lower final training loss in "
          f"{s['kna_lower_loss']} of {s['pairs']} pairs ({s['kna_lower_loss_disagree']} of the "
          f"{s['disagree']} that disagree), which alone could explain a learned key: a lean, not a "
          "controlled comparison. " + preregistered.same_commit_old_pairs(gau_pairs(records)))


# --- the answers that quote numbers -------------------------------------------------------------

ARCHITECTURES = {"gau": "GAU", "transformer": "Transformer"}
STREAMING_MARGIN = 0.005  # StreamingLLM named as the fairer control when this far above the window


def _name(key) -> str:
  architecture, name = key
  return f"{ARCHITECTURES[architecture]} {method_name(name)}"


def _points(values) -> str:
  """Gains in points: '+0.47 ± 0.03 (3 seeds)', or '+0.47 (1 seed)'."""
  values = [100 * v for v in values]
  sd = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
  return f"{statistics.fmean(values):+.2f}{sd} ({len(values)} seed{'s' * (len(values) > 1)})"


def answer_keynorm(records) -> str:
  """KeyNorm's bullet: Baseline and KNA RoPE at 8x, and KNA RoPE against its own window."""
  runs = text_runs(records)
  if not all((a, n) in runs for a in ARCHITECTURES for n in ("baseline_rope", "kna_rope")):
    return "- (Baseline and KNA RoPE are not recorded on both architectures yet.)"
  cell = lambda a, n, *m: spread([accuracy(r, *m) for r in runs[a, n]])
  ratio = lambda a: spread([accuracy(r, 8) / accuracy(r, 1) for r in runs[a, "kna_rope"]])
  below = []
  for a, label in ARCHITECTURES.items():
    gap = statistics.fmean(100 * (accuracy(r, 8) - accuracy(r, 8, "window"))
                           for r in runs[a, "kna_rope"])
    below.append(f"{abs(gap):.1f} points {'below' if gap < 0 else 'above'} it on the {label} "
                 f"({cell(a, 'kna_rope', 8)} against {cell(a, 'kna_rope', 8, 'window')})")
  seeds = sorted({len(runs[a, n]) for a in ARCHITECTURES for n in ("baseline_rope", "kna_rope")})
  return ("- **KeyNorm keeps next-token accuracy at 8x on both architectures** (Table 1, rows "
          f"Baseline RoPE and KNA RoPE): on the GAU {cell('gau', 'baseline_rope', 8)} against "
          f"{cell('gau', 'kna_rope', 8)} ({ratio('gau')} of 1x), on the Transformer "
          f"{cell('transformer', 'baseline_rope', 8)} against {cell('transformer', 'kna_rope', 8)} "
          f"({ratio('transformer')} of 1x), {' or '.join(map(str, seeds))} seeds each. The seed "
          f"article's ratios are {_seed_ratio('baseline_rope')} and {_seed_ratio('kna_rope')}. "
          "Against the same model reading only its last 512 tokens at 8x, KNA RoPE is "
          + " and ".join(below) + ", where Baseline RoPE's window gives "
          f"{cell('transformer', 'baseline_rope', 8, 'window')}.")


def _seed_ratio(name) -> str:
  _, train, _, eight = NO_SCALING[name]
  return f"{100 * eight / train:.1f}"


def answer_window(records) -> str:
  """The window's bullet: the largest text-only gain over the window, the retrieval-trained
  configurations that gain in every seed, and where StreamingLLM is the fairer control."""
  text, retrieval = text_runs(records), retrieval_runs(records)
  if not text:
    return "- (No text-only records yet.)"
  most, where = window_control.largest_gain(text)
  base = [spread([accuracy(r, 8, "window") for r in text.get((a, "baseline_rope"), [])])
          for a in ARCHITECTURES]
  repeat = window_control.repeatable_gains(retrieval)
  fairer = window_control.streaming_beats_window(retrieval, margin=STREAMING_MARGIN)
  return ("- **No text-only model gains from context beyond 512 tokens in next-token prediction at "
          "this scale** (Table 1, window columns; Figure 1): the largest gain of a text-only run's "
          f"8x accuracy over the same model reading only its last 512 tokens is {100 * most:+.2f} "
          f"points ({_name(where)}), and the window gives Baseline RoPE back {base[0]} (GAU) and "
          f"{base[1]} (Transformer). The models trained with retrieval episodes gain little, but "
          "in every seed: "
          + "; ".join(f"{_name(key)} {_points(values)}" for key, values in repeat)
          + " points over their window at 8x. For these retrieval-trained runs StreamingLLM, which "
          "re-indexes positions to fit the training length, reads more than the window at 8x by "
          f"over {100 * STREAMING_MARGIN:.1f} points, so the window overstates their gain from far "
          "context (mostly methods that read absolute positions): "
          + "; ".join(f"{_name(key)} (window {100 * w:.1f}, StreamingLLM {100 * s:.1f})"
                      for key, w, s in fairer) + ".")


# --- the page -----------------------------------------------------------------------------------

def blocks(records, reproduction, figure_folder="results/field/") -> dict[str, str]:
  """{marker name: generated text} of every block of RESULTS.md."""
  return {"table1": table1(records, reproduction), "table2": table2(records),
          "table3": table3(records), "table3b": preregistered.table(records),
          "answer_keynorm": answer_keynorm(records), "answer_window": answer_window(records),
          "answer_pre_registered": preregistered.answer(records),
          "figure1": figures.by_position_caption(records, figure_folder),
          "figure2": figures.reach_caption(records, figure_folder)}


def markers(name: str) -> tuple[str, str]:
  return f"<!-- {name} -->", f"<!-- /{name} -->"


def update_page(records, reproduction, page) -> bool:
  """Rewrites each block of `page` between its markers; False (nothing written) when the page or
  any marker is missing."""
  page = pathlib.Path(page)
  if not page.is_file():
    return False
  text = page.read_text()
  if any(m not in text for name in BLOCKS for m in markers(name)):
    return False
  for name, body in blocks(records, reproduction).items():
    begin, end = markers(name)
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    text = f"{head}{begin}\n{body}\n{end}{tail}"
  page.write_text(text)
  return True
