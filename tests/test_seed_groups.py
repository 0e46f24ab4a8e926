"""Seed groups (--config.num_seeds): its seed axis over 8 devices against one, its kill -9 and
preemption resumes, its refusals, and eval.py on it (against the single runs it replaces:
test_group_eval.py)."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import config_fields, run_config
from keynorm_jax.storage import checkpointing
from keynorm_jax.training import loop as training
from keynorm_jax.training import memory, preemption, seed_group
from keynorm_jax.training.optimizer import make_optimizer
from keynorm_jax.training.metrics_writer import read_metrics
from train_helpers import checkpoint_steps, copy_run, tiny_config
from faults.helpers import REPO, cli

def _group_config(data_dir, **overrides):
  return tiny_config(data_dir=data_dir, **{"num_seeds": 2, "num_devices": 1, **overrides})


def _restored(workdir, config):
  """The newest checkpoint's state, restored as training restores it (a group's stacked)."""
  config = run_config.resolve(config)
  model, tx = run_config.build_model(config), training.make_optimizer(config)
  if seed_group.is_group(config):
    target = seed_group.abstract_state(
        lambda s: training.init_state(model, tx, s, config.train_length),
        seed_group.member_seeds(config))
  else:
    target = training.abstract_state(model, tx, config.seed, config.train_length)
  return checkpointing.RunCheckpoints(workdir, read_only=True).restore_latest(
      lambda *_: checkpointing.state_restore_args(target), with_data=True)


@pytest.fixture(scope="module")
def straight_group(tmp_path_factory, data_dir):
  """An uninterrupted tiny group of seeds 0 and 1 on one device, 6 steps (checkpoints 3, 6)."""
  workdir = tmp_path_factory.mktemp("group")
  training.train_and_evaluate(_group_config(data_dir), workdir)
  return workdir


@pytest.mark.slow
def test_the_seed_axis_over_8_devices_equals_one_device(tmp_path, data_dir):
  """8 seeds on 8 devices (one member on each) give the losses and parameters of the same group
  vmapped on one device."""
  for n in (1, 8):
    config = _group_config(data_dir, num_seeds=8, num_devices=n, num_train_steps=3)
    training.train_and_evaluate(config, tmp_path / str(n))
  rows = {n: sorted((m["step"], m["seed"], m["loss"]) for m in read_metrics(tmp_path / str(n)))
          for n in (1, 8)}
  assert [(s, seed) for s, seed, _ in rows[8]] == [(s, seed) for s in (1, 2, 3) for seed in range(8)]
  np.testing.assert_allclose([l for *_, l in rows[8]], [l for *_, l in rows[1]], rtol=1e-5)
  one, eight = (_restored(tmp_path / str(n), config).state for n in (1, 8))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), one, eight)


def test_the_mesh_spreads_seeds_then_splits_each_batch():
  for num_seeds, devices, shape in ((8, 8, (8, 1)), (2, 8, (2, 4)), (3, 8, (1, 8)), (4, 1, (1, 1))):
    config = tiny_config(num_seeds=num_seeds, num_devices=devices)
    assert tuple(seed_group.make_mesh(config).devices.shape) == shape


def _same_but_speed(a, b):
  """Every logged value but tokens_per_second equal, exactly."""
  strip = lambda w: [{k: v for k, v in m.items() if k != "tokens_per_second"}
                     for m in read_metrics(w)]
  assert strip(a) == strip(b)


# Trains the tiny group in the workdir argv[1] (TFDS data in argv[2]) and kills itself with SIGKILL
# while the batches of step 5 are placed, once checkpoint 3 (saved in the background) is listed.
_KILLED_GROUP = textwrap.dedent("""
    import os, signal, sys, time
    sys.path[:0] = [{tests!r}]
    import conftest  # the tests' XLA flags and devices
    from keynorm_jax.training import loop as training, seed_group
    from train_helpers import tiny_config
    real, calls = seed_group.global_batch, []
    def global_batch(*args):
      calls.append(1)
      if len(calls) == 5:
        while not os.path.isdir(os.path.join(sys.argv[1], "checkpoints", "3")):
          time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
      return real(*args)
    seed_group.global_batch = global_batch
    training.train_and_evaluate(tiny_config(data_dir=sys.argv[2], num_seeds=2, num_devices=1),
                                sys.argv[1])
