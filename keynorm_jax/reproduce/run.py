r"""Reproduces the seed's tables with one command: `python -m keynorm_jax.reproduce --scale=cpu`.

`--architecture=transformer` runs the same study on the multi-head Transformer (config names with
the `transformer_` prefix, e.g. transformer_kna_rope; runs in runs/reproduce_<scale>_transformer).

Trains every variant of the seed's table plus qknorm_rope, kna_nope and baseline_nope, evaluates each
at the training length and at 8x (repeated and non-repeated; no scaling, NTK, YaRN, ReRoPE), and at
16x and 32x for a few variants, then writes a results page. What is already trained or evaluated is
skipped, so the command can be stopped and run again: SIGTERM or Ctrl-C stops it at the next safe
point (a training's next step, saving a checkpoint; between two evaluations) in one line, exit 75.
"""

import json
import pathlib
import time

from absl import flags, logging
import jax

from keynorm_jax import cli, run_config
from keynorm_jax.data.corpora import check_data_dir
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.command import make_columns
from keynorm_jax.evaluation.diagnostics import run_diagnostics
from keynorm_jax.evaluation.evaluate import evaluate_run, held_out_tokens
from keynorm_jax.reproduce.seed_comparison import write_page
from keynorm_jax.seed_results import EXTRA_VARIANTS, NO_SCALING, TRANSFORMER_PREFIX
from keynorm_jax.runs import load_run
from keynorm_jax.storage import disk
from keynorm_jax.storage.atomic import write_atomically
from keynorm_jax.study.provenance import code_version
from keynorm_jax.training import preemption
from keynorm_jax.training.loop import train_and_evaluate

VARIANTS = list(NO_SCALING) + list(EXTRA_VARIANTS)
SCALINGS = ("none", "ntk", "yarn", "rerope")
LONG_VARIANTS = ("baseline_rope", "kna_rope", "cosa_logn_rope", "qknorm_rope")

# scale -> training overrides and evaluation plan
SCALES = {
    "tiny": dict(train=dict(model_size="tiny", train_length=32, num_train_steps=30,
                            checkpoint_every_steps=30, eval_windows=4),
                 num_windows=4, long_windows=2),
    "cpu": dict(train=dict(model_size="cpu", train_length=512, num_train_steps=1000,
                           checkpoint_every_steps=250),
                num_windows=16, long_windows=4),
    "seed": dict(train=dict(model_size="seed", train_length=512),
                 num_windows=64, long_windows=16),
}

ARCHITECTURES = {"gau": "", "transformer": TRANSFORMER_PREFIX}  # -> config name prefix

_SCALE = flags.DEFINE_enum("scale", "cpu", list(SCALES), "Reproduction scale.")
_ARCHITECTURE = flags.DEFINE_enum("architecture", "gau", list(ARCHITECTURES),
                                  "gau (the seed's) or transformer (transformer_<variant> configs).")
_RUNS = flags.DEFINE_string("runs_dir", None, "Where runs go; default runs/reproduce_<scale> "
                            "(the Transformer: runs/reproduce_<scale>_transformer).")
_OUTPUT = flags.DEFINE_string("output", None, "Results page folder; default <runs_dir>/results.")
_VARIANTS = flags.DEFINE_list("variants", VARIANTS, "Variants to train and evaluate (GAU config "
                              "names; the Transformer adds its prefix).")
_STEPS = flags.DEFINE_integer("num_train_steps", 0, "Override the scale's training steps.")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "TFDS data dir (default: TFDS's).")


def _config(variant, scale, steps, data_dir):
  config = run_config.load_config(variant)
  config.update(SCALES[scale]["train"])
  if steps:
    config.num_train_steps = steps
  config.data.data_dir = data_dir
  return run_config.resolve(config)


def _trained(workdir, steps) -> bool:
  checkpoints = workdir / "checkpoints"
  return checkpoints.is_dir() and any(p.name == str(steps) for p in checkpoints.iterdir())


def _add_seconds(path, seconds) -> float:
  """Adds to the wall time recorded in `path` (training resumed over several invocations)."""
  total = (json.loads(path.read_text()) if path.exists() else 0.0) + seconds
  write_atomically(path, json.dumps(round(total, 1)))
  return round(total, 1)


def _evaluate(workdir, plan, long_lengths):
  """Per-run results, cached in <workdir>/reproduce_eval.json and keyed by the evaluation plan, the
  checkpoint step and the code version, so a retrained run or a code change never reuses them."""
  cache = workdir / "reproduce_eval.json"
  run = load_run(workdir)
  key = json.dumps({**plan, "long": long_lengths, "step": run.step,
                    "code_version": code_version()}, sort_keys=True)
  if cache.exists():
    found = json.loads(cache.read_text())
    if found.get("plan") == key:
      return found
  tokens = held_out_tokens(run.config)

  def progress(what):  # between two evaluations: where a signal stops the command
    preemption.check(f"while evaluating {workdir.name}: its training is saved (checkpoint "
                     f"{run.step} in {workdir / 'checkpoints'}) and the runs evaluated before it "
                     f"are kept. Run the same command again to go on from its evaluation.")
    print(f"  evaluating {what}", flush=True)

  records = evaluate_run(run, lengths=[plan["length"]],
                         columns=make_columns(SCALINGS),
                         num_windows=plan["num_windows"], tokens=tokens, progress=progress)
  if long_lengths:
    records += evaluate_run(run, lengths=long_lengths, columns=make_columns(["none"]),
                            num_windows=plan["long_windows"], tokens=tokens, progress=progress,
                            include_train_length=False)
  diagnostics = run_diagnostics(run, lengths=[plan["length"]], tokens=tokens)
  found = {"plan": key, "records": records, "diagnostics": diagnostics}
  write_atomically(cache, json.dumps(found))  # a kill leaves the old cache or the new
  return found


