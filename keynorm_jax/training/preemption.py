"""Preemption: SIGTERM or SIGINT asks a run to stop at the next safe point, saving what it has.

On clusters and TPU VMs a preemption is a SIGTERM with a grace period. The first SIGTERM or SIGINT
(Ctrl-C) only sets a flag; the work looks at it at safe points and raises `Preempted`, which the
CLI turns into one line and exit code `PREEMPTED_EXIT_CODE` (75, EX_TEMPFAIL: "try again": run
the same command to resume). The training loop looks after every step: it writes a checkpoint
at that step first. Before the first step (imports, data, restore) there is no new state to
save: the run stops before training, saying so, also with 75. The first signal also restores
both signals' default actions, so a second one ends the process at once, by the kernel, even
while Python waits in native code (an XLA compile, a device transfer).

The CLIs call `install()` as the first thing they do, before their imports, so a signal at any
moment is caught: Python's own Ctrl-C (a KeyboardInterrupt raised wherever the interpreter is)
printed a traceback during the imports, and was lost inside a garbage-collection callback of
XLA's ("Exception ignored in: <function _xla_gc_callback ...>"), letting the run go on. `check()`
raises `Preempted` at the safe points outside the training loop (between the stages of an
evaluation, say); `Watch` serves the loop.

With several processes (multi-host) the processes must save at the same step: JAX's preemption
service (started by jax.distributed.initialize) catches SIGTERM on any host, and
`multihost_utils.reached_preemption_sync_point` turns true on every process at one agreed step; no
Python handler is installed there (`uninstall()` before the service starts), so the service's
own stays in place (Ctrl-C then stops a process without saving). With the service turned off
(jax_enable_preemption_service) a multi-host run does not save on a signal.

This module imports nothing heavy (JAX only when a Watch opens), so that `install()` runs first.
"""

import os
import signal
import threading

from keynorm_jax.errors import KeynormError

PREEMPTED_EXIT_CODE = 75  # sysexits.h EX_TEMPFAIL
SIGNALS = (signal.SIGTERM, signal.SIGINT)
_STOPPING = "stopping at the next safe point"
_SAVING = "saving a checkpoint at the end of this step, then stopping"

_received = None      # name of the first signal since the handlers were installed
_installed = False    # install() was called: the handlers stay for the life of the process
_doing = _STOPPING    # what the process does on the first signal (said when it arrives)


class Preempted(KeynormError):
  """The run stopped on a signal (after saving a checkpoint if it had new state); running it again
  resumes there."""
  exit_code = PREEMPTED_EXIT_CODE


def _handle(signum, frame):
  global _received
  del frame
  name = signal.Signals(signum).name
  if _received is not None:  # a second signal that arrived before the defaults were set
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)
    return
  _received = name
  for sig in SIGNALS:  # the next one is the kernel's to act on
    signal.signal(sig, signal.SIG_DFL)
  # os.write, not print: the signal may land while the loop or tqdm is writing to stderr.
  os.write(2, f"\n{name} received: {_doing} (send it again to stop at once, without "
              f"saving).\n".encode())


def _main_thread() -> bool:
  return threading.current_thread() is threading.main_thread()


def install() -> None:
  """From now on, for the life of the process, SIGTERM and SIGINT request a stop (see above).
  Call it first in a CLI, before the heavy imports. Nothing is installed outside the main thread,
  where Python cannot install handlers."""
  global _installed
  if _main_thread():
    for sig in SIGNALS:
      signal.signal(sig, _handle)
    _installed = True


def uninstall() -> None:
  """Gives both signals back their default actions (multi-host: JAX's preemption service takes
  SIGTERM over). A signal already received still stops the run at its next safe point."""
  global _installed
  if _installed and _main_thread():
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _installed = False


def received() -> str | None:
  """The name of the signal that requested a stop, or None."""
  return _received


def check(what: str) -> None:
  """Raises Preempted if a signal requested a stop. what: the sentence that follows "Stopped by
  <signal> ", saying what is kept and how to go on, e.g. "before training: nothing to save.
  Run the same command again to start."."""
  if _received is not None:
    raise Preempted(f"Stopped by {_received} {what}")


class Watch:
  """Context manager around a training loop: while open, SIGTERM and SIGINT request a stop; once
  `begin_steps()` is called, said as "saving a checkpoint at the end of this step".

  Outside the main thread (where Python cannot install handlers) nothing is installed and only
  the multi-host sync point can request a stop. A signal received before it opened (install())
  counts: the loop stops after its first step.
  """

  _handle = staticmethod(_handle)

  def __init__(self):
    self._previous = {}
    self._synced = False      # multi-host: JAX's preemption service answers

  @property
  def received(self) -> str | None:
    return _received

  def __enter__(self):
    global _doing
    import jax  # pylint: disable=g-import-not-at-top  # (not at import: install() runs first)
    if jax.process_count() > 1:
      self._synced = bool(jax.config.jax_enable_preemption_service)
      if not self._synced:
        print("Note: jax_enable_preemption_service is off, so a preemption notice will not save "
              "a checkpoint.", flush=True)
    elif _main_thread():
      if _received is None:  # after a first signal, the defaults stay (the next one kills)
        for sig in SIGNALS:
          self._previous[sig] = signal.signal(sig, _handle)
    return self

  def __exit__(self, *exc):
    global _doing, _received
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous.clear()
    _doing = _STOPPING
    if not _installed:  # a Watch of its own (a test, a library call): the next one starts afresh
      _received = None
    return False

  def begin_steps(self) -> None:
    """From now on a signal saves a checkpoint at the end of the step in flight (said so)."""
    global _doing
    _doing = _SAVING

  def stop_at(self, step: int) -> bool:
    """Whether to save at `step` and stop (call once after every step, with its number)."""
    if self._synced:
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
      return multihost_utils.reached_preemption_sync_point(step)
    return _received is not None
