"""Attention's probabilities times values, [B, H, Q, K] x [B, K, H, E] -> [B, Q, H, E]: the
reference einsum, and the CPU backend's fast path (operand order and custom backward) with the
switches that trace the reference instead (tests, benchmarks/profile_step.py --ab)."""

import jax
import jax.numpy as jnp

from keynorm_jax.custom_backward import with_backward
from keynorm_jax.fusion_boundary import transposed
from keynorm_jax.trace_switch import TraceSwitch

_ORDERED_PROBS_TIMES_VALUES = TraceSwitch(True)  # False under einsum_operand_order() (reference)
_PROBS_VALUES_VJP = TraceSwitch(True)  # False under autodiff_probs_values() (reference)
# Values at least this wide take the custom backward of probs x values (measured: GAU, 512 wide,
# 1.07x; Transformer, 64 wide, 0.99x; benchmarks/PROFILE_NOTES.md; the bound between is a guess).
PROBS_VALUES_VJP_MIN_WIDTH = 256


def probs_times_values(probs_BxHxQxK, values_BxKxHxE):
  """probs [B, H, Q, K] x values [B, K, H, E] -> [B, Q, H, E], summed over the keys.

  jnp.einsum("bhqk,bkhe->bqhe") (the reference) emits dot_general(values, probs) -> [B, H, E, Q]
  and a transpose: on XLA's CPU backend the step then materializes the values transposed (once
  per query block, [B, E, keys]) and the probabilities transposed, and computes the product as
  V^T P^T. On the CPU backend this is dot_general(probs, values) -> [B, H, Q, E] instead (a
  row-major product of P and V; for one head the transpose after it is a bitcast), and for values
  at least PROBS_VALUES_VJP_MIN_WIDTH wide with the custom backward below. The same sums, within
  float32 rounding (benchmarks/PROFILE_NOTES.md); accelerators keep the reference (not measured
  there)."""
  if _ORDERED_PROBS_TIMES_VALUES.value and jax.default_backend() == "cpu":
    if _PROBS_VALUES_VJP.value and values_BxKxHxE.shape[-1] >= PROBS_VALUES_VJP_MIN_WIDTH:
      return _ordered_probs_times_values(probs_BxHxQxK, values_BxKxHxE)
    return _ordered_product(probs_BxHxQxK, values_BxKxHxE)
  return jnp.einsum("bhqk,bkhe->bqhe", probs_BxHxQxK, values_BxKxHxE)


def _ordered_product(probs_BxHxQxK, values_BxKxHxE):
  out_BxHxQxE = jax.lax.dot_general(probs_BxHxQxK, values_BxKxHxE,
                                    (((3,), (1,)), ((0, 1), (0, 2))),
                                    preferred_element_type=jnp.float32)
  return jnp.transpose(out_BxHxQxE, (0, 2, 1, 3)).astype(
      jnp.result_type(probs_BxHxQxK, values_BxKxHxE))


def _ordered_probs_times_values_bwd(residuals, g_BxQxHxE):
  """dP = dO V^T; dV = P^T dO with P^T materialized as its own array (fusion_boundary.transposed;
  autodiff's dV contracts the major axis of P, which XLA's CPU backend runs as a slower Eigen
  dot)."""
  probs_BxHxQxK, values_BxKxHxE = residuals
  g_BxHxQxE = jnp.transpose(g_BxQxHxE, (0, 2, 1, 3))
  values_BxHxKxE = jnp.transpose(values_BxKxHxE, (0, 2, 1, 3))
  grad_probs = jnp.einsum("bhqe,bhke->bhqk", g_BxHxQxE, values_BxHxKxE,
                          preferred_element_type=jnp.float32).astype(probs_BxHxQxK.dtype)
  probs_BxHxKxQ = transposed(probs_BxHxQxK, (0, 1, 3, 2))
  grad_values_BxHxKxE = jax.lax.dot_general(probs_BxHxKxQ, g_BxHxQxE,
                                            (((3,), (2,)), ((0, 1), (0, 1))),
                                            preferred_element_type=jnp.float32)
  grad_values = jnp.transpose(grad_values_BxHxKxE, (0, 2, 1, 3)).astype(values_BxKxHxE.dtype)
  return grad_probs, grad_values


# `_ordered_product` with the backward above.
_ordered_probs_times_values = with_backward(_ordered_product, _ordered_probs_times_values_bwd)


def autodiff_probs_values():
  """Within: `probs_times_values` traced is differentiated by autodiff (the reference for its
  custom backward, for tests and A/B timings)."""
  return _PROBS_VALUES_VJP.set_to(False)


def einsum_operand_order():
  """Within: `attend` traced multiplies probabilities and values through jnp.einsum's operand
  order (the reference for `probs_times_values`, for tests and A/B timings)."""
  return _ORDERED_PROBS_TIMES_VALUES.set_to(False)
