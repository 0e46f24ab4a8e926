"""x W over x's last axis, with a backward pass laid out for XLA's CPU matmul kernels.

The same function as jnp.einsum("...d,df->...f", x, W) (and its gradients, within float32 rounding).
Autodiff gives the weight gradient dW = x^T g as a dot that contracts the token axis, the major axis
of both operands. On the CPU backend XLA then transposes g inside the elementwise fusion that
produces it (a strided write of a [f, tokens] array) and runs the dot outside YNNPACK (an Eigen dot
at about half the speed; benchmarks/PROFILE_NOTES.md). Here x^T is materialized as its own array
(fusion_boundary.transposed: a layout copy that XLA neither folds back into the dot nor fuses with
x's producer), so dW is a plain row-major [d, tokens] x [tokens, f] product.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from keynorm_jax.custom_backward import with_backward
from keynorm_jax.fusion_boundary import transposed
from keynorm_jax.trace_switch import TraceSwitch


_FAST_BACKWARD = TraceSwitch(True)  # False: autodiff's backward (the reference; benchmarks)


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


def matmul(x, kernel):
  """x [..., d] @ kernel [d, f]: `dense_matmul` on the CPU backend (where it was measured faster);
  plain autodiff on accelerators (not measured there) or where _FAST_BACKWARD is off."""
  if _FAST_BACKWARD.value and jax.default_backend() == "cpu":
    return dense_matmul(x, kernel)
  return reference_matmul(x, kernel)


def autodiff_backward():
  """Within: functions traced use autodiff's backward for x W (the reference, for A/B timings)."""
  return _FAST_BACKWARD.set_to(False)


def dense_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
  """A `dot_general` for flax's nn.Dense (contract lhs's last axis with rhs's first) through
  `dense_matmul`; any other contraction goes to lax.dot_general unchanged."""
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  plain = (tuple(lhs_contract) == (lhs.ndim - 1,) and tuple(rhs_contract) == (0,)
           and not lhs_batch and not rhs_batch and rhs.ndim == 2 and precision is None
           and preferred_element_type is None)
  if not plain:
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type)
  return matmul(lhs, rhs)


def linear(features: int, dtype, name: str) -> nn.Module:
  """nn.Dense(features) without bias, its products through `dense_dot_general`."""
  return nn.Dense(features, use_bias=False, dtype=dtype, dot_general=dense_dot_general, name=name)
