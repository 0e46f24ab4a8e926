"""The pre-registered test (docs/study.md, "Pre-registered" and its amendment): Table 3b, the verdict
by the rule written before the runs, and the same-commit test of the older pairs beside it.

Primary: per pair, did each run learn a key (reading.learned); over the pairs that disagree, the
exact one-sided sign test towards KNA: "KNA helps" at p < 0.05, "no" when the same test towards
Baseline gives p < 0.05, else "not settled". Secondary: per run, the exact match over both keys'
secondary prompts (the record's `secondary`); per pair KNA minus Baseline, its mean with a Student-t
interval and the exact paired permutation test. A run whose training failed learned no key and
scores 0. The verdict is given only once every planned run has its record.
"""

from keynorm_jax.study import plan
from keynorm_jax.study.reading import learned, non_repeated, preregistered
from keynorm_jax.study.stats import paired_permutation_p, sign_test, t_interval

ALPHA = 0.05


def pairs(records) -> list[tuple[dict | None, dict | None]]:
  """(Baseline, KNA) records of each pre-registered seed, in seed order (None: not recorded yet)."""
  by_key = {r["key"]: r for r in records if preregistered(r)}
  found = []
  for seed in plan.PREREGISTERED_SEEDS:
    twins = [e for e in plan.preregistered_runs() if e.seed == seed]
    found.append(tuple(by_key.get(e.key) for e in sorted(twins, key=lambda e: e.config)))
  return found


def secondary_score(record) -> float:
  """Exact match over the secondary prompts of both keys (0 for a run whose training failed)."""
  if record.get("failed"):
    return 0.0
  cells = [r for r in record["secondary"] if r["task"] in plan.SECONDARY_TASKS]
  total = sum(r["prompts"] * len(r["depths"]) for r in cells)
  return sum(r["accuracy"] * r["prompts"] * len(r["depths"]) for r in cells) / total


def held_out_loss(record):
  """The non-repeated next-token loss at 1x with no inference-time method (None if failed)."""
  return non_repeated(record, 1, field="loss")


def verdict(records) -> dict | None:
  """The primary and secondary results by the rule, or None until all pairs are recorded."""
  found = pairs(records)
  if any(b is None or k is None for b, k in found):
    return None
  disagree = [(b, k) for b, k in found if learned(b) != learned(k)]
  kna_way = sum(learned(k) for _, k in disagree)
  towards_kna, _ = sign_test(kna_way, len(disagree) - kna_way)
  towards_baseline, _ = sign_test(len(disagree) - kna_way, kna_way)
  answer = ("KNA helps" if towards_kna < ALPHA else "no" if towards_baseline < ALPHA
            else "not settled")
  differences = [secondary_score(k) - secondary_score(b) for b, k in found]
  mean, low, high = t_interval(differences)
  return {"pairs": len(found), "disagree": len(disagree), "kna_way": kna_way,
          "p_kna": towards_kna, "p_baseline": towards_baseline, "answer": answer,
          "differences": differences, "mean": mean, "low": low, "high": high,
          "p_permutation": paired_permutation_p(differences)}


def _made_on(record) -> tuple:
  prov = record["provenance"]
  return ((prov.get("commit") or "?")[:7], prov.get("device") or "?",
          record["config"]["model"]["compute_dtype"])


def _outcome(record) -> str:
  if record is None:
    return "(waiting)"
  if record.get("failed"):
    return "failed (non-finite): no"
  cells = [next((r for r in record["retrieval"] if r["task"] == task
                 and r["length"] == record["config"]["train_length"]
                 and r["rope_scaling"] == "none"), None) for task in ("passkey_letters", "passkey")]
  pct = " / ".join("" if c is None else f"{100 * c['accuracy']:.0f}" for c in cells)
  return f"{'yes' if learned(record) else 'no'} ({pct})"


def _number(record, compute, digits, scale=1.0):
  value = None if record is None else compute(record)
  return "" if value is None else f"{scale * value:.{digits}f}"


