"""PaTH and PaTH-FoX end to end: the four configs on both architectures train (tiny, two steps; the
two that test_methods_end_to_end.py trains the same way and evaluates there, not again), and
one PaTH-FoX run of each architecture is evaluated at 8x and 16x its training length with the
weights as trained, as the model is and under a window; the inference methods that do not apply
are skipped with their reason; what does not compose is refused in one line naming the setting;
and the field study's plan holds their ten runs last, with the window alone as their inference
option."""

import math

import pytest

from keynorm_jax import positions, run_config
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.command import make_columns
from keynorm_jax.evaluation.evaluate import applicable_columns, evaluate_run
from keynorm_jax.models import ModelConfig
from keynorm_jax.runs import load_run
from keynorm_jax.study import plan
from keynorm_jax.training import loop as training
from train_helpers import tiny_config

pytestmark = pytest.mark.slow

CONFIGS = [f"{prefix}{a}_{p}" for prefix in ("", "transformer_") for p in ("path", "path_fox")
           for a in ("baseline", "kna")]
# Trained by test_methods_end_to_end.py as here (reference kernel, TRAIN_LENGTH, two steps), and
# evaluated there at 4x with every inference method that applies.
END_TO_END = ("transformer_baseline_path", "transformer_kna_path_fox")
# These train with `auto` (the chunked kernel, forward and backward), the others with the tests'
# reference kernel (the full square, train_helpers.TEST_KERNEL).
ON_THE_DEFAULT_KERNEL = ("kna_path", "transformer_baseline_path_fox")
# Evaluated at 8x and 16x (each evaluation compiles its own programs: two runs keep it short).
EVALUATED = ("kna_path_fox", "transformer_baseline_path_fox")
TRAIN_LENGTH = 16
# What a PaTH model is evaluated under, and what is skipped: nothing of RoPE or ALiBi applies, nor
# attention sinks; the factors on the scores and the window do.
APPLIES = {"none", "yarn_temperature", "drope_temperature", "llama4_temperature", "posthoc_ssmax",
           "window"}


def _model_config(name, **model):
  config = tiny_config(name, train_length=TRAIN_LENGTH)
  config.model.update(model)
  return run_config.model_config(run_config.resolve(config))


def test_the_configs_not_trained_here_are_trained_by_the_end_to_end_test():
  import test_methods_end_to_end as end_to_end  # pylint: disable=g-import-not-at-top
  assert set(END_TO_END) == {c for c in end_to_end.CASES if c in CONFIGS}
  assert not set(END_TO_END) & set(ON_THE_DEFAULT_KERNEL + EVALUATED)


@pytest.mark.parametrize("name", [c for c in CONFIGS if c not in END_TO_END])
def test_trains_and_evaluates_at_8x_and_16x(name, data_dir, tmp_path):
  config = tiny_config(name, data_dir=data_dir, train_length=TRAIN_LENGTH, num_train_steps=2,
                       checkpoint_every_steps=2, eval_windows=2)
  if name in ON_THE_DEFAULT_KERNEL:
    config.model.kernel = "auto"
  training.train_and_evaluate(config, tmp_path)
  run = load_run(tmp_path)
  assert run.step == 2
  if name not in EVALUATED:
    return
  records = evaluate_run(run, lengths=[8 * TRAIN_LENGTH, 16 * TRAIN_LENGTH],
                         columns=make_columns(["none", "window"], posthoc_logn=False),
                         num_windows=1, include_train_length=False)
  assert {(r["length"], r["rope_scaling"]) for r in records} == {
      (n * TRAIN_LENGTH, m) for n in (8, 16) for m in ("none", "window")}
  for r in records:
    assert 0.0 <= r["accuracy"] <= 1.0 and math.isfinite(r["loss"]), r


@pytest.mark.parametrize("position", ["path", "path_fox"])
def test_the_inference_methods_that_do_not_apply_are_skipped_by_name(position):
  cfg = _model_config(f"kna_{position}")
  kept, skipped = applicable_columns(cfg, make_columns(positions.INFERENCE_METHODS.names(),
                                                       posthoc_logn=False))
  assert {c.label for c in kept} == APPLIES
  assert skipped["yarn"] == f"{position} has no RoPE to scale"
  assert skipped["rerope"] == f"{position} has no RoPE to clip"
  assert skipped["alibi_interpolate"] == f"{position} has no ALiBi slopes"
  for sinks in ("streaming", "lm_infinite"):
    assert skipped[sinks].startswith(f"{position} moves a key through the Householder factors")


@pytest.mark.parametrize("name, model, named", [
    ("stickbreaking_path", {}, "model.position='path' cannot run here: stick-breaking"),
    ("kna_logn_path", dict(indices="random_integer"), "model.indices='random_integer'"),
    ("kna_path_fox", dict(position_options=dict(path_w_rank=-1)), "path_w_rank must be >= 0"),
    ("kna_path", dict(position_options=dict(path_conv_size=-2)), "path_conv_size must be >= 0"),
])
def test_what_does_not_compose_is_refused_in_one_line(name, model, named):
  with pytest.raises(ConfigError, match=named) as refused:
    _model_config(name, **model)
  assert "\n" not in str(refused.value)


def test_zero_rank_and_size_are_a_full_projection_and_no_convolution():
  method = _model_config("kna_path", position_options=dict(path_w_rank=0, path_conv_size=0))
  assert method.position_method.path_spec() == positions.PathSpec(w_rank=0, conv_size=0)
  assert ModelConfig(position="path_fox", num_layers=1).position_method.path_spec() == \
      positions.PathSpec(w_rank=32, conv_size=3)


def test_the_field_plan_holds_path_last_so_that_no_other_run_moves():
  entries = plan.field_runs()
  late = [e for e in entries if "_path" in e.config]
  assert entries[-len(late):] == late and len(late) == 10
  assert sorted(e.config for e in late if not e.retrieval_fraction) == sorted(CONFIGS)
  assert {e.label for e in late if e.retrieval_fraction} == {
      "transformer_baseline_path+copy50+retrieval50",
      "transformer_baseline_path_fox+copy50+retrieval50"}
  assert all(e.seed == 0 and not e.copy_fraction or e.retrieval_fraction for e in late)
  before = entries[:-len(late)]
  assert before[-1].model == (("indices", "random_float"),)   # after Random Float Sampling
  for position in ("path", "path_fox"):
    assert plan.inference_options(position) == plan.retrieval_options(position) == ("window",)
    assert plan.plan_key("cpu", position=position) == plan.plan_key("cpu") + ":path=window"
  assert plan.inference_options("nope") == plan.OTHER_OPTIONS == ("window", "streaming")
