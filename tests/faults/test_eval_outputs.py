"""Evaluation results are all or nothing: the table is printed first, and a failure mid-write leaves
no partial or temporary file and says in one line what was and was not written.

Decided: a failure while the files are written leaves the previous files untouched; a failure
while they are renamed into place removes the set's files, new and previous alike (no mix).
"""

import errno
import hashlib
import os
import pathlib

import pytest

from keynorm_jax.evaluation import accuracy_tables, outputs
from keynorm_jax.evaluation.command import EvalRequest, evaluate_runs, make_columns
from keynorm_jax.runs import workdir_source
from faults.helpers import killed_mid_swap

PREVIOUS = ("results.json", "results.csv", "results.md", "accuracy_by_position.png")


def _no_space(*_):
  raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_mid_write_prints_the_table_and_leaves_the_previous_files(
    straight_run, tmp_path, monkeypatch):
  output = tmp_path / "eval"
  output.mkdir()
  for name in PREVIOUS:
    (output / name).write_text(f"previous {name}")

  def half_a_csv(records, path):  # results.csv, the second file: part of it, then the disk is full
    pathlib.Path(path).write_text("run,config,st")
    _no_space()

  monkeypatch.setattr(accuracy_tables, "write_csv", half_a_csv)
  printed = []
  with pytest.raises(outputs.OutputError) as e:
    evaluate_runs(workdir_source(straight_run, warn=printed.append),
                  EvalRequest(lengths=[32], columns=make_columns(["none"]), num_windows=2),
                  output=output, echo=printed.append)
  assert any(line.lstrip().startswith("| run | scaling | 32 repeated") for line in printed)
  message = str(e.value)
  assert "\n" not in message
  assert message.startswith(f"Could not write results.csv in {output} (No space left on device), "
                            f"so none of results.json, results.csv, ")
  assert "the files there from before are untouched" in message
  assert message.endswith("Free some space there, or pass another --output.")
  assert sorted(os.listdir(output)) == sorted(PREVIOUS)  # no temporary or partial file
  assert all((output / name).read_text() == f"previous {name}" for name in PREVIOUS)


def _writers(names):
  return {name: (lambda path, name=name: pathlib.Path(path).write_text(f"new {name}"))
          for name in names}


def test_a_failed_rename_removes_the_whole_set_new_and_previous(tmp_path, monkeypatch):
  names = ["results.json", "results.csv", "results.md"]
  for name in [*names, "notes.txt"]:
    (tmp_path / name).write_text("previous")
  real_replace, calls = os.replace, []

  def second_fails(src, dst):
    calls.append(dst)
    if len(calls) == 2:
      _no_space()
    real_replace(src, dst)

  monkeypatch.setattr(os, "replace", second_fails)
  with pytest.raises(outputs.OutputError) as e:
    outputs.write_files(tmp_path, _writers(names), fix="pass another --output")
  message = str(e.value)
  assert "\n" not in message
  assert message.startswith(f"Could not put results.csv in place in {tmp_path} (No space left on "
                            f"device) after results.json; removed every file of the set")
  assert os.listdir(tmp_path) == ["notes.txt"]  # not in the set: kept


def test_files_are_written_and_a_killed_writers_leftovers_removed(tmp_path):
  dead_pid = 2**22 + 1  # above Linux's largest pid: no such process
  leftover = tmp_path / f".results.json.{dead_pid}{outputs.PARTIAL}"
  leftover.write_text("half")
  paths = outputs.write_files(tmp_path, _writers(["results.json", "results.md"]), fix="")
  assert sorted(os.listdir(tmp_path)) == [outputs.MANIFEST, "results.json", "results.md"]
  assert paths["results.md"].read_text() == "new results.md"


def test_an_error_that_is_a_bug_is_raised_as_it_is_and_leaves_nothing(tmp_path):
  writers = _writers(["results.json"])
  writers["results.md"] = lambda path: {}["a bug"]
  with pytest.raises(KeyError):
    outputs.write_files(tmp_path, writers, fix="")
  assert not os.listdir(tmp_path)


def test_a_smaller_set_removes_the_previous_sets_other_files_and_only_them(tmp_path):
  """An evaluation with retrieval, then one without: no stale retrieval.csv from the first; a file
  the writer never wrote stays."""
  (tmp_path / "notes.txt").write_text("mine")
  outputs.write_files(tmp_path, {name: outputs.text_writer(name) for name in
                                 ("results.json", "results.md", "retrieval.csv")}, fix="-")
  assert (tmp_path / "retrieval.csv").read_text() == "retrieval.csv"
  outputs.write_files(tmp_path, {"results.json": outputs.text_writer("second"),
                                 "results.md": outputs.text_writer("second")}, fix="-")
  assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
      "notes.txt", "results.json", "results.md"]
  assert (tmp_path / "results.json").read_text() == "second"
  assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_kill_between_renames_is_finished_by_the_next_write(tmp_path):
  killed_mid_swap(tmp_path)
  outputs.write_files(tmp_path, {"results.json": outputs.text_writer("third"),
                                 "results.md": outputs.text_writer("third")}, fix="-")
  # the killed set's results.csv removed with it; the png, never listed in a set, kept; no
  # .partial file and no journal left
  assert sorted(os.listdir(tmp_path)) == [outputs.MANIFEST, "accuracy_by_position.png",
                                          "results.json", "results.md"]
  assert all((tmp_path / n).read_text() == "third" for n in ("results.json", "results.md"))
  assert _manifest_matches(tmp_path)


def test_recover_finishes_the_killed_set_whole(tmp_path):
  killed_mid_swap(tmp_path)
  outputs.recover(tmp_path)
  assert sorted(os.listdir(tmp_path)) == [outputs.MANIFEST, "accuracy_by_position.png",
                                          "results.csv", "results.json", "results.md"]
  assert all((tmp_path / n).read_text() == f"new {n}"
             for n in ("results.json", "results.csv", "results.md"))   # one set, no .partial
  assert _manifest_matches(tmp_path)


def _manifest_matches(folder) -> bool:
  """What `sha256sum -c .written` checks."""
  lines = (folder / outputs.MANIFEST).read_text().splitlines()
  return lines and all(hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
                       for digest, name in (line.split("  ", 1) for line in lines))
