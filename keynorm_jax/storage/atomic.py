"""A file replaced all at once: written to `<name>.partial`, synced, then renamed over the file."""

import os
import pathlib


def write_atomically(path, text: str) -> pathlib.Path:
  """Replaces `path` with `text`: a kill at any moment leaves the old file or the new, never a
  mix (a stale `<name>.partial` at most)."""
  path = pathlib.Path(path)
  partial = path.with_name(f"{path.name}.partial")
  with partial.open("w") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(partial, path)
  return path
