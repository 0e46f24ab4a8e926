"""Shared inputs and helpers of the position-method tests (test_positions*.py), at the NumPy
loops' shape (shapes.py: T = 12 in query blocks of 5, 3 heads): attention inputs, the NumPy
reference per head, the comparison, and a layer's attend_options() arguments under an inference
method."""

import numpy as np

from keynorm_jax import positions
from attention_cases import layer_options
import numpy_attention_reference as attention_ref
from shapes import B, INV, S  # noqa: F401  (for the position tests)
from shapes import LOOP_BLOCKS as BLOCKS, LOOP_E as E, LOOP_H as H, LOOP_T as T


def inputs(seed=0, heads=H):
  rng = np.random.default_rng(seed)
  return tuple(rng.normal(size=(B, T, heads, size)).astype(np.float32) for size in (S, S, E))


def per_head_reference(q, k, v, per_head_kwargs):
  """attention_ref.attention for every batch row and head; per_head_kwargs(h) -> its keyword arguments."""
  out = np.zeros(q.shape[:3] + (v.shape[-1],))
  for b in range(q.shape[0]):
    for h in range(q.shape[2]):
      out[b, :, h] = attention_ref.attention(q[b, :, h], k[b, :, h], v[b, :, h], **per_head_kwargs(h))
  return out


def check(got, expected, atol=3e-5):
  np.testing.assert_allclose(np.asarray(got), expected, atol=atol, rtol=atol)


def column_kwargs(name, *, at, train_length, rope=True, logn_base=None, **knobs):
  """attend's keyword arguments of a layer (RoPE with base 100, or none) under inference method
  `name` at length `at` for a model trained at `train_length`, and the resolved column."""
  column = positions.EvalColumn(positions.inference_method(name, **knobs)).at(at, train_length)
  layer = positions.AttentionSpec(rotary=positions.RotarySpec(base=100.0) if rope else None)
  kwargs = layer_options(column.apply(layer, train_length), rotary_dim=S,
                         train_length=train_length, seq_length=T, logn_base=logn_base)
  return kwargs, column
