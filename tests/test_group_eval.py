"""A seed group (--config.num_seeds=2) against the single runs of the same seeds: trained (every
logged metric, the parameters), restored, and evaluated (its members' records, from one vmapped
pass, against the single runs evaluated the plain way); the mean +- std rows over seeds; a single
run's records (its old fields, plus `seed`)."""

import csv
import dataclasses
import json

import jax
import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.evaluation.command import EvalRequest, evaluate_runs, make_columns
from keynorm_jax.evaluation import evaluate
from keynorm_jax.evaluation.evaluate import auto_batch_size
from keynorm_jax.evaluation.seed_summary import STD, seed_summaries
from keynorm_jax.runs import load_run, workdir_source
from keynorm_jax.training import loop as training
from keynorm_jax.training.metrics_writer import read_metrics
from train_helpers import tiny_config

QUIET = lambda *_: None
SCORERS = []  # whether each scorer the evaluation built was stacked (the `evaluated` fixture)
STEPS = dict(num_train_steps=4, checkpoint_every_steps=2, num_devices=1)
SEEDS = (3, 4)   # a group that does not start at seed 0: its members' seeds are offset
# A single run's next-token record before seeds were recorded (test_eval.py's runs).
OLD_FIELDS = {"run", "config", "step", "position", "train_length", "length", "rope_scaling",
              "method", "set", "repeat_period", "accuracy", "accuracy_stderr",
              "accuracy_beyond_train", "loss", "tokens", "windows", "position_bucket",
              "accuracy_by_position", "seconds"}


def _config(data_dir, **overrides):
  config = tiny_config(data_dir=data_dir, **STEPS, **overrides)
  config.model.dropout = 0.1   # each member's own dropout key
  return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir):
  """runs/group: seeds 3 and 4 as one group; runs/seed_3 and runs/seed_4: each alone (4 steps,
  dropout, evaluated and saved at steps 2 and 4)."""
  root = tmp_path_factory.mktemp("runs")
  training.train_and_evaluate(_config(data_dir, num_seeds=2, seed=SEEDS[0]), root / "group")
  for seed in SEEDS:
    training.train_and_evaluate(_config(data_dir, seed=seed), root / f"seed_{seed}")
  return root


def _rows(workdir, seed=None):
  """{step: row} of a run's metrics (of one member of a group)."""
  return {m["step"]: m for m in read_metrics(workdir) if m.get("seed") == seed}


@pytest.mark.slow
def test_a_group_of_two_trains_as_the_two_single_runs(runs):
  """Every logged metric at every step (training and evaluation) of each member equals that of
  the single run of its seed."""
  saved = json.loads((runs / "group" / "config.json").read_text())
  assert saved["num_seeds"] == 2 and saved["member_seeds"] == list(SEEDS)
  assert sorted(p.name for p in (runs / "group" / "tensorboard").iterdir()) == [
      f"seed_{seed}" for seed in SEEDS]
  for seed in SEEDS:
    alone, member = _rows(runs / f"seed_{seed}"), _rows(runs / "group", seed)
    assert sorted(member) == sorted(alone) == [1, 2, 3, 4]
    assert "eval_loss" in alone[2] and "eval_loss" in alone[4]
    for step, row in alone.items():
      for key in ("loss", "accuracy", "grad_norm", "eval_loss", "eval_accuracy"):
        if key in row:
          np.testing.assert_allclose(member[step][key], row[key], rtol=1e-5, atol=1e-6,
                                     err_msg=f"seed {seed} step {step} {key}")
  # The members differ: another initialization, dropout and data order each.
  assert _rows(runs / "group", SEEDS[0])[1]["loss"] != _rows(runs / "group", SEEDS[1])[1]["loss"]


def _spy(make_scorer):
  """make_scorer, noting in SCORERS whether each scorer it builds is stacked."""
  def spied(model, stacked=False):
    SCORERS.append(stacked)
    return make_scorer(model, stacked=stacked)
  return spied


@pytest.fixture(scope="module")
def evaluated(runs, tmp_path_factory):
  """evaluate_runs' (records, failures, paths) of the three runs: next-token at the training
  length and 64 (4 windows per set), then passkey (1 prompt at each of 2 depths) at 176 tokens
  only, the shortest a passkey prompt fits (the training length, 32, is too short for one)."""
  source = workdir_source(runs, warn=QUIET)
  next_token = EvalRequest(lengths=[64], columns=make_columns(["none"]), num_windows=4)
  passkey = EvalRequest(lengths=[176], columns=make_columns(["none"]), tasks=["passkey"],
                        depths=(0.0, 1.0), num_prompts=1)
  with pytest.MonkeyPatch.context() as patch:  # which scorers were built: stacked for the group
    patch.setattr(evaluate, "make_scorer", _spy(evaluate.make_scorer))  # retrieval's too
    return (evaluate_runs(source, next_token, output=tmp_path_factory.mktemp("eval"), echo=QUIET),
            evaluate_runs(dataclasses.replace(source, at_train_length=False), passkey,
                          output=tmp_path_factory.mktemp("retrieval"), echo=QUIET))


