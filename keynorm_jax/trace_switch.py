"""A setting read while a function is traced (a fast path on or off, a block count), and the
context manager that changes it for the functions traced within: how tests and benchmarks trace
the reference path that a fast path replaces."""

import contextlib


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
