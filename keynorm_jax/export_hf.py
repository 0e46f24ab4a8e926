"""`python -m keynorm_jax.export_hf --workdir=runs/transformer_baseline_rope --out=DIR`: one of our
Transformer runs (its latest verified checkpoint) as a Llama-format Hugging Face folder, where
Llama computes the same model (Baseline attention, plain RoPE; huggingface/export.py); refused in
one line with the reason otherwise."""

from absl import app, flags

from keynorm_jax import cli
from keynorm_jax.evaluation.run_loading import load_run
from keynorm_jax.huggingface.export import export
from keynorm_jax.run_config import model_config

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's folder.", required=True)
_OUT = flags.DEFINE_string("out", None, "The new folder to write.", required=True)


def _export():
  run = load_run(_WORKDIR.value)
  return run, export(model_config(run.config), run.params, _OUT.value)


def main(argv):
  cli.refuse_arguments(argv)
  run, out = cli.run_or_exit(_export)
  print(f"Wrote {out} (step {run.step} of {run.name}): config.json, model.safetensors, "
        "tokenizer.json.")


if __name__ == "__main__":
  app.run(main)
