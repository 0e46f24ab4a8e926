"""kill -9 while a checkpoint is being finished: the next run resumes without a flag.

A step's folder appears under its final name only with its checksum manifest in it, so a kill at
any moment of the save leaves a listed, verifiable step or a temporary folder that nothing lists.
"""

import signal
import subprocess
import sys
import textwrap

import pytest

from keynorm_jax.storage import checksums
from keynorm_jax.training import loop as training
from train_helpers import checkpoint_steps, losses, tiny_config
from faults.helpers import REPO

# Trains the tiny run in the workdir argv[1] (TFDS data in argv[2]) and kills itself with
# SIGKILL while checkpoint 6 is finished: before its manifest is written, or after it is written
# and before the step is renamed into place.
_KILLED_RUN = textwrap.dedent("""
    import os, pathlib, signal, sys
    sys.path[:0] = [{tests!r}]
    import conftest  # the tests' XLA flags and devices
    from keynorm_jax.storage import checkpoint_writer
    from keynorm_jax.training import loop as training
    from train_helpers import tiny_config
    write = checkpoint_writer.checksums.write_manifest
    def killed(step_dir):
      if pathlib.Path(step_dir).name.startswith("6."):
        if {when!r} == "after":
          write(step_dir)
        os.kill(os.getpid(), signal.SIGKILL)
      return write(step_dir)
    checkpoint_writer.checksums.write_manifest = killed
    training.train_and_evaluate(tiny_config(data_dir=sys.argv[2]), sys.argv[1])
""")


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_kill_while_a_checkpoint_is_listed_resumes_without_a_flag(straight_run, tmp_path,
                                                                  data_dir, capsys, when):
  workdir = tmp_path / "run"
  script = _KILLED_RUN.format(tests=str(REPO / "tests"), when=when)
  killed = subprocess.run([sys.executable, "-c", script, str(workdir), data_dir], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
  assert checkpoint_steps(workdir) == [3]                  # 6 was never made visible unlisted
  assert [p.name for p in (workdir / "checkpoints").iterdir() if not p.name.isdigit()] == [
      "6.orbax-checkpoint-tmp-listing"]                    # the cut-off save, listed by nothing
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)   # no flag
  out = capsys.readouterr().out
  assert "unusable" not in out and "resuming at step 3" in out
  assert not (workdir / "corrupt_checkpoints").exists()
  assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["3", "6"]
  checksums.verify(workdir / "checkpoints" / "6")
  assert losses(workdir) == losses(straight_run)