def table(records) -> str:
  """Table 3b: each pair's outcomes, secondary exact matches, losses and where it ran; then the
  verdict line (or how many runs are still to come)."""
  found = pairs(records)
  rows = []
  for seed, (base, kna) in zip(plan.PREREGISTERED_SEEDS, found):
    score = lambda r: _number(r, secondary_score, 1, 100)
    difference = (f"{100 * (secondary_score(kna) - secondary_score(base)):+.1f}"
                  if base is not None and kna is not None else "")
    made = sorted({", ".join(_made_on(r)) for r in (base, kna) if r is not None})
    rows.append([seed, _outcome(base), _outcome(kna), f"{score(base)} / {score(kna)}", difference,
                 f"{_number(base, held_out_loss, 3)} / {_number(kna, held_out_loss, 3)}",
                 f"{_number(base, lambda r: r['train']['final_loss'], 3)} / "
                 f"{_number(kna, lambda r: r['train']['final_loss'], 3)}", "; ".join(made)])
  head = ["seed", "Baseline learned a key (letters / digits % at 1x)", "KNA learned a key",
          f"secondary: exact match % at 1x, Baseline / KNA ({_secondary_count()} prompts)",
          "KNA − Baseline (points)", "held-out text loss at 1x, Baseline / KNA",
          "final training loss, Baseline / KNA", "commit, device, dtype"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
  return ("Baseline RoPE against KNA RoPE on the GAU layout (separate q and k in 4 heads, 3000 "
          "steps), seeds planned before the runs (docs/study.md, \"Pre-registered\"): a key is "
          "learned when a passkey is at least 60% exact at 1x with no inference-time method, over "
          f"10 depths x {plan.RETRIEVAL_PROMPTS['cpu']} prompts.\n\n" + "\n".join(lines) + "\n\n"
          + verdict_line(records))


def _secondary_count() -> int:
  return len(plan.SECONDARY_TASKS) * 10 * plan.SECONDARY_PROMPTS


def verdict_line(records) -> str:
  """The primary verdict by the rule, the secondary estimate, and whether the 16 share a commit,
  device and dtype; before all are in, how many are."""
  found = pairs(records)
  done = sum(r is not None for pair in found for r in pair)
  v = verdict(records)
  if v is None:
    return (f"**Verdict:** waits for all {2 * len(found)} runs ({done} recorded); the rule is "
            "applied once, to all of them.")
  made = {_made_on(r) for pair in found for r in pair}
  same = (f"all {2 * len(found)} from commit {next(iter(made))[0]} on {next(iter(made))[1]} in "
          f"{next(iter(made))[2]}" if len(made) == 1 else
          f"**not** one commit, device and dtype: {sorted(made)}")
  return (f"**Verdict (pre-registered): {v['answer']}.** Of {v['pairs']} pairs, {v['disagree']} "
          f"{'disagrees' if v['disagree'] == 1 else 'disagree'}, {v['kna_way']} of them KNA's way: "
          f"exact sign test p = {v['p_kna']:.3g} "
          f"towards KNA ({v['p_baseline']:.3g} towards Baseline). Secondary: KNA − Baseline exact "
          f"match at 1x {100 * v['mean']:+.1f} points, 95% interval [{100 * v['low']:+.1f}, "
          f"{100 * v['high']:+.1f}] (t, {v['pairs'] - 1} df), paired permutation p = "
          f"{v['p_permutation']:.3g} (two-sided). Runs: {same}.")

# What each verdict is taken to mean (docs/study.md, the amendment's (a) and (g)).
SCOPE = "RoPE on the GAU retrieval layout at the `cpu` size, on the King James Bible in bytes"
MEANING = {
    "KNA helps": f"KeyNorm helps that GAU learn a key, within the rule's scope ({SCOPE}).",
    "no": f"KeyNorm hurts that GAU's learning of a key, within the rule's scope ({SCOPE}).",
    "not settled": ("This experiment cannot tell whether KeyNorm helps that GAU learn a key "
                    f"({SCOPE}); that is no evidence that it does not, and the interval is the "
                    "size of effect, either way, that the data leave open."),
}


def answer(records) -> str:
  """The one sentence of "What the study answers" that states the verdict."""
  v = verdict(records)
  if v is None:
    done = sum(r is not None for pair in pairs(records) for r in pair)
    return (f"- **Whether KeyNorm helps the GAU learn to retrieve is being tested** (Table 3b): "
            f"{done} of {2 * len(plan.PREREGISTERED_SEEDS)} pre-registered runs are recorded; the "
            "verdict waits for all of them.")
  return (f"- **Does KeyNorm help the GAU learn to retrieve? {v['answer'].capitalize()}** by the "
          f"pre-registered rule (Table 3b, verdict line): {v['kna_way']} of {v['disagree']} "
          f"disagreeing {'pair' if v['disagree'] == 1 else 'pairs'} KNA's way, p = "
          f"{v['p_kna']:.3g}; exact match at 1x "
          f"{100 * v['mean']:+.1f} points [{100 * v['low']:+.1f}, {100 * v['high']:+.1f}]. "
          + MEANING[v["answer"]])


def same_commit_old_pairs(old_pairs) -> str:
  """The sign test of Table 3's pairs restricted to those whose two runs share commit and device."""
  same = [(b, k) for b, k in old_pairs if _made_on(b)[:2] == _made_on(k)[:2]]
  disagree = [(b, k) for b, k in same if learned(b) != learned(k)]
  kna_way = sum(learned(k) for _, k in disagree)
  one, _ = sign_test(kna_way, len(disagree) - kna_way)
  return (f"**Same commit and device only:** {len(same)} of the {len(old_pairs)} pairs, "
          f"{len(disagree)} of them disagree, {kna_way} KNA's way: p = {one:.3g} one-sided.")

