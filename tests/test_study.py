"""The field study's harness: one tiny run end to end (record, skip, report), and the report's
derived figures checked on records whose answers are worked out by hand."""

import json

import pytest

from keynorm_jax.evaluation.retrieval import evaluate_retrieval
from keynorm_jax.study import plan, results_page, runner
from keynorm_jax.study.records import RecordStore
from keynorm_jax.study.field_page import (architecture_table, copy_accuracies, training_summary,
                                          within_window_retention, write_field_page)
from keynorm_jax.study.runner import run_one, step_seconds

pytestmark = pytest.mark.slow


def test_within_window_retention_by_hand():
  # 512 trained, buckets of 64: 8 buckets inside at 0.5, 8 beyond at 0.4 -> 0.8.
  r = {"accuracy": 0.45, "position_bucket": 64, "accuracy_by_position": [0.5] * 8 + [0.4] * 8}
  assert within_window_retention(r, 512) == pytest.approx(0.8)
  assert within_window_retention({"accuracy": None}, 512) is None


def test_copy_accuracies_by_hand():
  # Period 128, buckets of 64: buckets 0-1 are the first copy, 2-7 later copies inside 512.
  buckets = [0.1, 0.3] + [0.6, 0.8, 0.6, 0.8, 0.6, 0.8] + [0.5, 0.7]
  r = {"accuracy": 0.5, "position_bucket": 64, "accuracy_by_position": buckets,
       "repeat_period": 128}
  first, inside, beyond = copy_accuracies(r, 512)
  assert (first, inside, beyond) == pytest.approx((0.2, 0.7, 0.6))


def test_the_medium_scale_trains_the_medium_models_under_its_own_plan_key():
  entry = next(e for e in plan.retrieval_runs() if e.config == "transformer_kna_rope")
  config = runner.study_config(entry, "medium")
  assert config.model_size == "medium" and config.model.d_model == 512
  assert (config.num_train_steps, config.batch_size, config.train_length) == (3000, 16, 512)
  assert plan.plan_key("medium", retrieval=True) != plan.plan_key("cpu", retrieval=True)
  assert set(plan.RETRIEVAL_PROMPTS) == set(plan.SCALES)


def test_the_gau_retrieval_runs_have_separate_q_and_k_in_4_heads_in_their_key_and_config():
  entries = plan.retrieval_runs()
  entry = next(e for e in entries if (e.config, e.seed) == ("kna_rope", 1))
  assert entry.label == "kna_rope+gau_qk=separate+gau_heads=4+copy50+retrieval50"
  assert entry.key == "kna_rope__gau_qk-separate__gau_heads-4__copy50__retrieval50__seed1"
  config = runner.study_config(entry, "cpu")
  assert (config.model.gau_qk, config.model.gau_heads, config.seed) == ("separate", 4, 1)
  assert all(bool(e.model) != e.config.startswith("transformer_") for e in entries)


def test_gau_runs_with_their_own_model_settings_sit_beside_their_transformer_twin():
  labels = ["kna_rope+copy50+retrieval50", "kna_rope+gau_qk=separate+gau_heads=4+copy50+retrieval50",
            "transformer_kna_rope+copy50+retrieval50", "transformer_kna_fox", "baseline_alibi"]
  table = architecture_table([{"label": label, "config_name": label.split("+")[0], "seed": 0,
                               "config": {"train_length": 8}, "records": []} for label in labels])
  assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == [
      "| `kna_fox`", "| `kna_rope+copy50+retrieval50`",
      "| `kna_rope+gau_qk=separate+gau_heads=4+copy50+retrieval50`"]


def test_the_report_says_what_the_records_trained_counted_from_their_configs():
  configs = [(3000, 8, 512), (1000, 8, 512), (1000, 8, 512), (30, 2, 32)]
  records = [{"config": {"num_train_steps": s, "batch_size": b, "train_length": t}}
             for s, b, t in configs]
  assert training_summary(records) == ("30 steps of 2 x 32 (1 run), 1000 steps of 8 x 512 (2 runs), "
                                       "3000 steps of 8 x 512 (1 run)")


