"""The extrapolation evaluator on tiny models trained in the test."""

import csv
import json
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from keynorm_jax.data.corpora import DataError
from keynorm_jax.data.eval_sets import eval_windows
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.command import EvalRequest, evaluate_runs, make_columns
from keynorm_jax.evaluation.evaluate import held_out_tokens
from keynorm_jax.runs import load_run, workdir_source
from keynorm_jax.run_config import build_model
from keynorm_jax.storage import checksums
from keynorm_jax.training import loop as training
from train_helpers import tiny_config

REPO = pathlib.Path(__file__).resolve().parent.parent
QUIET = lambda *_: None


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir):
  root = tmp_path_factory.mktemp("runs")
  for name in ("kna_rope", "baseline_nope"):
    training.train_and_evaluate(tiny_config(name, data_dir=data_dir, num_train_steps=10,
                                            checkpoint_every_steps=10), root / name)
  return root


def _evaluate(workdir, tmp_path, **request):
  request.setdefault("lengths", [128])
  request.setdefault("columns", make_columns(["none"]))
  request.setdefault("num_windows", 4)
  return evaluate_runs(workdir_source(workdir, warn=QUIET), EvalRequest(**request), output=tmp_path,
                       echo=QUIET)


def test_accuracy_equals_direct_computation(runs, tmp_path):
  records, failures, _ = _evaluate(runs / "kna_rope", tmp_path)
  assert not failures
  run = load_run(runs / "kna_rope")
  model = build_model(run.config)
  tokens = held_out_tokens(run.config)
  apply = jax.jit(lambda params, inputs: model.apply({"params": params}, inputs))
  for record in records:
    windows = eval_windows(tokens, kind=record["set"], length=record["length"], count=4,
                           train_length=32)
    logits = np.asarray(apply(run.params, windows[:, :-1]))
    correct = logits.argmax(-1) == windows[:, 1:]
    per_window = correct.mean(axis=1)
    assert record["accuracy"] == pytest.approx(per_window.mean(), abs=1e-9)
    assert record["accuracy_stderr"] == pytest.approx(per_window.std(ddof=1) / 2, abs=1e-9)
    assert record["accuracy_beyond_train"] == (
        pytest.approx(correct[:, 32:].mean(), abs=1e-9) if record["length"] > 32 else None)
    log_probs = jax.nn.log_softmax(logits)
    nll = -np.take_along_axis(np.asarray(log_probs), windows[:, 1:, None], -1).mean()
    assert record["loss"] == pytest.approx(nll, rel=1e-5)
    assert record["tokens"] == 4 * record["length"]
  assert {(r["length"], r["set"]) for r in records} == {
      (32, "repeated"), (32, "non_repeated"), (128, "repeated"), (128, "non_repeated")}


def test_one_window_has_no_standard_error_and_its_cell_shows_the_accuracy_alone(runs, tmp_path):
  records, _, paths = _evaluate(runs / "kna_rope", tmp_path, num_windows=1)
  assert records and all(r["windows"] == 1 and r["accuracy_stderr"] is None for r in records)
  json.loads(paths["results.json"].read_text(), parse_constant=pytest.fail)  # no NaN in the JSON
  table = paths["results.md"].read_text()
  assert "±" not in table.split("\n\n", 1)[1] and "nan" not in table
  for r in records:
    assert f" {100 * r['accuracy']:.2f} |" in table


def test_numbers_identical_across_invocations(runs, tmp_path):
  strip = lambda rs: [{k: v for k, v in r.items() if k != "seconds"} for r in rs]
  first, _, _ = _evaluate(runs, tmp_path / "a")
  second, _, _ = _evaluate(runs, tmp_path / "b")
  assert strip(first) == strip(second)


def test_scalings_at_training_length_equal_none_where_the_formula_says(runs, tmp_path):
  names = ["none", "linear", "ntk", "dynamic_ntk", "yarn", "rerope"]
  columns = make_columns(names, rerope_window=32)
  records, _, _ = _evaluate(runs / "kna_rope", tmp_path, lengths=[32], columns=columns)
  for eval_set in ("repeated", "non_repeated"):
    found = {r["rope_scaling"]: (r["accuracy"], r["loss"]) for r in records
             if r["set"] == eval_set}
    for name in names:
      assert found[name][0] == found["none"][0]
      assert found[name][1] == pytest.approx(found["none"][1], rel=1e-6)
  # ...and at 4x the training length they do differ.
  records, _, _ = _evaluate(runs / "kna_rope", tmp_path, columns=columns[:3])
  long = {r["rope_scaling"]: r["loss"] for r in records if r["length"] == 128}
  assert len(set(long.values())) == 3


