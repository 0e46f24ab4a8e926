"""Metrics and TensorBoard files after a kill mid-write."""

import collections
import json
import os

import pytest

from keynorm_jax.training import loop as training
from keynorm_jax.training.metrics_writer import MetricsWriter
from train_helpers import copy_run, losses, tiny_config
from faults.helpers import tensorboard_events


def test_torn_metrics_line_and_tensorboard_after_a_kill(straight_run, tmp_path, data_dir, capsys):
  workdir = copy_run(straight_run, tmp_path, drop_steps=[6])  # killed after 6, before its save
  with (workdir / "metrics.jsonl").open("a") as f:
    f.write('{"step": 7, "loss": 2.3')                     # ...in the middle of a write
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  assert (f"WARNING: {workdir.resolve() / 'metrics.jsonl'}: dropped its torn last line"
          in capsys.readouterr().out)
  assert losses(workdir) == losses(straight_run)
  (_, first), (_, second) = tensorboard_events(workdir)
  assert [step for step, purge, _ in second if purge] == [4]          # resumed after step 3
  assert {step for step, _, scalars in second if scalars} == {4, 5, 6}
  # As TensorBoard reads them (the marker hides the first file's steps >= 4): every step's
  # scalars once, as in the uninterrupted run.
  shown = [s for s, _, scalars in first if scalars and s < 4] + [
      s for s, _, scalars in second if scalars]
  ((_, reference),) = tensorboard_events(straight_run)
  assert collections.Counter(shown) == collections.Counter(s for s, _, scalars in reference
                                                           if scalars)


def test_metrics_rewrite_is_atomic(tmp_path, monkeypatch):
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n"
                                                  for s in (1, 2, 3)))
  before = (tmp_path / "metrics.jsonl").read_text()

  def crash(*_):
    raise KeyboardInterrupt  # killed after writing the new file, before renaming it

  monkeypatch.setattr(os, "replace", crash)
  with pytest.raises(KeyboardInterrupt):
    MetricsWriter(tmp_path, resume_step=2)
  assert (tmp_path / "metrics.jsonl").read_text() == before
