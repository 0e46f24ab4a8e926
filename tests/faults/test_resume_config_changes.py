"""Resuming with another config: refused, naming the field and the flag that allows it."""

import pytest

from keynorm_jax import run_config
from keynorm_jax.training import config_changes
from keynorm_jax.training import loop as training
from train_helpers import copy_run, losses, tiny_config
from faults.helpers import restore_state


def test_extending_a_run_names_num_train_steps_and_records_the_change(straight_run, tmp_path,
                                                                     data_dir):
  workdir = copy_run(straight_run, tmp_path)
  longer = tiny_config(data_dir=data_dir, num_train_steps=9)
  with pytest.raises(run_config.ConfigError, match=r"other optimizer settings: num_train_steps "
                                                   r"\(6 there, 9 here\)\. .*"
                                                   r"--allow_config_change=num_train_steps") as e:
    training.train_and_evaluate(longer, workdir)
  assert "warmup_steps" not in str(e.value)  # derived from num_train_steps, never set by the user
  with pytest.raises(run_config.ConfigError, match=r"--allow_config_change=attention: only "
                                                   r"optimizer settings"):
    training.train_and_evaluate(longer, workdir, allow_config_change=["attention"])
  training.train_and_evaluate(longer, workdir, allow_config_change=["num_train_steps"])
  assert [s for s, _ in losses(workdir)] == list(range(1, 10))
  assert losses(workdir)[:6] == losses(straight_run)
  saved = restore_state(workdir, longer)
  assert saved.step == 9
  assert saved.history["changes"] == [{"step": 6, "changed": {"num_train_steps": [6, 9]},
                                       "time": saved.history["changes"][0]["time"]}]


def test_resume_checks_fields_as_the_user_set_them():
  saved_user = tiny_config().to_dict()
  saved = run_config.resolve(tiny_config()).to_dict()
  # The derived warmup written out explicitly is no change at all.
  same = tiny_config(warmup_steps=saved["warmup_steps"])
  assert config_changes.resume_changes(saved, {"user_config": saved_user, "changes": []},
                                       same.to_dict(), run_config.resolve(same).to_dict(), (),
                                       "W") == {}
  other = tiny_config("baseline_rope")
  with pytest.raises(run_config.ConfigError, match=r"different config: model.attention \('kna' there, "
                                                   r"'baseline' here\)"):
    config_changes.resume_changes(saved, {"user_config": saved_user, "changes": []},
                                  other.to_dict(), run_config.resolve(other).to_dict(),
                                  ["learning_rate"], "W")


@pytest.mark.parametrize("names, entry", [(["learning_rate", "", ""], "entry 2 of 3"),
                                          (["", "learning_rate"], "entry 1 of 2")])
def test_an_empty_entry_of_allow_config_change_is_named_as_such(names, entry):
  """`--allow_config_change=learning_rate,,` was refused as an unknown setting named by the
  doubled comma."""
  with pytest.raises(run_config.ConfigError) as e:
    config_changes.check_allowed_names(names)
  assert str(e.value) == (f"--allow_config_change={','.join(names)}: {entry} is empty (a doubled, "
                          f"leading or trailing comma); name each setting once, comma-separated, "
                          f"e.g. learning_rate,warmup_steps.")
