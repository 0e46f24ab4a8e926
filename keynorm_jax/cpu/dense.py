"""x W over x's last axis, with a backward pass laid out for XLA's CPU matmul kernels.

The same function as jnp.einsum("...d,df->...f", x, W) (and its gradients, within float32 rounding).
Autodiff gives the weight gradient dW = x^T g as a dot that contracts the token axis, the major axis
of both operands. On the CPU backend XLA then transposes g inside the elementwise fusion that
produces it (a strided write of a [f, tokens] array) and runs the dot outside YNNPACK (an Eigen dot
at about half the speed; benchmarks/PROFILE_NOTES.md). Here x^T is materialized as its own array
(boundary.transposed: a layout copy that XLA neither folds back into the dot nor fuses with x's
producer), so dW is a plain row-major [d, tokens] x [tokens, f] product.
"""

import jax.numpy as jnp

from keynorm_jax.cpu.backward import with_backward
from keynorm_jax.cpu.boundary import transposed


def reference_matmul(x, kernel):
  """x [..., d] @ kernel [d, f] -> [..., f], differentiated by autodiff."""
  return jnp.einsum("...d,df->...f", x, kernel)


def _dense_matmul_bwd(residuals, g):
  x, kernel = residuals
  x_NxD = x.reshape(-1, x.shape[-1])
  g_NxF = g.reshape(-1, g.shape[-1])
  x_DxN = transposed(x_NxD)
  grad_kernel = jnp.dot(x_DxN, g_NxF).astype(kernel.dtype)
  grad_x = jnp.einsum("...f,df->...d", g, kernel).astype(x.dtype)
  return grad_x, grad_kernel


dense_matmul = with_backward(reference_matmul, _dense_matmul_bwd)  # x W, the backward above
