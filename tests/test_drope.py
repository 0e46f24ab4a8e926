"""DroPE (Gelberg et al. 2025): RoPE for the first steps, then positions dropped for the last share,
from the same parameters and optimizer state; the switch follows the step number, so a run stopped
after it resumes exactly."""

import json

import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.runs import config_at_step, load_run
from keynorm_jax.training import loop as training
from train_helpers import checkpoint_steps, copy_run, losses, tiny_config


def _config(name, data_dir):
  config = tiny_config(name, data_dir=data_dir, num_train_steps=6, checkpoint_every_steps=2,
                       eval_windows=2)
  if name.endswith("drope"):
    config.model.position_options.drop_share = 0.5   # steps 1-3 RoPE, 4-6 NoPE
  return config


def test_rope_then_nope_and_an_exact_resume(tmp_path, data_dir):
  training.train_and_evaluate(_config("transformer_baseline_drope", data_dir), tmp_path / "drope")
  training.train_and_evaluate(_config("transformer_baseline_rope", data_dir), tmp_path / "rope")
  drope, rope = losses(tmp_path / "drope"), losses(tmp_path / "rope")
  assert drope[:3] == rope[:3]          # the RoPE phase is the RoPE model, number for number
  assert all(a != b for a, b in zip(drope[3:], rope[3:]))   # then the positions are gone
  # The model as trained (evaluated) is NoPE: no layer rotates.
  run = load_run(tmp_path / "drope")
  model = run_config.model_config(run.config)
  assert not model.position_method.rotary
  # Its checkpoint from before the drop (step 2) is the RoPE run's checkpoint 2, and evaluated as
  # that model: the same logits as the RoPE run's, not those of the same weights without positions.
  told = []
  early = load_run(copy_run(tmp_path / "drope", tmp_path, drop_steps=(4, 6)), warn=told.append)
  rope_early = load_run(copy_run(tmp_path / "rope", tmp_path / "r", drop_steps=(4, 6)))
  assert (early.step, early.config.model.position) == (2, "rope")
  assert told and "evaluated as rope" in told[0]
  tokens = np.arange(1, 17, dtype=np.int32)[None] % 50
  logits = lambda config, params: np.asarray(run_config.build_model(config).apply(
      {"params": params}, tokens, deterministic=True))
  np.testing.assert_allclose(logits(early.config, early.params),
                             logits(rope_early.config, rope_early.params), rtol=1e-6, atol=1e-6)
  assert not np.allclose(logits(run.config, early.params), logits(early.config, early.params),
                         atol=1e-3)
  # Killed after checkpoint 4 (in the NoPE phase), before step 5 was logged, and resumed: steps 5
  # and 6 trained again give the same run.
  again = copy_run(tmp_path / "drope", tmp_path / "again", drop_steps=(6,))
  rows = (again / "metrics.jsonl").read_text().splitlines()
  (again / "metrics.jsonl").write_text("".join(f"{row}\n" for row in rows
                                               if json.loads(row)["step"] <= 4))
  training.train_and_evaluate(_config("transformer_baseline_drope", data_dir), again)
  assert losses(again) == drope and checkpoint_steps(again) == [2, 4, 6]
  # Extending the run would move the switch (a share of num_train_steps): refused, nothing lost.
  longer = _config("transformer_baseline_drope", data_dir)
  longer.num_train_steps = 8
  with pytest.raises(run_config.ConfigError, match="would move the switch"):
    training.train_and_evaluate(longer, tmp_path / "drope", allow_config_change=("num_train_steps",))
  assert losses(tmp_path / "drope") == drope


def test_the_phase_of_a_checkpoint_follows_the_training_steps():
  config = run_config.resolve(_config("transformer_baseline_drope", ""))   # RoPE for steps 1-3
  assert [config_at_step(config, step).model.position for step in range(7)] == \
      ["rope"] * 4 + ["drope"] * 3
  assert all(config_at_step(config, step) is config for step in (4, 5, 6))


@pytest.mark.parametrize("share, message", [
    (1.0, r"drop_share must be in \[0, 1\)"), (-0.5, r"drop_share must be in \[0, 1\)"),
    (0.05, "leaves no step for its last phase"),   # 0.95 x 6 rounds to 6
])
def test_a_drop_share_outside_0_1_or_of_no_step_is_refused(tmp_path, data_dir, share, message):
  config = _config("transformer_baseline_drope", data_dir)
  config.model.position_options.drop_share = share
  with pytest.raises(run_config.ConfigError, match=message):
    training.train_and_evaluate(config, tmp_path)
