r"""Prints training and evaluation speed on this machine: `python benchmarks/throughput.py`.

Training: seconds per step and tokens/s of the real jit-compiled step (random weights, random
byte tokens).
Evaluation: seconds per window and peak memory growth at each length, batch sized as eval.py does.
"""

import pathlib
import resource
import sys
import time

from absl import app, flags
import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# pylint: disable=wrong-import-position
from benchmarks.step_setup import config_at, random_tokens, step_inputs
from keynorm_jax import run_config
from keynorm_jax.evaluation.evaluate import auto_batch_size
from keynorm_jax.scoring import make_scorer, score_windows
from keynorm_jax.training.loop import make_train_step

_SIZE = flags.DEFINE_enum("model_size", "cpu", list(run_config.MODEL_SIZES["gau"]), "Model size.")
_CONFIG = flags.DEFINE_string("config", "kna_rope", "Config name.")
_STEPS = flags.DEFINE_integer("steps", 20, "Timed training steps (after one warm-up step).")
_LENGTHS = flags.DEFINE_list("lengths", ["512", "4096", "16384"], "Evaluation lengths.")
_WINDOWS = flags.DEFINE_integer("windows", 4, "Windows per evaluation length.")


def _peak_rss_gib():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main(argv):
  del argv
  config = config_at(_CONFIG.value, _SIZE.value)
  model, tx, state, batch = step_inputs(config)
  step = jax.jit(make_train_step(model, tx, jax.random.PRNGKey(1)), donate_argnums=0)
  state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  start = time.perf_counter()
  for _ in range(_STEPS.value):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  seconds = (time.perf_counter() - start) / _STEPS.value
  print(f"device: {jax.devices()[0].device_kind} x {jax.device_count()}")
  print(f"train  {config.name} size={_SIZE.value} batch={config.batch_size}x{config.train_length}: "
        f"{seconds:.3f} s/step, {config.batch_size * config.train_length / seconds:,.0f} tokens/s")
  scorer = make_scorer(model)
  for length in map(int, _LENGTHS.value):
    windows = random_tokens(_WINDOWS.value, length)
    size = auto_batch_size(model.config, length, _WINDOWS.value)
    score_windows(scorer, state["params"], windows[:size], size)  # compile
    start = time.perf_counter()
    score_windows(scorer, state["params"], windows, size)
    per_window = (time.perf_counter() - start) / _WINDOWS.value
    print(f"eval   length={length:>6} batch={size}: {per_window:.2f} s/window, "
          f"peak RSS so far {_peak_rss_gib():.1f} GiB")


if __name__ == "__main__":
  app.run(main)