def test_output_files_exist_and_parse(runs, tmp_path):
  records, _, paths = _evaluate(runs, tmp_path, diagnostics=True,
                                columns=make_columns(["none", "yarn"]))
  results = json.loads(paths["results.json"].read_text())["results"]
  required = {"run", "config", "train_length", "length", "set", "rope_scaling", "accuracy",
              "accuracy_stderr", "accuracy_beyond_train", "loss", "tokens"}
  assert len(results) == len(records) and all(required <= set(r) for r in results)
  assert {r["run"] for r in results} == {"kna_rope", "baseline_nope"}
  # RoPE scalings do nothing to a NoPE model: only "none" is reported for it.
  assert {r["rope_scaling"] for r in results if r["run"] == "baseline_nope"} == {"none"}
  with paths["results.csv"].open() as f:
    assert len(list(csv.DictReader(f))) == len(records)
  assert "| kna_rope | yarn |" in paths["results.md"].read_text()
  for png in ("accuracy_by_position.png", "diagnostics.png"):
    assert paths[png].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  diagnostics = json.loads(paths["results.json"].read_text())["diagnostics"]
  kna_layer = diagnostics["kna_rope"]["128"]["layers"]["layer_0"]
  nope_layer = diagnostics["baseline_nope"]["128"]["layers"]["layer_0"]
  assert kna_layer["key_norm_cv"] == 0.0 and nope_layer["key_norm_cv"] > 0.0
  assert len(kna_layer["entropy_by_position"]) == 128 // 4
  assert 0.0 < kna_layer["entropy_beyond_train"] < np.log(128)


def test_a_failing_run_does_not_stop_the_others(runs, tmp_path):
  root = tmp_path / "runs"
  shutil.copytree(runs / "kna_rope", root / "good")
  shutil.copytree(runs / "kna_rope", root / "mismatched")
  meta = root / "mismatched" / "checkpoints" / "10" / "config" / "metadata"
  saved = json.loads(meta.read_text())
  saved["attention_heads"] = 4
  meta.write_text(json.dumps(saved))
  checksums.write_manifest(meta.parent.parent)  # as saved by another version, not corrupted
  (root / "empty" / "checkpoints").mkdir(parents=True)
  records, failures, _ = _evaluate(root, tmp_path / "out")
  assert {r["run"] for r in records} == {"good"}
  assert "does not match this code" in failures["mismatched"]
  assert "no finished checkpoint" in failures["empty"]


def test_a_checkpoint_from_before_a_setting_existed_loads_with_its_default(runs, tmp_path):
  old = tmp_path / "runs" / "old"
  shutil.copytree(runs / "kna_rope", old)
  meta = old / "checkpoints" / "10" / "config" / "metadata"
  saved = json.loads(meta.read_text())
  del saved["model"]["scan_layers"], saved["model"]["param_dtype"]
  meta.write_text(json.dumps(saved))
  checksums.write_manifest(meta.parent.parent)  # as written by the older version
  run = load_run(old)
  assert run.config.model.scan_layers is False and run.config.model.param_dtype == "float32"
  assert run.config.model.attention == "kna"                    # the saved settings are kept
  records, failures, _ = _evaluate(old, tmp_path / "out")
  assert not failures and records[0]["accuracy"] == _evaluate(
      runs / "kna_rope", tmp_path / "new")[0][0]["accuracy"]


def test_a_length_the_data_cannot_fill_is_refused_before_any_scoring(runs, tmp_path):
  """`--length=2000000` scored the 64-token columns before it refused: the lengths are checked
  against the held-out text before any scoring, and the evaluation writes nothing."""
  lines = []
  with pytest.raises(DataError, match=r"cannot supply 4 windows of 2000000 tokens.*largest length "
                                      r"is \d+\. Lower --num_windows or --length"):
    evaluate_runs(workdir_source(runs / "kna_rope", warn=QUIET),
                  EvalRequest(lengths=[64, 2_000_000], columns=make_columns(["none"]),
                              num_windows=4), output=tmp_path / "out", echo=lines.append)
  assert not [line for line in lines if "evaluating" in line], lines     # nothing scored
  assert not (tmp_path / "out").exists()


def _eval_cli(*args):
  return subprocess.run([sys.executable, str(REPO / "eval.py"), *args], cwd=REPO,
                        capture_output=True, text=True, timeout=300)


def test_cli_prints_table_and_writes_files(runs, tmp_path):
  # One run (a folder of runs is evaluated in-process above): the command line's parsing and output.
  result = _eval_cli(f"--workdir={runs / 'kna_rope'}", "--lengths=64",
                     "--rope_scaling=none,rerope", "--num_windows=2", f"--output={tmp_path}",
                     "--posthoc_logn")
  assert result.returncode == 0, result.stderr[-2000:]
  assert "| kna_rope | rerope+logn |" in result.stdout
  assert (tmp_path / "results.json").exists()


