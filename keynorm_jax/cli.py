"""What the entry points (train.py, eval.py, reproduce, study) do with their input and with the
errors a run ends on."""

import sys

from keynorm_jax.errors import ConfigError, KeynormError
from keynorm_jax.storage import disk
from keynorm_jax.training.preemption import Preempted

# The errors the user can cause and fix (config, data, checkpoints, NaN, disk, lock): one line.
USER_ERRORS = (KeynormError, ValueError, RuntimeError, FloatingPointError)


def run_or_exit(work):
  """Returns work(); a preempted run prints its line and exits with its code (75), the user's
  errors exit with `error: <message>` (every command alike: the message names what is wrong and
  what to do), and anything else (a bug) keeps its traceback."""
  try:
    return work()
  except Preempted as e:
    print(e, file=sys.stderr, flush=True)
    sys.exit(e.exit_code)
  except USER_ERRORS as e:
    sys.exit(f"error: {e}")


def refuse_arguments(argv) -> None:
  """Exits with one line for positional arguments (every option of these commands is a flag)."""
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments {' '.join(argv[1:])}; every option is a --flag.")


def check_folder_flags(**folders) -> None:
  """ConfigError for a folder flag given empty or as whitespace only (disk.check_folder_flag)."""
  for name, value in folders.items():
    disk.check_folder_flag(name, value)


def numbers(name: str, values, kind, default):
  """The numbers of list flag --name (`values`: its comma-separated words, None when it is not
  given) as `kind`, or `default` when it is not given; ConfigError for one given empty or with a
  word that is not a number."""
  if values is None:
    return default
  if not values:
    raise ConfigError(f"--{name} is empty; give comma-separated numbers or leave it unset.")
  try:
    return [kind(v) for v in values]
  except ValueError:
    raise ConfigError(f"--{name} takes comma-separated numbers, "
                      f"got {','.join(values)!r}.") from None
