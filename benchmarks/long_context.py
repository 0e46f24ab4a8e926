r"""Long-context evaluation speed and memory here: `python benchmarks/long_context.py`.

For each length 512, 1024, ... up to --max_length (default 65,536) a fresh process builds the model
of --config at --model_size with random weights, compiles the evaluator's own scorer
(keynorm_jax.scoring) and scores --windows random windows with the batch size eval.py
would use.
It prints seconds per window (the best of --repeats), the growth per doubling of the length, the
CPU seconds per window (all threads; steadier than the wall clock on a shared machine), the
process's peak resident memory (ru_maxrss, so it includes the Python/JAX runtime, shown apart as
"before") and XLA's temporary buffers for one batch (compiled memory_analysis). Figures, not tests.

  --lengths=262144        one length only (e.g. the 262k run)
  --batch_size=1          windows per batch (default: as eval.py)
  --blocks=0              every score at once (or --blocks=N: N x N blocks past N tokens)
  --train_blocks=0,128,256  instead: seconds per training step at --train_length (default 512),
                          every score at once (0) against key blocks of 128 x 128, 256 x 256
  --code=DIR              import keynorm_jax from another checkout (an older commit, to compare)
"""

import json
import os
import pathlib
import resource
import subprocess
import sys
import time

from absl import app, flags

_REPO = pathlib.Path(__file__).resolve().parent.parent

_CONFIG = flags.DEFINE_string("config", "kna_rope", "Config name.")
_SIZE = flags.DEFINE_string("model_size", "cpu", "Model size.")
_MIN = flags.DEFINE_integer("min_length", 512, "First length.")
_MAX = flags.DEFINE_integer("max_length", 65536, "Last length (lengths double from min_length).")
_LENGTHS = flags.DEFINE_list("lengths", [], "Explicit lengths (instead of min/max_length).")
_WINDOWS = flags.DEFINE_integer("windows", 2, "Windows scored per timed pass.")
_REPEATS = flags.DEFINE_integer("repeats", 1, "Timed passes per length; the best is printed.")
_BLOCKS = flags.DEFINE_integer("blocks", -1, "Evaluation's attention: -1 = the default rule, 0 = "
                               "every score at once, N = blocks of N x N (at any length > N).")
_BATCH = flags.DEFINE_integer("batch_size", 0,
                              "Windows per batch; 0 = as eval.py does (auto_batch_size).")
_SCALING = flags.DEFINE_string("rope_scaling", "none", "Inference method of the column "
                               "(none, ntk, yarn, rerope, window, streaming, ...).")
_CODE = flags.DEFINE_string("code", str(_REPO), "Checkout whose keynorm_jax is measured.")
_TRAIN = flags.DEFINE_list("train_blocks", [], "Instead of evaluation: seconds per training step "
                           "at --train_length with every score at once (0) or in blocks of N x N "
                           "(e.g. 0,128,256).")
_TRAIN_LENGTH = flags.DEFINE_integer("train_length", 512, "Training length for --train_blocks.")
_STEPS = flags.DEFINE_integer("steps", 10, "Timed training steps (after two warm-up steps).")
_CHILD = flags.DEFINE_integer("child_length", 0, "Internal: measure this length, print JSON.")
_CHILD_BLOCK = flags.DEFINE_integer("child_train_block", -1, "Internal: one training setting.")


def _rss_gib():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _set_blocks(config, block, length):
  """Sets config.model.kernel for the block rule: -1 the default (auto), 0 every score at once (the
  CPU layout on a CPU), N blocks of N x N (the blocked kernel) past N tokens."""
  # pylint: disable=g-import-not-at-top
  import jax
  from keynorm_jax.attention.kernels import blocked
  if block == 0:
    config.model.kernel = "cpu" if jax.default_backend() == "cpu" else "reference"
  elif block > 0:
    blocked.DEFAULT_BLOCK = block
    config.model.kernel = "blocked" if length > block else "auto"


def _measure(length):
  """One length in this process: a dict of figures."""
  sys.path.insert(0, _CODE.value)
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from keynorm_jax import positions, run_config  # pylint: disable=g-import-not-at-top
  from keynorm_jax.evaluation.evaluate import auto_batch_size  # pylint: disable=g-import-not-at-top
  from keynorm_jax.scoring import (  # pylint: disable=g-import-not-at-top
      make_scorer, score_windows)

  config = run_config.load_config(_CONFIG.value)
  config.model_size = _SIZE.value
  _set_blocks(config, _BLOCKS.value, length)
  config = run_config.resolve(config)
  column = positions.EvalColumn(positions.inference_method(_SCALING.value))
  model = run_config.build_model(config, column)
  params = jax.jit(model.init)(jax.random.PRNGKey(0),
                               np.zeros((1, config.train_length), np.int32))["params"]
  windows = np.random.default_rng(0).integers(0, 256, size=(_WINDOWS.value, length + 1),
                                              dtype=np.int32)
  size = _BATCH.value or auto_batch_size(run_config.model_config(config), length, _WINDOWS.value)
  scorer = make_scorer(model)
  rss_before = _rss_gib()
  started = time.perf_counter()
  compiled = scorer.lower(params, windows[:size]).compile()
  analysis = compiled.memory_analysis()
  temp = getattr(analysis, "temp_size_in_bytes", None) if analysis is not None else None
  score_windows(compiled, params, windows[:size], size)   # the scorer, compiled once
  first = time.perf_counter() - started
  times, cpu_times = [], []
  for _ in range(_REPEATS.value):
    started, cpu_started = time.perf_counter(), time.process_time()
    score_windows(compiled, params, windows, size)
    times.append((time.perf_counter() - started) / _WINDOWS.value)
    cpu_times.append((time.process_time() - cpu_started) / _WINDOWS.value)
  return {"length": length, "batch": size, "seconds_per_window": min(times),
          "all_seconds_per_window": times, "cpu_seconds_per_window": min(cpu_times),
          "compile_and_first_batch_s": first,
          "rss_before_gib": rss_before, "peak_rss_gib": _rss_gib(),
          "xla_temp_gib": None if temp is None else temp / 2**30,
          "jax": jax.__version__, "device": jax.devices()[0].device_kind}


