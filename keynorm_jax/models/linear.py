"""The models' x W: through the CPU seam's `dense_matmul` when the model takes the CPU paths
(ModelConfig.cpu_ops), else the plain einsum. A static choice: the same function either way."""

import functools

import flax.linen as nn
import jax

from keynorm_jax.cpu.dense import dense_matmul, reference_matmul


def matmul(x, kernel, cpu_ops: bool):
  """x [..., d] @ kernel [d, f] -> [..., f]."""
  return dense_matmul(x, kernel) if cpu_ops else reference_matmul(x, kernel)


def _dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, *,
                 cpu_ops: bool):
  """A `dot_general` for flax's nn.Dense (contract lhs's last axis with rhs's first) through
  `matmul`; any other contraction goes to lax.dot_general unchanged."""
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  plain = (tuple(lhs_contract) == (lhs.ndim - 1,) and tuple(rhs_contract) == (0,)
           and not lhs_batch and not rhs_batch and rhs.ndim == 2 and precision is None
           and preferred_element_type is None)
  if not plain:
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type)
  return matmul(lhs, rhs, cpu_ops)


def linear(features: int, dtype, name: str, cpu_ops: bool, bias: bool = False) -> nn.Module:
  """nn.Dense(features), without bias unless `bias`, its products through `matmul`."""
  return nn.Dense(features, use_bias=bias, dtype=dtype, name=name,
                  dot_general=functools.partial(_dot_general, cpu_ops=cpu_ops))
