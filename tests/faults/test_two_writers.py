"""Two training processes on one workdir: the second is refused; a killed holder blocks nothing."""

import json
import os
import socket
import subprocess
import sys

from keynorm_jax.storage import workdir_lock
from faults.helpers import REPO, cli


def test_second_writer_is_refused_naming_the_holder_and_a_dead_holder_does_not_block(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]);"
       "from keynorm_jax.storage import workdir_lock\n"
       "with workdir_lock.hold(sys.argv[2]):\n  print('locked', flush=True); time.sleep(300)",
       str(REPO), str(tmp_path)], stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "locked"
    code, output = cli("train.py", "--config=kna_rope", "--config.model_size=tiny",
                        f"--workdir={tmp_path}")
    assert code != 0 and "Traceback" not in output
    assert output.strip().splitlines()[-1] == (
        f"error: {tmp_path} is in use by another training process (pid "
        f"{holder.pid} on host {socket.gethostname()}, since "
        f"{json.loads((tmp_path / 'train.lock').read_text())['since']}; lock file "
        f"{tmp_path / 'train.lock'}). Wait for it to finish or stop it, or pass another --workdir.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.lock"]  # nothing else written
  finally:
    holder.kill()  # kill -9: the kernel drops its lock, and the next run is not blocked
    holder.wait()
  with workdir_lock.hold(tmp_path):
    assert json.loads((tmp_path / "train.lock").read_text())["pid"] == os.getpid()
