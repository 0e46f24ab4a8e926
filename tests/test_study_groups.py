"""The study's seed groups (--group_seeds): a tiny plan entry with two seeds trained as one group,
stopped during its evaluation and resumed, against the same two entries run as single runs; and
the pre-registered pairs as plan entries."""

import json

import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.study import groups, plan, runner
from keynorm_jax.study.records import RecordStore
from keynorm_jax.study.session import run_plan
from keynorm_jax.study.stages import FILE_NAME
from train_helpers import TEST_KERNEL, one_layer_where_alike

ENTRIES = [plan.StudyRun("kna_rope", 0), plan.StudyRun("kna_rope", 1)]


class Stopped(Exception):
  pass


@pytest.fixture(scope="module")
def studied(tmp_path_factory, data_dir):
  """The two entries by the study with --group_seeds, stopped before seed 1's first stage and run
  again (keeping the group's workdir), then as single runs: what each path left."""
  tmp = tmp_path_factory.mktemp("study_groups")
  found = {}
  with pytest.MonkeyPatch.context() as patch:
    load = run_config.load_config
    def with_the_reference_kernel(name):
      config = load(name)
      config.model.kernel = TEST_KERNEL  # as conftest's reference_kernel
      one_layer_where_alike(config)
      return config
    patch.setattr(run_config, "load_config", with_the_reference_kernel)
    patch.setitem(plan.SCALES["tiny"], "windows", {1: 2, 8: 1})   # the plan's shape, fewer windows
    patch.setattr(plan, "ROTARY_OPTIONS", ("yarn",))
    patch.setattr(plan, "field_runs", lambda: list(ENTRIES))
    evaluate_run, calls, stop = runner.evaluate_run, [], [True]
    def stopped_at_seed_1(run, **kw):
      calls.append((run.name, kw["lengths"]))
      if run.name == ENTRIES[1].key and stop:
        stop.clear()  # the first time only
        raise Stopped
      return evaluate_run(run, **kw)
    patch.setattr(runner, "evaluate_run", stopped_at_seed_1)
    grouped = RecordStore("field_tiny", root=tmp / "grouped")
    options = dict(scale="tiny", data_dir=data_dir, group_seeds=True, keep_runs=True)
    with pytest.raises(Stopped):
      run_plan(plan.field_runs(), grouped, runs_dir=tmp / "group_runs", **options)
    workdir = tmp / "group_runs" / "kna_rope__seeds0-1"
    found["workdirs"] = sorted(p.name for p in (tmp / "group_runs").iterdir())
    found["records_after_stop"] = grouped.all()
    found["stages_after_stop"] = {
        e.key: sorted(json.loads(p.read_text())["stages"]) if p.exists() else None
        for e in ENTRIES for p in [workdir / "members" / e.key / FILE_NAME]}
    found["calls_before_stop"], metrics = list(calls), (workdir / "metrics.jsonl").read_text()
    calls.clear()
    run_plan(plan.field_runs(), grouped, runs_dir=tmp / "group_runs", **options)
    found["calls_on_resume"] = list(calls)
    found["metrics_unchanged"] = (workdir / "metrics.jsonl").read_text() == metrics
    found["grouped"] = {r["key"]: r for r in grouped.all()}
    single = RecordStore("field_tiny", root=tmp / "single")
    run_plan(plan.field_runs(), single, scale="tiny", runs_dir=tmp / "single_runs",
             data_dir=data_dir)
    found["single"] = {r["key"]: r for r in single.all()}
  return found


def _numbers(results: list[dict]) -> dict:
  """{(length, set, method, field): value} of next-token results, for every numeric field but the
  timings."""
  out = {}
  for r in results:
    for field, value in r.items():
      if "second" in field:
        continue
      if isinstance(value, float) or (isinstance(value, list) and value
                                      and isinstance(value[0], float)):
        out[(r["length"], r["set"], r["rope_scaling"], field)] = np.asarray(value, np.float64)
  return out


