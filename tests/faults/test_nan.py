"""A parameter or loss that turns NaN: nothing non-finite is saved, and the advice works."""

import json

import pytest

from keynorm_jax import run_config
from keynorm_jax.training import loop as training
from train_helpers import checkpoint_steps, copy_run, losses, tiny_config
from faults.helpers import all_finite, restore_state


OVERFLOW = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")


@OVERFLOW
def test_nan_mid_run_saves_nothing_non_finite_and_the_advice_can_be_followed(straight_run, tmp_path,
                                                                            data_dir):
  """Parameters overflow at step 4 while the loss and gradient norm at step 4 are still finite
  (they are computed before the update): only a check of the state catches it."""
  workdir = copy_run(straight_run, tmp_path, drop_steps=[6])  # killed after 6, before its save
  blown = tiny_config(data_dir=data_dir, learning_rate=1e39)
  with pytest.raises(run_config.ConfigError,
                     match=r"learning_rate \(0.003 there, 1e\+39 here\).*"
                           r"--allow_config_change=learning_rate"):
    training.train_and_evaluate(blown, workdir)
  with pytest.raises(training.NonFiniteLossError,
                     match=r"parameters or optimizer state became NaN or infinite at or before "
                           r"step 4 .*; "
                           r"nothing non-finite was saved\. The last good checkpoint \(step 3\) "
                           r"is kept.*restores finite.*--allow_config_change"):
    training.train_and_evaluate(blown, workdir, allow_config_change=["learning_rate"])
  assert checkpoint_steps(workdir) == [3]
  assert all_finite(restore_state(workdir, tiny_config(data_dir=data_dir)).state)
  history = [json.loads(l) for l in (workdir / "config_history.jsonl").read_text().splitlines()]
  assert history[-1]["event"] == "change" and history[-1]["step"] == 3
  assert history[-1]["changed"] == {"learning_rate": [0.003, 1e39]}
  # Following the advice (here: back to the old rate) resumes from step 3, nothing lost.
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert losses(workdir) == losses(straight_run)


@OVERFLOW
def test_nan_before_any_checkpoint_says_there_is_none(tmp_path, data_dir):
  with pytest.raises(training.NonFiniteLossError,
                     match=r"at or before step 1 .*; nothing non-finite was saved\. "
                           r"No checkpoint was written "
                           r"before it.*nothing to resume"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir, learning_rate=1e39), tmp_path)
  assert not (tmp_path / "checkpoints").exists()
