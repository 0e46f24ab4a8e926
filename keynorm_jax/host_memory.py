"""glibc's malloc set to keep the memory that XLA's CPU runtime frees, for its next call.

XLA's CPU runtime allocates each call's temporaries as one block (0.45 GiB for the `cpu` size's
training step) from a worker thread and frees it when the call ends. glibc serves a block that large
from a fresh mmap in the thread's arena and unmaps it on free, so every step faults in and zeroes
its 0.45 GiB again: 119,000 page faults and 0.17 s of system CPU time a step on the project's 2-core
CPU, about a fifth of the step (benchmarks/PROFILE_NOTES.md, round 4).

`keep_freed_memory()` sets malloc to one arena (the main one), no mmap, and a 2 GiB trim threshold:
the block then comes from the heap and later steps reuse it, with no faults. Not from the first
step: on a step that faults, the heap grows by a fresh block (`perf trace`: an XLA worker thread's
brk, +48 MiB on each faulting call of tests/test_host_memory.py's program), so the hole the previous
block left did not fit. A likely cause, not verified: the block is allocated aligned, which asks
glibc for its size plus the alignment, and the hole's neighbours have since been taken by small
allocations. The faulting calls thin out (holes large enough form, we infer, as freed neighbours
merge): in 40 to 150 training steps of the `cpu` GAU, 3 or 4 steps faulted, the last by step 33,
and the process then held 2.2-2.6 GiB resident against 1.31 GiB with glibc's default (2.63 GiB,
unchanged from step 50 to 150, in the longest run): memory traded for the faults (PROFILE_NOTES,
round 5). The setting must come before any thread allocates, so the entry points that train
(train.py, the reproduction, the field study, the training benchmarks) call it before importing
anything else. eval.py does not: at 65,536 tokens a window took as long with it as without
(56-61 s against 58 s here), and in one of five runs with it the process's peak memory was
1.82 GiB instead of 1.31-1.41 (freed heap kept, fragmented), where long evaluation's bound is its
peak memory (the reproduction and the study also evaluate in-process, at up to 16,384 tokens: not
measured apart). Called late, it is refused with a warning, because threads that already hold an
arena keep it (for any process, the same can be set from the shell with GLIBC_TUNABLES: README,
"Speed on the CPU"). Off with KEYNORM_MALLOC=default. No number changes: only where memory comes
from and how much stays held.
"""

import ctypes
import os
import platform
import sys
import warnings

_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8   # glibc's malloc.h
_TRIM_THRESHOLD = 2**31 - 1                                 # the largest mallopt takes (an int)
# Modules that start threads (and so arenas) when imported or first used.
_THREADED = ("jax", "jaxlib", "numpy", "torch", "tensorflow", "grain")
_ACCELERATOR_DEVICES = ("/dev/nvidia0", "/dev/accel0", "/dev/vfio/0")   # a GPU, a TPU


def keep_freed_memory() -> bool:
  """Sets glibc's malloc as the module docstring says; True if it did. A no-op (False) off glibc,
  under KEYNORM_MALLOC=default, on a host with an accelerator device (its step's temporaries are
  not in host memory; not measured there), or once the process has a second thread or a module
  that starts threads has been imported (a warning says so)."""
  if os.environ.get("KEYNORM_MALLOC") == "default" or platform.libc_ver()[0] != "glibc":
    return False
  if any(os.path.exists(device) for device in _ACCELERATOR_DEVICES) and (
      os.environ.get("JAX_PLATFORMS", "") != "cpu"):
    return False
  late = sorted(name for name in _THREADED if name in sys.modules)
  threads = _thread_count()
  if late or threads > 1:
    reason = f"after importing {', '.join(late)}" if late else f"with {threads} threads running"
    warnings.warn(f"host_memory.keep_freed_memory() called {reason}: malloc left as it is. Call "
                  "it before any other import (see its module).", stacklevel=2)
    return False
  libc = ctypes.CDLL(None)
  done = [libc.mallopt(option, value) == 1
          for option, value in ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0),
                                (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))]
  return all(done)


def _thread_count() -> int:
  """Threads of this process (Linux's /proc; 1 where it cannot tell)."""
  try:
    return len(os.listdir("/proc/self/task"))
  except OSError:
    return 1
