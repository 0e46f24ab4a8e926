"""Training phases: a position method that changes during training (DroPE drops RoPE for the last
share of the steps).

Each phase is a model over the same parameters (the methods of a run's phases have none of their
own), so the state, the optimizer's moments and the learning-rate schedule run on unchanged from one
phase to the next; which phase a step belongs to follows from its number alone, so a resumed run
(after kill -9 or preemption) trains each step with the model it would have had.
"""

import dataclasses

import ml_collections

from keynorm_jax import positions, run_config


@dataclasses.dataclass(frozen=True)
class Phase:
  last_step: int   # the phase trains steps up to this one (1-based, included)
  model: object    # the Flax LM of the phase
  position: str    # its position method


def training_phases(config: ml_collections.ConfigDict) -> list[Phase]:
  """The phases of a resolved config, in order; one for most methods."""
  final = Phase(config.num_train_steps, run_config.build_model(config), config.model.position)
  method = positions.training_method(config.model.position, config.model.position_options)
  earlier = method.earlier_phase(config.num_train_steps)
  if earlier is None or earlier[0] < 1:
    return [final]
  steps, position = earlier
  early = config.copy_and_resolve_references()
  early.model.position = position
  early.model.position_options = ml_collections.ConfigDict(positions.knob_defaults(position))
  return [Phase(steps, run_config.build_model(early), position), final]


def phase_of(phases: list[Phase], step: int) -> int:
  """The index of the phase that trains `step` (1-based)."""
  return next((i for i, phase in enumerate(phases) if step <= phase.last_step), len(phases) - 1)
