"""Every training-time position method trains (tiny size, a few steps) and is evaluated at 4x its
training length (a Transformer RoPE run with every inference-time method): applicable ones give
finite accuracies, the others are skipped with a reason, and lengths past a learned table are
reported as not applicable."""

import math

import pytest

from keynorm_jax import positions, run_config
from keynorm_jax.evaluation.command import make_columns
from keynorm_jax.evaluation.evaluate import applicable_columns, evaluate_run
from keynorm_jax.runs import load_run
from keynorm_jax.training import loop as training
from train_helpers import tiny_config

pytestmark = pytest.mark.slow

# One attention variant per method, alternating, so both Baseline and KNA meet every kind.
# The methods whose papers train a multi-head Transformer on the Transformer (the registry's
# TrainingMethod.on_the_transformer; ALiBi there too, for its several heads: ntk_alibi needs two).
CASES = [("transformer_" if positions.TRAINING_METHODS.get(name).on_the_transformer else "")
         + ("kna" if i % 2 else "baseline") + "_" + name
         for i, name in enumerate(positions.TRAINING_METHODS.names())]
# Stick-breaking attention (no softmax), as its paper trains it: without positions; and a
# Transformer RoPE run.
CASES += ["transformer_stickbreaking_nope", "transformer_kna_rope"]
# Every inference method evaluates a Transformer RoPE run, or is skipped there with its reason; the
# two that skip every RoPE model evaluate a run of their own: ALiBi's scalings an ALiBi run, Llama
# 4's temperature (layers without RoPE) a NoPE run. The other runs evaluate "none" (the suite's
# time; the skips of the rest are checked in test_skips_say_why).
EVERY_METHOD = "transformer_kna_rope"
# The tiny runs use the reference kernel (train_helpers); these train with `auto`, what a CPU run
# gets by default (the cpu kernel), end to end.
ON_THE_DEFAULT_KERNEL = ("transformer_kna_rope", "kna_rope")
OWN_METHODS = {"transformer_baseline_alibi": ("alibi_interpolate", "ntk_alibi"),
               "baseline_nope": ("llama4_temperature",)}


def _model_config(name):
  return run_config.model_config(run_config.resolve(tiny_config(name, train_length=16)))


def _skipped(model_config, names):
  """The names among `names` that the evaluator skips for this model."""
  return set(applicable_columns(model_config, make_columns(names, posthoc_logn=False))[1])


def _evaluated_methods(name):
  if name == EVERY_METHOD:
    return positions.INFERENCE_METHODS.names()
  return ("none",) + OWN_METHODS.get(name, ())


@pytest.mark.parametrize("name", CASES)
def test_trains_and_evaluates_with_every_applicable_method(name, data_dir, tmp_path):
  config = tiny_config(name, data_dir=data_dir, train_length=16, num_train_steps=2,
                       checkpoint_every_steps=2, eval_windows=2)
  if name in ON_THE_DEFAULT_KERNEL:
    config.model.kernel = "auto"
  if config.model.position == "drope":   # of the two steps, one with RoPE and one without
    config.model.position_options.drop_share = 0.5
  training.train_and_evaluate(config, tmp_path)
  run = load_run(tmp_path)
  columns = make_columns(_evaluated_methods(name), posthoc_logn=False)
  messages = []
  records = evaluate_run(run, lengths=[64], columns=columns, num_windows=1,   # 4x
                         progress=messages.append, include_train_length=False)
  model_config = _model_config(name)
  method = model_config.position_method
  expected = {c.label for c in applicable_columns(model_config, columns)[0]}
  assert {r["rope_scaling"] for r in records} == expected
  if name in OWN_METHODS:   # the run is there for them: none may be skipped
    assert expected == {c.label for c in columns}
  for label in {c.label for c in columns} - expected:
    assert any(f"{label} skipped (" in m for m in messages), label
  for r in records:
    if method.max_length(16) == 16:
      assert r["accuracy"] is None and "stop at 16 tokens" in r["not_applicable"]
    else:
      assert 0.0 <= r["accuracy"] <= 1.0 and math.isfinite(r["loss"]), r


def test_every_inference_method_evaluates_some_run():
  """What skips a RoPE model is exactly what the other runs evaluate, so no method goes untried."""
  skipped = _skipped(_model_config(EVERY_METHOD), positions.INFERENCE_METHODS.names())
  assert skipped == set().union(*OWN_METHODS.values())
  for name, own in OWN_METHODS.items():
    assert not _skipped(_model_config(name), own), name