def test_step_seconds_add_the_logged_intervals_across_a_resume():
  # 10 steps of 4 tokens at 20 tokens/s = 2 s; a resume at step 10, then 10 more at 40/s = 1 s.
  metrics = [{"step": 10, "tokens_per_second": 20.0}, {"step": 20, "tokens_per_second": 40.0},
             {"step": 20, "eval_accuracy": 0.5}]
  assert step_seconds(metrics, tokens_per_step=4) == 3.0
  assert step_seconds([], tokens_per_step=4) == 0.0


def test_a_tiny_study_run_is_recorded_skipped_and_reported(tmp_path, reference_kernel,
                                                           data_dir):
  store = RecordStore("field_tiny", root=tmp_path / "results")
  entry = plan.StudyRun("kna_alibi")
  path = run_one(entry, scale="tiny", store=store, runs_dir=tmp_path / "runs",
                 data_dir=data_dir)
  record = json.loads(path.read_text())
  assert record["plan_key"] == plan.plan_key("tiny")
  assert store.find(entry.key, plan.plan_key("tiny")) is not None      # the study skips it
  assert store.find(entry.key, "another plan") is None                 # ...unless the plan changed
  assert record["provenance"]["code_version"] and record["checkpoint_step"] == 30
  assert 0 < record["train"]["step_seconds"] <= record["train"]["seconds"]
  lengths = {r["length"] for r in record["records"]}
  assert lengths == {32, 256, 512}
  methods = {r["rope_scaling"] for r in record["records"]}
  assert methods == {"none", "alibi_interpolate", "window", "streaming"}  # ntk_alibi: one head
  assert all(r["repeat_period"] == 8 for r in record["records"] if r["set"] == "repeated")
  assert not (tmp_path / "runs" / entry.key).exists()                    # scratch run removed
  page = write_field_page(store.all(), store.directory)
  text = page.read_text()
  assert (store.directory / "by_position_gau.png").exists()
  assert (store.directory / "reach_gau.png").exists()
  assert text.count("| `kna_alibi` |") == 4        # field, options, copy and reach tables
  reach = record["diagnostics"]["256"]["layers"]["layer_0"]["reach"]
  assert 0.0 <= reach["far_mass_beyond_train"] <= 1.0
  assert (store.directory / "NOTES.md").read_text().count("| `kna_alibi__seed0` |") == 1
  page = tmp_path / "RESULTS.md"
  frame = "intro\n" + "".join(f"{b}\nold numbers\n{e}\ntext\n"
                             for b, e in map(results_page.markers, results_page.BLOCKS))
  page.write_text(frame)
  assert results_page.update_page(store.all(), None, page)
  text = page.read_text()
  last = results_page.markers(results_page.BLOCKS[-1])[1]
  assert text.startswith("intro\n<!-- table1 -->\n") and text.endswith(f"{last}\ntext\n")
  assert "old numbers" not in text and "| Baseline ALiBi |" not in text
  assert "| KNA ALiBi | 1 |" in text                                    # Table 1's row
  page.write_text("no markers\n")
  assert not results_page.update_page(store.all(), None, page)
  assert page.read_text() == "no markers\n"


def test_copy_runs_have_their_own_keys_and_labels():
  run = plan.StudyRun("kna_rope", seed=1, copy_fraction=0.1)
  assert (run.key, run.label) == ("kna_rope__copy10__seed1", "kna_rope+copy10")
  assert plan.StudyRun("kna_rope").key == "kna_rope__seed0"
  keys = [r.key for r in plan.field_runs()]
  assert len(keys) == len(set(keys)) and "transformer_kna_rope__copy10__seed0" in keys


