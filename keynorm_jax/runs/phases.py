"""The configs of a run's training phases: a position method that changes during training (DroPE
drops RoPE for the last share of the steps) trains each phase as its own model over the same
parameters. Which phase a step belongs to follows from its number (and num_train_steps) alone:
training picks each step's model by it (training/phases.py) and the evaluator a checkpoint's
(loading.py)."""

import ml_collections

from keynorm_jax import positions
from keynorm_jax.errors import ConfigError


def phase_configs(
    config: ml_collections.ConfigDict) -> list[tuple[int, ml_collections.ConfigDict]]:
  """(last step, config) of each phase of a resolved config, in order; one for most methods.
  ConfigError where the last phase would get no step."""
  method = positions.training_method(config.model.position, config.model.position_options)
  earlier = method.earlier_phase(config.num_train_steps)
  if earlier is None or earlier[0] < 1:
    return [(config.num_train_steps, config)]
  steps, position = earlier
  if steps >= config.num_train_steps:
    raise ConfigError(f"{config.model.position} trains {position} until step {steps} of "
                      f"{config.num_train_steps}, which leaves no step for its last phase; train "
                      f"longer or raise its share (model.position_options).")
  early = config.copy_and_resolve_references()
  early.model.position = position
  early.model.position_options = ml_collections.ConfigDict(positions.knob_defaults(position))
  return [(steps, early), (config.num_train_steps, config)]


def config_at_step(config: ml_collections.ConfigDict, step: int) -> ml_collections.ConfigDict:
  """The config of the model that trained a checkpoint saved after `step` steps: a DroPE run's
  checkpoint from before the drop is a RoPE model, and evaluated as one."""
  phases = phase_configs(config)
  return next((c for last, c in phases if step <= last), phases[-1][1])
