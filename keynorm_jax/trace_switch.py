"""A setting read while a function is traced (a fast path on or off, a block count), and the
context manager that changes it for the functions traced within: how tests and benchmarks trace
the reference path that a fast path replaces.

JAX caches a function's trace by the function object, so jax.jit(f) of an f already traced reuses
that trace whatever the switches are now: trace through `jit_now(f)` to read them afresh.
"""

import contextlib

import jax


class TraceSwitch:
  """`value` is read at trace time; `set_to(v)` sets it to v within, and back on exit."""

  def __init__(self, value):
    self.value = value

  @contextlib.contextmanager
  def set_to(self, value):
    saved, self.value = self.value, value
    try:
      yield
    finally:
      self.value = saved


def jit_now(fn):
  """jax.jit of a new wrapper of fn: its first call traces fn under the switches as they are then,
  where jax.jit(fn) would reuse a trace of fn made under other settings."""
  return jax.jit(lambda *args: fn(*args))