def test_drope_runs_add_its_temperature_under_a_plan_key_of_their_own():
  # DroPE's runs are evaluated with its logit scale too, next-token and retrieval; no other
  # record's key changes.
  assert plan.inference_options("drope") == ("drope_temperature", "window", "streaming")
  assert plan.retrieval_options("drope") == ("drope_temperature", "window", "streaming")
  assert plan.inference_options("nope") == plan.retrieval_options("nope") == ("window", "streaming")
  key = lambda config, retrieval=0.0: runner.record_plan_key(
      plan.StudyRun(config, retrieval_fraction=retrieval), "cpu")
  assert key("baseline_rope") == key("transformer_kna_nope") == plan.plan_key("cpu")
  assert key("transformer_kna_drope") == plan.plan_key("cpu") + ":drope=drope_temperature"
  assert key("transformer_kna_rope", 0.5) == key("kna_nope", 0.5) == plan.plan_key("cpu", True)
  assert key("transformer_kna_drope", 0.5) == (plan.plan_key("cpu", retrieval=True)
                                               + ":drope=drope_temperature")


def test_a_study_in_bfloat16_trains_the_plan_under_keys_of_its_own(tmp_path):
  """--dtype: float32 (the default) leaves the plan as it is; bfloat16 puts model.compute_dtype in
  every run's config, label and key, so no record of one dtype is found for the other; the
  pre-registered runs refuse it (in one line, before any training: test_cli_input.py)."""
  entries = plan.field_runs()
  assert plan.in_dtype(entries, "float32") == entries
  bf16 = plan.in_dtype(entries, "bfloat16")
  keys, bf16_keys = {e.key for e in entries}, {e.key for e in bf16}
  assert len(bf16_keys) == len(bf16) == len(entries) and not keys & bf16_keys
  entry = plan.in_dtype([plan.StudyRun("kna_rope")], "bfloat16")[0]
  assert (entry.label, entry.key) == ("kna_rope+compute_dtype=bfloat16",
                                      "kna_rope__compute_dtype-bfloat16__seed0")
  assert runner.study_config(entry, "cpu").model.compute_dtype == "bfloat16"
  assert runner.study_config(plan.StudyRun("kna_rope"), "cpu").model.compute_dtype == "float32"
  with pytest.raises(ValueError) as refused:   # the CLI's exit in one line: test_cli_input.py
    plan.in_dtype(plan.preregistered_runs(), "bfloat16")
  assert str(refused.value) == (
      "--dtype=bfloat16: the pre-registered runs train in float32 (docs/study.md, (f)); "
      "leave --dtype at float32 with --plan=preregistered.")


def test_shards_split_the_plan_into_disjoint_parts_that_cover_it():
  entries = list(range(10))
  assert plan.shard_of(entries, "") == entries
  assert [plan.shard_of(entries, f"{i}/3") for i in range(3)] == [[0, 3, 6, 9], [1, 4, 7],
                                                                  [2, 5, 8]]
  for bad in ("3/3", "-1/2", "1", "a/b", "0/0"):
    with pytest.raises(ValueError, match="expected i/n"):
      plan.shard_of(entries, bad)


def test_tables_name_the_code_version_and_device_of_each_record():
  from keynorm_jax.study.field_page import made_with  # pylint: disable=import-outside-toplevel
  gpu = {"provenance": {"code_version": "bc23a3865d3b", "device": "NVIDIA H100 80GB HBM3",
                        "commit": "686c25fb"}}
  old = {"provenance": {"code_version": "0123456789ab", "backend": "cpu", "commit": None}}
  assert made_with(gpu) == "bc23a386 (H100)"
  assert made_with(old) == "01234567 (cpu)"


