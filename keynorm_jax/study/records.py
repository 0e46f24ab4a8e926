"""Finished runs' results, one small JSON file each, kept in the repository under results/<study>/.

A record holds the run's config, seed, training summary, evaluation records, diagnostics and
provenance. Files are written atomically (a temporary file renamed), so a kill never leaves half a
record, and the study skips every run whose record exists for the same plan.
"""

import json
import os
import pathlib
import tempfile

from keynorm_jax.evaluation.result_sets import read_json

RESULTS_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent / "results"


def reproduction_record(folder=RESULTS_ROOT / "cpu"):
  """The reproduction's results (results/cpu/results.json), whose seed variants Table 1 shows
  beside the field's, or None; checked as one set first (evaluation/result_sets.py: a write cut
  off between its renames is finished, a set being written or files of two sets refused)."""
  return read_json(folder) if (pathlib.Path(folder) / "results.json").is_file() else None


class RecordStore:
  """The records of one study in <root>/<study>/<run key>.json."""

  def __init__(self, study: str, root=RESULTS_ROOT):
    self.directory = pathlib.Path(root) / study

  def path(self, key: str) -> pathlib.Path:
    return self.directory / f"{key}.json"

  def find(self, key: str, plan_key: str) -> dict | None:
    """The record of `key` if it exists and was made with the plan `plan_key`."""
    path = self.path(key)
    if not path.exists():
      return None
    record = json.loads(path.read_text())
    return record if record.get("plan_key") == plan_key else None

  def save(self, key: str, record: dict) -> pathlib.Path:
    self.directory.mkdir(parents=True, exist_ok=True)
    path = self.path(key)
    with tempfile.NamedTemporaryFile("w", dir=self.directory, suffix=".tmp", delete=False) as f:
      json.dump(record, f, indent=None, separators=(",", ":"))
      f.flush()
      os.fsync(f.fileno())
    os.chmod(f.name, 0o644)
    os.replace(f.name, path)
    return path

  def all(self) -> list[dict]:
    if not self.directory.is_dir():
      return []
    return [json.loads(p.read_text()) for p in sorted(self.directory.glob("*.json"))]
