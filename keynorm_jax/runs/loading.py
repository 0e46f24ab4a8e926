"""Finding trained runs and restoring their weights, read-only, for evaluation.

The newest checkpoint that passes its checksum check and restores is used: a corrupt one, or one
deleted by a training run still writing the workdir, is skipped (with a warning) and nothing on
disk is moved or written. Only the parameters are read, so a run evaluates whatever optimizer it
was trained with. A run whose position method changes during training (DroPE) is evaluated as the
model that trained its checkpoint's last step (phases.py). A seed group's workdir
(--config.num_seeds > 1) is refused in one line for now.
"""

import dataclasses
import pathlib

import jax

from keynorm_jax import run_config
from keynorm_jax.errors import ConfigError
from keynorm_jax.models import init_params
from keynorm_jax.runs.phases import config_at_step
from keynorm_jax.storage.checkpointing import (CheckpointError, RunCheckpoints, check_params_match,
                                               params_restore_args)


@dataclasses.dataclass
class TrainedRun:
  name: str
  workdir: pathlib.Path
  config: object  # resolved ml_collections.ConfigDict
  step: int
  params: dict


def find_runs(workdir) -> list[pathlib.Path]:
  """The run itself if `workdir` holds checkpoints/, else its subfolders that do (sorted)."""
  workdir = pathlib.Path(workdir)
  if (workdir / "checkpoints").is_dir():
    return [workdir]
  runs = sorted(p for p in workdir.glob("*") if (p / "checkpoints").is_dir()) \
      if workdir.is_dir() else []
  if not runs:
    raise CheckpointError(f"No trained runs under {workdir} (no checkpoints/ folder in it or its "
                          f"subfolders). Train one first: python train.py --config=kna_rope.")
  return runs


def _model_of(config):
  """The model a resolved config describes (the one place evaluation builds a model)."""
  return run_config.build_model(config)


def abstract_params(config, sharding=None):
  """Shapes and dtypes (with `sharding`) of the parameters of the model a config describes."""
  model = _model_of(config)
  shapes = jax.eval_shape(lambda: init_params(model, config.seed, config.train_length))
  return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                      shapes)


def load_run(workdir, *, warn=None, trust_unverified=False) -> TrainedRun:
  """Restores the parameters of the newest usable checkpoint of the run in `workdir`.

  Nothing is moved or written. warn: callable(str) told about each checkpoint skipped, and when
  the checkpoint is from an earlier training phase (DroPE before its drop): the returned config is
  then that phase's, the model that trained it, not the run's stored one.
  trust_unverified: also restore a checkpoint whose checksum manifest is missing, empty or
  unreadable (skipped otherwise).
  """
  workdir = pathlib.Path(workdir)
  checkpoints = RunCheckpoints(workdir, read_only=True, trust_unverified=trust_unverified,
                               warn=warn)
  if not checkpoints.directory.is_dir():
    raise CheckpointError(f"No checkpoints in {workdir}: train a model there first "
                          f"(python train.py --config=NAME --workdir={workdir}).")
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  configs = {}

  def state_args(config_dict, step_dir):
    config = run_config.resolve(run_config.config_from_json_dict(config_dict))
    if config.num_seeds > 1:  # the stacked state of training/seed_group.py
      raise ConfigError(f"{workdir} holds a seed group of {config.num_seeds} (seeds "
                        f"{config.seed} to {config.seed + config.num_seeds - 1}); evaluating "
                        f"groups is not supported yet: evaluate single runs (--config.seed=S).")
    target = abstract_params(config, device)
    check_params_match(step_dir, target, fix="Evaluate it with the version of keynorm-jax that "
                                             "trained it, or retrain.")
    configs[step_dir.name] = config
    return params_restore_args(target)

  restored = checkpoints.restore_latest(state_args)
  if restored is None:
    raise CheckpointError(f"{workdir / 'checkpoints'} holds no finished checkpoint; train "
                          f"(or resume) the run first.")
  config = configs[str(restored.step)]
  trained_as = config_at_step(config, restored.step)
  if trained_as is not config and warn:
    warn(f"{workdir.name}: checkpoint {restored.step} is from before {config.model.position} "
         f"switched from {trained_as.model.position}; evaluated as {trained_as.model.position}, "
         f"the model that trained it.")
  return TrainedRun(name=workdir.name, workdir=workdir, config=trained_as, step=restored.step,
                    params=restored.state["params"])
