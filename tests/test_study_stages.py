"""A study run's saved evaluation stages: reused for the same checkpoint, plan, code and device;
computed again, with one line, when the file is corrupt or was made for another checkpoint or
device."""

import json

from keynorm_jax.study.stages import FILE_NAME, Stages

IDENTITY = {"checkpoint_step": 3000, "plan_key": "cpu:x", "code_version": "abc", "device": "cpu"}


def test_a_finished_stage_is_read_back_and_not_computed_again(tmp_path):
  first = Stages(tmp_path, IDENTITY)
  assert first.run("next_token@1x", lambda: [{"accuracy": 0.5}]) == [{"accuracy": 0.5}]
  again = Stages(tmp_path, IDENTITY)
  assert again.run("next_token@1x", lambda: 1 / 0) == [{"accuracy": 0.5}]
  assert again.run("diagnostics", lambda: {"entropy": 1.0}) == {"entropy": 1.0}
  assert again.resumed == ["next_token@1x"]
  saved = json.loads((tmp_path / FILE_NAME).read_text())
  assert saved == {"identity": IDENTITY, "stages": {"next_token@1x": [{"accuracy": 0.5}],
                                                    "diagnostics": {"entropy": 1.0}}}


def test_stages_of_another_checkpoint_or_device_are_computed_again(tmp_path):
  for other in ({"checkpoint_step": 3500}, {"device": "NVIDIA H200"}):
    Stages(tmp_path, IDENTITY).run("next_token@1x", lambda: [1])
    lines = []
    later = Stages(tmp_path, {**IDENTITY, **other}, echo=lines.append)
    assert later.run("next_token@1x", lambda: [2]) == [2] and later.resumed == []
    assert len(lines) == 1 and "was made for" in lines[0], lines


def test_a_corrupt_stages_file_is_named_and_evaluation_starts_over(tmp_path):
  lines = []
  saved = '{"identity": %s, "stages": %%s}' % json.dumps(IDENTITY)
  for text in ('{"identity": ', '[1, 2]', saved % "[1]", saved % '{"next_token@1x": 5}'):
    (tmp_path / FILE_NAME).write_text(text)
    stages = Stages(tmp_path, IDENTITY, echo=lines.append)
    assert stages.run("next_token@1x", lambda: [7]) == [7] and stages.resumed == []
  assert len(lines) == 4 and all("evaluating from the start" in line for line in lines)
  assert str(tmp_path / FILE_NAME) in lines[0]
