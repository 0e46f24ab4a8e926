"""The training loop: `train_and_evaluate(config, workdir)`, called by train.py and by the tests.

What a run survives (tests/faults/ injects each fault): a NaN or infinite loss, gradient
norm, parameter or eval loss stops it before anything non-finite is saved; a checkpoint that is
corrupt or cut off is set aside and the one before is used; a second process on the same workdir
is refused; a kill -9 at any moment loses only the steps since the last checkpoint; a full disk
or an unwritable workdir ends it with one line, the last checkpoint intact; SIGTERM or SIGINT
saves a checkpoint at the step in flight and stops (preemption.py); a run reads its data before it
creates its workdir, so a refused run leaves no folder behind. A seed group (--config.num_seeds)
trains its members' stacked states through the same loop (seed_group.py).
"""

import errno
import json
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import optax
import tqdm

from keynorm_jax import run_config
from keynorm_jax.data import corpora
from keynorm_jax.storage import disk, workdir_lock
from keynorm_jax.storage.checkpoint_writer import CheckpointWriter
from keynorm_jax.training import config_changes, memory, preemption, seed_group, sharding
from keynorm_jax.storage.checkpointing import (CheckpointError, RunCheckpoints, check_params_match,
                                               finished_steps, state_restore_args)
from keynorm_jax.data.eval_sets import eval_windows
from keynorm_jax.data.tokenizer import join_documents, offsets_encoder
from keynorm_jax.data.train_stream import train_dataset
from keynorm_jax.scoring import make_scorer, score_windows, token_scores
from keynorm_jax.models import count_params, init_params
from keynorm_jax.training.metrics_writer import MetricsWriter
from keynorm_jax.training.non_finite import (  # NonFiniteLossError: callers catch it from here
    NonFiniteLossError, non_finite, non_finite_error)
from keynorm_jax.training.optimizer import learning_rate_schedule, make_optimizer
from keynorm_jax.training.phases import check_resume, phase_of, training_phases

# Keys that may change when a stopped run is continued (they do not change what is computed);
# optimizer settings may change too when allowed explicitly (see config_changes.py).
RESUMABLE_CHANGES = config_changes.FREE_CHANGES


def init_state(model, tx, seed: int, train_length: int):
  params = init_params(model, seed, train_length)
  return {"step": jnp.zeros([], jnp.int32), "params": params, "opt_state": tx.init(params)}


def initial_state(model, tx, seed: int, train_length: int, mesh, state_sharding):
  """A fresh train state placed by `state_sharding`. Over several devices it is built under jit
  straight into its shards (out_shardings), never whole on one device first (the 1b FSDP state is
  about 11 GiB in float32). On one device it is built eagerly as before: XLA's fusions under jit
  round a few initial values of the Transformer differently (by one float32 ulp), which would
  change the trajectory of runs already recorded."""
  if mesh.devices.size == 1:
    return jax.device_put(init_state(model, tx, seed, train_length), state_sharding)
  return jax.jit(lambda: init_state(model, tx, seed, train_length),
                 out_shardings=state_sharding)()


def abstract_state(model, tx, seed: int, train_length: int, state_sharding=None):
  """Shapes, dtypes (and shardings) of the train state, for restoring without initializing.

  state_sharding: None, one sharding for every array, or a pytree of shardings like the state.
  """
  shapes = jax.eval_shape(lambda: init_state(model, tx, seed, train_length))
  if state_sharding is None:
    return shapes
  if isinstance(state_sharding, jax.sharding.Sharding):
    state_sharding = jax.tree.map(lambda _: state_sharding, shapes)
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                      shapes, state_sharding)


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
    finite = jnp.all(jnp.stack([jnp.isfinite(x).all() for x in jax.tree.leaves(new_state)]))
    return new_state, {"loss": loss, "accuracy": accuracy, "grad_norm": optax.global_norm(grads),
                       "state_finite": finite}

  return train_step


def _tokens(config, split):
  """The split's documents joined into one token stream; with several hosts, host 0 prepares the
  dataset (e.g. the first TFDS build) while the others wait, so they never build it at once."""
  if jax.process_count() > 1:
    if jax.process_index() == 0:
      corpora.load_documents(config.data, split)
    multihost_utils.sync_global_devices(f"keynorm_jax data ready: {split}")
  return join_documents(corpora.load_documents(config.data, split), config.data)



def _saved_config(workdir):
  """The newest readable checkpoint's config (nothing verified, moved or printed), or None."""
  try:
    return RunCheckpoints(workdir, read_only=True, warn=lambda _: None).restore_latest(verify=False)
  except CheckpointError:
    return None  # the full restore below reports it


