"""Shared by the one-off diagnostics in results/*/ that probe a trained run's attention: the run and
its model on the reference kernel (the whole square of scores, through the functions the
diagnostics patch), and the held-out non-repeated windows the evaluator uses.

  from results.probing import reference_run, held_out_windows   # with PYTHONPATH=.
"""
from keynorm_jax import run_config
from keynorm_jax.data.eval_sets import eval_windows
from keynorm_jax.evaluation.evaluate import held_out_tokens
from keynorm_jax.evaluation.run_loading import load_run


def reference_run(workdir):
  """(run, model) of a trained run's workdir, its config switched to the reference kernel."""
  run = load_run(workdir)
  with run.config.unlocked():
    run.config.model.kernel = "reference"
  return run, run_config.build_model(run.config)


def held_out_windows(config, length, count):
  """The evaluator's `count` held-out non-repeated windows of `length` tokens (+1 for targets)."""
  return eval_windows(held_out_tokens(config), kind="non_repeated", length=length, count=count,
                      train_length=config.train_length)
