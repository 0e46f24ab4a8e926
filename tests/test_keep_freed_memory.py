"""tools/keep_freed_memory.sh: glibc's malloc set from the launch environment to keep what XLA's CPU
runtime frees, so a call's temporaries are not mapped and faulted in again on every call."""

import json
import os
import pathlib
import platform
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
LAUNCHER = (str(REPO / "tools" / "keep_freed_memory.sh"),)

# A jitted function with 48 MiB of XLA temporaries (sin(x), the matmul's operand; blocks over 32 MiB
# are the ones glibc maps afresh), called 20 times after 2 warm-up calls; prints what
# each call's minor page faults, sorted: the kernel faults in a few pages of its own now and then,
# and with the setting some calls, most of them early, still fault while the heap grows
# (benchmarks/PROFILE_NOTES.md, round 5: 2 to 6 of 60 calls in four runs).
_PROGRAM = """
import ctypes, json, os, resource
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)   # PR_SET_THP_DISABLE: 4 KiB pages, whatever the host's THP
import jax, jax.numpy as jnp, numpy as np
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
print(json.dumps({"faults": faults, "tunables": os.environ.get("GLIBC_TUNABLES")}))
"""


def _run(launcher=(), **env):
  # One CPU device, as train.py here (not the tests' 8); no malloc settings from outside.
  inherited = {k: v for k, v in os.environ.items()
               if k not in ("GLIBC_TUNABLES", "LD_PRELOAD")
               and not k.startswith("MALLOC_")}
  done = subprocess.run([*launcher, sys.executable, "-c", _PROGRAM], cwd=REPO, capture_output=True,
                        text=True,
                        env={**inherited, "PYTHONPATH": str(REPO), "XLA_FLAGS": "", **env},
                        check=True)
  return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_the_launcher_keeps_freed_memory():
  # 48 MiB of temporaries is 12,288 pages: without the setting they are faulted in on every call.
  plain = _run()
  assert plain["faults"][0] > 10_000, plain   # the fewest of the 20 calls
  kept = _run(LAUNCHER)
  # The fewest and the median call: most calls fault none of the pages.
  assert kept["faults"][0] < 1_000 and kept["faults"][10] < 1_000, (plain, kept)


def test_the_launcher_keeps_the_callers_own_tunables_last():
  own = "glibc.malloc.tcache_count=0"
  seen = _run(LAUNCHER, GLIBC_TUNABLES=own)["tunables"]
  assert seen.startswith("glibc.malloc.arena_max=1:") and seen.endswith(":" + own), seen


def test_no_library_module_changes_the_allocator():
  """The setting belongs to the launch environment: no import of the package touches malloc."""
  hits = [str(path.relative_to(REPO)) for path in (REPO / "keynorm_jax").rglob("*.py")
          if "mallopt" in path.read_text() or "GLIBC_TUNABLES" in path.read_text()]
  assert not hits, hits
