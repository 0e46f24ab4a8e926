"""The real training loop on a tiny model: logging, devices, resumption, corrupt checkpoints, NaN."""

import copy
import importlib.util
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.storage.checkpoint_writer import CheckpointWriter
from keynorm_jax.training import loop as training
from keynorm_jax.training import sharding
from keynorm_jax.training.metrics_writer import read_metrics
from keynorm_jax.training.optimizer import make_optimizer
from train_helpers import checkpoint_steps, copy_run, losses, tiny_config

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_loop_logs_evaluates_and_checkpoints(straight_run):
  metrics = read_metrics(straight_run)
  assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
  for key in ("loss", "accuracy", "learning_rate", "grad_norm", "tokens_per_second"):
    assert all(np.isfinite(m[key]) for m in metrics), key
  assert "eval_accuracy" in metrics[2] and "eval_loss" in metrics[5]
  assert metrics[-1]["loss"] < metrics[0]["loss"]
  assert checkpoint_steps(straight_run) == [3, 6]
  assert any((straight_run / "tensorboard").glob("events.out.tfevents.*"))
  assert (straight_run / "config.json").exists()


_NO_TORCH_LOADED = """
import importlib.util, sys
import keynorm_jax.training.loop
assert "torch" not in sys.modules, "the training loop loaded torch"
if importlib.util.find_spec("torch") is not None:   # installed: still importable afterwards
  import torch
  assert torch.ones(2).sum().item() == 2.0
"""


def test_the_training_loop_loads_no_torch_and_leaves_it_importable():
  """tensorboardX imports torch wherever it is installed (seconds per training process): the
  metrics writer imports it with torch hidden, and a later `import torch` still works."""
  done = subprocess.run([sys.executable, "-c", _NO_TORCH_LOADED], cwd=REPO, capture_output=True,
                        text=True, check=False)
  assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_one_and_eight_devices_give_the_same_losses(tmp_path, data_dir, straight_run):
  """The straight run trained on every device (8 here); one device gives its losses."""
  assert tiny_config().num_devices == 0 and jax.device_count() == 8   # 0: every device
  training.train_and_evaluate(tiny_config(data_dir=data_dir, num_devices=1), tmp_path)
  np.testing.assert_allclose([l for _, l in losses(tmp_path)],
                             [l for _, l in losses(straight_run)], rtol=1e-5)


@pytest.mark.slow
def test_one_and_eight_devices_give_the_same_losses_for_the_transformer(tmp_path, data_dir):
  for n in (1, 8):
    training.train_and_evaluate(tiny_config("transformer_kna_rope", data_dir=data_dir,
                                            num_devices=n, num_train_steps=3), tmp_path / str(n))
  one, eight = losses(tmp_path / "1"), losses(tmp_path / "8")
  assert [s for s, _ in one] == [1, 2, 3]
  np.testing.assert_allclose([l for _, l in one], [l for _, l in eight], rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["reference", "cpu"])
def test_fsdp_over_8_devices_gives_the_same_losses(tmp_path, data_dir, straight_run, kernel):
  """FSDP over 8 devices gives the straight run's losses (reference kernel, data parallel); so does
  the cpu kernel, what `auto` picks on a CPU, with its own backward passes and remat besides."""
  config = tiny_config(data_dir=data_dir, num_devices=8, fsdp=4)
  config.model.kernel = kernel
  config.model.remat = kernel == "cpu"
  training.train_and_evaluate(config, tmp_path)
  np.testing.assert_allclose([l for _, l in losses(tmp_path)],
                             [l for _, l in losses(straight_run)], rtol=1e-5)


def test_fsdp_splits_parameters_and_optimizer_state():
  config = run_config.resolve(tiny_config())
  model, tx = run_config.build_model(config), make_optimizer(config)
  shapes = jax.eval_shape(lambda: training.init_state(model, tx, 0, 32))
  mesh = sharding.make_mesh(8, fsdp=4)
  # Built under jit straight into its shards (out_shardings): the eager state's numbers.
  state = training.initial_state(model, tx, 0, 32, mesh, sharding.state_shardings(mesh, shapes))
  eager = training.init_state(model, tx, 0, 32)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), state, eager)
  wi = state["params"]["layer_0"]["wi"]["kernel"]                          # [32, 144]
  assert wi.addressable_shards[0].data.shape == (32, 36)                   # 144 / 4
  mu = state["opt_state"][1][0].mu["layer_0"]["wi"]["kernel"]
  assert mu.addressable_shards[0].data.shape == (32, 36)
  assert state["step"].sharding.is_fully_replicated


