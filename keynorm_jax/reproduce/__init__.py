"""The one-command reproduction of the seed's tables: `python -m keynorm_jax.reproduce`."""
