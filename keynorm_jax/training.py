"""The training loop: `train_and_evaluate(config, workdir)`, called by train.py and by the tests."""

import json
import math
import pathlib
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import numpy as np
import optax
import tqdm

from keynorm_jax import corpora, run_config, sharding
from keynorm_jax.checkpointing import RunCheckpoints
from keynorm_jax.eval_sets import eval_windows
from keynorm_jax.metrics_writer import MetricsWriter
from keynorm_jax.models import count_params
from keynorm_jax.optimizer import learning_rate_schedule, make_optimizer
from keynorm_jax.scoring import make_scorer, score_windows, token_scores
from keynorm_jax.tokenizer import join_documents
from keynorm_jax.train_stream import train_dataset

# Keys that may change when a stopped run is continued (they do not change what is computed).
RESUMABLE_CHANGES = ("num_train_steps", "checkpoint_every_steps", "max_checkpoints_to_keep",
                     "log_every_steps", "eval_every_steps", "num_devices")


class NonFiniteLossError(FloatingPointError):
  """The loss became NaN or infinite; the last good checkpoint is kept."""


def init_state(model, tx, seed: int, train_length: int):
  params = model.init(jax.random.PRNGKey(seed), jnp.zeros([1, train_length], jnp.int32))["params"]
  return {"step": jnp.zeros([], jnp.int32), "params": params, "opt_state": tx.init(params)}


def abstract_state(model, tx, seed: int, train_length: int, state_sharding=None):
  """Shapes, dtypes (and shardings) of the train state, for restoring without initializing."""
  shapes = jax.eval_shape(lambda: init_state(model, tx, seed, train_length))
  if state_sharding is None:
    return shapes
  return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=state_sharding),
                      shapes)