def test_remat_changes_no_number(tmp_path, data_dir, straight_run):
  config = tiny_config(data_dir=data_dir)
  config.model.remat = True
  training.train_and_evaluate(config, tmp_path)
  np.testing.assert_allclose([l for _, l in losses(tmp_path)],
                             [l for _, l in losses(straight_run)], rtol=1e-6)


def test_stopped_and_resumed_run_matches_uninterrupted(tmp_path, data_dir, straight_run):
  config = tiny_config(data_dir=data_dir)
  training.train_and_evaluate(config, tmp_path, stop_after_steps=4)  # "killed" after step 4
  assert [s for s, _ in losses(tmp_path)] == [1, 2, 3, 4]
  training.train_and_evaluate(config, tmp_path)                        # resumes from step 3
  assert losses(tmp_path) == losses(straight_run)                    # exactly, step 4 re-done


def test_corrupt_or_incomplete_latest_checkpoint_falls_back(tmp_path, data_dir, straight_run, capsys):
  config = tiny_config(data_dir=data_dir)
  workdir = copy_run(straight_run, tmp_path)
  for f in (workdir / "checkpoints" / "6").rglob("*"):
    if f.is_file():
      f.write_bytes(b"garbage")
  incomplete = workdir / "checkpoints" / "9.orbax-checkpoint-tmp-1234"  # a save cut off midway
  incomplete.mkdir()
  (incomplete / "junk").write_bytes(b"partial")
  training.train_and_evaluate(config, workdir)
  assert "checkpoint 6 is unusable" in capsys.readouterr().out
  assert list((workdir / "corrupt_checkpoints").iterdir())          # kept aside, not deleted
  assert losses(workdir) == losses(straight_run)


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(straight_run, tmp_path, data_dir,
                                                          monkeypatch):
  config = tiny_config(data_dir=data_dir)
  workdir = copy_run(straight_run, tmp_path, drop_steps=[6])   # killed before checkpoint 6
  real = training.token_scores
  monkeypatch.setattr(training, "token_scores",
                      lambda logits, targets: (real(logits, targets)[0],
                                               jnp.full(targets.shape, jnp.nan)))
  with pytest.raises(training.NonFiniteLossError,
                     match=r"nan at or before step 4.*\(step 3\) is kept"):
    training.train_and_evaluate(config, workdir)
  assert checkpoint_steps(workdir) == [3]


def test_bfloat16_compute_trains(tmp_path, data_dir):
  config = tiny_config(data_dir=data_dir, num_train_steps=3)
  config.model.compute_dtype = "bfloat16"  # (it was set at the top level before: a no-op field)
  training.train_and_evaluate(config, tmp_path)
  logged = [l for _, l in losses(tmp_path)]
  assert len(logged) == 3 and all(np.isfinite(logged))


def test_batch_not_divisible_by_devices(tmp_path, data_dir):
  with pytest.raises(run_config.ConfigError, match="not divisible by the 8 devices"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir, batch_size=6), tmp_path)


def test_workdir_of_another_config_is_refused_and_kept(straight_run, tmp_path, data_dir):
  workdir = copy_run(straight_run, tmp_path, drop_steps=[6])   # a kna_rope run at checkpoint 3
  # qknorm_rope has more parameters: the refusal must come before any restore is tried.
  with pytest.raises(run_config.ConfigError, match="different config.*attention.*qk_norm"):
    training.train_and_evaluate(tiny_config("qknorm_rope", data_dir=data_dir), workdir)
  assert (workdir / "checkpoints" / "3").is_dir()
  assert not (workdir / "corrupt_checkpoints").exists()


def _train_3_steps_as_another_version(tmp_path, data_dir, monkeypatch, edit):
  """Trains 3 steps whose checkpoints hold their config (and the user's, in their history) as
  `edit` leaves it: as another version of the code, with other settings, would write them."""
  save = CheckpointWriter.save
  def save_edited(self, step, state, data_state, config_dict, history):
    config_dict, history = copy.deepcopy(config_dict), copy.deepcopy(history)
    edit(config_dict)
    edit(history["user_config"])
    save(self, step, state, data_state, config_dict, history)
  with monkeypatch.context() as patch:
    patch.setattr(CheckpointWriter, "save", save_edited)
    training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path, stop_after_steps=3)


