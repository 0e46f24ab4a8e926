"""Evaluation without needless compiles: the evaluator gives each layer its attention.Spec as an
argument (models.given_specs), so that its columns that differ only in numbers share one compiled
program per length. The logits so computed against the plain path (the column built into the model,
its numbers constants); the records against that path's own scoring; and the compile counts."""

import contextlib
import pathlib

import jax
import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.data.eval_sets import eval_windows
from keynorm_jax.evaluation.command import make_columns
from keynorm_jax.evaluation.evaluate import evaluate_run, summarize
from keynorm_jax.models import given_specs, init_params
from keynorm_jax.positions import EvalColumn, inference_method
from keynorm_jax.runs import TrainedRun
from keynorm_jax.scoring import make_scorer, score_windows
from train_helpers import tiny_config

LENGTH = 64   # twice the tiny runs' training length: every method changes something here
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def _config(name, **model):
  config = tiny_config(name)
  config.model.update(model)
  return run_config.resolve(config)


def _tokens(count, length=LENGTH):
  return np.random.default_rng(0).integers(0, 256, (count, length)).astype(np.int32)


@contextlib.contextmanager
def scorer_compiles():
  """The evaluator's scorer programs (jit(score)) compiled while in the block, as a list."""
  compiled = []

  def heard(event, duration, **fields):
    del duration
    if event == COMPILE_EVENT and fields.get("fun_name") == "jit(score)":
      compiled.append(fields["fun_name"])

  jax.monitoring.register_event_duration_secs_listener(heard)
  try:
    yield compiled
  finally:
    jax.monitoring.unregister_event_duration_listener(heard)


# (config, model settings, methods): both layer layouts, both architectures, every kind of number.
CASES = [
    ("kna_rope", {}, ("linear", "ntk", "dynamic_ntk", "yarn", "llama3", "yarn_temperature",
                      "drope_temperature", "posthoc_ssmax")),
    ("kna_rope", {}, ("rerope", "leaky_rerope", "self_extend", "dca", "string", "window",
                      "streaming", "lm_infinite")),
    ("transformer_kna_rope", {"scan_layers": True, "remat": True, "num_layers": 2},
     ("yarn", "leaky_rerope", "window")),
    ("transformer_baseline_alibi", {}, ("alibi_interpolate", "ntk_alibi")),
    ("kna_nope", {}, ("llama4_temperature",)),
]


@pytest.mark.parametrize("name,model,methods", CASES,
                         ids=[f"{case[0]}-{case[2][0]}" for case in CASES])
def test_given_specs_give_the_logits_of_the_column_built_in(name, model, methods):
  """The model as trained with a column's specs given (their numbers arguments) computes the
  logits of the model built under that column (its numbers constants), and not those of the
  model as trained: the column reaches every layer."""
  config = _config(name, **model)
  cfg = run_config.model_config(config)
  params = init_params(run_config.build_model(config), 0, 32)
  tokens = _tokens(2)
  given = jax.jit(lambda p, specs: run_config.build_model(config).apply(
      {"params": p}, tokens, specs=specs))
  plain = lambda column: jax.jit(lambda p: run_config.build_model(config, column).apply(
      {"params": p}, tokens))(params)
  as_trained = plain(EvalColumn())
  for column in make_columns(methods, string_window=4):  # (STRING's default W = S at 32 tokens)
    expected = plain(column)
    got = given(params, given_specs(cfg, column, LENGTH))
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5, err_msg=column.label)
    assert np.abs(expected - as_trained).max() > 1e-4, column.label


def _run(config, **fields):
  params = init_params(run_config.build_model(config), 0, 32)
  return TrainedRun(name="tiny", workdir=pathlib.Path("tiny"), config=config, step=0,
                    params=params, **fields)


def _evaluate(run, columns):
  return evaluate_run(run, lengths=[LENGTH], columns=columns, num_windows=2,
                      tokens=_tokens(1, 4096)[0], include_train_length=False)


def test_columns_that_differ_only_in_numbers_compile_one_program():
  """One evaluation of a RoPE model with "none", the RoPE scalings (factors), the temperatures and
  one method at two factors compiles one scorer program; leaky ReRoPE at two leaks one more."""
  run = _run(_config("kna_rope"))
  yarns = [EvalColumn(inference_method("yarn", factor=f)) for f in (2.0, 4.0)]
  with scorer_compiles() as compiled:
    _evaluate(run, make_columns(["none", "linear", "ntk", "dynamic_ntk", "llama3",
                                 "yarn_temperature", "drope_temperature"]) + yarns)
  assert len(compiled) == 1
  leaks = [EvalColumn(inference_method("leaky_rerope", leaky_rerope_factor=k)) for k in (4, 16)]
  with scorer_compiles() as compiled:
    _evaluate(run, leaks)
  assert len(compiled) == 1


def test_alibi_scalings_share_the_as_trained_program():
  run = _run(_config("transformer_baseline_alibi"))
  with scorer_compiles() as compiled:
    _evaluate(run, make_columns(["none", "alibi_interpolate", "ntk_alibi"]))
  assert len(compiled) == 1


def test_a_window_stays_static():
  """A window decides which blocks the kernels compute (Python, not traced): each is a program."""
  run = _run(_config("kna_rope"))
  windows = [EvalColumn(inference_method("window", window=w)) for w in (8, 16)]
  with scorer_compiles() as compiled:
    _evaluate(run, windows)
  assert len(compiled) == 2


@pytest.mark.parametrize("stacked", [False, True], ids=["single", "seed_group"])
def test_records_are_those_of_the_column_built_in(stacked):
  """evaluate_run's records (specs given) equal the plain path's scoring: the model built under
  each column, scored and summarized by hand; a seed group's members each their own."""
  config = _config("kna_rope")
  run = _run(config)
  if stacked:
    run = TrainedRun(name="tiny", workdir=run.workdir, config=config, step=0, seeds=(0, 1),
                     params=jax.tree.map(lambda p: np.stack([p, 2 * p]), run.params))
  columns = make_columns(["yarn", "window", "posthoc_ssmax"])
  records = [r for r in _evaluate(run, columns) if r["set"] == "non_repeated"]
  windows = eval_windows(_tokens(1, 4096)[0], kind="non_repeated", length=LENGTH, count=2,
                         train_length=32)
  for column in columns:
    scorer = make_scorer(run_config.build_model(config, column), stacked=stacked)
    correct, nll = score_windows(scorer, run.params, windows, 2)
    if not stacked:
      correct, nll = correct[None], nll[None]
    members = [r for r in records if r["rope_scaling"] == column.label]
    assert [r["seed"] for r in members] == list(run.member_seeds)
    for record, c, n in zip(members, correct, nll):
      expected = summarize(c, n, train_length=32, bucket=4)
      assert record["loss"] == pytest.approx(expected["loss"], rel=1e-6)
      assert record["accuracy"] == pytest.approx(expected["accuracy"], abs=1e-9)
