"""tools/keep_freed_memory.sh: glibc's malloc set from the launch environment (the page faults it
saves are measured by benchmarks/page_faults.py), and no library module touching the allocator."""

import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
LAUNCHER = str(REPO / "tools" / "keep_freed_memory.sh")
_SHOW = "import json, os; print(json.dumps(os.environ.get('GLIBC_TUNABLES')))"


def _tunables(**env):
  inherited = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
  done = subprocess.run([LAUNCHER, sys.executable, "-c", _SHOW], capture_output=True, text=True,
                        env={**inherited, **env}, check=True)
  return json.loads(done.stdout)


def test_the_launcher_sets_the_three_settings():
  assert _tunables() == ("glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
                         "glibc.malloc.trim_threshold=2147483647")


def test_the_launcher_keeps_the_callers_own_tunables_last():
  own = "glibc.malloc.tcache_count=0"
  seen = _tunables(GLIBC_TUNABLES=own)
  assert seen.startswith("glibc.malloc.arena_max=1:") and seen.endswith(":" + own), seen


def test_the_launcher_passes_the_exit_code_on():
  assert subprocess.run([LAUNCHER, sys.executable, "-c", "raise SystemExit(7)"],
                        check=False).returncode == 7


def test_no_library_module_changes_the_allocator():
  """The setting belongs to the launch environment: no import of the package touches malloc."""
  hits = [str(path.relative_to(REPO)) for path in (REPO / "keynorm_jax").rglob("*.py")
          if "mallopt" in path.read_text() or "GLIBC_TUNABLES" in path.read_text()]
  assert not hits, hits
