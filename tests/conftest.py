"""Test set-up: 8 simulated CPU devices (for the multi-device checks) and XLA flags, set before JAX
starts; one compilation cache for the test processes of a run."""

import atexit
import gc
import os
import shutil
import tempfile

import pytest

# 8 simulated devices; and three XLA settings that make its CPU compiler faster: the tests' models
# are tiny, so compiling dominates their time. LLVM's -O0 for the code XLA emits (about 20% faster
# to compile), and XLA's older elemental emitter for fusions instead of its fusion emitters (about
# 25% faster again, measured on end-to-end cases). The optimized programs keep their fusions and
# custom calls (only a lone broadcast goes unwrapped), so what the tests inspect is unchanged. And
# each program's machine code made as one module, not split into many for parallel compiling: a
# tiny program's parts cost more to set up than they save (test_kernels' gradient cases took
# 21-27% less CPU time).
_FLAGS = ("--xla_force_host_platform_device_count=8", "--xla_backend_optimization_level=0",
          "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")
for _flag in _FLAGS:
  if _flag not in os.environ.get("XLA_FLAGS", ""):  # xdist's workers inherit them set
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")


# Many tests train the same tiny models, whose jit compiles dominate their time: one persistent
# compilation cache for the run, made by its first process (xdist's controller, or pytest alone),
# which removes it at exit, and shared by the xdist workers (which inherit the environment and
# import this file), given through JAX's own environment variables, which JAX reads when it is
# imported (by the tests, after this file). The processes the tests start (the CLIs, the SIGKILL
# tests' scripts) inherit them too: their tiny runs compile what other tests compiled (their
# children's CPU time 141 -> 131 s over the files that start processes). A process killed while it
# writes an entry could leave it cut off (JAX writes entries in place); the tests kill only at
# points after their compiles and cache writes (a checkpoint's save, a result set's renames), or
# processes that compile nothing, and a cut-off entry would be read as a warning and a compile, not
# a wrong program.
_CACHE = os.environ.get("KEYNORM_JAX_TEST_CACHE")
if _CACHE is None:
  _CACHE = os.environ["KEYNORM_JAX_TEST_CACHE"] = tempfile.mkdtemp(prefix="keynorm_jax_test_cache_")
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
_MIN_COMPILE_SECONDS = 0.2   # programs faster to compile than this are not written
os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = str(_MIN_COMPILE_SECONDS)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
  """One TFDS folder for every tiny training of the session (the dataset is prepared once)."""
  return str(tmp_path_factory.mktemp("tfds"))


@pytest.fixture
def reference_kernel(monkeypatch):
  """Configs loaded by name (the study's and the reproduction's tiny runs) train with the reference
  kernel and one layer where the layers are alike, as tiny_config's do (train_helpers.py says
  why)."""
  from keynorm_jax import run_config
  from train_helpers import TEST_KERNEL, one_layer_where_alike
  load = run_config.load_config
  def load_with_the_reference_kernel(name):
    config = load(name)
    config.model.kernel = TEST_KERNEL
    one_layer_where_alike(config)
    return config
  monkeypatch.setattr(run_config, "load_config", load_with_the_reference_kernel)


@pytest.fixture(scope="session")
def straight_run(tmp_path_factory, data_dir):
  """An uninterrupted tiny 6-step run (checkpoints 3 and 6): the reference every resumed, sharded
  or faulted run must match. Read it or copy it; never write into it."""
  from keynorm_jax.training import loop as training
  from train_helpers import tiny_config
  workdir = tmp_path_factory.mktemp("straight")
  training.train_and_evaluate(tiny_config(data_dir=data_dir), workdir)
  return workdir


# The files that took longest (a full run on 2 workers beside a training, 2026-12-06, after
# tiny_config's one layer), longest first. xdist hands out whole files (--dist loadfile) in
# collection order as workers free up, so a long file collected last would leave the other worker
# idle at the end: these go first, longest first (the rest, each under about 30 s there, keep
# their order).
LONG_FILES = ("test_methods_end_to_end.py", "test_kernels.py", "test_model.py", "test_bfloat16.py",
              "test_seed_groups.py", "test_preemption.py", "test_disks.py", "test_study.py",
              "test_training.py", "test_notebook_and_reproduce.py", "test_transformer.py",
              "test_path_runs.py", "test_eval_signals.py", "test_path_layers.py",
              "test_accelerator_session.py", "test_eval.py", "test_layer_stack.py",
              "test_dot_product_kernel.py", "test_position_indices.py", "test_hf_import.py",
              "test_hf_lengths.py", "test_blocked_attention.py", "test_kill_mid_save.py",
              "test_study_groups.py", "test_cli_input.py", "test_path_attention.py")


# At its end each process (an xdist worker, or pytest alone) runs Python's garbage collector 5
# times, for pytest's report of exceptions raised in finalizers. Over the objects a worker's traced
# and compiled programs leave behind (610,000 after test_kernels and test_model: 0.35 s a
# collection, beside a training), that outlasted the 5 s xdist's gateway gives a worker to finish
# (test_model alone: 1.45 s, 0.00 s frozen): it then interrupted the worker (the
# KeyboardInterrupt "ignored in _xla_gc_callback" printed at the end of every full run) while the
# run waited. What is alive by then is frozen out of those collections; the cost: an exception
# raised in a finalizer of a reference cycle that only those last collections would free goes
# unreported.
@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure():
  gc.freeze()


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(LONG_FILES)}
  items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))
