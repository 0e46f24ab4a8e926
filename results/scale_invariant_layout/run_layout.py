"""One-off probe (2026-11-27): which difference keeps the GAU's KNA scale-invariant p-RoPE from
collapsing beyond 1x?

Trained on text alone in the seed's layout (one head, q and k from a shared z; 1000 steps) it falls
to 23.79 +- 0.37% at 8x over three seeds; trained with the retrieval recipe on separate q and k in
4 heads (3000 steps, half copies, half of the rest retrieval episodes) it keeps 60.12%. This trains
the text-only recipe (the study's `cpu` scale, 1000 steps) on the retrieval rows' layout, so the
layout is the only change from the collapsed runs, and evaluates it as the study evaluates every
run (next-token at 1x, 8x and 16x, the inference-time options at 8x, where attention goes).
`--heads=1` keeps q and k separate but in one head, to tell the two parts of the layout apart
(absl flags: an unknown or out-of-range flag is refused).

  PYTHONPATH=. python results/scale_invariant_layout/run_layout.py RUNS_DIR [CONFIG ...] [--heads=N]

Writes `<run key>.json` (the study's record format) beside this file; CONFIG defaults to
kna_scale_invariant, N to the retrieval rows' 4.
"""
import pathlib

from absl import app, flags

from keynorm_jax.study import plan
from keynorm_jax.study.records import RecordStore
from keynorm_jax.study.runner import run_one

_HEADS = flags.DEFINE_integer("heads", 4, "Heads that q and k are split into (kept separate).",
                              lower_bound=1)


def main(argv):
  if len(argv) < 2:
    raise app.UsageError("Give RUNS_DIR (and optionally CONFIG names).")
  here = pathlib.Path(__file__).resolve().parent
  store = RecordStore(here.name, root=here.parent)
  model = tuple((name, _HEADS.value if name == "gau_heads" else value)
                for name, value in plan.RETRIEVAL_GAU_MODEL)
  for name in argv[2:] or ["kna_scale_invariant"]:
    entry = plan.StudyRun(name, model=model)
    print(run_one(entry, scale="cpu", store=store, runs_dir=argv[1], keep_run=True), flush=True)


if __name__ == "__main__":
  app.run(main)
