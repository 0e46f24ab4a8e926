"""`python -m keynorm_jax.reproduce`: see run.py."""

from keynorm_jax import host_memory  # first of all: see host_memory

host_memory.keep_freed_memory()

# pylint: disable=wrong-import-position
from absl import app

from keynorm_jax.reproduce.run import main

if __name__ == "__main__":
  app.run(main)
