r"""How each product of our training step speeds up with the CPU's cores:
`tools/keep_freed_memory.sh python benchmarks/core_scaling.py`.

Compiles a config's step (`cpu` size, --dtype), reads every distinct dot of the compiled program
(shapes, contracting and batch axes, dtypes; benchmarks/PROFILE_NOTES.md, round 12), and has each
timed alone with random inputs in two child processes, given the dots on stdin: one pinned to the
first core, one on all of them (the affinity is set before jax starts in the child, so XLA's thread
pool takes its size from it). Prints one row
per distinct dot (count in the step, ms each on one core and on all, the speedup) and the totals of
the batched products (attention's, per query block) and the others (the dense layers'). Nothing is
asserted. On a CPU only; measure while nothing else runs.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
# pylint: disable=wrong-import-position
import collections
import json
import os
import re
import subprocess
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.step_setup import config_at, step_inputs
from keynorm_jax.training.loop import make_train_step

_CONFIG = flags.DEFINE_string("config", "transformer_kna_rope", "Config name.")
_DTYPE = flags.DEFINE_enum("dtype", "bfloat16", ["float32", "bfloat16"], "model.compute_dtype.")
_CHILD = flags.DEFINE_bool("child", False, "Internal: time the dots here (pinned by the parent).")

_DOT = re.compile(r"= (\w+)\[[\d,]*\]\S* dot\(%([\w.\-]+), %([\w.\-]+)\)")
_SHAPE = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\w+)\[([\d,]*)\]")


def _axes(line, name):
  found = re.search(name + r"=\{([\d,]*)\}", line)
  return tuple(int(a) for a in found.group(1).split(",") if a) if found else ()


def step_dots(config_name, dtype):
  """{(lhs (dtype, shape), rhs (dtype, shape), out dtype, contracting, batch axes): count}."""
  model, tx, state, batch = step_inputs(config_at(config_name, "cpu", dtype=dtype))
  hlo = jax.jit(make_train_step(model, tx, jax.random.PRNGKey(1))).lower(state, batch).compile()
  count, shapes = collections.Counter(), {}
  for line in hlo.as_text().splitlines():
    if line.endswith("{") and not line.startswith(" "):  # a computation begins: its own names
      shapes = {}
    if (m := _SHAPE.match(line)):
      shapes[m.group(1)] = (m.group(2), tuple(int(n) for n in m.group(3).split(",") if n))
    if (m := _DOT.search(line)):
      count[(shapes[m.group(2)], shapes[m.group(3)], m.group(1),
             (_axes(line, "lhs_contracting_dims"), _axes(line, "rhs_contracting_dims")),
             (_axes(line, "lhs_batch_dims"), _axes(line, "rhs_batch_dims")))] += 1
  return count


def time_dots(keys):
  """{key: best ms of one call} for step_dots' keys as JSON, each dot compiled alone."""
  types = {"bf16": jnp.bfloat16, "f32": jnp.float32}
  rng = np.random.default_rng(0)
  out = {}
  for key in keys:
    (ta, sa), (tb, sb), to, contracting, batch = json.loads(key)
    contracting, batch = (tuple(map(tuple, axes)) for axes in (contracting, batch))
    a = jnp.asarray(rng.standard_normal(sa), types[ta])
    b = jnp.asarray(rng.standard_normal(sb), types[tb])
    dot = jax.jit(lambda a, b, c=contracting, n=batch, t=types[to]: jax.lax.dot_general(
        a, b, (c, n), preferred_element_type=t))
    jax.block_until_ready(dot(a, b))
    best = float("inf")
    for _ in range(5):
      start = time.perf_counter()
      for _ in range(10):
        result = dot(a, b)
      jax.block_until_ready(result)
      best = min(best, (time.perf_counter() - start) / 10)
    out[key] = best * 1e3
  return out


def _child():
  print(json.dumps(time_dots(json.loads(sys.stdin.read()))))


def _run_child(cores, keys):
  """{key: ms} timed by a child process pinned to `cores`."""
  out = subprocess.run([sys.executable, __file__, "--child"], input=json.dumps(keys), check=True,
                       capture_output=True, text=True,
                       preexec_fn=lambda: os.sched_setaffinity(0, cores)).stdout
  return json.loads(out.strip().splitlines()[-1])


def main(argv):
  del argv
  if _CHILD.value:
    _child()
    return
  counts = {json.dumps(k): n for k, n in step_dots(_CONFIG.value, _DTYPE.value).items()}
  every = sorted(os.sched_getaffinity(0))
  one, many = _run_child([every[0]], list(counts)), _run_child(every, list(counts))
  print(f"{_CONFIG.value}, {_DTYPE.value}, `cpu` size: each distinct dot of the step alone, "
        f"1 core against {len(every)}")
  print(f"| dot | count | 1 core ms | {len(every)} cores ms | speedup |\n|---|---|---|---|---|")
  totals = collections.defaultdict(lambda: [0.0, 0.0])
  for key, n in sorted(counts.items(), key=lambda kv: -one[kv[0]] * kv[1]):
    (_, sa), (_, sb), _, contracting, batch = json.loads(key)
    kind = "batched" if batch[0] else "other"
    a, b = one[key], many[key]
    totals[kind][0] += n * a
    totals[kind][1] += n * b
    print(f"| {list(sa)} . {list(sb)} contracting {contracting} batch {batch} | {n} | "
          f"{a:.3f} | {b:.3f} | {a / b:.2f} |")
  for kind, (a, b) in totals.items():
    print(f"{kind} products, summed over the step: {a:.1f} ms on 1 core, {b:.1f} ms on "
          f"{len(every)} ({a / b:.2f}x)")


if __name__ == "__main__":
  app.run(main)
