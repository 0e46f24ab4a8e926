"""A transpose that XLA's CPU backend runs as a pure layout copy of its own.

XLA fuses a transpose with the elementwise work that produces its operand (a norm's multiply, a
gate) into one loop that writes the output in transposed order, element by element: on the
project's CPU a [4096, 256] float32 transpose takes 7.2 ms that way against 0.7 ms as a transpose
alone, which XLA runs as a tiled copy (one core; benchmarks/PROFILE_NOTES.md, round 4). An
optimization barrier does not separate them: the CPU pipeline removes barriers before fusion. A
conditional does: fusion stops at a computation's boundary, so here the transpose sits in both
branches of a `lax.cond` (the same transpose in each, so the predicate, a value of the array,
changes nothing) and its operand is materialized before it. The numbers are the transpose's, exactly.
"""

import jax
import jax.numpy as jnp

from keynorm_jax.trace_switch import TraceSwitch

_OWN_COPY = TraceSwitch(True)  # False under fused_transposes(): the plain transpose (reference)


def transposed(x, axes=None):
  """jnp.transpose(x, axes), on the CPU backend as its own layout copy (see the module docstring);
  elsewhere, or under fused_transposes(), the plain transpose behind an optimization barrier."""
  swap = lambda a: jnp.transpose(a, axes)
  if _OWN_COPY.value and jax.default_backend() == "cpu":
    return jax.lax.cond(x.reshape(-1)[0] >= 0, swap, swap, x)
  return jax.lax.optimization_barrier(swap(x))


def fused_transposes():
  """Within: `transposed` traced is the plain transpose behind an optimization barrier (as before
  round 4; the reference for tests and A/B timings)."""
  return _OWN_COPY.set_to(False)
