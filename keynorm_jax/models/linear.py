"""The models' x W: through the CPU seam's `dense_matmul` when the model takes the CPU paths
(ModelConfig.cpu_ops), else the plain einsum. A static choice: the same function either way.

x and W enter the layer in the activation dtype (ModelConfig.activation_dtype), the product rounds
them to the compute dtype and sums in float32 (keynorm_jax/precision.py); its result is rounded to
`out_dtype`: the model's activation dtype for a layer whose output the next layers read
(ModelConfig.activation_dtype: float32 on the CPU seam), float32 for the head (the loss follows)."""

import functools

import flax.linen as nn
import jax

from keynorm_jax.cpu.dense import dense_matmul, reference_matmul


def matmul(x, kernel, dtype, cpu_ops: bool, out_dtype=None):
  """x [..., d] @ kernel [d, f] -> [..., f] in out_dtype (default: x's dtype): x and kernel
  rounded to dtype (the compute dtype), summed in float32."""
  summed = (dense_matmul if cpu_ops else reference_matmul)(x, kernel, dtype)
  return summed.astype(out_dtype or x.dtype)


def _dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, *,
                 dtype, cpu_ops: bool, out_dtype=None):
  """A `dot_general` for flax's nn.Dense (contract lhs's last axis with rhs's first) through
  `matmul`; any other contraction goes to lax.dot_general unchanged."""
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  plain = (tuple(lhs_contract) == (lhs.ndim - 1,) and tuple(rhs_contract) == (0,)
           and not lhs_batch and not rhs_batch and rhs.ndim == 2 and precision is None
           and preferred_element_type is None)
  if not plain:
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type)
  return matmul(lhs, rhs, dtype, cpu_ops, out_dtype)


def linear(features: int, cfg, name: str, bias: bool = False, out_dtype=None) -> nn.Module:
  """nn.Dense(features) of the model `cfg` (a ModelConfig), without bias unless `bias`: its inputs
  and weights in the activation dtype, its products through `matmul` (the CPU seam's with
  cfg.cpu_ops) in the compute dtype, the result in out_dtype (default: cfg.activation_dtype)."""
  return nn.Dense(features, use_bias=bias, dtype=cfg.activation_dtype, name=name,
                  dot_general=functools.partial(_dot_general, dtype=cfg.product_dtype,
                                                cpu_ops=cfg.cpu_ops,
                                                out_dtype=out_dtype or cfg.activation_dtype))