def _measure_training(block):
  """Seconds per training step (the real jit step, random data) with blocks of `block` (0: full)."""
  # pylint: disable=g-import-not-at-top,protected-access
  sys.path.insert(0, _CODE.value)
  import jax
  import numpy as np
  from keynorm_jax import run_config
  from keynorm_jax.training.optimizer import make_optimizer
  from keynorm_jax.training.loop import init_state, make_train_step

  config = run_config.load_config(_CONFIG.value)
  config.model_size = _SIZE.value
  config.train_length = _TRAIN_LENGTH.value
  _set_blocks(config, block, _TRAIN_LENGTH.value)
  config = run_config.resolve(config)
  model, tx = run_config.build_model(config), make_optimizer(config)
  state = init_state(model, tx, 0, config.train_length)
  step = jax.jit(make_train_step(model, tx, jax.random.PRNGKey(1)), donate_argnums=0)
  batch = np.random.default_rng(0).integers(0, 256, size=(config.batch_size,
                                                          config.train_length + 1), dtype=np.int32)
  for _ in range(2):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  started, cpu_started = time.perf_counter(), time.process_time()
  for _ in range(_STEPS.value):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  return {"block": block, "batch": config.batch_size, "length": config.train_length,
          "seconds_per_step": (time.perf_counter() - started) / _STEPS.value,
          "cpu_seconds_per_step": (time.process_time() - cpu_started) / _STEPS.value,
          "loss": float(metrics["loss"]), "peak_rss_gib": _rss_gib()}


def _run_child(flags_):
  command = [sys.executable, __file__, f"--config={_CONFIG.value}", f"--model_size={_SIZE.value}",
             f"--code={_CODE.value}", *flags_]
  done = subprocess.run(command, capture_output=True, text=True, check=False)
  lines = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
  if done.returncode or not lines:
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return None, f"failed (exit {done.returncode}): {' | '.join(tail)}"
  return json.loads(lines[-1][len("RESULT "):]), None


def _training_table():
  print(f"training {_CONFIG.value} size={_SIZE.value} length={_TRAIN_LENGTH.value} "
        f"steps={_STEPS.value} cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
  print(f"{'blocks':>8} {'s/step':>7} {'CPU s/step':>10} {'loss':>8} {'peak GiB':>8}")
  for block in map(int, _TRAIN.value):
    r, error = _run_child([f"--child_train_block={block}", f"--train_length={_TRAIN_LENGTH.value}",
                           f"--steps={_STEPS.value}"])
    name = f"{block}x{block}" if block else "full"
    if error:
      print(f"{name:>8} {error}")
      continue
    print(f"{name:>8} {r['seconds_per_step']:>7.3f} {r['cpu_seconds_per_step']:>10.3f} "
          f"{r['loss']:>8.4f} {r['peak_rss_gib']:>8.2f}", flush=True)


def _lengths():
  if _LENGTHS.value:
    return [int(x) for x in _LENGTHS.value]
  out, length = [], _MIN.value
  while length <= _MAX.value:
    out.append(length)
    length *= 2
  return out


def main(argv):
  del argv
  if _CHILD.value:
    print("RESULT " + json.dumps(_measure(_CHILD.value)), flush=True)
    return
  if _CHILD_BLOCK.value >= 0:
    print("RESULT " + json.dumps(_measure_training(_CHILD_BLOCK.value)), flush=True)
    return
  if _TRAIN.value:
    _training_table()
    return
  blocks = {-1: "default", 0: "all at once"}.get(_BLOCKS.value, f"{_BLOCKS.value}x{_BLOCKS.value}")
  print(f"config={_CONFIG.value} size={_SIZE.value} scaling={_SCALING.value} windows="
        f"{_WINDOWS.value} repeats={_REPEATS.value} blocks={blocks} code={_CODE.value} "
        f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
  print(f"{'length':>7} {'batch':>5} {'s/window':>9} {'x/doubling':>10} {'CPU s/w':>8} "
        f"{'peak GiB':>8} {'before':>6} {'XLA temp':>8}")
  previous = None
  for length in _lengths():
    r, error = _run_child([f"--child_length={length}", f"--windows={_WINDOWS.value}",
                           f"--repeats={_REPEATS.value}", f"--rope_scaling={_SCALING.value}",
                           f"--batch_size={_BATCH.value}", f"--blocks={_BLOCKS.value}"])
    if error:
      print(f"{length:>7} {error}")
      previous = None
      continue
    growth = f"{r['seconds_per_window'] / previous:.2f}" if previous else "-"
    temp = "-" if r["xla_temp_gib"] is None else f"{r['xla_temp_gib']:.2f}"
    print(f"{length:>7} {r['batch']:>5} {r['seconds_per_window']:>9.2f} {growth:>10} "
          f"{r['cpu_seconds_per_window']:>8.2f} {r['peak_rss_gib']:>8.2f} "
          f"{r['rss_before_gib']:>6.2f} {temp:>8}  "
          f"(all {', '.join(f'{t:.2f}' for t in r['all_seconds_per_window'])}; compile+first "
          f"{r['compile_and_first_batch_s']:.1f} s)", flush=True)
    previous = r["seconds_per_window"]


if __name__ == "__main__":
  app.run(main)
