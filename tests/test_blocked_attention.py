"""The key-blocked online-softmax kernel (attention/blocked.py) against the full reference path.

Every option of einsum.attend, at T = 37 in blocks that really split queries and keys (the last
block ragged), output and entropy within 1e-5; the block ranges it skips; gradients; and the
evaluator's own numbers (scoring, records, diagnostics) past the blocking threshold.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import positions, run_config
from keynorm_jax.attention import attend, blocked, einsum
from keynorm_jax.evaluation.diagnostics import run_diagnostics
from keynorm_jax.evaluation.evaluate import evaluate_run
from keynorm_jax.evaluation.run_loading import TrainedRun
from keynorm_jax.models.position_bias import FireBias, KerpleLogBias
from keynorm_jax.rope import rope_inv_freq
from train_helpers import tiny_config

B, T, H, S, E = 2, 37, 4, 8, 6
INV = np.array([100.0**(-2 * m / S) for m in range(S // 2)], np.float32)
BLOCKS = [(8, 8), (8, 5), (16, 8), (5, 16)]


def _inputs(seed=0, heads=H, kv_heads=None):
  rng = np.random.default_rng(seed)
  kv = kv_heads or heads
  return (rng.normal(size=(B, T, heads, S)).astype(np.float32),
          rng.normal(size=(B, T, kv, S)).astype(np.float32),
          rng.normal(size=(B, T, kv, E)).astype(np.float32))


def _bias(module):
  return module.apply(module.init(jax.random.PRNGKey(3)))


def _sorted_random_positions(seed):
  """[B, T] sorted distinct positions in [0, 4T), a different draw per row (randomized RoPE)."""
  rng = np.random.default_rng(seed)
  return np.stack([np.sort(rng.choice(4 * T, T, replace=False)) for _ in range(B)])


CASES = {
    "baseline": dict(variant="baseline"),
    "qna_rope": dict(variant="qna", inv_freq=INV),
    "kna_rope": dict(variant="kna", inv_freq=INV),
    "cosa_rope_logn": dict(variant="cosa", inv_freq=INV, cosa_scale=4 * math.log(6), logn_base=6),
    "yarn_factor_posthoc_logn": dict(variant="kna", inv_freq=INV, attention_factor=1.2,
                                     posthoc_logn_length=8),
    "xpos": dict(variant="baseline", inv_freq=INV, xpos_gamma=0.4, xpos_scale_base=8.0),
    "rerope": dict(variant="baseline", inv_freq=INV, rerope_window=6),
    "rerope_wider_than_blocks": dict(variant="kna", inv_freq=INV, rerope_window=19, logn_base=6),
    "leaky_rerope": dict(variant="cosa", inv_freq=INV, rerope_window=4, leaky_rerope_factor=3.0,
                         cosa_scale=3.0),
    "window_smaller_than_block": dict(variant="baseline", window=3),
    "window_rope": dict(variant="kna", inv_freq=INV, window=11),
    "window_alibi": dict(variant="baseline", window=9, alibi_slope=0.3),
    "sinks": dict(variant="baseline", inv_freq=INV, window=7, sink_tokens=2),
    "sinks_over_a_block": dict(variant="baseline", inv_freq=INV, window=4, sink_tokens=10),
    "sinks_alibi": dict(variant="kna", window=6, sink_tokens=3, alibi_slope=0.2),
    "alibi_per_head": dict(variant="baseline",
                           alibi_slope=np.array(positions.alibi_slopes(H), np.float32)),
    "ssmax": dict(variant="qna", ssmax_scale=np.array([0.4, 0.9, 1.7, 1.1], np.float32)),
    "kerple": dict(variant="kna", score_bias=_bias(KerpleLogBias(H))),
    "fire": dict(variant="baseline", score_bias=_bias(FireBias(H, 16))),
    "fire_sinks": dict(variant="baseline", inv_freq=INV, window=8, sink_tokens=2,
                       score_bias=_bias(FireBias(H, 16))),
    "shifted_positions": dict(variant="kna", inv_freq=INV, window=10,
                              positions=np.arange(T) + 1000),
    "random_positions_per_row": dict(variant="baseline", inv_freq=INV, window=20,
                                     positions=_sorted_random_positions(1)),
    "random_positions_rerope": dict(variant="kna", inv_freq=INV, rerope_window=30,
                                    positions=_sorted_random_positions(2)),
}


def _check(blocked_result, full_result, atol=1e-5):
  for got, expected in zip(blocked_result, full_result):
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=atol, rtol=atol)


# Every case in 8 x 8 blocks and in one of the uneven shapes (in turn), to keep the test fast.
PAIRS = [(case, blocks) for i, case in enumerate(sorted(CASES))
         for blocks in (BLOCKS[0], BLOCKS[1 + i % (len(BLOCKS) - 1)])]


@pytest.mark.parametrize("case, blocks", PAIRS)
def test_blocked_equals_full(case, blocks):
  q, k, v = _inputs(sorted(CASES).index(case))
  full = attend(q, k, v, **CASES[case])
  query_block, key_block = blocks
  _check(attend(q, k, v, query_block=query_block, key_block=key_block, **CASES[case]), full)


@pytest.mark.parametrize("case", ["kna_rope", "rerope", "sinks", "alibi_per_head"])
def test_grouped_query_heads(case):
  q, k, v = _inputs(3, heads=H, kv_heads=2)
  full = attend(q, k, v, **CASES[case])
  _check(attend(q, k, v, query_block=8, key_block=8, **CASES[case]), full)


def test_single_head_layout_and_jit():
  q, k, v = (x[:, :, 0] for x in _inputs(4))
  kwargs = dict(variant="kna", inv_freq=INV, logn_base=6, window=12)
  full = attend(q, k, v, **kwargs)
  blocked_fn = jax.jit(lambda q, k, v: attend(q, k, v, query_block=8, key_block=8, **kwargs))
  got = blocked_fn(q, k, v)
  assert got[0].shape == (B, T, E) and got[1].shape == (B, T)
  _check(got, full)


def test_positions_out_of_order_with_a_window():
  # The block bounds assume nothing about the order of positions: a permutation still matches.
  q, k, v = _inputs(5)
  perm = np.random.default_rng(0).permutation(T)
  kwargs = dict(variant="baseline", inv_freq=INV, window=9, sink_tokens=2, positions=perm)
  _check(attend(q, k, v, query_block=8, key_block=8, **kwargs), attend(q, k, v, **kwargs))


def test_entropy_of_uniform_attention_in_blocks():
  _, k, v = _inputs(6)
  _, entropy = attend(np.zeros_like(k), k, v, variant="baseline", query_block=8, key_block=5)
  np.testing.assert_allclose(np.asarray(entropy)[0, :, 0], np.log(np.arange(1, T + 1)), atol=1e-5)
  _, entropy = attend(np.zeros_like(k), k, v, variant="baseline", window=6, query_block=8,
                      key_block=5)
  np.testing.assert_allclose(np.asarray(entropy)[0, :, 0],
                             np.log(np.minimum(np.arange(1, T + 1), 6)), atol=1e-5)


def _ranges(query_block_index, *, length=64, block=8, window=None, sink_tokens=None):
  index = jnp.arange(length)
  pos = jnp.broadcast_to(index, (1, length))
  side = blocked.Side(None, None, pos, index)
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


@pytest.mark.parametrize("case", ["kna_rope", "rerope", "leaky_rerope", "sinks_over_a_block",
                                  "window_alibi", "xpos", "random_positions_per_row"])
def test_gradients_equal_full(case):
  # Training runs through the custom VJP (blocks recomputed, flash-style): q, k, v gradients.
  q, k, v = _inputs(7, heads=H, kv_heads=2)
  grad = lambda **blocks: jax.grad(lambda *a: _loss(*attend(*a, **CASES[case], **blocks)),
                                   argnums=(0, 1, 2))(q, k, v)
  _check(grad(query_block=8, key_block=5), grad(), atol=1e-4)


def test_gradients_of_learned_bias_and_ssmax():
  module = FireBias(H, 16)
  params = module.init(jax.random.PRNGKey(3))
  q, k, v = _inputs(8)

  def loss(params, ssmax, q, k, v, **blocks):
    return _loss(*attend(q, k, v, variant="baseline", inv_freq=INV, window=9, sink_tokens=2,
                         score_bias=module.apply(params), ssmax_scale=ssmax, **blocks))

  args = (params, jnp.array([0.4, 0.9, 1.7, 1.1]), q, k, v)
  full = jax.grad(loss, argnums=(0, 1, 2, 3, 4))(*args)
  got = jax.jit(jax.grad(lambda *a: loss(*a, query_block=8, key_block=8),
                         argnums=(0, 1, 2, 3, 4)))(*args)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(full)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-4)
  assert np.abs(np.asarray(full[0]["params"]["w_out"])).max() > 1e-3   # the bias does learn


def test_block_sizes_rule():
  assert einsum.block_sizes(2048) == (None, None)
  assert einsum.block_sizes(4096) == (512, 512)
  assert einsum.block_sizes(37, 8) == (8, 8)
  assert einsum.block_sizes(37, None, 5) == (5, 5)
  assert einsum.block_sizes(37, 64, 64) == (None, None)
  with pytest.raises(ValueError, match=">= 1"):
    einsum.block_sizes(37, 0, -1)


# Through the evaluator: a tiny model scored past the blocking threshold (lowered to 32 here).

LENGTH = 100


@pytest.fixture(scope="module")
def tiny_run():
  config = run_config.resolve(tiny_config("kna_rope"))
  model = run_config.build_model(config)
  params = model.init(jax.random.PRNGKey(0), np.zeros((1, 32), np.int32))["params"]
  tokens = np.random.default_rng(0).integers(0, 256, size=4 * (LENGTH + 1)).astype(np.int32)
  return TrainedRun("tiny", None, config, 0, params), tokens


def _with_threshold(monkeypatch, threshold, block=16):
  monkeypatch.setattr(einsum, "_FULL_ATTENTION_MAX_LENGTH", threshold)
  monkeypatch.setattr(einsum, "_DEFAULT_QUERY_BLOCK", block)
  monkeypatch.setattr(einsum, "_DEFAULT_KEY_BLOCK", block)


def test_evaluator_numbers_equal_full(tiny_run, monkeypatch):
  run, tokens = tiny_run
  columns = [positions.EvalColumn(positions.inference_method(name)) for name in
             ("none", "rerope", "window", "streaming")]
  evaluate = lambda: evaluate_run(run, lengths=[LENGTH], columns=columns, num_windows=2,
                                  tokens=tokens, include_train_length=False)
  _with_threshold(monkeypatch, 10**9)
  full = evaluate()
  _with_threshold(monkeypatch, 32)
  got = evaluate()
  assert len(got) == len(full) == 8
  for a, b in zip(got, full):
    assert (a["rope_scaling"], a["set"]) == (b["rope_scaling"], b["set"])
    assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-5)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    np.testing.assert_allclose(a["accuracy_by_position"], b["accuracy_by_position"], atol=1e-5)


def test_model_logits_and_diagnostics_equal_full(tiny_run, monkeypatch):
  run, tokens = tiny_run
  model = run_config.build_model(run.config)
  inputs = tokens[:2 * LENGTH].reshape(2, LENGTH)
  logits = lambda: np.asarray(jax.jit(model.apply)({"params": run.params}, inputs))
  _with_threshold(monkeypatch, 10**9)
  full_logits = logits()
  full_diagnostics = run_diagnostics(run, lengths=[LENGTH], tokens=tokens, num_windows=2)
  _with_threshold(monkeypatch, 32)
  np.testing.assert_allclose(logits(), full_logits, atol=1e-5, rtol=1e-5)
  got = run_diagnostics(run, lengths=[LENGTH], tokens=tokens, num_windows=2)
  for layer, found in got[LENGTH]["layers"].items():
    expected = full_diagnostics[LENGTH]["layers"][layer]
    np.testing.assert_allclose(found["entropy_by_position"], expected["entropy_by_position"],
                               atol=1e-5)


def test_gau_split_projection_is_one_dense():
  # The GAU computes u, v, z as three products (memory); parameters and numbers are nn.Dense's.
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  from keynorm_jax.models.gau import SplitDense  # pylint: disable=g-import-not-at-top
  x = np.random.default_rng(0).normal(size=(2, 5, 12)).astype(np.float32)
  split, dense = SplitDense((7, 7, 3)), nn.Dense(17, use_bias=False)
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
