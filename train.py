r"""Trains a GAU or Transformer language model: `python train.py --config=kna_rope`.

--config takes a name (configs/named.py: [transformer_]<attention>[_logn]_<position>, e.g. kna_rope,
baseline_alibi) or a path to a config file; --config.key=value overrides any field (e.g.
--config.model_size=tiny --config.num_train_steps=50 --config.model.position_options.slope=0.1).
--workdir defaults to runs/<config name>. A workdir with checkpoints resumes from the latest;
--allow_config_change=learning_rate,warmup_steps lets it resume with changed optimizer settings
(recorded in <workdir>/config_history.jsonl), e.g. after a NaN stop.
Launched as one process of several (Cloud TPU pods, SLURM, or JAX_COORDINATOR_ADDRESS /
JAX_NUM_PROCESSES / JAX_PROCESS_ID set), pass --multihost to join JAX's multi-host runtime.
SIGTERM or Ctrl-C saves a checkpoint at the step in flight and exits with code 75 (preempted: run
the same command again to resume); before the first step, it stops with nothing to save, also
with 75; a second signal stops at once.
"""

# First of all, before the imports that take seconds: a signal from now on requests a stop.
from keynorm_jax.training import preemption  # pylint: disable=g-bad-import-order
if __name__ == "__main__":  # (not when a test imports this file)
  preemption.install()

import logging as python_logging  # pylint: disable=g-import-not-at-top,wrong-import-position
import sys  # pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app, flags, logging
from ml_collections import config_flags

from keynorm_jax import cli, run_config

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config name or file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (default runs/<config name>).")
_MULTIHOST = flags.DEFINE_bool("multihost", False, "Call jax.distributed.initialize() first.")
_TRUST_UNVERIFIED = flags.DEFINE_bool(
    "trust_unverified_checkpoints", False, "Restore a checkpoint whose checksum manifest is "
    "missing, empty or unreadable (by default it is set aside like a corrupt one).")
_ALLOW_CHANGE = flags.DEFINE_list(
    "allow_config_change", [], "Optimizer settings that may differ from the checkpoint's when "
    "resuming, e.g. learning_rate,warmup_steps (also num_train_steps, end_learning_rate_ratio, "
    "weight_decay, grad_clip_norm); each change is recorded with its step.")


class _NoOrbaxTracebacks(python_logging.Filter):
  """Orbax logs the traceback of a failed save before raising it; the run reports it in one line."""

  def filter(self, record):
    return not (record.exc_info and "/orbax/" in record.pathname)


def expand_config_name(argv):
  """Rewrites `--config=NAME` (or `--config NAME`) to the path of configs/NAME.py and checks
  that every `--config.KEY=...` override names a field of that config."""
  argv, name = list(argv), None
  given = [a for a in argv[1:] if a == "--config" or a.startswith("--config=")]
  if len(given) > 1:
    raise run_config.ConfigError(f"--config is given {len(given)} times ({', '.join(given)}); "
                                 f"give it once and change fields with --config.KEY=VALUE.")
  for i, arg in enumerate(argv):
    if arg.startswith("--config="):
      name = arg.split("=", 1)[1]
      argv[i] = f"--config={run_config.config_path(name)}"
    elif arg == "--config" and i + 1 < len(argv):
      name = argv[i + 1]
      argv[i + 1] = run_config.config_path(name)
  if name is not None:
    overrides = [a[len("--config."):].split("=", 1)[0] for a in argv
                 if a.startswith("--config.")]
    run_config.check_override_keys(run_config.load_config(name), overrides)
  return argv


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO
  logging.get_absl_handler().addFilter(_NoOrbaxTracebacks())
  cli.run_or_exit(lambda: cli.check_folder_flags(workdir=_WORKDIR.value))
  if _MULTIHOST.value:
    preemption.uninstall()  # JAX's preemption service takes SIGTERM (preemption.py)
    from keynorm_jax.training import sharding  # pylint: disable=g-import-not-at-top
    sharding.maybe_initialize_distributed()
  from keynorm_jax.training.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top

  config = _CONFIG.value
  cli.run_or_exit(lambda: train_and_evaluate(  # one line for the user's errors; preempted: 75
      config, _WORKDIR.value or f"runs/{config.name}", allow_config_change=_ALLOW_CHANGE.value,
      trust_unverified=_TRUST_UNVERIFIED.value))


if __name__ == "__main__":
  try:
    sys.argv = expand_config_name(sys.argv)
  except run_config.ConfigError as e:
    sys.exit(f"error: {e}")
  flags.mark_flag_as_required("config")
  app.run(main)
