"""keynorm_jax.host_memory: glibc's malloc set, first thing in a process, to keep what XLA's CPU
runtime frees, so a call's temporaries are not mapped and faulted in again on every call."""

import json
import os
import pathlib
import platform
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent

# A jitted function with 48 MiB of XLA temporaries (sin(x), the matmul's operand; blocks over 32 MiB
# are the ones glibc maps afresh), called 20 times after 2 warm-up calls; prints what
# keep_freed_memory returned and each call's minor page faults, sorted: the kernel faults in a few
# pages of its own now and then, and with the setting some calls, most of them early, still fault
# while the heap grows (benchmarks/PROFILE_NOTES.md, round 5: 2 to 6 of 60 calls in four runs).
_PROGRAM = """
import ctypes, json, os, resource, sys, warnings
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)   # PR_SET_THP_DISABLE: 4 KiB pages, whatever the host's THP
if os.environ.get("FIRST"):
  from keynorm_jax import host_memory
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    kept = host_memory.keep_freed_memory()
import jax, jax.numpy as jnp, numpy as np
if os.environ.get("LATE"):
  from keynorm_jax import host_memory
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    kept = host_memory.keep_freed_memory()
x = jnp.asarray(np.random.default_rng(0).normal(size=(12288, 1024)).astype(np.float32))
call = jax.jit(lambda a: jnp.sum(jnp.sin(a) @ a[:1024, :8])).lower(x).compile()
for _ in range(2):
  call(x).block_until_ready()
faults = []
for _ in range(20):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  call(x).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
faults = sorted(faults)
print(json.dumps({"kept": kept if "kept" in dir() else None, "faults": faults,
                  "warnings": [str(w.message) for w in caught] if "caught" in dir() else []}))
"""


def _run(**env):
  # One CPU device, as train.py here (not the tests' 8); no malloc settings from outside.
  inherited = {k: v for k, v in os.environ.items()
               if k not in ("GLIBC_TUNABLES", "LD_PRELOAD", "KEYNORM_MALLOC")
               and not k.startswith("MALLOC_")}
  done = subprocess.run([sys.executable, "-c", _PROGRAM], cwd=REPO, capture_output=True, text=True,
                        env={**inherited, "PYTHONPATH": str(REPO), "XLA_FLAGS": "", **env},
                        check=True)
  return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_first_thing_in_a_process_it_keeps_freed_memory():
  # 48 MiB of temporaries is 12,288 pages: without the setting they are faulted in on every call.
  plain = _run()
  assert plain["faults"][0] > 10_000, plain   # the fewest of the 20 calls
  kept = _run(FIRST="1")
  assert kept["kept"] is True and not kept["warnings"], kept
  # The fewest and the median call: most calls fault none of the pages.
  assert kept["faults"][0] < 1_000 and kept["faults"][10] < 1_000, (plain, kept)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_too_late_or_turned_off_it_changes_nothing_and_says_why():
  late = _run(LATE="1")
  assert late["kept"] is False
  assert any("after importing" in w and "jax" in w for w in late["warnings"]), late
  assert late["faults"][0] > 10_000, late
  off = _run(FIRST="1", KEYNORM_MALLOC="default")
  assert off["kept"] is False and off["faults"][0] > 10_000, off