""")


@pytest.mark.slow
def test_a_group_killed_with_sigkill_resumes_bit_exactly(tmp_path, data_dir, straight_group):
  """Killed after step 4 with checkpoint 3 listed, the group resumes from step 3 to the
  uninterrupted group's metrics and state (a plain stop after step 4, stop_after_steps, leaves
  the same workdir: this holds it too)."""
  workdir = tmp_path / "run"
  killed = subprocess.run([sys.executable, "-c", _KILLED_GROUP.format(tests=str(REPO / "tests")),
                           str(workdir), data_dir], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
  assert checkpoint_steps(workdir) == [3]
  assert {m["step"] for m in read_metrics(workdir)} == {1, 2, 3, 4}
  training.train_and_evaluate(_group_config(data_dir), workdir)
  _same_but_speed(workdir, straight_group)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b),
               _restored(workdir, _group_config(data_dir)).state,
               _restored(straight_group, _group_config(data_dir)).state)


def test_a_preempted_group_saves_and_resumes_exactly(tmp_path, data_dir, straight_group,
                                                    monkeypatch):
  real, calls = seed_group.global_batch, []

  def global_batch(*args):
    calls.append(1)
    if len(calls) == 4:
      os.kill(os.getpid(), signal.SIGTERM)
    return real(*args)

  with monkeypatch.context() as patch:
    patch.setattr(seed_group, "global_batch", global_batch)
    with pytest.raises(preemption.Preempted, match=r"^Stopped by SIGTERM after step 4: "
                                                    r"checkpoint 4 is saved"):
      training.train_and_evaluate(_group_config(data_dir), tmp_path)
  assert checkpoint_steps(tmp_path) == [3, 4]
  training.train_and_evaluate(_group_config(data_dir), tmp_path)
  _same_but_speed(tmp_path, straight_group)


def test_a_member_that_goes_non_finite_stops_the_group_naming_its_seed(tmp_path, data_dir,
                                                                      monkeypatch):
  real = training.init_params

  def seed_1_infinite(model, seed, length):  # traced under the group's vmap: a where, not an if
    return jax.tree.map(lambda p: jnp.where(seed == 1, jnp.inf, p), real(model, seed, length))

  monkeypatch.setattr(training, "init_params", seed_1_infinite)
  with pytest.raises(training.NonFiniteLossError,
                     match=r"^Seed 1 of the group \(seeds 0 to 1\): the loss became nan at or "
                           r"before step 1 .*nothing non-finite was saved\. No checkpoint"):
    training.train_and_evaluate(_group_config(data_dir, num_train_steps=3), tmp_path)
  assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize("value", [0, -2, 1.5, "two", 65, 1000])
def test_bad_num_seeds_are_refused_in_one_line(value):
  """1000 was accepted: 1000 TensorBoard folders, whatever the memory."""
  config = run_config.resolve(tiny_config())
  config = type(config)({**config.to_dict(), "num_seeds": value})   # as a saved config holds it
  with pytest.raises(run_config.ConfigError) as refused:
    config_fields.check(config)
  assert str(refused.value) == (f"--config.num_seeds={value!r} is not allowed: num_seeds (seeds "
                                f"trained together as one group: seed, seed + 1, ..., each with a "
                                f"TensorBoard folder of its own; more train as several groups) "
                                f"must be an integer >= 1 and <= 64.")


def test_a_group_beyond_the_devices_memory_is_refused_before_any_work(tmp_path, data_dir,
                                                                     monkeypatch):
  """The estimate (training/memory.py) against the devices' memory, here made 4 MiB (a tiny
  member needs about 1.7): refused in one line naming what fits, before the data is read or the
  workdir made; where not even one member fits, said so."""
  capacity = [4 * 2**20]
  monkeypatch.setattr(memory, "device_memory", lambda devices: (capacity[0], "the test's memory"))
  monkeypatch.setattr(training, "_tokens", lambda *_: pytest.fail("the data was read"))
  with pytest.raises(run_config.ConfigError, match=r"^--config.num_seeds=8: a group of 8 needs "
                                                   r"about \d+\.\d MiB to train \(\d\.\d MiB a "
                                                   r"member.*more than the test's memory, 4\.0 MiB\. "
                                                   r"Train at most [1-3] seed\(s\) per group"):
    training.train_and_evaluate(_group_config(data_dir, num_seeds=8), tmp_path / "run")
  capacity[0] = 1
  with pytest.raises(run_config.ConfigError, match=r"one member alone needs about"):
    training.train_and_evaluate(_group_config(data_dir, num_seeds=8), tmp_path / "run")
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["kna_rope", "transformer_kna_rope"])
def test_the_memory_estimate_is_near_xlas_own(name):
  """memory.member_bytes against XLA's memory analysis of the compiled train step of one member
  (its state, and temporaries: gradients and activations), within a factor of 2."""
  config = run_config.resolve(tiny_config(name))
  model, tx = run_config.build_model(config), make_optimizer(config)
  state = jax.eval_shape(lambda: training.init_state(model, tx, 0, config.train_length))
  step = jax.jit(training.make_train_step(model, tx, jax.random.PRNGKey(1)))
  batch = jax.ShapeDtypeStruct((config.batch_size, config.train_length + 1), np.int32)
  analysis = step.lower(state, batch).compile().memory_analysis()
  xla = analysis.argument_size_in_bytes + analysis.temp_size_in_bytes
  estimate = memory.member_bytes(run_config.model_config(config), state,
                                 batch_size=config.batch_size, train_length=config.train_length)
  assert xla / 2 < estimate < 2 * xla, (estimate, xla)


def test_num_seeds_0_is_refused_before_training(tmp_path, data_dir):
  with pytest.raises(run_config.ConfigError, match=r"^--config.num_seeds=0 is not allowed"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir, num_seeds=0), tmp_path / "run")
  assert not (tmp_path / "run").exists()


def test_a_group_resumed_with_another_num_seeds_is_refused(tmp_path, data_dir, straight_group):
  workdir = copy_run(straight_group, tmp_path)
  with pytest.raises(run_config.ConfigError, match=r"num_seeds"):
    training.train_and_evaluate(_group_config(data_dir, num_seeds=3), workdir)
  assert checkpoint_steps(workdir) == [3, 6] and not (workdir / "corrupt_checkpoints").exists()


def test_fsdp_with_a_group_is_refused_in_one_line(tmp_path, data_dir):
  with pytest.raises(run_config.ConfigError,
                     match=r"^--config.num_seeds=2 with --config.fsdp=4: a seed group .*FSDP"):
    training.train_and_evaluate(tiny_config(data_dir=data_dir, num_seeds=2, fsdp=4),
                                tmp_path / "run")
  assert not (tmp_path / "run").exists()


def test_eval_py_evaluates_a_groups_members_and_their_mean(straight_group, tmp_path):
  """eval.py on a group's workdir: a record per member (test_group_eval.py checks them against the
  single runs) and the table's mean +- std over the 2 seeds."""
  code, output = cli("eval.py", f"--workdir={straight_group}", f"--output={tmp_path}",
                     "--lengths=32", "--num_windows=1")
  assert code == 0 and "Traceback" not in output, output
  assert "a seed group of 2: seeds 0, 1" in output and "mean ± std over 2 seeds" in output
  assert f"| {straight_group.name} (2 seeds) | none |" in output
  saved = json.loads((tmp_path / "results.json").read_text())
  assert [(r["seed"], r["set"]) for r in saved["results"]] == [
      (0, "repeated"), (1, "repeated"), (0, "non_repeated"), (1, "non_repeated")]
  assert [s["member_seeds"] for s in saved["seed_summary"]] == [[0, 1], [0, 1]]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kna_drope", "kna_randomized_rope"])
def test_phases_and_random_positions_train_in_a_group(tmp_path, data_dir, name):
  """DroPE (a model per phase, the same steps for every member) and randomized RoPE (positions
  drawn from each member's key): member 1 of a group gives the losses of --config.seed=1."""
  training.train_and_evaluate(tiny_config(name, data_dir=data_dir, num_devices=1, num_seeds=2),
                              tmp_path / "group")
  training.train_and_evaluate(tiny_config(name, data_dir=data_dir, num_devices=1, seed=1),
                              tmp_path / "single")
  member = [m["loss"] for m in read_metrics(tmp_path / "group") if m["seed"] == 1]
  np.testing.assert_allclose(member, [m["loss"] for m in read_metrics(tmp_path / "single")],
                             rtol=1e-5)