def test_a_tiny_retrieval_run_is_recorded_with_its_retrieval_results(tmp_path, monkeypatch,
                                                                     reference_kernel, data_dir):
  monkeypatch.setattr(plan, "RETRIEVAL_MULTIPLES", (1, 2))    # the plan's shape, fewer lengths
  monkeypatch.setattr(plan, "RETRIEVAL_TASKS", ("passkey", "mqar"))
  monkeypatch.setattr(plan, "RETRIEVAL_OPTION_MULTIPLES", (2,))
  monkeypatch.setitem(plan.SCALES["tiny"], "windows", {1: 2})   # next-token: 1x, "none" only
  monkeypatch.setattr(plan, "ROTARY_OPTIONS", ())
  store = RecordStore("field_tiny", root=tmp_path / "results")
  entry = plan.StudyRun("kna_rope", retrieval_fraction=0.5)
  assert (entry.key, entry.label) == ("kna_rope__retrieval50__seed0", "kna_rope+retrieval50")
  # Stopped during the retrieval evaluation (the second length), then run again: the trained
  # checkpoint and the finished stages are read back, nothing before the stop is evaluated again.
  calls, stop = [], [True]
  class Stopped(Exception):
    pass
  def stopped_at_2x(run, **kw):
    calls.append(kw["lengths"])
    if kw["lengths"] == [384] and stop:
      stop.clear()  # the first time only
      raise Stopped
    return evaluate_retrieval(run, **kw)
  monkeypatch.setattr(runner, "evaluate_retrieval", stopped_at_2x)
  with pytest.raises(Stopped):
    run_one(entry, scale="tiny", store=store, runs_dir=tmp_path / "runs",
            data_dir=data_dir)
  assert not store.path(entry.key).exists()
  stages_file = tmp_path / "runs" / entry.key / "study_stages.json"
  saved = json.loads(stages_file.read_text())["stages"]
  assert set(saved) == {"next_token@1x", "retrieval@1x"}
  monkeypatch.setattr(runner, "evaluate_run", lambda *a, **kw: pytest.fail("evaluated again"))
  calls.clear()
  path = run_one(entry, scale="tiny", store=store, runs_dir=tmp_path / "runs",
                 data_dir=data_dir)
  record = json.loads(path.read_text())
  assert calls == [[384]] and record["resumed_stages"] == ["next_token@1x", "retrieval@1x"]
  assert [r for r in record["retrieval"] if r["length"] == 192] == saved["retrieval@1x"]
  assert record["records"] == saved["next_token@1x"]
  assert not stages_file.exists()  # the workdir goes once the record is saved
  assert record["plan_key"] == plan.plan_key("tiny", retrieval=True) != plan.plan_key("tiny")
  assert record["config"]["train_length"] == 192 and record["retrieval_fraction"] == 0.5
  assert record["config"]["data"]["retrieval_tasks"] == "passkey,mqar"
  found = {(r["task"], r["length"], r["rope_scaling"]) for r in record["retrieval"]}
  options = ("none", "yarn", "rerope", "window", "streaming")
  assert found == {(t, 192, "none") for t in ("passkey", "mqar")} | {
      (t, 384, m) for t in ("passkey", "mqar") for m in options}
  assert all(len(r["accuracy_by_depth"]) == 10 and r["prompts"] == 1 for r in record["retrieval"])
  page = write_field_page(store.all(), store.directory).read_text()
  assert "## Retrieval beyond the training length" in page
  assert page.count("| `kna_rope+retrieval50` |") >= 2 + len(options)  # by length and options
  assert (store.directory / "needle" / f"{entry.key}.png").exists()      # its heat map


