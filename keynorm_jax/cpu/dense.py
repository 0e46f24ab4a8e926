"""x W over x's last axis, with a backward pass laid out for XLA's CPU matmul kernels.

The same function as jnp.einsum("...d,df->...f", x, W) (and its gradients, within float32 rounding).
Autodiff gives the weight gradient dW = x^T g as a dot that contracts the token axis, the major axis
of both operands. On the CPU backend XLA then transposes g inside the elementwise fusion that
produces it (a strided write of a [f, tokens] array) and runs the dot outside YNNPACK (an Eigen dot
at about half the speed; benchmarks/PROFILE_NOTES.md). Here x^T is materialized as its own array
(boundary.transposed: a layout copy that XLA neither folds back into the dot nor fuses with x's
producer), so dW is a plain row-major [d, tokens] x [tokens, f] product.

Both functions take x, W and the compute dtype and return the float32 sums; every product here,
forward and backward, reads its inputs and the cotangent rounded to that dtype and sums in float32
(keynorm_jax/precision.py). dense_matmul rounds x and W itself and returns their gradients in their
own dtypes, unrounded (cpu/backward.rounding_inside): float32 on the CPU seam, where the layer's
input and weights are float32 and the products' gradients of one x (the GAU's split W) add in
float32.
"""

from keynorm_jax import precision
from keynorm_jax.cpu.backward import rounding_inside
from keynorm_jax.cpu.boundary import transposed


def reference_matmul(x, kernel, dtype):
  """x [..., d] @ kernel [d, f] -> [..., f] float32 (precision.einsum: x and kernel rounded to
  dtype), differentiated by autodiff (precision.einsum's backward in bfloat16)."""
  return precision.einsum("...d,df->...f", x, kernel, dtype)


def _dense_matmul_fwd(x, kernel):
  return precision.summed("...d,df->...f", x, kernel)


def _dense_matmul_bwd(residuals, g):
  x, kernel = residuals
  x_NxD = x.reshape(-1, x.shape[-1])
  g_NxF = g.reshape(-1, g.shape[-1])
  x_DxN = transposed(x_NxD)
  grad_kernel = precision.summed("dn,nf->df", x_DxN, g_NxF)
  grad_x = precision.summed("...f,df->...d", g, kernel)
  return grad_x, grad_kernel


# (x [..., d], kernel [d, f], dtype) -> x @ kernel [..., f] float32, the backward above.
dense_matmul = rounding_inside(_dense_matmul_fwd, _dense_matmul_bwd)
