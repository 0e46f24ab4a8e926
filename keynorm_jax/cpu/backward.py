"""A function of two arrays with a hand-written backward pass whose residuals are its inputs: the
shape both CPU fast paths take (cpu/dense.py, cpu/products.py)."""

import jax


def with_backward(forward, backward):
  """jax.custom_vjp of forward(a, b), differentiated by backward((a, b), g) -> (da, db)."""
  fn = jax.custom_vjp(forward)
  fn.defvjp(lambda a, b: (forward(a, b), (a, b)), backward)
  return fn
