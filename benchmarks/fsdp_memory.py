r"""Per-device memory of the 1B models' training step under FSDP, compiled but never run:
`python benchmarks/fsdp_memory.py` (8 and 64 simulated CPU devices, GAU and Transformer).

For each case a fresh process simulates the devices (--xla_force_host_platform_device_count), builds
the `model_size=1b` config with --config.fsdp = all devices, layer remat and (--scan_layers,
the default) scanned layers, which compile as one layer whatever the depth, lowers the real training
step on abstract arrays (nothing is allocated) and prints XLA's memory_analysis() of the compiled
step per device: arguments (the sharded state and batch), outputs, temporaries. Figures printed;
nothing is asserted.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parent.parent
_CASES = flags.DEFINE_list("configs", ["kna_rope", "transformer_kna_rope"], "Config names.")
_DEVICES = flags.DEFINE_list("devices", ["8", "64"], "Simulated device counts.")
_SCAN = flags.DEFINE_bool("scan_layers", True, "Scanned layers (model.scan_layers).")
_CHILD = flags.DEFINE_string("child", None, "Internal: config,devices to measure in this process.")


def measure(config_name: str, devices: int, scan_layers: bool) -> dict:
  sys.path.insert(0, str(ROOT))
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from keynorm_jax import run_config
  from keynorm_jax.training import sharding  # pylint: disable=g-import-not-at-top
  from keynorm_jax.models import count_params  # pylint: disable=g-import-not-at-top
  from keynorm_jax.training.optimizer import make_optimizer  # pylint: disable=g-import-not-at-top
  from keynorm_jax.training.loop import (  # pylint: disable=g-import-not-at-top
      abstract_state, init_state, make_train_step)

  config = run_config.load_config(config_name)
  config.model_size = "1b"
  config.fsdp = devices
  config.batch_size = devices
  config.model.remat = True
  config.model.scan_layers = scan_layers
  config = run_config.resolve(config)
  model, tx = run_config.build_model(config), make_optimizer(config)
  mesh = sharding.make_mesh(devices, devices)
  shapes = jax.eval_shape(lambda: init_state(model, tx, 0, config.train_length))
  shardings = sharding.state_shardings(mesh, shapes)
  state = abstract_state(model, tx, 0, config.train_length, shardings)
  batch = jax.ShapeDtypeStruct((config.batch_size, config.train_length + 1), np.int32,
                               sharding=sharding.batch_sharding(mesh))
  step = jax.jit(make_train_step(model, tx, jax.random.PRNGKey(1)),
                 out_shardings=(shardings, None), donate_argnums=0)
  started = time.perf_counter()
  analysis = step.lower(state, batch).compile().memory_analysis()
  compile_seconds = round(time.perf_counter() - started, 1)
  gib = lambda b: round(b / 2**30, 3)
  return {"config": config_name, "devices": devices,
          "parameters": count_params(shapes["params"]),
          "batch": f"{config.batch_size} x {config.train_length}",
          "arguments_gib": gib(analysis.argument_size_in_bytes),
          "outputs_gib": gib(analysis.output_size_in_bytes),
          "temporaries_gib": gib(analysis.temp_size_in_bytes),
          "aliased_gib": gib(analysis.alias_size_in_bytes), "compile_s": compile_seconds}


def main(argv):
  del argv
  if _CHILD.value:
    name, devices = _CHILD.value.split(",")
    print(json.dumps(measure(name, int(devices), _SCAN.value)))
    return
  print(f"scan_layers={_SCAN.value}")
  print("| config | devices | parameters | batch | arguments | outputs | temporaries (GiB per "
        "device) | compile s |")
  print("|---|---|---|---|---|---|---|---|")
  for name in _CASES.value:
    for devices in map(int, _DEVICES.value):
      env = dict(os.environ, JAX_PLATFORMS="cpu",
                 XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
      out = subprocess.run([sys.executable, __file__, f"--child={name},{devices}",
                            f"--scan_layers={_SCAN.value}"], env=env,
                           capture_output=True, text=True, check=False)
      if out.returncode:
        print(f"| {name} | {devices} | failed: {out.stderr.strip().splitlines()[-1]} |")
        continue
      r = json.loads(out.stdout.strip().splitlines()[-1])
      print(f"| {name} | {devices} | {r['parameters']:,} | {r['batch']} | {r['arguments_gib']} | "
            f"{r['outputs_gib']} | {r['temporaries_gib']} | {r['compile_s']} |", flush=True)


if __name__ == "__main__":
  app.run(main)