@pytest.mark.slow
def test_the_group_is_scored_by_one_vmapped_scorer(evaluated):
  """The group's members share one stacked scorer (one pass over the seed axis) for all their
  lengths and methods; each single run has its own plain one; next-token, then passkey."""
  assert SCORERS == [True, False, False] * 2   # the group, seed_3, seed_4


@pytest.mark.slow
def test_a_group_restores_with_its_seed_axis(runs):
  group = load_run(runs / "group")
  assert group.seeds == group.member_seeds == SEEDS
  for i, seed in enumerate(SEEDS):
    single = load_run(runs / f"seed_{seed}")
    assert single.seeds is None and single.member_seeds == (seed,)
    jax.tree.map(lambda g, s: np.testing.assert_equal(g.shape, (2, *s.shape)), group.params,
                 single.params)
    member = group.member(i)
    assert member.config.seed == seed and member.seeds is None
    jax.tree.map(lambda m, s: np.testing.assert_allclose(m, s, rtol=1e-5, atol=1e-6),
                 member.params, single.params)


@pytest.mark.slow
def test_the_members_records_equal_the_single_runs(evaluated):
  """Every cell (next-token: both sets; passkey: overall and by depth) of member s equals the
  single run --config.seed=s, to float tolerance; all but the measured numbers exactly."""
  (next_token, failures, _), (passkey, passkey_failures, _) = evaluated
  assert not failures and not passkey_failures
  records = next_token + passkey
  measured = {"accuracy", "accuracy_stderr", "accuracy_beyond_train", "loss",
              "accuracy_by_position", "token_accuracy", "accuracy_by_depth",
              "token_accuracy_by_depth", "seconds"}
  for seed in SEEDS:
    member = [r for r in records if r["run"] == "group" and r["seed"] == seed]
    alone = [r for r in records if r["run"] == f"seed_{seed}"]
    assert len(member) == len(alone) == 2 * 2 + 1  # 2 lengths x 2 sets, passkey
    for m, a in zip(member, alone):
      assert a["seed"] == seed
      assert ({k: v for k, v in m.items() if k not in measured | {"run", "config"}} ==
              {k: v for k, v in a.items() if k not in measured | {"run", "config"}})
      for key in measured - {"seconds"}:
        if a.get(key) is None:
          assert m.get(key) is None, key               # (beyond the training length at it)
        else:
          np.testing.assert_allclose(m[key], a[key], rtol=1e-5, atol=1e-6,
                                     err_msg=f"seed {seed} {a.get('set') or a['task']} {key}")
  losses = [r["loss"] for r in next_token if r["run"] == "group"]
  assert losses[0] != losses[1]                         # the members are two models
  assert any(r["accuracy"] > 0 for r in next_token)     # (not all zero: a real comparison)


