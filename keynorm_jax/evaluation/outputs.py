"""A set of result files written all or nothing: each to a temporary name beside it, then renamed.

A failure while the files are written (a full disk, say) removes the temporary files and leaves
the folder's previous files untouched. Once every file is written and synced, a journal
(`.writing`: each file's temporary name and SHA-256) is put in place, then the files are renamed
one by one, then the journal is removed: a process killed between two renames (it left
results.json of one evaluation beside results.csv, .md and .png of the one before, and their
`.partial` files) leaves the journal, and the next write into the folder finishes those renames
first (`recover`), so the folder holds the whole new set and no `.partial` file. A failure while
the files are renamed (rare) removes this set's files, new and previous alike, so that no mix of
two evaluations remains. Either way `OutputError` says in one line what was and was not written.
A hidden `.written` file lists the set in `sha256sum` format (`cd <folder> && sha256sum -c
.written` checks that the files are one set); the next set written into the folder removes the
files of the previous set it does not rewrite (e.g. an earlier evaluation's retrieval.csv and heat
maps), so that the folder holds one evaluation's files, never a mix. Files the set never wrote
are left alone. Readers check the set before they use it (result_sets.py).
"""

import hashlib
import json
import os
import pathlib

from keynorm_jax.errors import KeynormError
from keynorm_jax.storage import disk

PARTIAL = ".partial"
MANIFEST = ".written"
JOURNAL = ".writing"


class OutputError(KeynormError, RuntimeError):
  """Result files that could not be written; the message says which and what to do."""


def text_writer(text: str):
  """A write_files writer that writes `text`."""
  return lambda path: pathlib.Path(path).write_text(text)


def temp_path(path: pathlib.Path) -> pathlib.Path:
  return path.with_name(f".{path.name}.{os.getpid()}{PARTIAL}")


def alive(pid: int) -> bool:
  """Whether process `pid` exists (another user's counts)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def remove_stale_temps(folder: pathlib.Path) -> None:
  """Removes the temporary files that killed processes left in `folder`."""
  for path in folder.glob(f".*{PARTIAL}"):
    pid = path.name[:-len(PARTIAL)].rsplit(".", 1)[-1]
    if pid.isdigit() and not alive(int(pid)):
      path.unlink(missing_ok=True)


def sha256_of(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _sha256(path: pathlib.Path) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def _write_synced(path: pathlib.Path, text: str) -> None:
  """`path` replaced by `text`, synced, through a temporary name (no partial journal)."""
  temp = temp_path(path)
  with open(temp, "w") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.rename(temp, path)  # (replaces it, as os.replace)


def recover(folder) -> None:
  """Finishes the renames of a set whose writer was killed midway (its journal is still there,
  its process gone): each file not yet renamed is renamed from its temporary name if that holds
  the bytes listed in the journal. Then removes the temporary files of killed processes."""
  folder = pathlib.Path(folder)
  journal = folder / JOURNAL
  try:
    entry = json.loads(journal.read_text())
    pid, files = int(entry["pid"]), dict(entry["files"])
  except FileNotFoundError:
    entry = None
  except (OSError, ValueError, KeyError, TypeError):  # cut off before its rename: no set began
    entry, pid = None, None
    journal.unlink(missing_ok=True)
  if entry is not None and not alive(pid):
    for name, (temp, digest) in files.items():
      temp = folder / temp
      if temp.is_file() and _sha256(temp) == digest:
        os.replace(temp, folder / name)
    _replace_previous_set(folder, list(files))
    journal.unlink(missing_ok=True)
  remove_stale_temps(folder)


def _remove(paths) -> None:
  for path in paths:
    try:
      path.unlink(missing_ok=True)
    except OSError:
      pass


def _reason(error: OSError, fix: str) -> tuple[str, str]:
  """(what went wrong, what to do) for an OSError."""
  reason = error.strerror or str(error) or type(error).__name__
  what_to_do = f"free some space there, or {fix}" if disk.is_disk_full(error) else fix
  return reason, what_to_do[:1].upper() + what_to_do[1:]


def write_files(folder, writers: dict, *, fix: str) -> dict[str, pathlib.Path]:
  """Writes a set of files into `folder` all or nothing; returns their paths by name.

  writers: {file name: callable(path) that writes the file's content to `path`}; the path is a
    temporary name (a plot must name its format).
  fix: what the user can do otherwise, e.g. "pass another --output".
  An OSError becomes OutputError (its message names the files written and not written); any
  other error is raised as it is, once the temporary files are removed.
  """
  folder = pathlib.Path(folder)
  recover(folder)
  names = list(writers)
  temps = {name: temp_path(folder / name) for name in names}
  listed = ", ".join(names)
  current = names[0] if names else ""
  try:
    for current in names:
      writers[current](temps[current])
      with open(temps[current], "rb") as f:
        os.fsync(f.fileno())
  except BaseException as e:
    _remove(temps.values())
    if not isinstance(e, OSError):
      raise
    reason, what_to_do = _reason(e, fix)
    raise OutputError(f"Could not write {current} in {folder} ({reason}), so none of {listed} "
                      f"was written; the files there from before are untouched. "
                      f"{what_to_do}.") from None
  renamed = []
  journal = folder / JOURNAL
  try:
    _write_synced(journal, json.dumps({"pid": os.getpid(), "files": {
        name: [temps[name].name, _sha256(temps[name])] for name in names}}))
    for current in names:
      os.replace(temps[current], folder / current)
      renamed.append(current)
  except BaseException as e:
    _remove(temps.values())
    _remove(folder / name for name in names)  # new and previous alike: no mix of the two
    _remove([journal, temp_path(journal)])
    if not isinstance(e, OSError):
      raise
    reason, what_to_do = _reason(e, fix)
    raise OutputError(f"Could not put {current} in place in {folder} ({reason}) after "
                      f"{', '.join(renamed) or 'no other file'}; removed every file of the set "
                      f"({listed}), new and from before, so that none of them was written and no "
                      f"mix of old and new remains. {what_to_do}.") from None
  _replace_previous_set(folder, names)
  _remove([journal])
  return {name: folder / name for name in names}


def _replace_previous_set(folder: pathlib.Path, names) -> None:
  """Removes the files of the folder's previous set that this set did not rewrite, and lists this
  set in its place (best effort: a failure here leaves extra files, never a broken set)."""
  manifest = folder / MANIFEST
  try:  # "<sha256>  <name>" lines (older versions: "<name>")
    previous = [line.split("  ", 1)[-1] for line in manifest.read_text().split("\n")
                ] if manifest.exists() else []
  except (OSError, UnicodeDecodeError):
    previous = []
  kept = set(names)
  _remove(folder / name for name in previous
          if name and name not in kept and "/" not in name and not name.startswith("."))
  try:
    _write_synced(manifest, "".join(f"{_sha256(folder / name)}  {name}\n" for name in names))
  except OSError:
    pass
