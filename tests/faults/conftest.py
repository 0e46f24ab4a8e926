"""Fixtures of the fault tests (tests/conftest.py has the shared ones)."""

import signal

import pytest

from keynorm_jax.training import preemption


@pytest.fixture
def installed():
  """preemption.install() as the CLIs call it first, undone afterwards (handlers and state)."""
  handlers = {s: signal.getsignal(s) for s in preemption.SIGNALS}
  preemption.install()
  yield
  for s, handler in handlers.items():
    signal.signal(s, handler)
  preemption._installed, preemption._received = False, None  # pylint: disable=protected-access
