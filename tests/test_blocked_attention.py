"""The blocked kernel (attention/kernels/blocked.py) beyond the shared conformance test
(test_kernels.py): uneven blocks, grouped heads, the block ranges it skips, gradients of learned
biases, and the evaluator's own numbers (scoring, records, diagnostics) with a model whose
`model.kernel` is `blocked` against the same model with `reference`.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import positions, run_config
from keynorm_jax.attention import block_sizes
from keynorm_jax.attention.kernels import blocked
from keynorm_jax.attention.prepare import Side
from keynorm_jax.evaluation.command import with_kernel
from keynorm_jax.evaluation.diagnostics import run_diagnostics
from keynorm_jax.evaluation.evaluate import evaluate_run
from keynorm_jax.models.position_bias import FireBias
from keynorm_jax.runs import TrainedRun
from attention_cases import CASES, attend_options, inputs as _inputs
from shapes import B, E, H, INV32, T
from train_helpers import tiny_config


def _check(blocked_result, full_result, atol=1e-5):
  for got, expected in zip(blocked_result, full_result):
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=atol, rtol=atol)


@pytest.mark.parametrize("case", ["kna_rope", "rerope", "sinks", "alibi_per_head"])
def test_grouped_query_heads(case):
  q, k, v = _inputs(3, heads=H, kv_heads=2)
  full = attend_options(q, k, v, kernel="reference", **CASES[case])
  _check(attend_options(q, k, v, query_block=8, key_block=8, **CASES[case]), full)


def test_single_head_layout_and_jit():
  q, k, v = (x[:, :, 0] for x in _inputs(4))
  kwargs = dict(variant="kna", inv_freq=INV32, logn_base=6, window=12)
  full = attend_options(q, k, v, kernel="reference", **kwargs)
  blocked_fn = jax.jit(lambda q, k, v: attend_options(q, k, v, query_block=8, key_block=8, **kwargs))
  got = blocked_fn(q, k, v)
  assert got[0].shape == (B, T, E) and got[1].shape == (B, T)
  _check(got, full)


def test_positions_out_of_order_with_a_window():
  # The block bounds assume nothing about the order of positions: a permutation still matches.
  q, k, v = _inputs(5)
  perm = np.random.default_rng(0).permutation(T)
  kwargs = dict(variant="baseline", inv_freq=INV32, window=9, sink_tokens=2, positions=perm)
  _check(attend_options(q, k, v, query_block=8, key_block=8, **kwargs),
         attend_options(q, k, v, kernel="reference", **kwargs))


def test_entropy_of_uniform_attention_in_blocks():
  _, k, v = _inputs(6)
  _, entropy = attend_options(np.zeros_like(k), k, v, variant="baseline", query_block=8, key_block=5)
  np.testing.assert_allclose(np.asarray(entropy)[0, :, 0], np.log(np.arange(1, T + 1)), atol=1e-5)
  _, entropy = attend_options(np.zeros_like(k), k, v, variant="baseline", window=6, query_block=8,
                      key_block=5)
  np.testing.assert_allclose(np.asarray(entropy)[0, :, 0],
                             np.log(np.minimum(np.arange(1, T + 1), 6)), atol=1e-5)


def _ranges(query_block_index, *, length=64, block=8, window=None, sink_tokens=None):
  index = jnp.arange(length)
  pos = jnp.broadcast_to(index, (1, length))
  side = Side(None, None, pos, index)
  per_block = pos.reshape(1, -1, block)
  bounds = (per_block.min(axis=(0, 2)), per_block.max(axis=(0, 2)))
  start = query_block_index * block
  query = blocked._slice(side, start, block)
  return tuple(int(x) for x in blocked._key_block_ranges(
      query, bounds, query_stop=min(start + block, length), key_block=block,
      num_key_blocks=length // block, window=window, sink_tokens=sink_tokens))


def test_key_blocks_skipped():
  # (sinks_end, window_start, causal_end): blocks [0, sinks_end) and [window_start, causal_end)
  # are scored. Causal: the diagonal and below only.
  assert _ranges(0) == (0, 0, 1) and _ranges(5) == (0, 0, 6)
  # Window 10: queries 40..47 reach keys 31..47, blocks 3..5; nothing below.
  assert _ranges(5, window=10) == (0, 3, 6)
  assert _ranges(5, window=1) == (0, 5, 6)
  # Sinks 2 (block 0) plus the window; sinks 9 span blocks 0 and 1.
  assert _ranges(5, window=10, sink_tokens=2) == (1, 3, 6)
  assert _ranges(5, window=10, sink_tokens=9) == (2, 3, 6)
  # Sinks that reach the window: no block twice.
  assert _ranges(2, window=10, sink_tokens=9) == (2, 2, 3)


def _loss(out, entropy):
  """A scalar that weighs every output and entropy differently (so no gradient cancels)."""
  return (jnp.sum(out * jnp.cos(jnp.arange(out.size).reshape(out.shape)))
          + jnp.sum(entropy * jnp.sin(jnp.arange(entropy.size).reshape(entropy.shape))))


def test_gradients_of_learned_bias_and_ssmax():
  module = FireBias(H, 16)
  params = module.init(jax.random.PRNGKey(3))
  q, k, v = _inputs(8)

  def loss(params, ssmax, q, k, v, **blocks):
    return _loss(*attend_options(q, k, v, variant="baseline", inv_freq=INV32, window=9,
                                 sink_tokens=2, score_bias=module.apply(params),
                                 ssmax_scale=ssmax, **blocks))

  args = (params, jnp.array([0.4, 0.9, 1.7, 1.1]), q, k, v)
  full = jax.grad(lambda *a: loss(*a, kernel="reference"), argnums=(0, 1, 2, 3, 4))(*args)
  got = jax.jit(jax.grad(lambda *a: loss(*a, query_block=8, key_block=8),
                         argnums=(0, 1, 2, 3, 4)))(*args)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(full)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-4)
  assert np.abs(np.asarray(full[0]["params"]["w_out"])).max() > 1e-3   # the bias does learn


def test_block_sizes_rule():
  assert block_sizes(2048) == (None, None)
  assert block_sizes(4096) == (512, 512)
  assert block_sizes(37, 8) == (8, 8)
  assert block_sizes(37, None, 5) == (5, 5)
  assert block_sizes(37, 64, 64) == (None, None)
  with pytest.raises(ValueError, match=">= 1"):
    block_sizes(37, 0, -1)


# Through the evaluator: a tiny model with model.kernel=blocked (blocks of 16) against reference.

LENGTH = 100


@pytest.fixture(scope="module")
def tiny_run():
  config = run_config.resolve(tiny_config("kna_rope"))
  model = run_config.build_model(config)
  params = model.init(jax.random.PRNGKey(0), np.zeros((1, 32), np.int32))["params"]
  tokens = np.random.default_rng(0).integers(0, 256, size=4 * (LENGTH + 1)).astype(np.int32)
  return TrainedRun("tiny", None, config, 0, params), tokens


def _with_kernel(run, kernel, monkeypatch):
  """run with model.kernel = kernel (blocks of 16 tokens for `blocked`)."""
  monkeypatch.setattr(blocked, "DEFAULT_BLOCK", 16)
  return with_kernel(run, kernel)


def test_evaluator_numbers_equal_full(tiny_run, monkeypatch):
  run, tokens = tiny_run
  columns = [positions.EvalColumn(positions.inference_method(name)) for name in
             ("none", "rerope", "window", "streaming")]
  evaluate = lambda kernel: evaluate_run(_with_kernel(run, kernel, monkeypatch), lengths=[LENGTH],
                                         columns=columns, num_windows=2, tokens=tokens,
                                         include_train_length=False)
  full = evaluate("reference")
  got = evaluate("blocked")
  assert len(got) == len(full) == 8
  for a, b in zip(got, full):
    assert (a["rope_scaling"], a["set"]) == (b["rope_scaling"], b["set"])
    assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-5)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    np.testing.assert_allclose(a["accuracy_by_position"], b["accuracy_by_position"], atol=1e-5)


def test_model_logits_and_diagnostics_equal_full(tiny_run, monkeypatch):
  run, tokens = tiny_run
  inputs = tokens[:2 * LENGTH].reshape(2, LENGTH)
  runs = {kernel: _with_kernel(run, kernel, monkeypatch) for kernel in ("reference", "blocked")}
  logits = lambda kernel: np.asarray(jax.jit(run_config.build_model(runs[kernel].config).apply)(
      {"params": run.params}, inputs))
  np.testing.assert_allclose(logits("blocked"), logits("reference"), atol=1e-5, rtol=1e-5)
  full_diagnostics = run_diagnostics(runs["reference"], lengths=[LENGTH], tokens=tokens,
                                     num_windows=2)
  got = run_diagnostics(runs["blocked"], lengths=[LENGTH], tokens=tokens, num_windows=2)
  for layer, found in got[LENGTH]["layers"].items():
    expected = full_diagnostics[LENGTH]["layers"][layer]
    np.testing.assert_allclose(found["entropy_by_position"], expected["entropy_by_position"],
                               atol=1e-5)


def test_gau_split_projection_is_one_dense():
  # The GAU computes u, v, z as three products (memory); parameters and numbers are nn.Dense's.
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  from keynorm_jax.models import ModelConfig  # pylint: disable=g-import-not-at-top
  from keynorm_jax.models.gau import SplitDense  # pylint: disable=g-import-not-at-top
  x = np.random.default_rng(0).normal(size=(2, 5, 12)).astype(np.float32)
  split, dense = SplitDense((7, 7, 3), ModelConfig()), nn.Dense(17, use_bias=False)
  params = split.init(jax.random.PRNGKey(1), x)
  expected_params = dense.init(jax.random.PRNGKey(1), x)
  np.testing.assert_array_equal(params["params"]["kernel"], expected_params["params"]["kernel"])
  parts = split.apply(params, x)
  assert [p.shape[-1] for p in parts] == [7, 7, 3]
  np.testing.assert_allclose(np.concatenate(parts, axis=-1), dense.apply(params, x), atol=1e-6)


def test_auto_batch_size_follows_the_blocks():
  from keynorm_jax.evaluation.evaluate import auto_batch_size  # pylint: disable=g-import-not-at-top
  cfg = run_config.model_config(run_config.resolve(run_config.load_config("kna_rope")))
  sizes = {length: auto_batch_size(cfg, length, 16) for length in (512, 4096, 16384, 65536)}
  assert sizes == {512: 16, 4096: 4, 16384: 1, 65536: 1}   # at most 16,384 tokens a batch
  big = dataclasses.replace(cfg, d_model=4096, expansion=8192)
  assert auto_batch_size(big, 4096, 16) < 4                # and within the memory budget
