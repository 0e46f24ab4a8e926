"""`python -m keynorm_jax.export_hf --workdir=runs/transformer_baseline_rope --out=DIR`: one of our
Transformer runs (its latest verified checkpoint) as a Llama-format Hugging Face folder, where
Llama computes the same model (Baseline attention, plain RoPE; huggingface/export.py); refused in
one line with the reason otherwise."""

from absl import app, flags, logging

from keynorm_jax import cli
from keynorm_jax.huggingface.export import FILES, export
from keynorm_jax.run_config import model_config
from keynorm_jax.runs import load_run

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's folder.", required=True)
_OUT = flags.DEFINE_string("out", None, "The new folder to write.", required=True)


def _export():
  cli.check_folder_flags(workdir=_WORKDIR.value, out=_OUT.value)
  print(f"Reading {_WORKDIR.value}'s latest verified checkpoint ...", flush=True)
  run = load_run(_WORKDIR.value)
  print(f"Writing step {run.step} of {run.name} to {_OUT.value} ...", flush=True)
  return run, export(model_config(run.config), run.params, _OUT.value)


def main(argv):
  cli.refuse_arguments(argv)
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # Orbax's INFO lines
  run, out = cli.run_or_exit(_export)
  print(f"Wrote {out} (step {run.step} of {run.name}): {', '.join(FILES)}.")


if __name__ == "__main__":
  app.run(main)
