"""Finding trained runs and restoring their weights, read-only, for evaluation."""

import dataclasses
import pathlib

import jax
import orbax.checkpoint as ocp

from keynorm_jax import run_config
from keynorm_jax.checkpointing import CheckpointError, RunCheckpoints
from keynorm_jax.optimizer import make_optimizer
from keynorm_jax.training import abstract_state


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


def _check_params_match(step_dir: pathlib.Path, expected_params) -> None:
  """ConfigError naming the first difference between the checkpoint's params and the model's."""
  saved = ocp.StandardCheckpointer().metadata(str(step_dir / "state")).item_metadata.tree
  saved_shapes = {jax.tree_util.keystr(p): tuple(m.shape)
                  for p, m in jax.tree_util.tree_leaves_with_path(saved["params"])}
  expected_shapes = {jax.tree_util.keystr(p): tuple(s.shape)
                     for p, s in jax.tree_util.tree_leaves_with_path(expected_params)}
  if saved_shapes != expected_shapes:
    diff = sorted(set(saved_shapes.items()) ^ set(expected_shapes.items()))[:4]
    raise run_config.ConfigError(
        f"The parameters in {step_dir} do not match the model this code builds from its config "
        f"(first differences: {diff}). Evaluate it with the version of keynorm-jax that trained "
        f"it, or retrain.")


def load_run(workdir) -> TrainedRun:
  """Restores the latest usable checkpoint of the run in `workdir` (nothing is moved or written)."""
  workdir = pathlib.Path(workdir)
  checkpoints = RunCheckpoints(workdir, create=False)
  try:
    found = checkpoints.restore_latest(None, read_only=True)
    if found is None:
      raise CheckpointError(f"{workdir / 'checkpoints'} holds no finished checkpoint; train "
                            f"(or resume) the run first.")
    step, _, _, config_dict = found
    config = run_config.resolve(run_config.config_from_json_dict(config_dict))
    model, tx = run_config.build_model(config), make_optimizer(config)
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = abstract_state(model, tx, config.seed, config.train_length, device)
    _check_params_match(checkpoints.directory / str(step), target["params"])
    step, state, _, _ = checkpoints.restore_latest(target, read_only=True)
  finally:
    checkpoints.close()
  return TrainedRun(name=workdir.name, workdir=workdir, config=config, step=step,
                    params=state["params"])
