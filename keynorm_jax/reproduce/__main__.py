"""`python -m keynorm_jax.reproduce`: see run.py."""

from absl import app

from keynorm_jax.reproduce.run import main

if __name__ == "__main__":
  app.run(main)
