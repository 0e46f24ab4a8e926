r"""Where one training step's time goes: `python benchmarks/profile_step.py --configs=kna_rope`.

For each config (the `cpu` size, float32), in one process and alternating (A, B, A, B; best of
each), the wall and process-CPU seconds of: the forward pass (loss only), forward + backward
(value_and_grad), and the real jitted training step (make_train_step). --hlo_dir writes the
optimized HLO of the step. Figures printed; nothing is asserted. Timings on a loaded machine are
noisy: compare ratios within one run.
On a CPU, start it as `tools/keep_freed_memory.sh python benchmarks/profile_step.py`:
BENCHMARKS.md's figures were measured with that malloc setting.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
# pylint: disable=wrong-import-position
import time

from absl import app, flags
import jax

from benchmarks.step_setup import config_at, step_inputs
from keynorm_jax.attention import KERNEL_NAMES
from keynorm_jax.scoring import token_scores
from keynorm_jax.training.loop import make_train_step

_CONFIGS = flags.DEFINE_list("configs", ["kna_rope", "transformer_kna_rope"], "Config names.")
_SIZE = flags.DEFINE_string("model_size", "cpu", "Model size.")
_STEPS = flags.DEFINE_integer("steps", 3, "Timed calls per repeat.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Alternating repeats (the best is reported).")
_HLO_DIR = flags.DEFINE_string("hlo_dir", None, "Write the step's optimized HLO here.")
_AB = flags.DEFINE_enum("ab", None, KERNEL_NAMES, "Time the step with model.kernel set to this "
                        "(A) against the config's own kernel (B) instead of the parts: e.g. "
                        "--ab=reference, the step without the CPU seam (PROFILE_NOTES.md).")


def parts(model, tx):
  """{name: jitted fn(state, batch)}: forward, forward + backward, the training step."""

  def loss(params, batch):
    logits = model.apply({"params": params}, batch[:, :-1], deterministic=True)
    return token_scores(logits, batch[:, 1:])[1].mean()

  step = make_train_step(model, tx, jax.random.PRNGKey(1))
  return {
      "forward": jax.jit(lambda state, batch: loss(state["params"], batch)),
      "forward+backward": jax.jit(lambda state, batch: jax.grad(loss)(state["params"], batch)),
      "train step": jax.jit(lambda state, batch: step(state, batch)[1]),
  }


def time_alternating(fns: dict, args, steps: int, repeats: int) -> dict:
  """{name: (best wall s, best process CPU s) per call}, the fns run in turn each repeat."""
  for fn in fns.values():
    jax.block_until_ready(fn(*args))
  best = {name: (float("inf"), float("inf")) for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      wall, cpu = time.perf_counter(), time.process_time()
      for _ in range(steps):
        out = fn(*args)
      jax.block_until_ready(out)
      wall, cpu = (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps
      best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
  return best


def ab_steps(config_name: str, size: str, kernel: str):
  """({"A (kernel)": the step with model.kernel = kernel, "B (config)": the config's step}, state,
  batch): the same parameters and batch for both."""
  steps = {}
  for label, name in ((f"A ({kernel})", kernel), ("B (config)", None)):
    model, tx, state, batch = step_inputs(config_at(config_name, size, kernel=name))
    step = jax.jit(make_train_step(model, tx, jax.random.PRNGKey(1)))
    steps[label] = step
  metrics = {label: step(state, batch)[1] for label, step in steps.items()}
  for key in ("loss", "grad_norm"):
    print("  " + key + ": " + "  ".join(f"{label} {float(m[key]):.7g}"
                                        for label, m in metrics.items()))
  return {label: (lambda s, x, f=step: f(s, x)[1]) for label, step in steps.items()}, state, batch


def main(argv):
  del argv
  for name in _CONFIGS.value:
    if _AB.value:
      fns, state, batch = ab_steps(name, _SIZE.value, _AB.value)
      best = time_alternating(fns, (state, batch), _STEPS.value, _REPEATS.value)
      (a_wall, a_cpu), (b_wall, b_cpu) = best.values()
      print(f"{name:24s} A {a_wall:.3f} s (cpu {a_cpu:.3f})  B {b_wall:.3f} s (cpu {b_cpu:.3f})  "
            f"A/B wall {a_wall / b_wall:.3f}  cpu {a_cpu / b_cpu:.3f}", flush=True)
      continue
    model, tx, state, batch = step_inputs(config_at(name, _SIZE.value))
    fns = parts(model, tx)
    if _HLO_DIR.value:
      path = pathlib.Path(_HLO_DIR.value) / f"{name}_step.hlo.txt"
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(fns["train step"].lower(state, batch).compile().as_text())
      print(f"wrote {path}")
    best = time_alternating(fns, (state, batch), _STEPS.value, _REPEATS.value)
    step_wall = best["train step"][0]
    for part, (wall, cpu) in best.items():
      print(f"{name:24s} {part:18s} wall {wall:.3f} s ({wall / step_wall:5.1%} of the step)  "
            f"cpu {cpu:.3f} s", flush=True)


if __name__ == "__main__":
  app.run(main)
