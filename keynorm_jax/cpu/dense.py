"""x W over x's last axis, with a backward pass laid out for XLA's CPU matmul kernels.

The same function as jnp.einsum("...d,df->...f", x, W) (and its gradients, within float32 rounding).
Autodiff gives the weight gradient dW = x^T g as a dot that contracts the token axis, the major axis
of both operands. On the CPU backend XLA then transposes g inside the elementwise fusion that
produces it (a strided write of a [f, tokens] array) and runs the dot outside YNNPACK (an Eigen dot
at about half the speed; benchmarks/PROFILE_NOTES.md). Here x^T is materialized as its own array
(boundary.transposed: a layout copy that XLA neither folds back into the dot nor fuses with x's
producer), so dW is a plain row-major [d, tokens] x [tokens, f] product.

Both functions take x and W in the compute dtype and return the float32 sums; every product here,
forward and backward, sums in float32 with the cotangent rounded to the inputs' dtype
(keynorm_jax/precision.py).
"""

import jax.numpy as jnp

from keynorm_jax import precision
from keynorm_jax.cpu.backward import with_backward
from keynorm_jax.cpu.boundary import transposed


def reference_matmul(x, kernel):
  """x [..., d] @ kernel [d, f] -> [..., f] float32 (precision.einsum, in x's and kernel's dtype),
  differentiated by autodiff (precision.einsum's backward in bfloat16)."""
  return precision.einsum("...d,df->...f", x, kernel, jnp.result_type(x, kernel))


def _dense_matmul_fwd(x, kernel):
  return precision.summed("...d,df->...f", x, kernel)


def _dense_matmul_bwd(residuals, g):
  x, kernel = residuals
  g = g.astype(x.dtype)
  x_NxD = x.reshape(-1, x.shape[-1])
  g_NxF = g.reshape(-1, g.shape[-1])
  x_DxN = transposed(x_NxD)
  grad_kernel = precision.summed("dn,nf->df", x_DxN, g_NxF).astype(kernel.dtype)
  grad_x = precision.summed("...f,df->...d", g, kernel).astype(x.dtype)
  return grad_x, grad_kernel


# x [..., d] @ kernel [d, f] -> [..., f] float32 (x and kernel in one dtype), the backward above.
dense_matmul = with_backward(_dense_matmul_fwd, _dense_matmul_bwd)
