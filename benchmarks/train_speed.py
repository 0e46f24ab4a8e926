r"""Training speed and MFU on this machine: `python benchmarks/train_speed.py`.

For each architecture at the `cpu` size (8 x 512, float32; --dtypes=float32,bfloat16 adds bf16):
seconds per jitted training step, tokens/s, the step's FLOPs (counted analytically, see
benchmarks/flops.py) and MFU = achieved FLOP/s over this machine's matmul peak in the row's compute
dtype, measured here through XLA (an n x n matmul, best of 20) in the form the step's products take
(keynorm_jax/precision.py: inputs in the compute dtype, summed in float32; in bfloat16 that is not
`a @ b`, whose bfloat16 result XLA's CPU backend computes at about half that rate on a processor
with bfloat16 units: BENCHMARKS.md, "bfloat16 on the CPU"), beside it the MFU with the attention
counted over the causal triangle only, and the memory of the compiled step (XLA's memory_analysis:
arguments + temporaries). The first line names the processor and its bfloat16 units (cpu/features.py). Figures
printed; nothing is asserted.

On an accelerator: `python benchmarks/train_speed.py --model_size=seed --dtypes=bfloat16,float32
--peak_n=8192` (the seed's sizes, 32 x 512; parameters and optimizer state stay float32).
On a CPU, start it as `tools/keep_freed_memory.sh python benchmarks/train_speed.py`: BENCHMARKS.md's
figures were measured with that malloc setting.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
# pylint: disable=wrong-import-position
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.compiled import compiled_gib  # pylint: disable=wrong-import-position
from benchmarks.flops import train_step_flops  # pylint: disable=wrong-import-position
from benchmarks.step_setup import config_at, step_inputs  # pylint: disable=wrong-import-position
from keynorm_jax import precision, run_config  # pylint: disable=wrong-import-position
from keynorm_jax.cpu import features  # pylint: disable=wrong-import-position
from keynorm_jax.training.loop import make_train_step  # pylint: disable=wrong-import-position

_CONFIGS = flags.DEFINE_list("configs", ["kna_rope", "transformer_kna_rope"], "Config names.")
_SIZE = flags.DEFINE_string("model_size", "cpu", "Model size.")
_DTYPES = flags.DEFINE_list("dtypes", ["float32"], "compute dtypes to time.")
_STEPS = flags.DEFINE_integer("steps", 10, "Timed steps per repeat.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Repeats (the best is reported).")
_PEAK_N = flags.DEFINE_integer("peak_n", 2048, "Matrix size of the peak measurement.")


def matmul_peak(n: int, dtype=jnp.float32, repeats: int = 20) -> float:
  """Best FLOP/s of an n x n x n matmul through XLA on the default device, as the training step's
  products run: inputs in `dtype`, summed in float32 (precision.summed)."""
  a = jnp.asarray(np.random.default_rng(0).normal(size=(n, n)), dtype)
  f = jax.jit(lambda x: precision.summed("ij,jk->ik", x, x))
  f(a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * n**3 / best


def time_train_step(config_name: str, size: str, dtype: str, steps: int, repeats: int):
  """(seconds per step, model config, batch, length, compiled GiB) of the real jitted step on
  random tokens."""
  config = config_at(config_name, size, dtype=dtype)
  model, tx, state, batch = step_inputs(config)
  step = jax.jit(make_train_step(model, tx, jax.random.PRNGKey(1)),
                 donate_argnums=0).lower(state, batch).compile()  # compiled once, timed below
  memory = compiled_gib(step)
  state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(steps):
      state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    best = min(best, (time.perf_counter() - start) / steps)
  return best, run_config.model_config(config), config.batch_size, config.train_length, memory


def main(argv):
  del argv
  print(f"device: {jax.devices()[0].device_kind} x {jax.device_count()}, jax {jax.__version__}, "
        f"default matmul precision {jax.config.jax_default_matmul_precision}; "
        f"processor: {features.cpu_model()}")
  peaks = {}
  for dtype in _DTYPES.value:
    peaks[dtype] = matmul_peak(_PEAK_N.value, jnp.dtype(dtype))
    print(f"{dtype} matmul peak through XLA ({dtype} inputs, float32 sums; n={_PEAK_N.value}): "
          f"{peaks[dtype] / 1e9:,.0f} GFLOP/s")
  print("| config | dtype | s/step | tokens/s | GFLOP/step (dense + attention) | GFLOP/s | MFU | "
        "MFU, causal triangle | compiled GiB |")
  print("|---|---|---|---|---|---|---|---|---|")
  for name in _CONFIGS.value:
    for dtype in _DTYPES.value:
      seconds, cfg, batch, length, memory = time_train_step(name, _SIZE.value, dtype,
                                                            _STEPS.value, _REPEATS.value)
      flops = train_step_flops(cfg, batch, length)
      achieved = flops["total"] / seconds
      print(f"| {name} | {dtype} | {seconds:.4f} | {batch * length / seconds:,.0f} | "
            f"{flops['total'] / 1e9:.1f} ({flops['dense'] / 1e9:.1f} + "
            f"{flops['attention'] / 1e9:.1f}) | {achieved / 1e9:,.0f} | "
            f"{achieved / peaks[dtype]:.1%} | "
            f"{flops['total_causal'] / seconds / peaks[dtype]:.1%} | {memory:.2f} |", flush=True)


if __name__ == "__main__":
  app.run(main)
