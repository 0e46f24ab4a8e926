"""Preemption: SIGTERM or SIGINT asks a run to save at the end of the current step and stop.

On clusters and TPU VMs a preemption is a SIGTERM with a grace period. The first SIGTERM or SIGINT
(Ctrl-C) sets a flag; the training loop sees it after the step in flight, writes a checkpoint at
that step and raises `Preempted`, which the CLI turns into one line and exit code
`PREEMPTED_EXIT_CODE` (75, EX_TEMPFAIL: "try again": run the same command to resume). The first
signal also restores both signals' default actions, so a second one ends the process at once,
by the kernel, even while Python waits in native code (an XLA compile, a device transfer).

With several processes (multi-host) the processes must save at the same step: JAX's preemption
service (started by jax.distributed.initialize) catches SIGTERM on any host, and
`multihost_utils.reached_preemption_sync_point` turns true on every process at one agreed step; no
Python handler is installed there, so the service's own stays in place (Ctrl-C then stops a
process without saving). With the service turned off (jax_enable_preemption_service) a multi-host
run does not save on a signal.
"""

import os
import signal
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
    self._synced = False      # multi-host: JAX's preemption service answers

  def __enter__(self):
    if jax.process_count() > 1:
      self._synced = bool(jax.config.jax_enable_preemption_service)
      if not self._synced:
        print("Note: jax_enable_preemption_service is off, so a preemption notice will not save "
              "a checkpoint.", flush=True)
    elif threading.current_thread() is threading.main_thread():
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
    if self.received is not None:  # a second signal that arrived before the defaults were set
      signal.signal(signum, signal.SIG_DFL)
      signal.raise_signal(signum)
      return
    self.received = name
    for sig in SIGNALS:  # the next one is the kernel's to act on
      signal.signal(sig, signal.SIG_DFL)
    # os.write, not print: the signal may land while the loop or tqdm is writing to stderr.
    os.write(2, f"\n{name} received: saving a checkpoint at the end of this step, then stopping "
                f"(send it again to stop at once, without saving).\n".encode())

  def stop_at(self, step: int) -> bool:
    """Whether to save at `step` and stop (call once after every step, with its number)."""
    if self._synced:
      return multihost_utils.reached_preemption_sync_point(step)
    return self.received is not None
