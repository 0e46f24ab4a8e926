"""Every training-time position method trains (tiny size, a few steps) and is evaluated at 4x its
training length (with every inference-time method for three of them): applicable ones give finite
accuracies, the others are skipped with a reason, and lengths past a learned table are reported as
not applicable."""

import math

import pytest

from keynorm_jax import positions
from keynorm_jax.evaluation.command import make_columns
from keynorm_jax.evaluation.evaluate import evaluate_run
from keynorm_jax.evaluation.run_loading import load_run
from keynorm_jax.training import loop as training
from train_helpers import tiny_config

pytestmark = pytest.mark.slow

# One attention variant per method, alternating, so both Baseline and KNA meet every kind.
# The methods of 2025 on the Transformer, as their papers train them.
ON_THE_TRANSFORMER = ("scale_invariant", "drope", "fox", "cope", "rnope_swa")
CASES = [("transformer_" if name in ON_THE_TRANSFORMER else "")
         + ("kna" if i % 2 else "baseline") + "_" + name
         for i, name in enumerate(positions.TRAINING_METHODS.names())]
# Stick-breaking attention (no softmax), as its paper trains it: without positions; and a
# Transformer RoPE run.
CASES += ["transformer_stickbreaking_nope", "transformer_kna_rope"]
# Evaluated with every inference method: a RoPE run (the RoPE rewrites and scalings), an ALiBi run
# (its scalings) and a NoPE run (Llama 4's rule, the temperatures). The others with the two that
# apply to every model (the suite's time), the skips of the rest checked in test_skips_say_why.
EVERY_METHOD = ("transformer_kna_rope", "baseline_alibi", "baseline_nope")


@pytest.mark.parametrize("name", CASES)
def test_trains_and_evaluates_with_every_applicable_method(name, data_dir, tmp_path):
  config = tiny_config(name, data_dir=data_dir, train_length=16, num_train_steps=2,
                       checkpoint_every_steps=2, eval_windows=2)
  if config.model.position == "drope":   # of the two steps, one with RoPE and one without
    config.model.position_options.drop_share = 0.5
  training.train_and_evaluate(config, tmp_path)
  run = load_run(tmp_path)
  names = positions.INFERENCE_METHODS.names() if name in EVERY_METHOD else ("none", "window")
  columns = make_columns(names, posthoc_logn=False)
  messages = []
  records = evaluate_run(run, lengths=[64], columns=columns, num_windows=1,   # 4x
                         progress=messages.append, include_train_length=False)
  method = positions.training_method(config.model.position)
  expected = {c.label for c in columns if not c.method.skip_reason(method, 1)}
  assert {r["rope_scaling"] for r in records} == expected
  for label in {c.label for c in columns} - expected:
    assert any(f"{label} skipped (" in m for m in messages), label
  for r in records:
    if method.max_length(16) == 16:
      assert r["accuracy"] is None and "stop at 16 tokens" in r["not_applicable"]
    else:
      assert 0.0 <= r["accuracy"] <= 1.0 and math.isfinite(r["loss"]), r
