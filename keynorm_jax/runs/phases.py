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
  """(last step, config) of each phase of a resolved config, in order; one for most methods (and
  for a method whose earlier phase is the whole run: DroPE with drop_share 0 trains RoPE, and is
  evaluated as RoPE). ConfigError where the last phase would get no step."""
  method = positions.training_method(config.model.position, config.model.position_options)
  try:
    earlier = method.earlier_phase(config.num_train_steps)
  except ValueError as e:
    raise ConfigError(f"model.position_options: {e}.") from None
  if earlier is None or earlier[0] < 1:
    return [(config.num_train_steps, config)]
  steps, position = earlier
  early = config.copy_and_resolve_references()
  early.model.position = position
  early.model.position_options = ml_collections.ConfigDict(positions.knob_defaults(position))
  if steps >= config.num_train_steps:
    return [(config.num_train_steps, early)]
  return [(steps, early), (config.num_train_steps, config)]


def config_at_step(config: ml_collections.ConfigDict, step: int) -> ml_collections.ConfigDict:
  """The config of the model that trained a checkpoint saved after `step` steps: a DroPE run's
  checkpoint from before the drop is a RoPE model, and evaluated as one."""
  phases = phase_configs(config)
  return next((c for last, c in phases if step <= last), phases[-1][1])
