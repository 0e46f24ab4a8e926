"""Where a number came from: the command, the commit, the code version and the library versions."""

import datetime
import functools
import hashlib
import pathlib
import platform
import subprocess
import sys

import jax

from keynorm_jax.cpu.features import cpu_model

PACKAGE = pathlib.Path(__file__).resolve().parent.parent


@functools.cache
def code_version() -> str:
  """sha256 (first 12 hex) of every .py file of the package, in path order."""
  digest = hashlib.sha256()
  for path in sorted(PACKAGE.rglob("*.py")):
    digest.update(str(path.relative_to(PACKAGE)).encode())
    digest.update(path.read_bytes())
  return digest.hexdigest()[:12]


def _git(*args) -> str | None:
  try:
    out = subprocess.run(["git", *args], cwd=PACKAGE, capture_output=True, text=True, timeout=10)
  except (OSError, subprocess.TimeoutExpired):
    return None
  return out.stdout.strip() if out.returncode == 0 else None


@functools.cache
def _code_state() -> dict:
  """The commit and code version, read once per process: a record made by a long-running study
  names the code it ran, not code edited on disk since it started."""
  return {
      "commit": _git("rev-parse", "HEAD"),
      "dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "--", str(PACKAGE))),
      "code_version": code_version(),
  }


def commit() -> str | None:
  """The commit this process runs (None outside a git checkout)."""
  return _code_state()["commit"]


def provenance() -> dict:
  return {
      "command": " ".join(sys.argv),
      **_code_state(),
      "date": datetime.datetime.now().isoformat(timespec="seconds"),
      "jax": jax.__version__,
      "backend": jax.default_backend(),
      "device": jax.devices()[0].device_kind,
      "matmul_precision": str(jax.config.jax_default_matmul_precision),
      "machine": platform.platform(),
      "cpu": cpu_model(),
      "python": platform.python_version(),
  }
