r"""Evaluates trained runs far beyond their training length: `python eval.py --length=4096`.

`--tasks=passkey,mqar` measures retrieval instead (or beside `next_token`): exact match of a needle
placed at each of --depths, at every length, drawn as a needle-in-a-haystack heat map per run and
method.

Every run under --workdir (default runs/; or one run's folder) is restored from its latest checkpoint
with its weights unchanged and scored on the "repeated" and "non_repeated" held-out sets at its
training length and at --length (or each of --lengths), for each inference-time method (--methods).
The methods and their knobs come from keynorm_jax.positions' registry. `--hf_checkpoint=DIR` evaluates
a local Hugging Face model of the Llama family the same way instead (keynorm_jax/huggingface/).
"""

import sys

from absl import app, flags, logging

from keynorm_jax.data.retrieval import DEFAULT_DEPTHS
from keynorm_jax import cli
from keynorm_jax.attention import KERNEL_NAMES
from keynorm_jax.evaluation.command import (EvalRequest, check_eval_options, check_tasks,
                                            evaluate_runs, make_columns)
from keynorm_jax.huggingface.run import folder_source
from keynorm_jax.positions import INFERENCE_METHODS
from keynorm_jax.positions.registry import knob_help
from keynorm_jax.runs import workdir_source

_WORKDIR = flags.DEFINE_string("workdir", "runs", "A run's folder, or a folder of runs.")
_LENGTH = flags.DEFINE_integer("length", 4096, "Evaluation length (tokens).")
_LENGTHS = flags.DEFINE_list("lengths", None, "Several lengths, e.g. 512,1024,2048,4096; "
                             "overrides --length.")
_NUM_WINDOWS = flags.DEFINE_integer("num_windows", 16, "Windows per set.")
_METHODS = flags.DEFINE_list(
    "methods", ["none"], "Inference-time methods, one column each (a method that does not apply "
    "to a model is skipped with its reason): " + INFERENCE_METHODS.help() + ".")
flags.DEFINE_alias("rope_scaling", "methods")
_KNOBS = {
    name: (flags.DEFINE_integer if "int" in str(field.type) else flags.DEFINE_float)(
        name, None, knob_help(field) or f"{name} (see the method table in the README).")
    for name, field in INFERENCE_METHODS.knobs().items()
}
_POSTHOC_LOGN = flags.DEFINE_bool("posthoc_logn", False, "Add, beside each method, a column "
                                  "with the post-hoc log n max(1, log(i+1)/log(train_length)).")
_REPEAT_PERIOD = flags.DEFINE_integer(
    "repeat_period", None, "Period of the repeated set: its windows tile their first P tokens "
    "(default train_length, as in the seed's table; train_length / 4 puts the copy distance inside "
    "the trained range).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 0, "Windows per batch; 0 = fit ~4 GiB.")
_OUTPUT = flags.DEFINE_string("output", None, "Results folder; default <workdir>/eval.")
_TASKS = flags.DEFINE_list(
    "tasks", ["next_token"], "What to evaluate: next_token (next-token accuracy on the repeated and "
    "non-repeated sets) and the retrieval tasks passkey (a 5-digit key at a depth, asked at the "
    "end), passkey_letters (the same with 5 lowercase letters) and mqar (16 letter-digit pairs at "
    "a depth, all queried at the end), comma-separated.")
_DEPTHS = flags.DEFINE_list("depths", None, "Retrieval: needle depths as fractions of the context "
                            "from its start (0) to its end (1); default 10 from 0 to 1.")
_NUM_PROMPTS = flags.DEFINE_integer("num_prompts", 4, "Retrieval: prompts per task, length and "
                                    "depth (the same prompts for every model).")
_TRUST_UNVERIFIED = flags.DEFINE_bool(
    "trust_unverified_checkpoints", False, "Also evaluate a checkpoint whose checksum manifest is "
    "missing, empty or unreadable (by default it is skipped like a corrupt one).")
_KERNEL = flags.DEFINE_enum("kernel", None, KERNEL_NAMES, "Attention kernel to evaluate with "
                            "instead of each run's own model.kernel (the same function; e.g. "
                            "cudnn on a GPU, blocked for bounded memory).")
_HF_CHECKPOINT = flags.DEFINE_string(
    "hf_checkpoint", None, "Instead of our runs: a local Hugging Face model folder (config.json, "
    "*.safetensors, tokenizer.json) of the Llama family (Llama 2/3/3.1/3.2, TinyLlama, Mistral "
    "without a sliding window, Qwen2), evaluated at --lengths on the held-out text and the "
    "retrieval prompts in its own tokens.")
_HF_DTYPE = flags.DEFINE_enum("hf_dtype", "auto", ("auto", "float32", "bfloat16"),
                              "With --hf_checkpoint: parameters and computation in float32 or "
                              "bfloat16; auto = bfloat16 for bfloat16 weights on an accelerator, "
                              "float32 otherwise.")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "With --hf_checkpoint: the TFDS data dir of the "
                                "held-out text (\"\" = the TFDS default).")
_DIAGNOSTICS = flags.DEFINE_bool("diagnostics", False, "Also record key-norm spread and "
                                 "attention entropy per layer.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  # Bad options, no runs, an unwritable output folder or files: `error: <message>`, one line.
  records, failures, _ = cli.run_or_exit(_evaluate)
  if failures or not records:
    sys.exit(1)


def _evaluate():
  """Checks every option, then evaluates: evaluate_runs' (records, failures, paths) of the runs
  under --workdir or of --hf_checkpoint's folder."""
  check_eval_options(factor=_KNOBS["factor"].value, batch_size=_BATCH_SIZE.value,
                     num_prompts=_NUM_PROMPTS.value, num_windows=_NUM_WINDOWS.value,
                     repeat_period=_REPEAT_PERIOD.value, workdir=_WORKDIR.value,
                     output=_OUTPUT.value)
  lengths = cli.numbers("lengths", _LENGTHS.value, int, [_LENGTH.value])
  depths = cli.numbers("depths", _DEPTHS.value, float, DEFAULT_DEPTHS)
  tasks = check_tasks(_TASKS.value)
  columns = make_columns(_METHODS.value, posthoc_logn=_POSTHOC_LOGN.value,
                         **{name: flag.value for name, flag in _KNOBS.items()})
  request = EvalRequest(
      lengths=lengths, columns=columns, num_windows=_NUM_WINDOWS.value,
      batch_size=_BATCH_SIZE.value, tasks=tasks, depths=depths, num_prompts=_NUM_PROMPTS.value,
      repeat_period=_REPEAT_PERIOD.value, kernel=_KERNEL.value, diagnostics=_DIAGNOSTICS.value)
  if _HF_CHECKPOINT.value is not None:
    source = folder_source(_HF_CHECKPOINT.value, _WORKDIR.value, data_dir=_DATA_DIR.value,
                           dtype=_HF_DTYPE.value)
  else:
    source = workdir_source(_WORKDIR.value, trust_unverified=_TRUST_UNVERIFIED.value)
  return evaluate_runs(source, request, output=_OUTPUT.value)


if __name__ == "__main__":
  app.run(main)
