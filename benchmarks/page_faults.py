r"""Page faults of XLA's CPU temporaries with and without tools/keep_freed_memory.sh.

`python benchmarks/page_faults.py`: a jitted function with 48 MiB of XLA temporaries (12,288 pages
of 4 KiB) called 20 times after 2 warm-up calls, in a child process started plainly and one started
through the launcher; prints each call's minor page faults, sorted. Without the setting every call
faults its temporaries in again (more than 10,000 faults a call); with it most calls fault none
(a few early calls may, while the heap grows: benchmarks/PROFILE_NOTES.md, round 5). Figures
printed; nothing asserted (a measurement, not a test).
"""

import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
LAUNCHER = str(REPO / "tools" / "keep_freed_memory.sh")

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


def faults(launcher=()):
  """Sorted minor page faults of the 20 calls, in a fresh process (one CPU device)."""
  inherited = {k: v for k, v in os.environ.items()
               if k not in ("GLIBC_TUNABLES", "LD_PRELOAD") and not k.startswith("MALLOC_")}
  done = subprocess.run([*launcher, sys.executable, "-c", _PROGRAM], cwd=REPO, capture_output=True,
                        text=True, env={**inherited, "XLA_FLAGS": ""}, check=True)
  return json.loads(done.stdout.strip().splitlines()[-1])["faults"]


def main():
  for label, launcher in (("plain", ()), ("keep_freed_memory.sh", (LAUNCHER,))):
    found = faults(launcher)
    print(f"{label:22s} fewest {found[0]:6d}  median {found[10]:6d}  most {found[-1]:6d}  "
          f"all {found}")


if __name__ == "__main__":
  main()
