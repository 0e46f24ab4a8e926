"""Training phases: a position method that changes during training (DroPE drops RoPE for the last
share of the steps).

Each phase is a model over the same parameters (the methods of a run's phases have none of their
own), so the state, the optimizer's moments and the learning-rate schedule run on unchanged from one
phase to the next; which phase a step belongs to follows from its number (and num_train_steps)
alone, so a resumed run (after kill -9 or preemption) trains each step with the model it would have
had. Extending such a run (a new num_train_steps) would move the switch: it is refused
(`check_resume`). The phases' configs, which the evaluator reads too: runs/phases.py.
"""

import dataclasses

import ml_collections

from keynorm_jax import run_config
from keynorm_jax.errors import ConfigError
from keynorm_jax.runs.phases import phase_configs


@dataclasses.dataclass(frozen=True)
class Phase:
  last_step: int   # the phase trains steps up to this one (1-based, included)
  model: object    # the Flax LM of the phase
  position: str    # its position method


def training_phases(config: ml_collections.ConfigDict) -> list[Phase]:
  """The phases of a resolved config, in order, each with its model; see phase_configs."""
  return [Phase(last, run_config.build_model(c), c.model.position)
          for last, c in phase_configs(config)]


def phase_of(phases: list[Phase], step: int) -> int:
  """The index of the phase that trains `step` (1-based)."""
  return next((i for i, phase in enumerate(phases) if step <= phase.last_step), len(phases) - 1)


def check_resume(phases: list[Phase], changed: dict) -> None:
  """ConfigError for a resume that changes num_train_steps of a run with phases (the switch is a
  share of it: steps after it would go back to the earlier phase)."""
  if "num_train_steps" in changed and len(phases) > 1:
    old, new = changed["num_train_steps"]
    raise ConfigError(f"{phases[-1].position} switches phases at a share of num_train_steps: "
                      f"changing it from {old} to {new} on resume would move the switch (steps "
                      f"after it would train as before it). Start a new run to train longer.")
