"""What the training entry points (train.py, reproduce, study) do with the errors a run ends on."""

import sys

from keynorm_jax.errors import KeynormError
from keynorm_jax.training.preemption import Preempted

# The errors the user can cause and fix (config, data, checkpoints, NaN, disk, lock): one line.
USER_ERRORS = (KeynormError, ValueError, RuntimeError, FloatingPointError)


def run_or_exit(work):
  """Returns work(); a preempted run prints its line and exits with its code (75), the user's
  errors exit with `error: <type>: <message>`, and anything else (a bug) keeps its traceback."""
  try:
    return work()
  except Preempted as e:
    print(e, file=sys.stderr, flush=True)
    sys.exit(e.exit_code)
  except USER_ERRORS as e:
    sys.exit(f"error: {type(e).__name__}: {e}")