def test_retrieval_tables_read_the_records_by_hand(monkeypatch):
  from keynorm_jax.study import retrieval_report  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(plan, "RETRIEVAL_TASKS", ("passkey", "mqar"))
  def result(task, length, accuracy, method="none"):
    return {"task": task, "length": length, "rope_scaling": method, "accuracy": accuracy}
  rec = lambda seed, passkey_2x, steps=3000, label="kna_rope+retrieval50": {
      "label": label, "seed": seed, "architecture": "gau", "train": {"steps": steps},
      "config": {"train_length": 512, "model": {"position": "rope"}},
      "retrieval": [result("passkey", 512, 1.0), result("mqar", 1024, 0.25, "window")]
                   + ([] if passkey_2x is None else [result("passkey", 1024, passkey_2x)])}
  records = [rec(0, 0.5), rec(1, 0.7), rec(2, 0.9), rec(1, 0.0, steps=2000)]
  assert retrieval_report.find(records[0], "passkey", 2)["accuracy"] == 0.5
  assert retrieval_report.find(records[0], "mqar", 2) is None                 # only with window
  table = retrieval_report.by_length_table(records, "gau")
  assert "| `kna_rope+retrieval50` | 3000 | 100 | 50 |  |" in table            # seed 0 only
  seeds = retrieval_report.seed_table(records)
  # mean ± sd over the seeds trained alike; the one 2000-step record is no spread of them
  # then each seed's value, in the seeds column's order
  assert ("| `kna_rope+retrieval50` | 3000 | 0, 1, 2 | 100 ± 0 (100, 100, 100) "
          "| 70 ± 20 (50, 70, 90) |") in seeds
  assert "| 2000 |" not in seeds
  gap = [rec(0, 0.5, label="x"), rec(1, None, label="x"), rec(2, 0.9, label="x")]
  assert "| `x` | 3000 | 0, 1, 2 | 100 ± 0 (100, 100, 100) | 70 ± 28 (50, -, 90) |" \
      in retrieval_report.seed_table(gap)                                     # seed 1 lacks 2x
  options = retrieval_report.options_table(records, "gau")
  assert "| `kna_rope+retrieval50` | 3000 | window |  |  | 25 |  |" in options


def test_a_preregistered_run_is_scored_on_its_secondary_endpoint(tmp_path, monkeypatch,
                                                                  reference_kernel, data_dir):
  monkeypatch.setattr(plan, "RETRIEVAL_MULTIPLES", (1,))    # the plan's shape, one length
  monkeypatch.setattr(plan, "RETRIEVAL_TASKS", ("passkey",))
  monkeypatch.setattr(plan, "RETRIEVAL_OPTION_MULTIPLES", ())
  monkeypatch.setitem(plan.SCALES["tiny"], "windows", {1: 2})
  monkeypatch.setattr(plan, "SECONDARY_PROMPTS", 3)
  monkeypatch.setattr(plan, "ROTARY_OPTIONS", ())             # next-token: "none" only
  store = RecordStore("field_tiny", root=tmp_path / "results")
  entry = [e for e in plan.preregistered_runs() if e.key.startswith("kna_rope")][0]
  assert entry.preregistered and entry.key.endswith("__retrieval50__seed3")
  record = json.loads(run_one(entry, scale="tiny", store=store, runs_dir=tmp_path / "runs",
                              data_dir=data_dir).read_text())
  assert record["plan_key"].endswith(":secondary=passkey_letters,passkey@1x:prompts=3")
  assert store.find(entry.key, runner.record_plan_key(entry, "tiny")) == record
  secondary = record["secondary"]
  assert [(r["task"], r["length"], r["rope_scaling"], r["prompts"]) for r in secondary] == [
      ("passkey_letters", 192, "none", 3), ("passkey", 192, "none", 3)]
  primary = [r for r in record["retrieval"] if r["task"] == "passkey"][0]
  assert primary["prompts"] == 1 and len(secondary[1]["accuracy_by_depth"]) == 10
  assert record["provenance"]["cpu"] is None or "bf16" in record["provenance"]["cpu"]


def test_a_preregistered_run_that_goes_non_finite_is_recorded_as_failed(tmp_path, monkeypatch):
  def non_finite(config, workdir):
    raise runner.NonFiniteLossError("The loss became nan at or before step 20 (injected).")
  monkeypatch.setattr(runner, "train_and_evaluate", non_finite)
  store = RecordStore("field_tiny", root=tmp_path / "results")
  entry = plan.preregistered_runs()[0]
  record = json.loads(run_one(entry, scale="tiny", store=store, runs_dir=tmp_path / "runs",
                              echo=lambda _: None).read_text())
  assert record["failed"].startswith("The loss became nan") and record["retrieval"] == []
  assert record["plan_key"] == runner.record_plan_key(entry, "tiny")
  # Outside the pre-registered plan the error still stops the study.
  with pytest.raises(runner.NonFiniteLossError):
    run_one(plan.StudyRun("kna_rope"), scale="tiny", store=store, runs_dir=tmp_path / "runs")
