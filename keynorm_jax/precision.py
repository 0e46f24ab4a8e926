"""The large products' precision, in one place: inputs in the compute dtype, sums in float32.

With model.compute_dtype=bfloat16 every large product (the dense layers, the head, attention's
q . k and probabilities x values, and the products of their backward passes) takes bfloat16 inputs
and accumulates in float32 (`preferred_element_type=float32`). That is the form a processor with
bfloat16 units multiplies at twice its float32 rate (a CPU with avx512_bf16 or amx_bf16, through
XLA: cpu/features.py, BENCHMARKS.md "bfloat16 on the CPU"), and the form GPUs and TPUs give a
bfloat16 product anyway, so every backend takes this one code path. Softmax, norms, the loss, the
optimizer and the parameters stay float32.

A product's result is its float32 sum. The caller keeps it in the model's activation dtype where
other layers read it (a dense layer's output; ModelConfig.activation_dtype: the compute dtype, but
float32 on the CPU seam) and in float32 where a softmax or the loss follows (the scores, the
logits, attention's output before its cast); a product rounds its inputs to the compute dtype.

Backward: a product with a float32 result gets a float32 cotangent, and autodiff would feed it to
the backward products as it is (float32 x bfloat16, computed in float32). So `einsum` has a custom
VJP that rounds the cotangent to the inputs' dtype first, sums each backward product in float32 and
returns each gradient in its input's dtype. The CPU seam's products (cpu/dense.py, cpu/products.py)
round their inputs themselves, inside their hand-written backward passes' custom VJP: the
cotangent is rounded the same way, and a float32 input (the seam's activations, the dense layers'
weights) gets its gradient in float32, unrounded (cpu/backward.rounding_inside); `einsum`'s
products (the tied head, the `reference` and `blocked` kernels) round theirs once. In float32
there is nothing to round: `einsum` is the plain jnp.einsum, differentiated by autodiff, and the
float32 step is what it was.
"""

import functools

import jax
import jax.numpy as jnp

ACCUMULATION = jnp.float32   # the dtype every product sums in


def summed(spec: str, a, b):
  """jnp.einsum(spec, a, b) on a and b as given, summed in float32 (a float32 result). For the
  forward and backward passes written by hand (cpu/); differentiate `einsum` instead."""
  return jnp.einsum(spec, a, b, preferred_element_type=ACCUMULATION)


def summed_dot_general(a, b, dimension_numbers):
  """jax.lax.dot_general on a and b as given, summed in float32 (a float32 result)."""
  return jax.lax.dot_general(a, b, dimension_numbers, preferred_element_type=ACCUMULATION)


def einsum(spec: str, a, b, dtype):
  """jnp.einsum(spec, a, b) with a and b rounded to `dtype` (the compute dtype) and summed in
  float32: the float32 result. Its backward products round the cotangent to `dtype` and sum in
  float32 too (the module docstring). Every index of an input must be in the other input or in the
  result (what a product's two transposes need), with no index twice in one input."""
  a, b = a.astype(dtype), b.astype(dtype)
  if jnp.dtype(dtype) == ACCUMULATION:
    return jnp.einsum(spec, a, b)
  _transposes(spec)   # refused here, when traced, rather than when first differentiated
  return _rounded_einsum(spec, a, b)


def _transposes(spec: str) -> tuple[str, str]:
  """The specs of d a = g . b and d b = a . g for the product `spec` (explicit, two inputs)."""
  inputs, result = spec.replace(" ", "").split("->")
  spec_a, spec_b = inputs.split(",")
  for one, other in ((spec_a, spec_b), (spec_b, spec_a)):
    letters = one.replace("...", "")
    if len(set(letters)) != len(letters) or not set(letters) <= set(other + result):
      raise ValueError(f"precision.einsum cannot transpose {spec!r}: an index of {one!r} repeats "
                       f"or is summed within it.")
  return f"{result},{spec_b}->{spec_a}", f"{spec_a},{result}->{spec_b}"


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _rounded_einsum(spec, a, b):
  return summed(spec, a, b)


def _rounded_einsum_fwd(spec, a, b):
  return summed(spec, a, b), (a, b)


def _rounded_einsum_bwd(spec, residuals, g):
  a, b = residuals
  grad_a_spec, grad_b_spec = _transposes(spec)
  g = g.astype(a.dtype)
  return (summed(grad_a_spec, g, b).astype(a.dtype), summed(grad_b_spec, a, g).astype(b.dtype))


_rounded_einsum.defvjp(_rounded_einsum_fwd, _rounded_einsum_bwd)
