"""One process of a two-process (two-"host") training run on this machine; see test_multihost.py."""

import pathlib
import sys

import jax

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent),
                str(pathlib.Path(__file__).resolve().parent)]

from keynorm_jax.training import loop as training  # pylint: disable=wrong-import-position
from train_helpers import tiny_config  # pylint: disable=wrong-import-position

if __name__ == "__main__":
  port, process_id, workdir, data_dir = sys.argv[1:5]
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                             process_id=int(process_id))
  assert jax.process_count() == 2 and len(jax.devices()) == 2
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  print("finished", jax.process_index(), flush=True)
