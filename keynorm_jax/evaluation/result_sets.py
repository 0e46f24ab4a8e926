"""Reading a set of result files that outputs.py wrote: checked as one set before it is used.

A writer puts a journal (`.writing`) in place before its renames and lists the finished set in
`.written` (`<sha256>  <name>` lines). A reader (the study's page, eval's own summary) first looks
at the journal: a writer still alive is waited for (refused: read it once it has finished); a
writer killed between its renames left the folder with files of two sets, and the reader finishes
those renames (outputs.recover) before it reads, or refuses where it cannot (a read-only folder).
Then every file it reads must hold the bytes `.written` lists for it, hashed as read: a file of
another set (changed by hand, copied in, or renamed under the reader by a new writer) is refused,
so a reader never combines two sets. A folder without `.written` (written before it existed, e.g.
a committed copy of a set) is read as it is.
"""

import json
import pathlib

from keynorm_jax.errors import KeynormError
from keynorm_jax.evaluation import outputs


class ResultSetError(KeynormError, ValueError):
  """Result files that are not one whole set; the message says why and what to do."""


def _writer(folder: pathlib.Path) -> int | None:
  """The pid of the process whose journal is in `folder`, or None (no journal, or a cut-off one,
  which recover removes)."""
  try:
    return int(json.loads((folder / outputs.JOURNAL).read_text())["pid"])
  except FileNotFoundError:
    return None
  except (OSError, ValueError, KeyError, TypeError):
    return None


def listed(folder) -> dict[str, str] | None:
  """{name: SHA-256} of the set in `folder`, once its journal is dealt with (see above); None where
  the folder has no `.written`. ResultSetError where a writer is at work or its cut-off set cannot
  be finished."""
  folder = pathlib.Path(folder)
  if (folder / outputs.JOURNAL).exists():
    pid = _writer(folder)
    if pid is not None and outputs.alive(pid):
      raise ResultSetError(f"{folder} is being written by process {pid} (its journal "
                           f"{outputs.JOURNAL} is there); read it once that evaluation has "
                           f"finished.")
    try:
      outputs.recover(folder)
    except OSError as e:
      raise ResultSetError(
          f"{folder} holds a set whose writing was cut off between its renames (its journal "
          f"{outputs.JOURNAL} is there), and it cannot be finished here "
          f"({e.strerror or type(e).__name__}); make the folder writable so that the next reader "
          f"finishes it, or write the results again.") from None
  manifest = folder / outputs.MANIFEST
  if not manifest.exists():
    return None
  found = {}
  for line in manifest.read_text().splitlines():
    digest, _, name = line.rpartition("  ")
    if name:
      found[name] = digest
  return found


def read_bytes(folder, name: str) -> bytes:
  """The bytes of `name` in the result set in `folder`, checked as one set (module docstring)."""
  folder = pathlib.Path(folder)
  digests = listed(folder)
  path = folder / name
  if not path.is_file():
    raise ResultSetError(f"{folder} has no {name}; write the results there first.")
  data = path.read_bytes()
  if digests is None:
    return data
  if name not in digests:
    raise ResultSetError(f"{path} is not of the set {folder / outputs.MANIFEST} lists "
                         f"({', '.join(digests)}): it is left from another evaluation; write the "
                         f"results again.")
  if digests[name] and outputs.sha256_of(data) != digests[name]:
    raise ResultSetError(f"{path} is not the file its set lists in {folder / outputs.MANIFEST} "
                         f"(another SHA-256: changed since, or of another evaluation), so it "
                         f"would mix two sets; write the results again (`sha256sum -c "
                         f"{outputs.MANIFEST}` there shows which files differ).")
  return data


def read_json(folder, name: str = "results.json"):
  """read_bytes(folder, name) parsed as JSON."""
  return json.loads(read_bytes(folder, name))


def check_set(folder) -> list[str]:
  """Every file of the set in `folder` checked as read_bytes checks one; returns their names
  (those on disk where the folder has no `.written`)."""
  folder = pathlib.Path(folder)
  digests = listed(folder)
  names = list(digests) if digests is not None else sorted(
      p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
  for name in names:
    read_bytes(folder, name)
  return names
