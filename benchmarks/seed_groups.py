r"""A seed group against its single runs, in model-steps per second: `python benchmarks/seed_groups.py`.

For each N of --num_seeds a group of N seeds (`--config.num_seeds=N`, one jitted program) is timed
against one single run of the same config, in one process on one device: the same jitted steps
training builds (keynorm_jax.training.loop: `make_train_step`, vmapped by
`seed_group.train_step` for a group, with the loop's shardings and donated state), on random
tokens, compilation and two warm-up steps excluded. The N separate single runs are counted as one
single run's time multiplied by N (they would run one after another on the device): a group's
model-steps/s is N x its steps/s, and the speed-up is that over the single run's steps/s. The
single run is timed again beside each N (rounds alternate single and group, best of --repeats
rounds of --steps steps each), so a drifting machine moves both sides of a row alike.

  --architecture=transformer     transformer_<config> (default gau: <config>)
  --model_size=tiny --train_length=64 --steps=3 --num_seeds=1,2    seconds, for checks
  --out=seed_groups.json         the figures as JSON too
"""

import json
import os
import pathlib
import sys
import time

from absl import app, flags
import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# pylint: disable=wrong-import-position
from keynorm_jax import run_config
from keynorm_jax.training import seed_group, sharding
from keynorm_jax.training.loop import init_state, initial_state, make_train_step
from keynorm_jax.training.optimizer import make_optimizer

_CONFIG = flags.DEFINE_string("config", "kna_rope", "Config name (the GAU's; --architecture="
                              "transformer prefixes transformer_).")
_ARCH = flags.DEFINE_enum("architecture", "gau", ["gau", "transformer"], "Architecture.")
_SIZE = flags.DEFINE_string("model_size", "cpu", "Model size (tiny, cpu, medium, seed, ...).")
_LENGTH = flags.DEFINE_integer("train_length", 512, "Training length (tokens per sequence).")
_BATCH = flags.DEFINE_integer("batch_size", 0, "Sequences per member's step; 0 = the size's.")
_NUM_SEEDS = flags.DEFINE_list("num_seeds", ["1", "2", "4", "8"], "Group sizes N to time.")
_STEPS = flags.DEFINE_integer("steps", 5, "Timed steps per round (after two warm-up steps).")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Rounds per side; the best is kept.")
_OUT = flags.DEFINE_string("out", "", "Also write the figures here as JSON.")


def _config(num_seeds):
  name = _CONFIG.value if _ARCH.value == "gau" else f"transformer_{_CONFIG.value}"
  config = run_config.load_config(name)
  config.model_size = _SIZE.value
  config.train_length = _LENGTH.value
  config.num_devices = 1
  config.num_seeds = num_seeds
  if _BATCH.value:
    config.batch_size = _BATCH.value
  config = run_config.resolve(config)
  run_config.validate(config, 1)
  return config


class _Stepper:
  """One run's (or group's) jitted step, state and batch, as training.loop builds them."""

  def __init__(self, num_seeds):
    config = self.config = _config(num_seeds)
    model, tx = run_config.build_model(config), make_optimizer(config)
    rng = np.random.default_rng(0)
    if seed_group.is_group(config):
      seeds = seed_group.member_seeds(config)
      mesh = seed_group.make_mesh(config)
      init_one = lambda seed: init_state(model, tx, seed, config.train_length)
      state_sharding = seed_group.state_shardings(mesh,
                                                  seed_group.abstract_state(init_one, seeds))
      self.state = seed_group.initial_state(init_one, seeds, state_sharding)
      step = seed_group.train_step(lambda key: make_train_step(model, tx, key), seeds)
      tokens = rng.integers(0, 256, size=(num_seeds, config.batch_size, config.train_length + 1),
                            dtype=np.int32)
      self.batch = seed_group.global_batch(mesh, tokens)
    else:
      mesh = sharding.make_mesh(config.num_devices, config.fsdp)
      state_sharding = sharding.state_shardings(
          mesh, jax.eval_shape(lambda: init_state(model, tx, config.seed, config.train_length)))
      self.state = initial_state(model, tx, config.seed, config.train_length, mesh,
                                 state_sharding)
      step = make_train_step(model, tx, jax.random.PRNGKey(config.seed + 1))
      tokens = rng.integers(0, 256, size=(config.batch_size, config.train_length + 1),
                            dtype=np.int32)
      self.batch = sharding.global_batch(mesh, tokens)
    self.step = jax.jit(step, out_shardings=(state_sharding, None), donate_argnums=0)
    started = time.perf_counter()
    self.run(2)  # compile and warm up
    self.compile_and_warm_up_s = time.perf_counter() - started

  def run(self, steps):
    """Seconds per step over `steps` steps."""
    started = time.perf_counter()
    for _ in range(steps):
      self.state, metrics = self.step(self.state, self.batch)
    jax.block_until_ready(metrics)
    self.loss = float(np.mean(metrics["loss"]))
    return (time.perf_counter() - started) / steps


def main(argv):
  del argv
  sizes = [int(n) for n in _NUM_SEEDS.value]
  single = _Stepper(1)
  config = single.config
  print(f"{config.name} size={_SIZE.value} batch={config.batch_size}x{config.train_length} "
        f"device={jax.devices()[0].device_kind} jax={jax.__version__} cpus={os.cpu_count()} "
        f"load={os.getloadavg()[0]:.1f} steps={_STEPS.value} repeats={_REPEATS.value}")
  print("N separate runs = one single run's time x N (run one after another)")
  print(f"{'N':>3} {'group s/step':>12} {'group model-steps/s':>19} {'single steps/s':>14} "
        f"{'speed-up':>8} {'compile s':>9}")
  rows = []
  for n in sizes:
    group = single if n == 1 else _Stepper(n)
    single_s, group_s = [], []
    for _ in range(_REPEATS.value):
      single_s.append(single.run(_STEPS.value))
      group_s.append(group.run(_STEPS.value) if n > 1 else single_s[-1])
    single_rate, group_rate = 1 / min(single_s), n / min(group_s)
    row = {"num_seeds": n, "group_seconds_per_step": min(group_s),
           "group_model_steps_per_second": group_rate, "single_steps_per_second": single_rate,
           "speed_up": group_rate / single_rate, "group_compile_and_warm_up_s":
           group.compile_and_warm_up_s, "all_group_seconds": group_s,
           "all_single_seconds": single_s, "group_loss": group.loss}
    rows.append(row)
    print(f"{n:>3} {row['group_seconds_per_step']:>12.4f} {group_rate:>19.2f} "
          f"{single_rate:>14.2f} {row['speed_up']:>7.2f}x {group.compile_and_warm_up_s:>9.1f}",
          flush=True)
    if group is not single:
      del group
  if _OUT.value:
    out = {"config": config.name, "architecture": _ARCH.value, "model_size": _SIZE.value,
           "batch_size": config.batch_size, "train_length": config.train_length,
           "steps": _STEPS.value, "repeats": _REPEATS.value,
           "device": jax.devices()[0].device_kind, "jax": jax.__version__,
           "cpus": os.cpu_count(), "method": "N single runs = one single run's time x N",
           "rows": rows}
    path = pathlib.Path(_OUT.value)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
  app.run(main)
