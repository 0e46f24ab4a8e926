"""Finding trained runs and restoring their weights, read-only, for evaluation.

The newest checkpoint that passes its checksum check and restores is used: a corrupt one, or one
deleted by a training run still writing the workdir, is skipped (with a warning) and nothing on
disk is moved or written. Only the parameters are read, so a run evaluates whatever optimizer it
was trained with. A run whose position method changes during training (DroPE) is evaluated as the
model that trained its checkpoint's last step (phases.py). A seed group's workdir
(--config.num_seeds = N > 1, training/seed_group.py) restores as one TrainedRun whose parameters
carry the group's leading seed axis [N, ...] and whose `seeds` name the members in that order.
"""

import dataclasses
import pathlib

import jax

from keynorm_jax import run_config
from keynorm_jax.models import init_params
from keynorm_jax.runs.phases import config_at_step
from keynorm_jax.storage.checkpointing import (CheckpointError, RunCheckpoints, check_params_match,
                                               params_restore_args)


@dataclasses.dataclass
class TrainedRun:
  """A run's restored parameters. seeds: a seed group's member seeds, in the order of the leading
  seed axis [N, ...] of every parameter; None for a single run (parameters without that axis).
  one_x: where config.train_length, the model's 1x (the length an evaluation's multiples count
  from), comes from: our runs' training length; a Hugging Face folder says which setting gave it.
  """
  name: str
  workdir: pathlib.Path
  config: object  # resolved ml_collections.ConfigDict
  step: int
  params: dict
  seeds: tuple[int, ...] | None = None
  one_x: str = "the training length"

  @property
  def member_seeds(self) -> tuple[int, ...]:
    """The seeds whose results the run gives: a group's members, or a single run's own seed."""
    return self.seeds if self.seeds is not None else (self.config.seed,)

  def member(self, index: int) -> "TrainedRun":
    """Member `index` of a group as a single run (a single run itself for index 0)."""
    if self.seeds is None:
      if index != 0:
        raise IndexError(f"{self.name} is a single run; it has no member {index}.")
      return self
    return dataclasses.replace(self, params=jax.tree.map(lambda x: x[index], self.params),
                               seeds=None, config=_with_seed(self.config, self.seeds[index]))


def _with_seed(config, seed: int):
  """A group's config as its member `seed`'s single run."""
  config = config.copy_and_resolve_references()
  config.seed, config.num_seeds = seed, 1
  return config


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
  """Shapes and dtypes (with `sharding`) of the parameters of the model a config describes; a
  seed group's (num_seeds = N > 1) with the leading seed axis [N, ...] of its stacked state."""
  model = _model_of(config)
  shapes = jax.eval_shape(lambda: init_params(model, config.seed, config.train_length))
  seeds = (config.num_seeds,) if config.get("num_seeds", 1) > 1 else ()
  return jax.tree.map(lambda s: jax.ShapeDtypeStruct((*seeds, *s.shape), s.dtype,
                                                     sharding=sharding), shapes)


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
  num_seeds = config.get("num_seeds", 1)
  seeds = (tuple(range(config.seed, config.seed + num_seeds))  # as training/seed_group.py's
           if num_seeds > 1 else None)
  return TrainedRun(name=workdir.name, workdir=workdir, config=trained_as, step=restored.step,
                    params=restored.state["params"], seeds=seeds)
