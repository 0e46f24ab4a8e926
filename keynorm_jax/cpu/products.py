"""Attention's two batched products laid out for XLA's CPU backend (the `cpu` kernel's):

  scores = q k^T       [B, Q, H, S] x [B, K, H, S] -> [B, H, Q, K]   (query_key_scores)
  out    = probs v     [B, H, Q, K] x [B, K, H, E] -> [B, Q, H, E]   (probs_times_values)

XLA's CPU backend runs a product as a fast YNNPACK kernel only when it is row-major: the lhs
contracting its minor axis, the rhs its major axis. jnp.einsum's order for probs x values emits
dot_general(values, probs) and a transpose, so the step materialized V^T (once per query block)
and P^T and computed V^T P^T; autodiff's gradients dK = dS^T Q and dV = P^T dO contract the query
axis, the major axis of dS and P, which XLA runs as Eigen dots at about half the speed. Here probs x
values is dot_general(probs, values), and both products have a custom backward whose every product
is row-major, dS^T and P^T materialized as their own copies (boundary.transposed). The same sums as
the reference kernel's einsums (attention/kernels/reference.py), within float32 rounding
(benchmarks/PROFILE_NOTES.md); measured on the CPU only.

Both take their two inputs and `dtype` (the compute dtype), round the inputs to it themselves and
return the float32 sums; their backward passes round the cotangent to `dtype`, sum every product in
float32 and return each gradient in its input's own dtype, unrounded (cpu/backward.rounding_inside;
keynorm_jax/precision.py).
"""

import jax.numpy as jnp

from keynorm_jax import precision
from keynorm_jax.cpu.backward import rounding_inside
from keynorm_jax.cpu.boundary import transposed


def einsum_scores(q_BxQxHxS, k_BxKxHxS):
  """q [B, Q, H, S] x k [B, K, H, S] -> scores [B, H, Q, K] float32, as written (the reference)."""
  return precision.summed("bqhs,bkhs->bhqk", q_BxQxHxS, k_BxKxHxS)


def einsum_probs_times_values(probs_BxHxQxK, values_BxKxHxE):
  """probs [B, H, Q, K] x values [B, K, H, E] -> [B, Q, H, E] float32, as written (the
  reference)."""
  return precision.summed("bhqk,bkhe->bqhe", probs_BxHxQxK, values_BxKxHxE)


def _scores(q_BxQxHxS, k_BxKxHxS):
  """einsum_scores; for one head, as a [B, Q, S] x [B, K, S] product (see _ordered_product)."""
  if q_BxQxHxS.shape[2] == k_BxKxHxS.shape[2] == 1:
    return precision.summed("bqs,bks->bqk", q_BxQxHxS[:, :, 0], k_BxKxHxS[:, :, 0])[:, None]
  return einsum_scores(q_BxQxHxS, k_BxKxHxS)


def _ordered_product(a_BxHxQxK, b_BxKxHxE):
  """a [B, H, Q, K] x b [B, K, H, E] -> [B, Q, H, E] float32 as dot_general(a, b) -> [B, H, Q, E]
  (a row-major product) and a transpose.

  For one head, both products here are written without the head axis ([B, Q, K] x [B, K, E]):
  with it between the batch axis and the rows, XLA first transposes an operand to its canonical
  order, a copy per query block (the GAU's values as [B, E, K] for dP = dO V^T), where the 3-d
  product goes to YNNPACK as it is (benchmarks/PROFILE_NOTES.md, round 8). With several heads that
  transpose is a real one, which XLA's canonical order places so that YNNPACK takes the product."""
  if a_BxHxQxK.shape[1] == b_BxKxHxE.shape[2] == 1:
    return precision.summed("bqk,bke->bqe", a_BxHxQxK[:, 0], b_BxKxHxE[:, :, 0])[:, :, None]
  out_BxHxQxE = precision.summed_dot_general(a_BxHxQxK, b_BxKxHxE,
                                             (((3,), (1,)), ((0, 1), (0, 2))))
  return jnp.transpose(out_BxHxQxE, (0, 2, 1, 3))


def _swap_last(x_BxHxQxK):
  """x^T over the last two axes, as its own copy."""
  return transposed(x_BxHxQxK, (0, 1, 3, 2))


def _probs_times_values_bwd(residuals, g_BxQxHxE):
  """dP = dO V^T; dV = P^T dO."""
  probs_BxHxQxK, values_BxKxHxE = residuals
  grad_probs = _scores(g_BxQxHxE, values_BxKxHxE)
  grad_values = _ordered_product(_swap_last(probs_BxHxQxK), g_BxQxHxE)
  return grad_probs, grad_values


def _scores_bwd(residuals, g_BxHxQxK):
  """dQ = dS K; dK = dS^T Q."""
  q_BxQxHxS, k_BxKxHxS = residuals
  grad_q = _ordered_product(g_BxHxQxK, k_BxKxHxS)
  grad_k = _ordered_product(_swap_last(g_BxHxQxK), q_BxQxHxS)
  return grad_q, grad_k


# (probs [B, H, Q, K], values [B, K, H, E], dtype) -> [B, Q, H, E] float32, the backward pass above.
probs_times_values = rounding_inside(_ordered_product, _probs_times_values_bwd)
# (q [B, Q, H, S], k [B, K, H, S], dtype) -> scores [B, H, Q, K] float32, the backward pass above.
query_key_scores = rounding_inside(_scores, _scores_bwd)
