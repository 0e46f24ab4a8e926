"""Table 3b and the pre-registered verdict (study/preregistered.py) on made-up records whose answers
are worked out by hand from the rule in docs/study.md."""

import math

import pytest

from keynorm_jax.study import plan, preregistered
from keynorm_jax.study.reading import retrieval_runs


def record(entry, *, letters=0.0, digits=0.0, secondary=(0.0, 0.0), loss=1.0, failed=False,
           commit="67d63c4", device="cpu", dtype="float32"):
  """A study record of `entry` with these exact matches at 1x (primary, 20 prompts), secondary
  exact matches (letters, digits over 100 prompts each) and held-out loss."""
  rec = {"key": entry.key, "label": entry.label, "config_name": entry.config, "seed": entry.seed,
         "architecture": "gau", "train": {"final_loss": loss + 0.1},
         "config": {"train_length": 512, "model": {"compute_dtype": dtype}},
         "provenance": {"commit": commit, "device": device}}
  if failed:
    return {**rec, "failed": "The loss became nan", "records": [], "retrieval": [],
            "secondary": []}
  cell = lambda task, acc, prompts: {"task": task, "length": 512, "rope_scaling": "none",
                                     "accuracy": acc, "prompts": prompts, "depths": [0.0] * 10}
  return {**rec,
          "records": [{"length": 512, "set": "non_repeated", "rope_scaling": "none",
                       "accuracy": 0.6, "loss": loss}],
          "retrieval": [cell("passkey_letters", letters, 2), cell("passkey", digits, 2)],
          "secondary": [cell("passkey_letters", secondary[0], 10),
                        cell("passkey", secondary[1], 10)]}


def study(outcomes):
  """Records of every pre-registered run: outcomes[seed] = (Baseline kwargs, KNA kwargs)."""
  found = []
  for entry in plan.preregistered_runs():
    base, kna = outcomes[entry.seed]
    found.append(record(entry, **(kna if entry.config == "kna_rope" else base)))
  return found


NO, YES = dict(letters=0.1), dict(letters=0.9)


def test_six_of_six_disagreeing_pairs_kna_s_way_is_kna_helps():
  # Seeds 3-8: KNA learned a key, Baseline did not; seeds 9, 10: neither. p = 1 / 2^6.
  outcomes = {s: (NO, YES) for s in range(3, 9)} | {s: (NO, NO) for s in (9, 10)}
  v = preregistered.verdict(study(outcomes))
  assert (v["disagree"], v["kna_way"], v["answer"]) == (6, 6, "KNA helps")
  assert v["p_kna"] == pytest.approx(1 / 64) and v["p_baseline"] == pytest.approx(1.0)
  assert "KeyNorm helps that GAU learn a key" in preregistered.answer(study(outcomes))


def test_a_split_is_not_settled_and_the_mirror_is_no():
  split = {s: (NO, YES) for s in (3, 4, 5)} | {6: (YES, NO)} | {s: (NO, NO) for s in range(7, 11)}
  v = preregistered.verdict(study(split))
  # 3 of 4 KNA's way: p = (C(4,3) + C(4,4)) / 16 = 5/16.
  assert v["answer"] == "not settled" and v["p_kna"] == pytest.approx(5 / 16)
  assert "cannot tell" in preregistered.answer(study(split))   # the amendment's (g)
  mirror = {s: (YES, NO) for s in range(3, 10)} | {10: (NO, NO)}
  assert preregistered.verdict(study(mirror))["answer"] == "no"   # 0 of 7: p towards Baseline 1/128
  assert "KeyNorm hurts" in preregistered.answer(study(mirror))


def test_the_secondary_difference_interval_and_permutation_test_by_hand():
  # KNA - Baseline per pair over 200 prompts: (letters + digits) / 2.
  d = [0.10, 0.20, 0.05, 0.30, -0.05, 0.15, 0.10, 0.25]
  outcomes = {s: (dict(secondary=(0.2, 0.2)), dict(secondary=(0.2 + 2 * x, 0.2)))
              for s, x in zip(range(3, 11), d)}
  v = preregistered.verdict(study(outcomes))
  mean = sum(d) / 8
  sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 7)
  half = 2.3646 * sd / math.sqrt(8)   # t(0.975, 7 df) from a printed table
  assert v["differences"] == pytest.approx(d)
  assert (v["mean"], v["low"], v["high"]) == pytest.approx((mean, mean - half, mean + half),
                                                           abs=1e-4)
  # The observed sum is 1.10; sign flips reaching |sum| >= 1.10: all positive (1.20), as observed
  # (1.10), and -0.05 made positive with 0.05 made negative (1.10); with their mirrors 6 of 256.
  assert v["p_permutation"] == pytest.approx(6 / 256)


def test_a_failed_run_learned_no_key_and_scores_zero():
  outcomes = {s: (NO, YES) for s in range(3, 11)}
  outcomes[3] = (dict(failed=True), dict(YES, secondary=(0.5, 0.3)))
  records = study(outcomes)
  v = preregistered.verdict(records)
  assert v["differences"][0] == pytest.approx(0.4) and v["kna_way"] == 8
  assert "failed (non-finite): no" in preregistered.table(records)


def test_before_all_sixteen_are_in_there_is_no_verdict_and_the_table_says_so():
  records = study({s: (NO, YES) for s in range(3, 11)})[:5]
  assert preregistered.verdict(records) is None
  table = preregistered.table(records)
  assert "waits for all 16 runs (5 recorded)" in table and "(waiting)" in table
  assert "5 of 16 pre-registered runs are recorded" in preregistered.answer(records)


def test_the_verdict_line_names_a_mixed_commit_and_keeps_the_runs_out_of_the_field_tables():
  records = study({s: (NO, YES) for s in range(3, 11)})
  assert "all 16 from commit 67d63c4 on cpu in float32" in preregistered.verdict_line(records)
  records[0]["provenance"]["commit"] = "0123456"
  assert "**not** one commit, device and dtype" in preregistered.verdict_line(records)
  assert retrieval_runs(records) == {}   # Tables 2 and 3 leave them to Table 3b
