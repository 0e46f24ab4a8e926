"""Where a number came from: the command, the commit, the code version and the library versions."""

import datetime
import hashlib
import pathlib
import platform
import subprocess
import sys

import jax

PACKAGE = pathlib.Path(__file__).resolve().parent.parent


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


def provenance() -> dict:
  return {
      "command": " ".join(sys.argv),
      "commit": _git("rev-parse", "HEAD"),
      "dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "--", str(PACKAGE))),
      "code_version": code_version(),
      "date": datetime.datetime.now().isoformat(timespec="seconds"),
      "jax": jax.__version__,
      "backend": jax.default_backend(),
      "machine": platform.platform(),
      "python": platform.python_version(),
  }
