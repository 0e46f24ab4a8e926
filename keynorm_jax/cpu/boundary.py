"""Arrays that XLA's CPU backend computes as an op of their own, outside the fusions that use them.

XLA fuses elementwise work into its consumers, and two cases of that cost more than they save on
the CPU (benchmarks/PROFILE_NOTES.md, round 4; one core of the project's CPU):
- a transpose fused with the work that produces its operand (a norm's multiply, a gate) becomes a
  loop writing the output element by element in transposed order: a [4096, 256] float32 transpose
  takes 7.2 ms that way against 0.7 ms as a transpose alone, which XLA runs as a tiled copy;
- a small table read by large fusions (RoPE's cos and sin, [T, S/2], read by every q and k of
  every layer, forward and backward) is recomputed inside each of them for every element.
An optimization barrier does not separate them (the CPU pipeline removes barriers before fusion).
A conditional does: fusion stops at a computation's boundary. So here the work sits in both
branches of a `lax.cond`, the same function in each (the predicate, a value of the array, changes
nothing), and its operand is computed before it and its result once. The numbers are exactly the
function's.
"""

import jax
import jax.numpy as jnp


def own_op(fn, x):
  """fn(x) as an op of its own (see the module docstring). Callers take this path on the CPU only
  (model.kernel `cpu`, or `auto` there); it is correct on any backend but measured on the CPU only.

  The predicate reads x's first element: under a sharded x (data parallel on several CPU devices)
  that may cost a small exchange per call (not measured). Under jax.vmap with a batched x the
  conditional becomes a select, and the boundary is gone (nothing here vmaps it).

  Called outside any transformation (x a concrete array: eager execution, as the tests apply the
  models), it is fn(x): each op then runs as a program of its own, so there is no fusion to stop,
  and a conditional would be compiled anew at every call (its branches are new functions each
  time), about 20 ms each on the CPU."""
  if not isinstance(x, jax.core.Tracer):
    return fn(x)
  return jax.lax.cond(x.reshape(-1)[0] >= 0, fn, fn, x)


def transposed(x, axes=None):
  """jnp.transpose(x, axes) as an op of its own: on the CPU backend a tiled copy, row-major.

  The conditional returns it flattened: returned as it is, XLA's layout assignment gave the
  conditional's result a column-major layout (the transpose then a free relabelling of x's
  layout) and copied it to row-major outside, where the consumer's dot is decided, and in bfloat16
  that dot was refused to YNNPACK and run in float32 (benchmarks/PROFILE_NOTES.md, round 6). A
  flat array has one layout, so the copy happens here and the consumer reads a row-major array."""
  shape = tuple(x.shape[i] for i in (range(x.ndim)[::-1] if axes is None else axes))
  return own_op(lambda a: jnp.transpose(a, axes).reshape(-1), x).reshape(shape)