@pytest.mark.slow
def test_a_group_of_two_seeds_records_what_the_two_single_runs_record(studied):
  grouped, single = studied["grouped"], studied["single"]
  assert sorted(grouped) == sorted(single) == sorted(e.key for e in ENTRIES)
  assert studied["workdirs"] == ["kna_rope__seeds0-1"]          # one group trained, not two runs
  for key, alone in single.items():
    member = grouped[key]
    assert member["group"] == {"seeds": [0, 1],
                               "workdir": str(member["group"]["workdir"])}
    assert member["group"]["workdir"].endswith("kna_rope__seeds0-1")
    assert set(member) - set(alone) == {"group"} and "group" not in alone
    for field in ("key", "label", "seed", "config_name", "plan_key", "checkpoint_step", "config",
                  "architecture", "copy_fraction", "retrieval_fraction", "scale", "study"):
      assert member[field] == alone[field], field
    assert member["config"]["seed"] == alone["config"]["seed"] == int(key[-1])
    lengths = {(r["length"], r["set"], r["rope_scaling"]) for r in alone["records"]}
    assert lengths == {(length, s, m) for length in (32, 256) for s in ("non_repeated", "repeated")
                       for m in ("none", "yarn")}  # 1x and 8x: the options too
    assert [r["run"] for r in member["records"]] == [r["run"] for r in alone["records"]] == \
        [key] * len(alone["records"])
    ours, theirs = _numbers(member["records"]), _numbers(alone["records"])
    assert sorted(ours) == sorted(theirs)
    assert {name[3] for name in theirs} >= {"accuracy", "loss", "accuracy_by_position"}
    for name, value in theirs.items():
      np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-5, err_msg=str(name))
    np.testing.assert_allclose(member["train"]["final_loss"], alone["train"]["final_loss"],
                               rtol=1e-5)
  assert grouped["kna_rope__seed0"]["records"] != grouped["kna_rope__seed1"]["records"]


@pytest.mark.slow
def test_a_group_stopped_during_its_evaluation_resumes_each_member_from_its_stages(studied):
  # Stopped before seed 1's first stage: no record yet (they are saved together), seed 0's stages
  # saved; the second session trains nothing and evaluates only seed 1.
  assert studied["records_after_stop"] == []
  assert studied["stages_after_stop"] == {"kna_rope__seed0": ["diagnostics", "next_token@1x",
                                                              "next_token@8x"],
                                          "kna_rope__seed1": None}
  assert [name for name, _ in studied["calls_before_stop"]] == ["kna_rope__seed0"] * 2 + [
      "kna_rope__seed1"]
  assert studied["metrics_unchanged"]
  assert studied["calls_on_resume"] == [("kna_rope__seed1", [32]), ("kna_rope__seed1", [256])]
  grouped = studied["grouped"]
  assert grouped["kna_rope__seed0"]["resumed_stages"] == ["next_token@1x", "next_token@8x",
                                                          "diagnostics"]
  assert grouped["kna_rope__seed1"]["resumed_stages"] == []


def test_entries_that_differ_only_by_seed_group_on_consecutive_seeds():
  run = lambda config, seed, **kw: plan.StudyRun(config, seed, **kw)
  entries = [run("a", 5), run("b", 0), run("a", 3), run("a", 4), run("a", 7),
             run("a", 6, copy_fraction=0.1), run("b", 1)]
  found = [[(e.label, e.seed) for e in group] for group in groups.seed_groups(entries)]
  assert found == [[("a", 3), ("a", 4), ("a", 5)], [("b", 0), ("b", 1)], [("a", 7)],
                   [("a+copy10", 6)]]
  assert groups.group_key([run("a", 3), run("a", 4)]) == "a__seeds3-4"


def test_the_preregistered_pairs_are_their_own_plan_of_two_groups_of_eight():
  entries = plan.preregistered_runs()
  assert len(entries) == 16 and len({e.key for e in entries}) == 16
  assert {e.config for e in entries} == {"baseline_rope", "kna_rope"}
  for config in ("baseline_rope", "kna_rope"):
    assert sorted(e.seed for e in entries if e.config == config) == list(range(3, 11))
  assert all(e.model == plan.RETRIEVAL_GAU_MODEL and e.copy_fraction == 0.5
             and e.retrieval_fraction == 0.5 for e in entries)
  assert entries[0].key == "baseline_rope__gau_qk-separate__gau_heads-4__copy50__retrieval50__seed3"
  assert not {e.key for e in entries} & {e.key for e in plan.field_runs()}
  assert plan.PLANS["preregistered"] is plan.preregistered_runs
  assert [groups.group_key(g) for g in groups.seed_groups(entries)] == [
      "baseline_rope__gau_qk-separate__gau_heads-4__copy50__retrieval50__seeds3-10",
      "kna_rope__gau_qk-separate__gau_heads-4__copy50__retrieval50__seeds3-10"]
