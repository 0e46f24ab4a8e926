r"""Our training step against the same model in PyTorch, side by side: `python benchmarks/torch_peer.py`.

Needs `pip install -r benchmarks/requirements.txt` (torch, CPU build). For each config (GAU and
Transformer, `cpu` size, 8 x 512, float32) it alternates, in one process and with the same thread
count: our jitted JAX step, the PyTorch step eagerly, and the PyTorch step under torch.compile; it
prints the best seconds per step of each, tokens/s and the ratio. Nothing is asserted.
--dtype=bfloat16: ours with model.compute_dtype=bfloat16 (keynorm_jax/precision.py) against the
peers under torch.autocast("cpu", dtype=torch.bfloat16); parameters and optimizer state stay float32
on both sides.
On a CPU, start it as `tools/keep_freed_memory.sh python benchmarks/torch_peer.py`: BENCHMARKS.md's
figures were measured with that malloc setting.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
# pylint: disable=wrong-import-position
import os
import time

from absl import app, flags
import jax
import numpy as np
import torch

from benchmarks import torch_models  # pylint: disable=wrong-import-position
from benchmarks.step_setup import config_at, step_inputs  # pylint: disable=wrong-import-position
from keynorm_jax import run_config  # pylint: disable=wrong-import-position
from keynorm_jax.cpu import features  # pylint: disable=wrong-import-position
from keynorm_jax.training.loop import make_train_step  # pylint: disable=wrong-import-position

_CONFIGS = flags.DEFINE_list("configs", ["kna_rope", "transformer_kna_rope"], "Config names.")
_SIZE = flags.DEFINE_string("model_size", "cpu", "Model size.")
_STEPS = flags.DEFINE_integer("steps", 5, "Steps per timed round.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Alternating rounds (the best of each is reported).")
_COMPILE = flags.DEFINE_bool("compile", True, "Also time torch.compile.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype: ours "
                           "model.compute_dtype, the peers' torch.autocast dtype (float32: none).")


def _timed(run, steps):
  start = time.perf_counter()
  for _ in range(steps):
    run()
  return (time.perf_counter() - start) / steps


def compare(name, size, steps, rounds, with_compile, dtype):
  config = config_at(name, size, dtype=dtype)
  autocast = None if dtype == "float32" else getattr(torch, dtype)
  cfg = run_config.model_config(config)
  model, tx, state, batch = step_inputs(config)
  holder = {"state": state}
  jax_step = jax.jit(make_train_step(model, tx, jax.random.PRNGKey(1)), donate_argnums=0)

  def run_jax():
    holder["state"], metrics = jax_step(holder["state"], batch)
    jax.block_until_ready(metrics)

  torch_batch = torch.from_numpy(batch.astype(np.int64))
  runners = {"jax": run_jax}
  eager = torch_models.make_train_step(torch_models.LM(cfg, config.train_length),
                                       autocast_dtype=autocast)
  runners["torch eager"] = lambda: eager(torch_batch)
  if with_compile:
    compiled_model = torch.compile(torch_models.LM(cfg, config.train_length))
    compiled = torch_models.make_train_step(compiled_model, autocast_dtype=autocast)
    runners["torch.compile"] = lambda: compiled(torch_batch)
  for run in runners.values():  # warm-up and compile
    run()
    run()
  best = {k: float("inf") for k in runners}
  for _ in range(rounds):
    for key, run in runners.items():
      best[key] = min(best[key], _timed(run, steps))
  tokens = config.batch_size * config.train_length
  peer = min(v for k, v in best.items() if k != "jax")
  for key, seconds in best.items():
    print(f"| {name} | {dtype} | {key} | {seconds:.3f} | {tokens / seconds:,.0f} | "
          f"{peer / seconds if key == 'jax' else best['jax'] / seconds:.2f} |", flush=True)


def main(argv):
  del argv
  threads = os.cpu_count()
  torch.set_num_threads(threads)
  print(f"jax {jax.__version__}, torch {torch.__version__}, {threads} threads for both; "
        f"{jax.devices()[0].device_kind}; {features.cpu_model()}")
  print("| config | dtype | implementation | s/step | tokens/s | speed vs (jax: best peer; peer: "
        "jax) |")
  print("|---|---|---|---|---|---|")
  for name in _CONFIGS.value:
    compare(name, _SIZE.value, _STEPS.value, _ROUNDS.value, _COMPILE.value, _DTYPE.value)


if __name__ == "__main__":
  app.run(main)