def test_a_checkpoint_from_before_a_setting_existed_resumes_with_its_default(tmp_path, data_dir,
                                                                             monkeypatch):
  # Checkpoints written without data.copy_symbols in their config, as before it existed: it
  # counts as its default there, what the code did before it; refused only if set otherwise.
  _train_3_steps_as_another_version(tmp_path, data_dir, monkeypatch,
                                    lambda config: config["data"].pop("copy_symbols"))
  symbols = tiny_config(data_dir=data_dir)
  symbols.data.update(copy_fraction=0.5, copy_symbols=0.5)
  with pytest.raises(run_config.ConfigError, match=r"data.copy_symbols \(0.0 there, 0.5 here\)"):
    training.train_and_evaluate(symbols, tmp_path)
  training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path, stop_after_steps=4)
  assert [step for step, _ in losses(tmp_path)] == [1, 2, 3, 4]


def test_a_checkpoint_from_a_newer_version_is_refused_and_kept(tmp_path, data_dir, monkeypatch):
  # A setting this code does not have: resuming would drop it silently, so it is refused.
  _train_3_steps_as_another_version(
      tmp_path, data_dir, monkeypatch,
      lambda config: config["data"].update(setting_of_a_newer_version=1))
  with pytest.raises(run_config.ConfigError, match=r"unknown keys: \['data.setting_of_a_newer_"
                                                   r"version'\]\). Evaluate or resume it with"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir), tmp_path)
  assert checkpoint_steps(tmp_path) == [3] and not (tmp_path / "corrupt_checkpoints").exists()


def _train_cli(args, cwd):
  return subprocess.run([sys.executable, str(REPO / "train.py"), *args], cwd=cwd,
                        capture_output=True, text=True, timeout=300)


_spec = importlib.util.spec_from_file_location("train_cli", REPO / "train.py")
train_cli = importlib.util.module_from_spec(_spec)   # its flags defined; __main__ not run
_spec.loader.exec_module(train_cli)


@pytest.mark.parametrize("args, message", [
    (["--config=kna_alibi", "--config.model.position_options.slopes=1"], "slopes"),
    (["--config=kna_ropez"], "No config 'kna_ropez'. Did you mean kna_rope"),
    (["--config=kna_rope", "--config.no_such_key=1"], "no_such_key"),
    (["--config=kna_rope", "--config=kna_alibi"], "--config is given 2 times"),
])
def test_bad_config_names_and_keys_are_refused_before_flags_are_parsed(args, message):
  """train.py's expand_config_name, what it runs first (its `error: ...` exit is
  faults/test_input_errors.py's, a syntax error in a config file)."""
  with pytest.raises(run_config.ConfigError) as refused:
    train_cli.expand_config_name(["train.py", *args])
  assert message in str(refused.value)


@pytest.mark.parametrize("name, field, value, message", [
    ("kna_alibi", "model.position", "rotary", "model.position must be one of nope, rope,"),
    ("kna_rope", "model_size", "huge", "Unknown model_size 'huge'"),
    ("kna_rope", "data.copy_fraction", 1.5,
     "data.copy_fraction (the share of training windows made synthetic copies) must be"),
])
def test_bad_config_values_are_refused_before_any_work(tmp_path, data_dir, name, field, value,
                                                       message):
  """What train.py's flags leave in the config, refused by training in one line (train.py's exit
  on such an error: the CLI cases below)."""
  config = run_config.load_config(name)
  config.data.data_dir = data_dir
  section, _, key = field.rpartition(".")
  (config[section] if section else config)[key] = value
  with pytest.raises(run_config.ConfigError) as refused:
    training.train_and_evaluate(config, tmp_path / "run")
  assert message in str(refused.value) and "\n" not in str(refused.value)
  assert not (tmp_path / "run").exists()


# Through the CLI: a value its flags cannot parse, and a value they parse (a bool) that training
# refuses; each a nonzero exit naming it.
@pytest.mark.parametrize("args, message", [
    (["--config=kna_rope", "--config.batch_size=eight"], "batch_size"),
    (["--config=baseline_hwfa", "--config.model.scan_layers=true"], "scan_layers=False"),
])
def test_cli_bad_configs_fail_clearly(tmp_path, args, message):
  result = _train_cli(args, tmp_path)
  assert result.returncode != 0
  assert message in result.stderr + result.stdout
