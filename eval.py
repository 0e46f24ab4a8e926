r"""Evaluates trained runs far beyond their training length: `python eval.py --length=4096`.

Every run under --workdir (default runs/; or one run's folder) is restored from its latest checkpoint
with its weights unchanged and scored on the "repeated" and "non_repeated" held-out sets at its
training length and at --length (or each of --lengths), for each --rope_scaling.
"""

import sys

from absl import app, flags, logging

from keynorm_jax.eval_command import check_eval_options, check_scaling_names, evaluate_workdir
from keynorm_jax.evaluation import ScalingRequest

_WORKDIR = flags.DEFINE_string("workdir", "runs", "A run's folder, or a folder of runs.")
_LENGTH = flags.DEFINE_integer("length", 4096, "Evaluation length (tokens).")
_LENGTHS = flags.DEFINE_list("lengths", None, "Several lengths, e.g. 512,1024,2048,4096; "
                             "overrides --length.")
_NUM_WINDOWS = flags.DEFINE_integer("num_windows", 16, "Windows per set.")
_SCALINGS = flags.DEFINE_list(
    "rope_scaling", ["none"], "Inference-time RoPE scalings, one column each: none, linear, ntk, "
    "dynamic_ntk, yarn, rerope, leaky_rerope.")
_FACTOR = flags.DEFINE_float("factor", None, "Scaling factor; default length / train_length "
                             "(dynamic_ntk: 1, since it already grows with the length).")
_REROPE_WINDOW = flags.DEFINE_integer("rerope_window", None, "ReRoPE window; default "
                                      "train_length / 2.")
_LEAKY_WINDOW = flags.DEFINE_integer("leaky_rerope_window", None, "Leaky ReRoPE window; "
                                     "default train_length / 4.")
_LEAKY_FACTOR = flags.DEFINE_float("leaky_rerope_factor", 16.0, "Leaky ReRoPE k.")
_POSTHOC_LOGN = flags.DEFINE_bool("posthoc_logn", False, "Add, beside each scaling, a column "
                                  "with the post-hoc log n max(1, log(i+1)/log(train_length)).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 0, "Windows per batch; 0 = fit ~4 GiB.")
_OUTPUT = flags.DEFINE_string("output", None, "Results folder; default <workdir>/eval.")
_DIAGNOSTICS = flags.DEFINE_bool("diagnostics", False, "Also record key-norm spread and "
                                 "attention entropy per layer.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  try:
    check_scaling_names(_SCALINGS.value)
    check_eval_options(factor=_FACTOR.value, batch_size=_BATCH_SIZE.value)
    lengths = [int(x) for x in _LENGTHS.value] if _LENGTHS.value else [_LENGTH.value]
  except ValueError as e:
    sys.exit(f"error: {e}")
  requests = []
  for name in _SCALINGS.value:
    for posthoc in ([False, True] if _POSTHOC_LOGN.value else [False]):
      requests.append(ScalingRequest(
          rope_scaling=name, factor=_FACTOR.value, rerope_window=_REROPE_WINDOW.value,
          leaky_rerope_window=_LEAKY_WINDOW.value, leaky_rerope_factor=_LEAKY_FACTOR.value,
          posthoc_logn=posthoc))
  try:
    records, failures, _ = evaluate_workdir(
        _WORKDIR.value, lengths=lengths, requests=requests, num_windows=_NUM_WINDOWS.value,
        batch_size=_BATCH_SIZE.value, output=_OUTPUT.value, diagnostics=_DIAGNOSTICS.value)
  except (ValueError, RuntimeError) as e:
    sys.exit(f"error: {e}")
  if failures or not records:
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
