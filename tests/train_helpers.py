"""A tiny training config shared by the training and evaluation tests, and what a run wrote."""

import shutil

from keynorm_jax import run_config
from keynorm_jax.errors import ConfigError
from keynorm_jax.models.attention_block import layer_specs
from keynorm_jax.positions import EvalColumn
from keynorm_jax.training.metrics_writer import read_metrics


# The kernel of the tests' tiny runs (tiny_config below; conftest's reference_kernel fixture).
TEST_KERNEL = "reference"


def tiny_config(name="kna_rope", data_dir="", **overrides):
  config = run_config.load_config(name)
  config.model_size = "tiny"
  config.train_length = 32
  config.batch_size = 8
  config.num_train_steps = 6
  config.checkpoint_every_steps = 3
  config.log_every_steps = 1
  config.eval_windows = 4
  config.data.data_dir = data_dir
  # The plain reference kernel: these runs test training, evaluation and their faults, and the
  # reference compiles in about a third less time than the CPU layout `auto` picks. The kernels
  # themselves are checked against it (test_kernels.py, test_cpu_fast_paths.py), and the end-to-end
  # RoPE cases train with `auto` (test_methods_end_to_end.py).
  config.model.kernel = TEST_KERNEL
  one_layer_where_alike(config)
  run_config.check_override_keys(config, overrides)  # a misspelt key must not pass unnoticed
  config.update(overrides)
  return config


def one_layer_where_alike(config):
  """model.num_layers=1 where the position method gives every layer of the config's model size the
  same attention: a tiny run's programs then trace in half the time and compile in about 40% less
  than with the tiny preset's two layers. Where its layers differ (HWFA, RNoPE-SWA, ...) the size's
  layers stay, so that each kind trains; so do they for a config the model refuses (the refusal is
  left to the test)."""
  try:
    model_config = run_config.model_config(run_config.resolve(config))
  except ConfigError:
    return
  first, *others = layer_specs(model_config, EvalColumn(), model_config.train_length)
  if all(spec == first for spec in others):
    config.model.num_layers = 1


def copy_run(run, tmp_path, *, drop_steps=()):
  """A copy of a run, as if it had been killed before checkpointing `drop_steps`."""
  workdir = tmp_path / "run"
  shutil.copytree(run, workdir)
  for step in drop_steps:
    shutil.rmtree(workdir / "checkpoints" / str(step))
  return workdir


def losses(workdir):
  """[(step, loss)] of every logged step."""
  return [(m["step"], m["loss"]) for m in read_metrics(workdir)]


def checkpoint_steps(workdir):
  return sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