def _refuse_to_start_over(checkpoints: RunCheckpoints) -> None:
  corrupt = checkpoints.corrupt_directory
  if corrupt.is_dir() and any(corrupt.iterdir()):
    raise CheckpointError(
        f"{checkpoints.workdir} has no checkpoint that restores, and its corrupt ones are in "
        f"{corrupt}: starting over would overwrite this run's metrics. Move a repaired checkpoint "
        f"back into {checkpoints.directory}, or delete {corrupt} to start the run over from "
        f"step 0, or pass another --workdir.")


def train_and_evaluate(config, workdir, *, stop_after_steps=None, allow_config_change=(),
                       trust_unverified=False):
  """Trains (or resumes) the run in `workdir`; returns the last logged metrics (a seed group:
  a list of them, one per member, each with its "seed").

  stop_after_steps: stop once this many steps are done in all, without a final checkpoint, as a
    killed run would (for tests of resumption).
  allow_config_change: optimizer settings (config_changes.OPTIMIZER_CHANGES) that may differ from
    the checkpoint's when resuming; each change is recorded with its step.
  trust_unverified: restore a checkpoint whose checksum manifest is missing, empty or unreadable
    (otherwise it is set aside like a corrupt one).
  """
  user_config = config.to_dict()  # as the user set it, before derived defaults are filled in
  preemption.check(_BEFORE_TRAINING)
  config = run_config.resolve(config)
  config_changes.check_allowed_names(allow_config_change)
  group = seed_group.is_group(config)
  if group:
    seed_group.check(config, jax.process_count())
  mesh = (seed_group.make_mesh(config) if group else
          sharding.make_mesh(config.num_devices, config.fsdp))
  run_config.validate(config, seed_group.batch_devices(mesh) if group else mesh.size)
  if group:  # before any work: a group that cannot fit is refused in one line
    _check_group_memory(config, mesh)
  # The data (and the validation windows) are read before the workdir is created, so a data
  # refusal leaves no folder behind (and every process of a multi-host run takes the same steps,
  # whatever each one sees on disk).
  tokens = _tokens(config, "train"), _tokens(config, "validation")
  validation = _validation_windows(config, tokens[1])
  preemption.check(_BEFORE_TRAINING)
  made = disk.missing_folders(workdir)
  workdir = disk.ensure_writable(workdir, what="the workdir",
                                 fix="choose a writable --workdir").resolve()
  try:
    with workdir_lock.hold(workdir), preemption.Watch() as watch:
      return _train_in(workdir, config, user_config, mesh, stop_after_steps, allow_config_change,
                       watch, tokens[0], validation, trust_unverified)
  except BaseException:
    _remove_if_unused(workdir, made)
    raise


def _check_group_memory(config, mesh) -> None:
  """ConfigError where the group's estimated training memory exceeds its devices' (memory.py)."""
  model, tx = run_config.build_model(config), make_optimizer(config)
  shapes = jax.eval_shape(lambda: init_state(model, tx, config.seed, config.train_length))
  per_member = memory.member_bytes(run_config.model_config(config), shapes,
                                   batch_size=config.batch_size,
                                   train_length=config.train_length)
  memory.check_group(config.num_seeds, per_member,
                     memory.device_memory(list(mesh.devices.flat)))


_BEFORE_TRAINING = ("before training started: there was nothing new to save. Run the same "
                    "command again to start (or resume).")


def _validation_windows(config, validation_tokens):
  try:
    return eval_windows(validation_tokens, kind="non_repeated", length=config.train_length,
                        count=config.eval_windows, train_length=config.train_length)
  except corpora.DataError as e:
    raise corpora.DataError(f"{str(e).split(' Lower ')[0]} Lower --config.eval_windows (now "
                            f"{config.eval_windows}) or --config.train_length, or use a larger "
                            f"held-out split.") from None


def _remove_if_unused(workdir, made) -> None:
  """Removes a workdir this run created (and the parents it created) if the run ended before
  writing anything there but its lock: a refused run leaves nothing behind."""
  if not made:
    return
  lock = workdir / "train.lock"
  try:
    if {p.name for p in workdir.iterdir()} <= {"train.lock"}:
      lock.unlink(missing_ok=True)
  except OSError:
    return
  disk.remove_empty(made)