def make_train_step(model, tx, dropout_key):

  def train_step(state, batch_BxT1):
    inputs, targets = batch_BxT1[:, :-1], batch_BxT1[:, 1:]
    rng = jax.random.fold_in(dropout_key, state["step"])

    def loss_fn(params):
      logits = model.apply({"params": params}, inputs, deterministic=False,
                           rngs={"dropout": rng, "positions": jax.random.fold_in(rng, 1)})
      correct, nll = token_scores(logits, targets)
      return nll.mean(), correct.mean()

    (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    new_state = {"step": state["step"] + 1, "params": optax.apply_updates(state["params"], updates),
                 "opt_state": opt_state}
    return new_state, {"loss": loss, "accuracy": accuracy, "grad_norm": optax.global_norm(grads)}

  return train_step


def _flat(d: dict, prefix="") -> dict:
  out = {}
  for key, value in d.items():
    out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
  return out


def _check_same_run(saved: dict, config, workdir) -> None:
  saved, current = _flat(saved), _flat(config.to_dict())
  differing = sorted(k for k in set(saved) | set(current)
                     if k not in RESUMABLE_CHANGES and saved.get(k) != current.get(k))
  if differing:
    raise run_config.ConfigError(
        f"{workdir} holds a run with a different config ({', '.join(differing)} differ). Resume "
        f"it with its own config, or pass another --workdir.")


def _tokens(config, split):
  """The split's documents joined into one token stream; with several hosts, host 0 prepares the
  dataset (e.g. the first TFDS build) while the others wait, so they never build it at once."""
  if jax.process_count() > 1:
    if jax.process_index() == 0:
      corpora.load_documents(config.data, split)
    multihost_utils.sync_global_devices(f"keynorm_jax data ready: {split}")
  return join_documents(corpora.load_documents(config.data, split))


def train_and_evaluate(config, workdir, *, stop_after_steps=None):
  """Trains (or resumes) the run in `workdir`; returns the last logged metrics.

  stop_after_steps: stop once this many steps are done in all, without a final checkpoint, as a
  killed run would (for tests of resumption).
  """
  config = run_config.resolve(config)
  mesh = sharding.make_mesh(config.num_devices)
  run_config.validate(config, mesh.size)
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  is_main = jax.process_index() == 0

  model = run_config.build_model(config)
  tx = make_optimizer(config)
  schedule = learning_rate_schedule(config)
  state_sharding = sharding.replicated(mesh)
  checkpoints = RunCheckpoints(workdir, max_to_keep=config.max_checkpoints_to_keep)
  saved = checkpoints.restore_latest(None, read_only=True)  # the saved config, read first
  if saved is not None:
    _check_same_run(saved[3], config, workdir)
  restored = checkpoints.restore_latest(
      abstract_state(model, tx, config.seed, config.train_length, state_sharding))

  dataset = train_dataset(_tokens(config, "train"), train_length=config.train_length,
                          global_batch_size=config.batch_size, seed=config.seed,
                          process_index=jax.process_index(), process_count=jax.process_count())
  batches = iter(dataset)
  if restored is None:
    state = jax.device_put(init_state(model, tx, config.seed, config.train_length),
                           state_sharding)
  else:
    _, state, data_state, _ = restored
    batches.set_state(data_state)
  start_step = int(state["step"])
  if is_main:
    (workdir / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    print(f"{config.name}: {count_params(state['params']):,} parameters, {mesh.size} device(s), "
          f"{'resuming at step ' + str(start_step) if start_step else 'starting'} in {workdir}",
          flush=True)

  validation = eval_windows(_tokens(config, "validation"), kind="non_repeated",
                            length=config.train_length, count=config.eval_windows,
                            train_length=config.train_length)
  scorer = make_scorer(model)
  train_step = jax.jit(make_train_step(model, tx, jax.random.PRNGKey(config.seed + 1)),
                       out_shardings=(state_sharding, None), donate_argnums=0)
  writer = MetricsWriter(workdir, resume_step=start_step, enabled=is_main)
  progress = tqdm.tqdm(total=config.num_train_steps, initial=start_step, disable=not is_main,
                       desc=config.name, dynamic_ncols=True)
  last_good_checkpoint = restored[0] if restored else None
  logged, tick, tick_step = {}, time.perf_counter(), start_step
  try:
    for step in range(start_step + 1, config.num_train_steps + 1):
      batch = sharding.global_batch(mesh, next(batches))
      state, metrics = train_step(state, batch)
      metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
      if not math.isfinite(metrics["loss"]):
        checkpoints.wait()
        raise NonFiniteLossError(
            f"The loss became {metrics['loss']} at step {step}. The last good checkpoint "
            f"(step {last_good_checkpoint}) is kept in {workdir / 'checkpoints'}. Lower "
            f"--config.learning_rate, raise --config.warmup_steps or tighten "
            f"--config.grad_clip_norm, then resume or restart.")
      progress.update(1)
      progress.set_postfix(loss=f"{metrics['loss']:.3f}", acc=f"{metrics['accuracy']:.3f}")
      last = step == config.num_train_steps
      evaluate = step % config.eval_every_steps == 0 or last
      if step % config.log_every_steps == 0 or evaluate:
        now = time.perf_counter()
        tokens = (step - tick_step) * config.batch_size * config.train_length
        logged = {**metrics, "learning_rate": float(schedule(step - 1)),
                  "tokens_per_second": tokens / max(now - tick, 1e-9)}
        if evaluate:
          correct, nll = score_windows(scorer, state["params"], validation, config.batch_size)
          logged.update(eval_loss=float(nll.mean()), eval_accuracy=float(correct.mean()))
        writer.write(step, logged)
        tick, tick_step = time.perf_counter(), step
      if step % config.checkpoint_every_steps == 0 or last:
        checkpoints.save(step, state, batches.get_state(), config.to_dict())
        last_good_checkpoint = step
      if stop_after_steps is not None and step >= stop_after_steps:
        break
  finally:
    progress.close()
    writer.close()
    checkpoints.close()
  logging.info("Finished at step %d: %s", int(state["step"]), logged)
  return logged
