"""NaN and infinity in training: what became non-finite in a step's metrics, and the error that
stops the run with what to change (nothing non-finite is saved; the last good checkpoint is kept)."""

import math


class NonFiniteLossError(FloatingPointError):
  """The loss, gradient norm, parameters or eval loss became NaN or infinite; nothing
  non-finite was saved, and the last good checkpoint is kept."""


def non_finite(metrics: dict) -> str | None:
  """What became NaN or infinite in a step's metrics (None if all is finite)."""
  for key, what in (("loss", "the loss"), ("grad_norm", "the gradient norm"),
                    ("eval_loss", "the eval loss")):
    if key in metrics and not math.isfinite(metrics[key]):
      return f"{what} became {metrics[key]}"
  if not metrics.get("state_finite", 1.0):
    return "the parameters or optimizer state became NaN or infinite"
  return None


def non_finite_error(problem: str, step: int, last_good, config, workdir) -> NonFiniteLossError:
  knobs = (f"a lower --config.learning_rate (now {config.learning_rate:g}) or a larger "
           f"--config.warmup_steps (now {config.warmup_steps})")
  problem = (f"{problem[0].upper()}{problem[1:]} at or before step {step} (metrics are checked "
             f"at every log, eval and checkpoint step); nothing non-finite was saved.")
  if last_good is None:
    return NonFiniteLossError(
        f"{problem} No checkpoint was written before it in {workdir / 'checkpoints'}, so there "
        f"is nothing to resume: start over with {knobs}.")
  return NonFiniteLossError(
      f"{problem} The last good checkpoint (step {last_good}) is kept in "
      f"{workdir / 'checkpoints'} and restores finite. Resume from it with {knobs}, adding "
      f"--allow_config_change=learning_rate,warmup_steps.")
