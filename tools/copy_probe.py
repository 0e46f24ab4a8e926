r"""The copy probe: does a model learn to copy when every training window is a synthetic copy?

A probe is a plain training run, e.g.
  python train.py --config=kna_rope --config.data.copy_fraction=1.0 \
      --config.num_train_steps=600 --config.log_every_steps=25 --workdir=runs/probe
(every window a prefix of 16 to 256 tokens tiled over the window). A model that copies reaches a
training accuracy far above its accuracy on natural text (the cpu Transformer: 0.82 at step 300).

  python tools/copy_probe.py record --workdir=runs/probe --name=gau_kna_rope_prenorm_copy100_600 \
      --what="..." --command="python train.py ..."
writes results/retrieval_recipe/<name>.json (training accuracy by step, every 100 steps, and the
evaluation accuracy on natural text), and
  python tools/copy_probe.py plot
draws every results/retrieval_recipe/*copy100*.json into copy_probe.png there.
"""

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from keynorm_jax.study.provenance import commit  # pylint: disable=g-import-not-at-top
from keynorm_jax.training.metrics_writer import read_metrics  # pylint: disable=g-import-not-at-top

FOLDER = ROOT / "results" / "retrieval_recipe"


def record(args) -> pathlib.Path:
  metrics = read_metrics(args.workdir)
  if not metrics:
    sys.exit(f"error: no metrics in {args.workdir}/metrics.jsonl: train the probe there first.")
  train = {str(m["step"]): round(m["accuracy"], 4) for m in metrics
           if "accuracy" in m and m["step"] % 100 == 0}
  natural = {str(m["step"]): round(m["eval_accuracy"], 4) for m in metrics if "eval_accuracy" in m}
  code = args.code or (commit() or "unknown")[:7]
  out = pathlib.Path(args.folder) / f"{args.name}.json"
  out.write_text(json.dumps({
      "what": args.what, "command": args.command, "device": args.device, "code": code,
      "train_accuracy_by_step": train, "eval_accuracy_natural_text": natural}, indent=1) + "\n")
  return out


def plot(args) -> pathlib.Path:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(11, 4.5))
  folder = pathlib.Path(args.folder)
  # Past ten probes the default cycle repeats its colors: tab20's strong colors, then its pale ones.
  tab20 = plt.get_cmap("tab20").colors
  colors = tab20[0::2] + tab20[1::2]
  for i, path in enumerate(sorted(folder.glob("*copy100*.json"))):
    probe = json.loads(path.read_text())
    steps = sorted(probe["train_accuracy_by_step"], key=int)
    ax.plot([int(s) for s in steps], [probe["train_accuracy_by_step"][s] for s in steps],
            marker=".", label=path.stem, color=colors[i % len(colors)],
            linestyle="--" if path.stem.startswith("transformer") else "-")
  ax.set_xlabel("training step")
  ax.set_ylabel("training accuracy (every window a copy)")
  ax.set_title("Copy probe, cpu size: who learns to copy")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside, not over, the lines
  out = folder / "copy_probe.png"
  fig.tight_layout()
  fig.savefig(out, dpi=110)
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="action", required=True)
  rec = sub.add_parser("record")
  rec.add_argument("--workdir", required=True)
  rec.add_argument("--name", required=True)
  rec.add_argument("--what", required=True)
  rec.add_argument("--command", required=True)
  rec.add_argument("--device", default="cpu (2 cores)")
  rec.add_argument("--code", default="", help="the commit the probe trained from; default HEAD")
  draw = sub.add_parser("plot")
  for command in (rec, draw):
    command.add_argument("--folder", default=str(FOLDER), help="where the probes' files are")
  args = parser.parse_args(argv)
  print({"record": record, "plot": plot}[args.action](args))


if __name__ == "__main__":
  main()
