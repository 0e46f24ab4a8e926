"""glibc's malloc set to keep the memory that XLA's CPU runtime frees, for its next call.

XLA's CPU runtime allocates each call's temporaries as one block (0.45 GiB for the `cpu` size's
training step) from a worker thread and frees it when the call ends. glibc serves a block that large
from a fresh mmap in the thread's arena and unmaps it on free, so every step faults in and zeroes
its 0.45 GiB again: 119,000 page faults and 0.17 s of system CPU time a step on the project's 2-core
CPU, about a fifth of the step (benchmarks/PROFILE_NOTES.md, round 4).

`keep_freed_memory()` sets malloc to one arena (the main one), no mmap, and a 2 GiB trim threshold:
the block then comes from the heap and the next step reuses it, with no faults. The setting must
come before any thread allocates, so the entry points that train (train.py, the reproduction, the
field study, the training benchmarks) call it before importing anything else. eval.py does not:
at 65,536 tokens a window took as long with it as without (56-61 s against 58 s here), and in one
of five runs with it the process's peak memory was 1.82 GiB instead of 1.31-1.41 (freed heap kept,
fragmented), where long evaluation's bound is its peak memory. Called late, it is refused
with a warning, because threads that already hold an arena keep it (for any process, the same can
be set from the shell with GLIBC_TUNABLES: README, "Speed on the CPU"). Off with
KEYNORM_MALLOC=default. Nothing else changes: no number, only where memory comes from.
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


def keep_freed_memory() -> bool:
  """Sets glibc's malloc as the module docstring says; True if it did. A no-op (False) off glibc,
  under KEYNORM_MALLOC=default, or after a module that starts threads has been imported (a
  warning says so)."""
  if os.environ.get("KEYNORM_MALLOC") == "default" or platform.libc_ver()[0] != "glibc":
    return False
  late = sorted(name for name in _THREADED if name in sys.modules)
  if late:
    warnings.warn(f"host_memory.keep_freed_memory() called after importing {', '.join(late)}: "
                  "malloc left as it is. Call it before any other import (see its module).")
    return False
  libc = ctypes.CDLL(None)
  return all(libc.mallopt(option, value) == 1
             for option, value in ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0),
                                   (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)))