def test_a_length_below_the_training_length_is_evaluated(runs, tmp_path):
  """It was refused ("shorter than kna_rope's training length 32"): at 16 tokens the non-repeated
  set is scored, and the repeated set, whose period (the training length) is longer, is n/a with
  its reason and fix."""
  records, failures, paths = _evaluate(runs / "kna_rope", tmp_path / "out", lengths=[16])
  assert not failures
  found = {(r["length"], r["set"]): r for r in records}
  assert sorted(found) == [(16, "non_repeated"), (16, "repeated"), (32, "non_repeated"),
                           (32, "repeated")]
  assert 0 <= found[16, "non_repeated"]["accuracy"] <= 1
  assert found[16, "non_repeated"]["accuracy_beyond_train"] is None
  assert found[16, "repeated"]["accuracy"] is None
  assert found[16, "repeated"]["not_applicable"] == (
      "the repeated set tiles a period of 32 tokens, longer than 16; pass --repeat_period <= 16 "
      "to score it there")
  assert all(r["one_x"] == "the training length" and r["train_length"] == 32 for r in records)
  table = paths["results.md"].read_text()
  assert "1x: kna_rope 32 tokens (the training length)." in table
  assert "| kna_rope | none | n/a |" in table and "n/a: not applicable (the repeated set" in table
  with pytest.raises(ConfigError, match="Unknown --methods longrope"):
    make_columns(["ntk", "longrope"])
  with pytest.raises(ConfigError, match=r"--length/--lengths takes positive numbers of tokens, got "
                                        r"0, -5"):
    EvalRequest(lengths=[64, 0, -5], columns=make_columns(["none"]))


def test_another_kernel_gives_the_same_numbers(runs, tmp_path, monkeypatch):
  """--kernel evaluates with another attention kernel than the run's own: the same numbers (here
  `blocked` in blocks of 16, with the CPU's dense layers, against the run's own, the reference
  kernel of the tiny runs)."""
  from keynorm_jax.attention.kernels import blocked  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(blocked, "DEFAULT_BLOCK", 16)
  plain, _, _ = _evaluate(runs / "kna_rope", tmp_path / "a")
  calls = []
  real = blocked.blocked_attention
  monkeypatch.setattr(blocked, "blocked_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
  other, failures, _ = _evaluate(runs / "kna_rope", tmp_path / "b", kernel="blocked")
  assert not failures and calls                      # the blocked kernel ran
  for a, b in zip(plain, other):
    assert (a["length"], a["set"]) == (b["length"], b["set"])
    assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-6)
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


def test_retrieval_skips_the_lengths_a_prompt_does_not_fit_and_scores_the_rest(runs, tmp_path):
  """A run trained at 32 tokens, below any prompt (passkey 167, mqar 176): every passkey
  evaluation failed ("Length 32 is shorter than a passkey prompt needs") even at a length that
  fits. Each task is skipped where its prompt does not fit, with one line, and scored elsewhere."""
  lines = []
  request = EvalRequest(lengths=[170], columns=make_columns(["none"]), tasks=["passkey", "mqar"],
                        depths=[0.5], num_prompts=1)
  records, failures, paths = evaluate_runs(workdir_source(runs / "kna_rope", warn=QUIET), request,
                                           output=tmp_path, echo=lines.append)
  assert not failures
  found = {(r["task"], r["length"]): r for r in records}
  assert sorted(found) == [("mqar", 32), ("mqar", 170), ("passkey", 32), ("passkey", 170)]
  assert 0 <= found["passkey", 170]["accuracy"] <= 1
  skipped = [key for key, r in found.items() if r["accuracy"] is None]
  assert sorted(skipped) == [("mqar", 32), ("mqar", 170), ("passkey", 32)]
  said = [line.strip() for line in lines if "skipped" in line]
  assert said == ["evaluating kna_rope L=32 passkey: skipped (a passkey prompt needs at least "
                  "167 tokens (its needle, 64 tokens of filler, the question and the answer))",
                  "evaluating kna_rope L=32 mqar: skipped (a mqar prompt needs at least 176 "
                  "tokens (its needle, 64 tokens of filler, the question and the answer))",
                  "evaluating kna_rope L=170 mqar: skipped (a mqar prompt needs at least 176 "
                  "tokens (its needle, 64 tokens of filler, the question and the answer))"]
  assert "n/a: not applicable (a mqar prompt needs at least 176" in paths["results.md"].read_text()
