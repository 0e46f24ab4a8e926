"""SHA-256 manifests of finished checkpoints, to detect corrupt bytes on restore.

`<step dir>/_SHA256SUMS` lists every file of the step directory in `sha256sum` format, so it can
also be checked by hand: `cd <workdir>/checkpoints/<step> && sha256sum -c _SHA256SUMS`. It is
written (atomically: a temporary file renamed) over the finished step before the step takes its
final name (checkpoint_writer.py), and checked before the step is restored. A step whose manifest is missing, empty or unreadable is unverified
(`Unverified`): readers skip it and training sets it aside unless the user trusts it explicitly
(--trust_unverified_checkpoints), and no manifest is ever written over bytes that were not verified.
"""

import hashlib
import pathlib

from keynorm_jax.storage.atomic import write_atomically

MANIFEST = "_SHA256SUMS"


class ChecksumMismatch(ValueError):
  """A file of a checkpoint differs from (or is missing against) its manifest."""

  def __init__(self, path: pathlib.Path, problem: str):
    super().__init__(f"{path} {problem}")
    self.path = path


class Unverified(ValueError):
  """A checkpoint whose bytes cannot be checked: its manifest is missing, empty or unreadable."""

  def __init__(self, step_dir: pathlib.Path, problem: str):
    super().__init__(f"{step_dir} cannot be verified: {problem}")
    self.path = step_dir
    self.problem = problem


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
  return write_atomically(step_dir / MANIFEST, lines)


def _listing(step_dir: pathlib.Path) -> dict:
  """{relative name: sha256} of the step's manifest; Unverified if it cannot serve as one."""
  path = step_dir / MANIFEST
  try:
    text = path.read_bytes().decode("utf-8")
  except FileNotFoundError:
    raise Unverified(step_dir, f"it has no checksum manifest ({MANIFEST})") from None
  except (OSError, UnicodeDecodeError) as e:
    raise Unverified(step_dir, f"its checksum manifest is unreadable ({e})") from None
  listing = {}
  for line in text.splitlines():
    expected, sep, name = line.partition("  ")
    if not sep or len(expected) != 64 or not name:
      raise Unverified(step_dir, f"its checksum manifest has a malformed line ({line[:80]!r})")
    listing[name] = expected
  if not listing:
    raise Unverified(step_dir, "its checksum manifest is empty")
  return listing


def verify(step_dir) -> None:
  """Checks every file of step_dir against its manifest: Unverified when the manifest is missing,
  empty or unreadable; ChecksumMismatch naming the first file that differs, is missing, or is
  not listed."""
  step_dir = pathlib.Path(step_dir)
  listing = _listing(step_dir)
  for name, expected in listing.items():
    path = step_dir / name
    if not path.is_file():
      raise ChecksumMismatch(path, "is missing (listed in its checksum manifest)")
    if _sha256(path) != expected:
      raise ChecksumMismatch(path, "does not match its checksum (corrupt bytes)")
  for path in _files(step_dir):
    if path.relative_to(step_dir).as_posix() not in listing:
      raise ChecksumMismatch(path, "is not listed in its checksum manifest")