def config_names(variants, architecture):
  """The config names of the variants (GAU names) for an architecture."""
  prefix = ARCHITECTURES[architecture]
  return [v if v.startswith(prefix) else prefix + v for v in variants]


def reproduce(scale, *, runs_dir, output, variants, steps=0, data_dir="", architecture="gau"):
  """Trains and evaluates every variant (skipping what is done); returns the page's path."""
  runs_dir, started = pathlib.Path(runs_dir), time.time()
  timings, records, diagnostics = {}, [], {}
  variants = config_names(variants, architecture)
  for index, variant in enumerate(variants, 1):
    preemption.check(f"before {variant}: the runs before it are trained and evaluated. Run the "
                     f"same command again to go on.")
    config = _config(variant, scale, steps, data_dir)
    workdir = runs_dir / variant
    t0 = time.time()
    if _trained(workdir, config.num_train_steps):
      print(f"[{index}/{len(variants)}] {variant}: trained, skipping", flush=True)
    else:
      print(f"[{index}/{len(variants)}] {variant}: training {config.num_train_steps} steps",
            flush=True)
      train_and_evaluate(config, workdir)
      _add_seconds(workdir / "train_seconds.json", time.time() - t0)
    t1 = time.time()
    train_length = config.train_length
    plan = {"length": 8 * train_length, "num_windows": SCALES[scale]["num_windows"],
            "long_windows": SCALES[scale]["long_windows"]}
    long_lengths = ([16 * train_length, 32 * train_length]
                    if variant.removeprefix(TRANSFORMER_PREFIX) in LONG_VARIANTS else [])
    print(f"[{index}/{len(variants)}] {variant}: evaluating", flush=True)
    found = _evaluate(workdir, plan, long_lengths)
    records += found["records"]
    diagnostics[variant] = found["diagnostics"]
    timings[variant] = {"train_seconds": _add_seconds(workdir / "train_seconds.json", 0),
                        "eval_seconds": round(time.time() - t1, 1)}
  meta = {"scale": scale, "architecture": architecture, "config": SCALES[scale], "num_train_steps": config.num_train_steps,
          "jax": jax.__version__, "backend": jax.default_backend(),
          "device": str(jax.devices()[0].device_kind), "this_invocation_seconds":
          round(time.time() - started, 1), "timings": timings}
  return write_page(records, diagnostics, meta, output)


def check_options(*, variants, steps, architecture) -> None:
  """ConfigError for --variants (empty or unknown) or --num_train_steps (negative)."""
  if steps < 0:
    raise ConfigError(f"--num_train_steps must be at least 1, or 0 for the scale's own; got "
                      f"{steps}.")
  choose = (f"give config names (comma-separated), e.g. the default (the seed's table) "
            f"{','.join(VARIANTS)}")
  if not variants:
    raise ConfigError(f"--variants is empty; {choose}.")
  unknown = sorted(set(config_names(variants, architecture)) - set(run_config.available_configs()))
  if unknown:
    raise ConfigError(f"--variants: unknown {', '.join(unknown)}; {choose}.")


def check_paths(*, runs_dir, output, data_dir) -> None:
  """DataError or DiskError, naming the flag, for a folder that cannot be read or written; the
  outer folder first (ensure_writable creates it), so a bad one leaves no other folder behind."""
  check_data_dir(data_dir, flag="--data_dir")
  folders = [(runs_dir, "the runs folder", "--runs_dir"),
             (output, "the results page folder", "--output")]
  if not pathlib.Path(output).is_relative_to(runs_dir):
    folders.reverse()
  with disk.removed_if_refused(runs_dir, output):
    for folder, what, flag in folders:
      disk.ensure_writable(folder, what=what, fix=f"pass a writable {flag}")


def _check_all(*, runs_dir, output, architecture) -> None:
  """Every option, before any work."""
  cli.check_folder_flags(**{_RUNS.name: _RUNS.value, _OUTPUT.name: _OUTPUT.value})
  check_options(variants=_VARIANTS.value, steps=_STEPS.value, architecture=architecture)
  check_paths(runs_dir=runs_dir, output=output, data_dir=_DATA_DIR.value)


def main(argv):
  cli.refuse_arguments(argv)
  logging.set_verbosity(logging.WARNING)
  architecture = _ARCHITECTURE.value
  suffix = "" if architecture == "gau" else f"_{architecture}"
  runs_dir = _RUNS.value or f"runs/reproduce_{_SCALE.value}{suffix}"
  output = _OUTPUT.value or f"{runs_dir}/results"
  cli.run_or_exit(lambda: _check_all(runs_dir=runs_dir, output=output, architecture=architecture))
  page = cli.run_or_exit(lambda: reproduce(  # as train.py (preemption: exit 75)
      _SCALE.value, runs_dir=runs_dir, output=output, variants=_VARIANTS.value, steps=_STEPS.value,
      data_dir=_DATA_DIR.value, architecture=architecture))
  print(f"Results page: {page}")
