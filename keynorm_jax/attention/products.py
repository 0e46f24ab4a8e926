"""Attention's two batched products, and the CPU backend's fast path for each with the switches that
trace the reference instead (tests, benchmarks/profile_step.py --ab):

  scores = q k^T       [B, Q, H, S] x [B, K, H, S] -> [B, H, Q, K]   (query_key_scores)
  out    = probs v     [B, H, Q, K] x [B, K, H, E] -> [B, Q, H, E]   (probs_times_values)

XLA's CPU backend runs a product as a fast YNNPACK kernel only when it is row-major: the lhs
contracting its minor axis, the rhs its major axis. jnp.einsum's order for probs x values emits
dot_general(values, probs) and a transpose, so the step materialized V^T (once per query block)
and P^T and computed V^T P^T; autodiff's gradients dK = dS^T Q and dV = P^T dO contract the query
axis, the major axis of dS and P, which XLA runs as Eigen dots at about half the speed. On the CPU
backend, here, probs x values is dot_general(probs, values), and both products have a custom
backward whose every product is row-major, dS^T and P^T materialized as their own copies
(fusion_boundary.transposed). The same sums, within float32 rounding (benchmarks/PROFILE_NOTES.md);
accelerators keep the reference (not measured there).
"""

import jax
import jax.numpy as jnp

from keynorm_jax.custom_backward import with_backward
from keynorm_jax.fusion_boundary import transposed
from keynorm_jax.trace_switch import TraceSwitch

_ORDERED_PROBS_TIMES_VALUES = TraceSwitch(True)  # False under einsum_operand_order() (reference)
_CUSTOM_BACKWARD = TraceSwitch(True)  # False under autodiff_products() (reference)


def _on_cpu() -> bool:
  return jax.default_backend() == "cpu"


def probs_times_values(probs_BxHxQxK, values_BxKxHxE):
  """probs [B, H, Q, K] x values [B, K, H, E] -> [B, Q, H, E], summed over the keys."""
  if _ORDERED_PROBS_TIMES_VALUES.value and _on_cpu():
    if _CUSTOM_BACKWARD.value:
      return _ordered_probs_times_values(probs_BxHxQxK, values_BxKxHxE)
    return _ordered_product(probs_BxHxQxK, values_BxKxHxE)
  return jnp.einsum("bhqk,bkhe->bqhe", probs_BxHxQxK, values_BxKxHxE)


def query_key_scores(q_BxQxHxS, k_BxKxHxS):
  """q [B, Q, H, S] x k [B, K, H, S] -> scores [B, H, Q, K], summed over S."""
  if _CUSTOM_BACKWARD.value and _on_cpu():
    return _scores(q_BxQxHxS, k_BxKxHxS)
  return _reference_scores(q_BxQxHxS, k_BxKxHxS)


def _reference_scores(q_BxQxHxS, k_BxKxHxS):
  return jnp.einsum("bqhs,bkhs->bhqk", q_BxQxHxS, k_BxKxHxS)


def _ordered_product(a_BxHxQxK, b_BxKxHxE):
  """a [B, H, Q, K] x b [B, K, H, E] -> [B, Q, H, E] as dot_general(a, b) -> [B, H, Q, E] (a
  row-major product) and a transpose (a bitcast for one head)."""
  out_BxHxQxE = jax.lax.dot_general(a_BxHxQxK, b_BxKxHxE, (((3,), (1,)), ((0, 1), (0, 2))),
                                    preferred_element_type=jnp.float32)
  return jnp.transpose(out_BxHxQxE, (0, 2, 1, 3)).astype(jnp.result_type(a_BxHxQxK, b_BxKxHxE))


def _swap_last(x_BxHxQxK):
  """x^T over the last two axes, as its own copy."""
  return transposed(x_BxHxQxK, (0, 1, 3, 2))


def _probs_times_values_bwd(residuals, g_BxQxHxE):
  """dP = dO V^T; dV = P^T dO."""
  probs_BxHxQxK, values_BxKxHxE = residuals
  grad_probs = _reference_scores(g_BxQxHxE, values_BxKxHxE).astype(probs_BxHxQxK.dtype)
  grad_values = _ordered_product(_swap_last(probs_BxHxQxK), g_BxQxHxE).astype(values_BxKxHxE.dtype)
  return grad_probs, grad_values


def _scores_bwd(residuals, g_BxHxQxK):
  """dQ = dS K; dK = dS^T Q."""
  q_BxQxHxS, k_BxKxHxS = residuals
  grad_q = _ordered_product(g_BxHxQxK, k_BxKxHxS).astype(q_BxQxHxS.dtype)
  grad_k = _ordered_product(_swap_last(g_BxHxQxK), q_BxQxHxS).astype(k_BxKxHxS.dtype)
  return grad_q, grad_k


# The products with the backward passes above.
_ordered_probs_times_values = with_backward(_ordered_product, _probs_times_values_bwd)
_scores = with_backward(_reference_scores, _scores_bwd)


def autodiff_products():
  """Within: both products traced are differentiated by autodiff (the reference for their custom
  backward passes, for tests and A/B timings)."""
  return _CUSTOM_BACKWARD.set_to(False)


def einsum_operand_order():
  """Within: `attend` traced multiplies probabilities and values through jnp.einsum's operand
  order (the reference for `probs_times_values`, for tests and A/B timings)."""
  return _ORDERED_PROBS_TIMES_VALUES.set_to(False)
