"""`python -m keynorm_jax.reproduce`: see run.py."""

# First of all, before the imports that take seconds: SIGTERM or Ctrl-C from now on stops the
# command at its next safe point, in one line with exit code 75 (training/preemption.py).
from keynorm_jax.training import preemption  # pylint: disable=g-bad-import-order
if __name__ == "__main__":  # (not when a test imports this file)
  preemption.install()

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position

from keynorm_jax.reproduce.run import main  # pylint: disable=g-import-not-at-top,wrong-import-position

if __name__ == "__main__":
  app.run(main)