@pytest.mark.slow
def test_the_summary_rows_are_numpys_mean_and_std_over_the_members(evaluated):
  (_, _, paths), (_, _, retrieval_paths) = evaluated
  saved = json.loads(paths["results.json"].read_text())
  saved_retrieval = json.loads(retrieval_paths["results.json"].read_text())
  for summary_key, member_key, found in (("seed_summary", "results", saved),
                                         ("retrieval_seed_summary", "retrieval", saved_retrieval)):
    summaries = found[summary_key]
    assert {s["run"] for s in summaries} == {"group"}            # single runs have none
    for s in summaries:
      members = [r for r in found[member_key] if r["run"] == "group" and r["length"] == s["length"]
                 and r.get("set") == s.get("set") and r.get("task") == s.get("task")]
      assert s["seeds"] == 2 and s["member_seeds"] == [r["seed"] for r in members] == list(SEEDS)
      for key in ("accuracy", "loss", "accuracy_by_position", "accuracy_by_depth"):
        if key in members[0]:
          values = np.array([r[key] for r in members], np.float64)
          np.testing.assert_allclose(s[f"{key}_mean"], values.mean(axis=0), rtol=1e-12)
          np.testing.assert_allclose(s[f"{key}_std"], values.std(axis=0, ddof=1), rtol=1e-12)
  assert len(saved["seed_summary"]) == 2 * 2 and len(saved_retrieval["retrieval_seed_summary"]) == 1
  assert len(saved["results"]) == 4 * 4 and len(saved_retrieval["retrieval"]) == 4  # a row a seed
  summary = saved["seed_summary"][0]
  table = paths["results.md"].read_text()
  assert "a seed group's: mean ± std over 2 seeds (sample std, ddof=1)" in table
  assert (f"| group (2 seeds) | none | {100 * summary['accuracy_mean']:.2f} ± "
          f"{100 * summary['accuracy_std']:.2f} |") in table
  with paths["seed_summary.csv"].open() as f:
    assert [(r["run"], r["seeds"]) for r in csv.DictReader(f)] == [("group", "2")] * 4
  with paths["results.csv"].open() as f:
    assert [(r["run"], r["seed"]) for r in csv.DictReader(f)] == (
        [("group", "3"), ("group", "4")] * 4 + [("seed_3", "3")] * 4 + [("seed_4", "4")] * 4)
  assert paths["accuracy_by_position.png"].read_bytes()[:4] == b"\x89PNG"
  assert "| group (2 seeds) | none | passkey |" in retrieval_paths["results.md"].read_text()
  assert retrieval_paths["needle_group__none.png"].read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_single_runs_records_keep_their_fields_plus_seed(evaluated):
  (records, _, _), _ = evaluated
  single = [r for r in records if r["run"] == "seed_4"]
  assert single and all(set(r) == OLD_FIELDS | {"seed", "one_x"} and r["seed"] == 4
                        for r in single)     # and where its 1x comes from (issue 69)


def test_a_groups_members_share_the_automatic_batch():
  """The vmapped pass holds every member's batch at once: the automatic batch (4 GiB, 16,384
  tokens) is shared among them."""
  cfg = run_config.model_config(run_config.resolve(run_config.load_config("kna_rope")))
  assert [auto_batch_size(cfg, 1024, 16, members) for members in (1, 2, 4, 16, 64)] == [
      16, 8, 4, 1, 1]


@pytest.mark.slow
def test_the_vmapped_pass_equals_each_member_evaluated_alone(runs):
  """The group's one vmapped pass against the plain path on each member's own parameters
  (TrainedRun.member): the same windows, the same numbers to float rounding."""
  group = load_run(runs / "group")
  stacked = evaluate.evaluate_run(group, lengths=[64], columns=make_columns(["none"]),
                                  num_windows=4)
  for i, seed in enumerate(group.seeds):
    alone = evaluate.evaluate_run(group.member(i), lengths=[64], columns=make_columns(["none"]),
                                  num_windows=4)
    member = [r for r in stacked if r["seed"] == seed]
    assert [(r["length"], r["set"]) for r in member] == [(r["length"], r["set"]) for r in alone]
    for m, a in zip(member, alone):
      assert m["accuracy"] == pytest.approx(a["accuracy"], abs=1e-9)
      assert m["loss"] == pytest.approx(a["loss"], rel=1e-6)


def test_summary_rows_by_hand():
  """Two seeds of a cell by hand: means, sample standard deviations (ddof=1), lists element by
  element; a not-applicable cell keeps its reason; a single run gets no row."""
  cell = dict(run="g", length=64, set="repeated", rope_scaling="none", tokens=128)
  records = [{**cell, "seed": 3, "accuracy": 0.25, "loss": 2.0, "accuracy_stderr": 0.1,
              "accuracy_by_position": [0.0, 0.5]},
             {**cell, "seed": 4, "accuracy": 0.75, "loss": 1.0, "accuracy_stderr": 0.2,
              "accuracy_by_position": [1.0, 0.5]},
             {**cell, "length": 99, "seed": 3, "accuracy": None, "not_applicable": "stop"},
             {**cell, "length": 99, "seed": 4, "accuracy": None, "not_applicable": "stop"},
             {**cell, "run": "single", "seed": 0, "accuracy": 0.5, "loss": 1.5}]
  first, second = seed_summaries(records)
  assert first == {**cell, "seeds": 2, "member_seeds": [3, 4], "accuracy_mean": 0.5,
                   "accuracy_std": pytest.approx(0.5 / 2 ** 0.5), "loss_mean": 1.5,
                   "loss_std": pytest.approx(2 ** -0.5), "accuracy_by_position_mean": [0.5, 0.5],
                   "accuracy_by_position_std": [pytest.approx(2 ** -0.5), 0.0], "std": STD}
  assert second == {**cell, "length": 99, "not_applicable": "stop", "seeds": 2,
                    "member_seeds": [3, 4], "std": STD}
