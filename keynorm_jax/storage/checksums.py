"""SHA-256 manifests of finished checkpoints, to detect corrupt bytes on restore.

`<step dir>/_SHA256SUMS` lists every file of the step directory in `sha256sum` format, so it can
also be checked by hand: `cd <workdir>/checkpoints/<step> && sha256sum -c _SHA256SUMS`. It is
written (atomically: a temporary file renamed) once Orbax has finalized the step, and checked
before the step is restored. A step without one (saved by an older version, or the run was killed
in the moment between finalizing a checkpoint and listing it) is restored unverified.
"""

import hashlib
import os
import pathlib

MANIFEST = "_SHA256SUMS"


class ChecksumMismatch(ValueError):
  """A file of a checkpoint differs from (or is missing against) its manifest."""

  def __init__(self, path: pathlib.Path, problem: str):
    super().__init__(f"{path} {problem}")
    self.path = path


def _sha256(path: pathlib.Path) -> str:
  digest = hashlib.sha256()
  with path.open("rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def _files(step_dir: pathlib.Path):
  for path in sorted(step_dir.rglob("*")):
    if path.is_file() and not path.name.startswith(MANIFEST):
      yield path


def write_manifest(step_dir) -> pathlib.Path:
  """Lists the sha256 of every file under step_dir in step_dir/_SHA256SUMS."""
  step_dir = pathlib.Path(step_dir)
  lines = "".join(f"{_sha256(p)}  {p.relative_to(step_dir).as_posix()}\n"
                  for p in _files(step_dir))
  target = step_dir / MANIFEST
  partial = step_dir / f"{MANIFEST}.partial"
  with partial.open("w") as f:
    f.write(lines)
    f.flush()
    os.fsync(f.fileno())
  os.replace(partial, target)
  return target


def has_manifest(step_dir) -> bool:
  return (pathlib.Path(step_dir) / MANIFEST).is_file()


def verify(step_dir) -> bool:
  """True if step_dir matches its manifest, False if it has none; ChecksumMismatch naming the
  first file that differs or is missing otherwise."""
  step_dir = pathlib.Path(step_dir)
  try:
    listing = (step_dir / MANIFEST).read_text()
  except FileNotFoundError:
    return False
  for line in listing.splitlines():
    expected, _, name = line.partition("  ")
    path = step_dir / name
    if not path.is_file():
      raise ChecksumMismatch(path, "is missing (listed in its checksum manifest)")
    if _sha256(path) != expected:
      raise ChecksumMismatch(path, "does not match its checksum (corrupt bytes)")
  return True