def _train_in(workdir, config, user_config, mesh, stop_after_steps, allow_config_change, watch,
              train_tokens, validation, trust_unverified):
  try:
    checkpoints = RunCheckpoints(workdir, trust_unverified=trust_unverified)
    return _train(config, user_config, checkpoints, mesh, stop_after_steps,
                  allow_config_change, watch, train_tokens, validation)
  except OSError as e:
    steps = finished_steps(workdir / "checkpoints")
    kept = (f"the last checkpoint (step {steps[-1]}) is intact" if steps else
            "no checkpoint was written yet")
    if disk.is_disk_full(e):
      raise disk.DiskError(f"The disk under {workdir} is full ({e}); {kept}. Free some space "
                           f"and run the same command again to "
                           f"{'resume' if steps else 'start'}.") from None
    if e.errno in _UNWRITABLE:
      raise disk.DiskError(f"Cannot write {e.filename or workdir} ({e.strerror}); {kept}. "
                           f"Make it writable (or pass another --workdir) and run the same "
                           f"command again.") from None
    raise


_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR)


def _train(config, user_config, checkpoints, mesh, stop_after_steps, allow_config_change, watch,
           train_tokens, validation):
  workdir = checkpoints.workdir
  is_main = jax.process_index() == 0
  saved = _saved_config(workdir)  # checked before anything is restored, moved or loaded
  if saved is not None:
    config_changes.resume_changes(saved.config_dict, saved.history, user_config,
                                  config.to_dict(), allow_config_change, workdir)
  if checkpoints.directory.is_dir():  # (else the first save makes it, in the workdir just probed)
    # a read-only checkpoints/ was found only at the first save, steps into the run
    disk.ensure_writable(checkpoints.directory, what="the checkpoint folder",
                         fix="make it writable (or pass another --workdir) and run the same "
                             "command again")

  group = seed_group.is_group(config)
  seeds = seed_group.member_seeds(config)  # [config.seed] for a single run
  datasets = [train_dataset(train_tokens, train_length=config.train_length,
                            global_batch_size=config.batch_size, seed=seed,
                            process_index=jax.process_index(), process_count=jax.process_count(),
                            copy_fraction=config.data.copy_fraction,
                            copy_symbols=config.data.copy_symbols,
                            retrieval_fraction=config.data.retrieval_fraction,
                            retrieval_tasks=config.data.retrieval_tasks.split(","),
                            encode=offsets_encoder(config.data)) for seed in seeds]

  # The phases of the position method (one for most; DroPE: RoPE, then NoPE); the last is the model
  # as trained.
  phases = training_phases(config)
  model = phases[-1].model
  tx = make_optimizer(config)
  schedule = learning_rate_schedule(config)
  if group:  # the members' states stacked, split over the seed axis
    init_one = lambda seed: init_state(model, tx, seed, config.train_length)
    state_sharding = seed_group.state_shardings(mesh, seed_group.abstract_state(init_one, seeds))
    target = seed_group.abstract_state(init_one, seeds, state_sharding)
  else:
    state_sharding = sharding.state_shardings(  # replicated, or split over fsdp
        mesh, jax.eval_shape(lambda: init_state(model, tx, config.seed, config.train_length)))
    target = abstract_state(model, tx, config.seed, config.train_length, state_sharding)

  def state_args(config_dict, step_dir):  # another version's model is refused, not set aside
    del config_dict
    check_params_match(step_dir, target["params"], fix="Resume it with the version of "
                       "keynorm-jax that trained it, or pass another --workdir.")
    return state_restore_args(target)

  restored = checkpoints.restore_latest(state_args, with_data=True)
  batches = seed_group.MemberBatches(datasets) if group else iter(datasets[0])
  changed = {}
  if restored is None:
    _refuse_to_start_over(checkpoints)
    state = (seed_group.initial_state(init_one, seeds, state_sharding) if group else
             initial_state(model, tx, config.seed, config.train_length, mesh, state_sharding))
  else:
    changed = config_changes.resume_changes(restored.config_dict, restored.history, user_config,
                                            config.to_dict(), allow_config_change, workdir)
    check_resume(phases, changed)
    state = restored.state
    batches.set_state(restored.data_state)
  start_step = int(restored.step) if restored else 0
  preemption.check(f"before step {start_step + 1}: checkpoint {start_step} in "
                   f"{checkpoints.directory} is intact and there was nothing new to save. Run the "
                   f"same command again to resume." if restored else _BEFORE_TRAINING)
  history = config_changes.history_after(restored.history if restored else None, user_config,
                                         start_step, changed)
  saver = CheckpointWriter(checkpoints.directory, max_to_keep=config.max_checkpoints_to_keep)
  if is_main:
    saved_config = {**config.to_dict(), **({"member_seeds": seeds} if group else {})}
    (workdir / "config.json").write_text(json.dumps(saved_config, indent=2))
    if restored is None or changed:
      config_changes.append_history_line(workdir, event="change" if changed else "start",
                                         step=start_step, changed=changed,
                                         user_config=user_config)
    members = (f" per member, a group of {len(seeds)} seeds ({seeds[0]} to {seeds[-1]}),"
               if group else ",")
    print(f"{config.name}: {count_params(state['params']) // len(seeds):,} parameters{members} "
          f"{mesh.size} device(s), "
          f"{'resuming at step ' + str(start_step) if start_step else 'starting'} in {workdir}",
          flush=True)
    if changed:
      print(f"Changed from step {start_step} on (recorded in "
            f"{workdir / config_changes.HISTORY_FILE}): " +
            ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items()), flush=True)

  def step_of(phase_model):  # a group: the members' steps vmapped into one, each its own key
    if group:
      return seed_group.train_step(lambda key: make_train_step(phase_model, tx, key), seeds)
    return make_train_step(phase_model, tx, jax.random.PRNGKey(config.seed + 1))

  # One jitted step and scorer per phase (DroPE: RoPE, then NoPE), compiled when first used.
  train_steps = [jax.jit(step_of(phase.model), out_shardings=(state_sharding, None),
                         donate_argnums=0) for phase in phases]
  scorers = [make_scorer(phase.model) for phase in phases]
  metrics_writer = MetricsWriter(workdir, resume_step=start_step, enabled=is_main,
                                 seeds=seeds if group else None)
  progress = tqdm.tqdm(total=config.num_train_steps, initial=start_step, disable=not is_main,
                       desc=config.name, dynamic_ncols=True)
  last_good = restored.step if restored else None
  logged, tick, tick_step = {}, time.perf_counter(), start_step
  finished = False
  watch.begin_steps()
  try:
    for step in range(start_step + 1, config.num_train_steps + 1):
      batch = (seed_group.global_batch if group else sharding.global_batch)(mesh, next(batches))
      phase = phase_of(phases, step)
      if is_main and phase and step == phases[phase - 1].last_step + 1:
        progress.write(f"{config.name}: from step {step}, position {phases[phase].position}")
      state, metrics = train_steps[phase](state, batch)  # dispatched; the host does not wait
      progress.update(1)
      last = step == config.num_train_steps
      evaluate = step % config.eval_every_steps == 0 or last
      stopping = stop_after_steps is not None and step >= stop_after_steps
      preempted = watch.stop_at(step)
      if not (step % config.log_every_steps == 0 or evaluate or stopping or preempted
              or step % config.checkpoint_every_steps == 0):
        continue  # metrics are fetched (and checked for NaN) only at log / eval / save steps
      rows = seed_group.member_rows(jax.device_get(metrics), len(seeds) if group else 0)
      now = time.perf_counter()
      for i, metrics in enumerate(rows):
        if evaluate and non_finite(metrics) is None:
          params = seed_group.member(state["params"], i) if group else state["params"]
          correct, nll = score_windows(scorers[phase], params, validation, config.batch_size)
          metrics.update(eval_loss=float(nll.mean()), eval_accuracy=float(correct.mean()))
        problem = non_finite(metrics)
        if problem:
          saver.wait()
          if group:
            problem = f"seed {seeds[i]} of the group (seeds {seeds[0]} to {seeds[-1]}): {problem}"
          raise non_finite_error(problem, step, last_good, config, workdir)
        del metrics["state_finite"]
      progress.set_postfix(loss=f"{seed_group.mean(rows, 'loss'):.3f}", acc=f"{seed_group.mean(rows, 'accuracy'):.3f}")
      if step % config.log_every_steps == 0 or evaluate:
        tokens = (step - tick_step) * config.batch_size * config.train_length  # per member
        logged = [{**metrics, "learning_rate": float(schedule(step - 1)),
                   "tokens_per_second": tokens / max(now - tick, 1e-9)} for metrics in rows]
        if group:  # one row per member, with its seed
          for seed, row in zip(seeds, logged):
            metrics_writer.write(step, row, seed)
          logged = [{"seed": seed, **row} for seed, row in zip(seeds, logged)]
        else:
          logged = logged[0]
          metrics_writer.write(step, logged)
        tick, tick_step = time.perf_counter(), step
      if step % config.checkpoint_every_steps == 0 or last or preempted:
        saver.save(step, state, batches.get_state(), config.to_dict(), history)
        last_good = step
      if preempted and not last:
        saver.wait()
        raise preemption.Preempted(
            f"Stopped by {watch.received or 'a preemption notice'} after step {step}: checkpoint "
            f"{step} is saved in {saver.directory}. Run the same command again to resume.")
      if stopping:
        break
    finished = True
  finally:
    progress.close()
    metrics_writer.close(check=finished)
    saver.close(check=finished)
  logging.info("Finished at step %d: %s", int(jnp.max(state["step"])), logged)
  return logged
