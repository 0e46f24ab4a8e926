"""tools/copy_probe.py: a probe's metrics log summarised by hand-checked steps, and its plot."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import copy_probe  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_a_probe_is_recorded_every_100_steps_and_plotted(tmp_path, capsys):
  run = tmp_path / "run"
  run.mkdir()
  rows = [{"step": s, "accuracy": s / 1000, "loss": 1.0} for s in (50, 100, 150, 200)]
  rows.append({"step": 200, "eval_accuracy": 0.456789})
  (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  copy_probe.main(["record", f"--workdir={run}", "--name=x_copy100_200", "--what=w",
                   "--command=c", "--code=abc1234", f"--folder={tmp_path}"])
  probe = json.loads((tmp_path / "x_copy100_200.json").read_text())
  assert probe["train_accuracy_by_step"] == {"100": 0.1, "200": 0.2}
  assert probe["eval_accuracy_natural_text"] == {"200": 0.4568}
  assert probe["code"] == "abc1234" and probe["command"] == "c"
  copy_probe.main(["plot", f"--folder={tmp_path}"])
  assert (tmp_path / "copy_probe.png").stat().st_size > 0
  with pytest.raises(SystemExit, match="no metrics in"):
    copy_probe.main(["record", f"--workdir={tmp_path / 'none'}", "--name=y", "--what=w",
                     "--command=c", f"--folder={tmp_path}"])
