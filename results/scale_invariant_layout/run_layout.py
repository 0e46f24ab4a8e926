"""One-off probe (2026-11-27): which difference keeps the GAU's KNA scale-invariant p-RoPE from
collapsing beyond 1x?

Trained on text alone in the seed's layout (one head, q and k from a shared z; 1000 steps) it falls
to 23.79 +- 0.37% at 8x over three seeds; trained with the retrieval recipe on separate q and k in
4 heads (3000 steps, half copies, half of the rest retrieval episodes) it keeps 60.12%. This trains
the text-only recipe (the study's `cpu` scale, 1000 steps) on the retrieval rows' layout, so the
layout is the only change from the collapsed runs, and evaluates it as the study evaluates every
run (next-token at 1x, 8x and 16x, the inference-time options at 8x, where attention goes).
`--heads=1` keeps q and k separate but in one head, to tell the two parts of the layout apart.

  PYTHONPATH=. python results/scale_invariant_layout/run_layout.py RUNS_DIR [CONFIG ...] [--heads=N]

Writes `<run key>.json` (the study's record format) beside this file; CONFIG defaults to
kna_scale_invariant, N to the retrieval rows' 4.
"""
import pathlib
import sys

from keynorm_jax.study import plan
from keynorm_jax.study.records import RecordStore
from keynorm_jax.study.runner import run_one

if __name__ == "__main__":
  here = pathlib.Path(__file__).resolve().parent
  store = RecordStore(here.name, root=here.parent)
  options = [a for a in sys.argv[2:] if a.startswith("-")]
  if any(not a.startswith("--heads=") for a in options):
    sys.exit(f"run_layout.py takes only --heads=N (with '='); got {' '.join(options)}.")
  heads = [int(a.split("=", 1)[1]) for a in options]
  model = tuple((name, heads[0] if heads and name == "gau_heads" else value)
                for name, value in plan.RETRIEVAL_GAU_MODEL)
  for name in [a for a in sys.argv[2:] if not a.startswith("-")] or ["kna_scale_invariant"]:
    entry = plan.StudyRun(name, model=model)
    print(run_one(entry, scale="cpu", store=store, runs_dir=sys.argv[1], keep_run=True), flush=True)
