r"""Evaluates trained runs far beyond their training length: `python eval.py --length=4096`.

`--tasks=passkey,mqar` measures retrieval instead (or beside `next_token`): exact match of a needle
placed at each of --depths, at every length, drawn as a needle-in-a-haystack heat map per run and
method.

Every run under --workdir (default runs/; or one run's folder) is restored from its latest checkpoint
with its weights unchanged and scored on the "repeated" and "non_repeated" held-out sets at its
training length and at --length (or each of --lengths), for each inference-time method (--methods).
The methods and their knobs come from keynorm_jax.positions' registry. `--hf_checkpoint=DIR` evaluates
a local Hugging Face model of the Llama family the same way instead (keynorm_jax/huggingface/), at
--lengths only, below or above its max_position_embeddings, against its 1x: its pretraining length
(original_max_position_embeddings of its rope parameters, else max_position_embeddings), or
--hf_train_length.
SIGTERM or Ctrl-C stops at the next safe point (before each run, each scoring and the files) with
one line and exit code 75; nothing is left half-written (the files are written all at once, at the
end); a second signal stops at once.
"""

# First of all, before the imports that take seconds: a signal from now on requests a stop.
from keynorm_jax.training import preemption  # pylint: disable=g-bad-import-order
if __name__ == "__main__":  # (not when a test imports this file)
  preemption.install()

import sys  # pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app, flags, logging  # pylint: disable=g-import-not-at-top,wrong-import-position

from keynorm_jax.data.retrieval import DEFAULT_DEPTHS
from keynorm_jax import cli
from keynorm_jax.attention import KERNEL_NAMES
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.command import (EvalRequest, check_eval_options, check_tasks,
                                            check_text, evaluate_runs, make_columns)
from keynorm_jax.evaluation.evaluate import held_out_tokens
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
_HF_TRAIN_LENGTH = flags.DEFINE_integer(
    "hf_train_length", None, "With --hf_checkpoint: the model's 1x, the length the multiples, the "
    "inference-time methods and the repeated set count from (default: its pretraining length, "
    "original_max_position_embeddings of its rope parameters, else max_position_embeddings).")
_HF_ONLY = ("hf_dtype", "data_dir", "hf_train_length")  # flags that mean nothing without it
_DIAGNOSTICS = flags.DEFINE_bool("diagnostics", False, "Also record key-norm spread and "
                                 "attention entropy per layer.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  # Bad options, no runs, an unwritable output folder or files: `error: <message>`, one line; a
  # signal: its line and exit code 75.
  records, failures, _ = cli.run_or_exit(_evaluate)
  cli.run_or_exit(lambda: preemption.check(_AFTER))  # the last moment: never an exit 0 after one
  if failures or not records:
    sys.exit(1)


_BEFORE = "before any work: nothing was read or written. Run the same command again to evaluate."
_AFTER = "at the end: the evaluation is complete, as said above."


def check_hf_flags(hf_checkpoint, present) -> None:
  """ConfigError for a flag of --hf_checkpoint's given without it (it would be ignored), and for
  --workdir given with both --hf_checkpoint and --output (then nothing reads it). present: the
  names of the flags given."""
  if hf_checkpoint is None:
    given = [f"--{name}" for name in _HF_ONLY if name in present]
    if given:
      raise ConfigError(f"{', '.join(given)} applies to --hf_checkpoint's folder only (our runs' "
                        f"1x is their training length, their text and dtype their own); pass "
                        f"--hf_checkpoint, or leave {', '.join(given)} unset.")
  elif "workdir" in present and "output" in present:
    raise ConfigError("--workdir with --hf_checkpoint and --output: nothing reads it (the folder "
                      "is the run, --output the results' place); leave --workdir unset.")


def _evaluate():
  """Checks every option, then evaluates: evaluate_runs' (records, failures, paths) of the runs
  under --workdir or of --hf_checkpoint's folder."""
  preemption.check(_BEFORE)
  present = {name for name in flags.FLAGS if flags.FLAGS[name].present}
  check_hf_flags(_HF_CHECKPOINT.value, present)
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
    source = folder_source(
        _HF_CHECKPOINT.value, _WORKDIR.value, data_dir=_DATA_DIR.value, dtype=_HF_DTYPE.value,
        train_length=_HF_TRAIN_LENGTH.value,  # the asked lengths' text, before any weight is read:
        check=lambda config: check_text(held_out_tokens(config), request.lengths, request))
    if "workdir" in present:  # it only places the results
      print(f"Note: --workdir={_WORKDIR.value} with --hf_checkpoint holds no run to evaluate; it "
            f"places the results only: {source.default_output} (--output to choose).", flush=True)
  else:
    source = workdir_source(_WORKDIR.value, trust_unverified=_TRUST_UNVERIFIED.value)
  preemption.check(_BEFORE.replace("nothing was read", "nothing was evaluated"))
  return evaluate_runs(source, request, output=_OUTPUT.value, stop=preemption.check)


if __name__ == "__main__":
  app.run(main)
