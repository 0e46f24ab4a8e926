"""The shape both CPU fast paths take (cpu/dense.py, cpu/products.py): a product of two arrays that
rounds them to the compute dtype itself, with a hand-written backward pass."""

import functools

import jax
import jax.numpy as jnp


def rounding_inside(forward, backward):
  """fn(a, b, dtype) = forward(a and b rounded to dtype), differentiated by backward((the rounded
  a, b), g rounded to dtype) -> (da, db) as float32 sums, each returned in its input's own dtype.

  The rounding sits inside the product, so a float32 input gets its float32 gradient, never
  rounded to dtype and widened again: where the caller adds several products' gradients of one
  array (attention's query blocks, which read overlapping keys and values; the GAU's input, read by
  one product per part of its W), they add in float32, and a float32 weight's gradient reaches the
  optimizer unrounded."""
  @functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
  def fn(a, b, dtype):
    return forward(a.astype(dtype), b.astype(dtype))

  def fn_fwd(a, b, dtype):
    rounded = (a.astype(dtype), b.astype(dtype))
    # empty arrays: the inputs' dtypes, which the gradients take (a residual must be an array)
    return forward(*rounded), (rounded, (jnp.zeros((0,), a.dtype), jnp.zeros((0,), b.dtype)))

  def fn_bwd(dtype, residuals, g):
    rounded, (like_a, like_b) = residuals
    grad_a, grad_b = backward(rounded, g.astype(dtype))
    return grad_a.astype(like_a.dtype), grad_b.astype(like_b.dtype)

  fn.defvjp(fn_fwd, fn_bwd)
  return fn
