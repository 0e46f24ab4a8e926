r"""PaTH's cost against RoPE, in one command: `python benchmarks/path_cost.py`.

For each config (--configs, default kna_rope and kna_path) at --model_size (default cpu, 8 x 512):
the jitted training step's compiled memory (XLA's memory_analysis: arguments + temporaries, GiB per
device) and its seconds per step (the best of --repeats passes of --steps steps, after a warm-up
step); and the evaluator's scorer (keynorm_jax.scoring, as eval.py compiles it, with the kernel
`auto` picks: for PaTH the chunked one) at --eval_length tokens (default 8192, 16x the cpu models'
512) with eval.py's batch size for its 16 windows: its compiled memory and seconds per window.

--memory_only: compile and print the memory alone (the timings of a busy machine are not valid).
On a CPU, time it as `tools/keep_freed_memory.sh python benchmarks/path_cost.py`, as
benchmarks/train_speed.py. Figures printed; nothing is asserted. BENCHMARKS.md, "PaTH's cost".
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
# pylint: disable=wrong-import-position
import time

from absl import app, flags
import jax
import numpy as np

from benchmarks.compiled import compiled_gib
from benchmarks.step_setup import config_at, random_tokens, step_inputs
from keynorm_jax import run_config
from keynorm_jax.evaluation.evaluate import auto_batch_size
from keynorm_jax.scoring import make_scorer
from keynorm_jax.training.loop import make_train_step

_CONFIGS = flags.DEFINE_list("configs", ["kna_rope", "kna_path"], "Config names.")
_SIZE = flags.DEFINE_string("model_size", "cpu", "Model size.")
_EVAL_LENGTH = flags.DEFINE_integer("eval_length", 8192, "Tokens of the evaluation measured.")
_EVAL_WINDOWS = flags.DEFINE_integer("eval_windows", 16, "Windows evaluated (eval.py's default: "
                                     "its batch size follows from them).")
_MEMORY_ONLY = flags.DEFINE_bool("memory_only", False, "Compiled memory only, no timing.")
_STEPS = flags.DEFINE_integer("steps", 5, "Timed training steps per pass.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed passes (the best is printed).")


def _best_seconds(run, count: int) -> float:
  """The best of --repeats passes of `count` calls of run() (each returns what to wait for)."""
  best = float("inf")
  for _ in range(_REPEATS.value):
    start = time.perf_counter()
    for _ in range(count):
      out = run()
    jax.block_until_ready(out)
    best = min(best, (time.perf_counter() - start) / count)
  return best


def training(config):
  """(compiled GiB, seconds per step or None) of the config's jitted training step."""
  model, tx, state, batch = step_inputs(config)
  step = jax.jit(make_train_step(model, tx, jax.random.PRNGKey(1))).lower(state, batch).compile()
  if _MEMORY_ONLY.value:
    return compiled_gib(step), None
  jax.block_until_ready(step(state, batch))
  return compiled_gib(step), _best_seconds(lambda: step(state, batch), _STEPS.value)


def evaluation(config):
  """(batch size, compiled GiB, seconds per window or None) of the scorer at --eval_length."""
  model = run_config.build_model(config)
  params = jax.jit(model.init)(jax.random.PRNGKey(0),
                               np.zeros((1, config.train_length), np.int32))["params"]
  length = _EVAL_LENGTH.value
  size = auto_batch_size(run_config.model_config(config), length, _EVAL_WINDOWS.value)
  windows = random_tokens(size, length)
  scorer = make_scorer(model).lower(params, windows).compile()
  if _MEMORY_ONLY.value:
    return size, compiled_gib(scorer), None
  jax.block_until_ready(scorer(params, windows))   # the first call, untimed
  seconds = _best_seconds(lambda: scorer(params, windows), 1) / size
  return size, compiled_gib(scorer), seconds


def main(argv):
  del argv
  print(f"device: {jax.devices()[0].device_kind} x {jax.device_count()}, jax {jax.__version__}")
  print(f"| config | training step: compiled GiB | s/step | eval at {_EVAL_LENGTH.value}: "
        f"windows per batch | compiled GiB | s/window |")
  print("|---|---|---|---|---|---|")
  shown = lambda seconds, digits: "-" if seconds is None else f"{seconds:.{digits}f}"
  for name in _CONFIGS.value:
    config = config_at(name, _SIZE.value)
    train_gib, step_seconds = training(config)
    batch, eval_gib, window_seconds = evaluation(config)
    print(f"| {name} | {train_gib:.3f} | {shown(step_seconds, 3)} | {batch} | {eval_gib:.3f} | "
          f"{shown(window_seconds, 2)} |", flush=True)


if __name__ == "__main__":
  app.run(main)
