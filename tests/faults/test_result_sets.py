"""Readers of a result set check it is one set before they use it: a writer killed between its
renames left results.json of the new set beside results.csv and .md of the old one, and nothing
that read the folder looked at the journal; now a reader finishes those renames first, or refuses
in one line, and never combines two sets."""

import json
import os
import subprocess
import sys

import pytest

from keynorm_jax.evaluation import outputs, result_sets
from keynorm_jax.study.records import reproduction_record
from faults.helpers import killed_mid_swap


def test_a_reader_started_after_a_kill_between_renames_finishes_the_set_first(tmp_path):
  killed_mid_swap(tmp_path)
  assert result_sets.read_bytes(tmp_path, "results.csv") == b"new results.csv"   # not the old
  assert result_sets.check_set(tmp_path) == ["results.json", "results.csv", "results.md"]
  assert not (tmp_path / outputs.JOURNAL).exists()
  assert not list(tmp_path.glob(f".*{outputs.PARTIAL}"))


def test_the_study_reads_the_reproduction_through_the_check(tmp_path):
  """The study's page (reproduction_record) after a kill between the renames of results/cpu/: the
  new set, finished, never the new results.json read beside the old files."""
  killed_mid_swap(tmp_path, as_json=True)
  assert reproduction_record(tmp_path) == "new results.json"
  assert (tmp_path / "results.md").read_text() == '"new results.md"'
  assert reproduction_record(tmp_path / "none") is None


def test_a_set_still_being_written_is_refused(tmp_path):
  killed_mid_swap(tmp_path)
  writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    journal = json.loads((tmp_path / outputs.JOURNAL).read_text())
    (tmp_path / outputs.JOURNAL).write_text(json.dumps({**journal, "pid": writer.pid}))
    with pytest.raises(result_sets.ResultSetError) as refused:
      result_sets.read_json(tmp_path)
    assert str(refused.value) == (f"{tmp_path} is being written by process {writer.pid} (its "
                                  f"journal .writing is there); read it once that evaluation "
                                  f"has finished.")
    assert (tmp_path / "results.csv").read_text() == "previous results.csv"   # left to its writer
  finally:
    writer.kill()
    writer.wait()


def test_a_cut_off_set_in_a_folder_the_reader_cannot_write_is_refused(tmp_path, monkeypatch):
  killed_mid_swap(tmp_path)
  monkeypatch.setattr(outputs.os, "replace", lambda *_: (_ for _ in ()).throw(
      PermissionError(13, "Permission denied")))
  with pytest.raises(result_sets.ResultSetError, match=r"cut off between its renames .* cannot be "
                                                       r"finished here \(Permission denied\)"):
    result_sets.read_bytes(tmp_path, "results.json")


def test_files_of_two_sets_are_refused_never_combined(tmp_path):
  outputs.write_files(tmp_path, {n: outputs.text_writer(f"first {n}")
                                 for n in ("results.json", "results.csv")}, fix="-")
  assert result_sets.read_bytes(tmp_path, "results.json") == b"first results.json"
  (tmp_path / "results.csv").write_text("second results.csv")        # another set's file
  with pytest.raises(result_sets.ResultSetError, match=r"results.csv is not the file its set "
                                                       r"lists in .*\.written \(another SHA-256"):
    result_sets.check_set(tmp_path)
  (tmp_path / "retrieval.csv").write_text("left from another evaluation")
  with pytest.raises(result_sets.ResultSetError, match="is not of the set .* lists"):
    result_sets.read_bytes(tmp_path, "retrieval.csv")
  os.remove(tmp_path / outputs.MANIFEST)                # written before manifests: read as it is
  assert result_sets.read_bytes(tmp_path, "results.csv") == b"second results.csv"
