"""Preemption: SIGTERM or SIGINT asks a run to save at the end of the current step and stop.

On clusters and TPU VMs a preemption is a SIGTERM with a grace period. The first SIGTERM or SIGINT
(Ctrl-C) sets a flag; the training loop sees it after the step in flight, writes a checkpoint at
that step and raises `Preempted`, which the CLI turns into one line and exit code
`PREEMPTED_EXIT_CODE` (75, EX_TEMPFAIL: "try again": run the same command to resume). A second
signal ends the process at once, as the signal's default action would.

With several processes (multi-host) the processes must save at the same step: JAX's preemption
service (started by jax.distributed.initialize) catches SIGTERM on any host, and
`multihost_utils.reached_preemption_sync_point` turns true on every process at one agreed step; no
Python handler is installed there, so the service's own stays in place.
"""

import signal
import sys
import threading

import jax
from jax.experimental import multihost_utils

from keynorm_jax.errors import KeynormError

PREEMPTED_EXIT_CODE = 75  # sysexits.h EX_TEMPFAIL
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(KeynormError):
  """The run stopped on a signal after saving a checkpoint; running it again resumes there."""
  exit_code = PREEMPTED_EXIT_CODE


class Watch:
  """Context manager: while open, SIGTERM and SIGINT request a stop (see the module docstring).

  Outside the main thread (where Python cannot install handlers) nothing is installed and only
  the multi-host sync point can request a stop.
  """

  def __init__(self):
    self.received = None      # name of the first signal, once one arrived
    self._previous = {}

  def __enter__(self):
    if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
      for sig in SIGNALS:
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous.clear()
    return False

  def _handle(self, signum, frame):
    del frame
    name = signal.Signals(signum).name
    if self.received is not None:  # the second signal: stop now, as its default action does
      print(f"{name} again: stopping at once, without saving.", file=sys.stderr, flush=True)
      signal.signal(signum, signal.SIG_DFL)
      signal.raise_signal(signum)
      return
    self.received = name
    print(f"{name} received: saving a checkpoint at the end of this step, then stopping (send it "
          f"again to stop at once).", file=sys.stderr, flush=True)

  def stop_at(self, step: int) -> bool:
    """Whether to save at `step` and stop (call once after every step, with its number)."""
    if jax.process_count() > 1:
      return multihost_utils.reached_preemption_sync_point(step)
    return self.received is not None
