"""Where attention goes (attention/reach.py, diagnostics.reach_summary) against explicit NumPy loops
over the attention probabilities written from the definition (tests/numpy_attention_reference.py)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import run_config
from attention_cases import attend_options, split_options
from keynorm_jax.attention.reach import attend_with_reach
from keynorm_jax.evaluation.diagnostics import reach_summary, run_diagnostics
import numpy_attention_reference as attention_ref
from shapes import B, INV, S
from shapes import LOOP_E as E, LOOP_H as H, LOOP_T as T   # the NumPy loops' shape
from train_helpers import TEST_KERNEL

BUCKET = 4   # keys per reach block: a divisor of T = 12, so that the blocks are whole


def _probabilities(q, k, **kwargs):
  """[T, T] attention probabilities of one head: the reference attention applied to the identity
  (row i of the output is p_i over the keys)."""
  return attention_ref.attention(q, k, np.eye(len(q)), **kwargs)


@pytest.mark.parametrize("blocks", [None, (5, 4)])
@pytest.mark.parametrize("window", [None, 5])
def test_reach_is_the_attention_mass_per_key_block_and_the_mean_key_index(blocks, window):
  rng = np.random.default_rng(0)
  q, k = (rng.normal(size=(B, T, H, S)).astype(np.float32) for _ in range(2))
  v = rng.normal(size=(B, T, H, E)).astype(np.float32)
  kwargs = dict(variant="baseline", inv_freq=jnp.asarray(INV, jnp.float32), window=window)
  if blocks:
    kwargs.update(query_block=blocks[0], key_block=blocks[1])
  spec, learned, rest = split_options(kwargs)
  out, entropy, reach = attend_with_reach(q, k, v, spec, learned, bucket=BUCKET, **rest)
  plain_out, plain_entropy = attend_options(q, k, v, **kwargs)
  np.testing.assert_allclose(out, plain_out, atol=1e-6)       # the model's output is unchanged
  np.testing.assert_allclose(entropy, plain_entropy, atol=1e-6)
  assert reach.shape == (B, T, H, T // BUCKET + 1)
  for b in range(B):
    for h in range(H):
      p = _probabilities(q[b, :, h], k[b, :, h], variant="baseline", inv_freq=INV, window=window)
      for block in range(T // BUCKET):
        np.testing.assert_allclose(reach[b, :, h, block],
                                   p[:, block * BUCKET:(block + 1) * BUCKET].sum(-1), atol=2e-5)
      np.testing.assert_allclose(reach[b, :, h, -1], p @ np.arange(T), atol=1e-4)


def _reach_from(p_BxHxTxT, bucket):
  """The reach channels of given probabilities, by loops."""
  batch, heads, length, _ = p_BxHxTxT.shape
  blocks = -(-length // bucket)
  reach = np.zeros((batch, length, heads, blocks + 1))
  for b in range(batch):
    for h in range(heads):
      for i in range(length):
        for j in range(length):
          reach[b, i, h, j // bucket] += p_BxHxTxT[b, h, i, j]
          reach[b, i, h, -1] += p_BxHxTxT[b, h, i, j] * j
  return reach


def test_reach_summary_against_loops_over_the_probabilities():
  rng = np.random.default_rng(1)
  length, train_length, bucket = 20, 8, 2
  p = rng.random((2, 3, length, length)) * np.tril(np.ones((length, length)))
  p /= p.sum(-1, keepdims=True)
  got = reach_summary(_reach_from(p, bucket), train_length=train_length, bucket=bucket)

  distance = np.zeros((2, 3, length))
  far = np.zeros((2, 3, length))
  by_block = np.zeros((2, 3, length, length // bucket))
  for i in range(length):
    for j in range(i + 1):
      distance[:, :, i] += p[:, :, i, j] * (i - j)
      block_end = (j // bucket + 1) * bucket - 1
      if i - block_end >= train_length:
        far[:, :, i] += p[:, :, i, j]
      by_block[:, :, i, i // bucket - j // bucket] += p[:, :, i, j]
  beyond = slice(train_length, length)
  assert got["mean_distance_by_position"] == pytest.approx(
      [distance[:, :, s:s + bucket].mean() for s in range(0, length, bucket)], abs=1e-6)
  assert got["far_mass_by_position"] == pytest.approx(
      [far[:, :, s:s + bucket].mean() for s in range(0, length, bucket)], abs=1e-6)
  assert got["sink_mass_by_position"] == pytest.approx(
      [p[:, :, s:s + bucket, :bucket].sum(-1).mean() for s in range(0, length, bucket)], abs=1e-6)
  assert got["far_mass_beyond_train"] == pytest.approx(far[:, :, beyond].mean(), abs=1e-9)
  assert got["mean_distance_within_train"] == pytest.approx(distance[:, :, :train_length].mean())
  assert got["mass_by_block_distance_beyond_train"] == pytest.approx(
      by_block[:, :, beyond].mean((0, 1, 2)), abs=1e-6)
  assert got["mass_by_block_distance_within_train"] == pytest.approx(
      by_block[:, :, :train_length, :train_length // bucket].mean((0, 1, 2)), abs=1e-6)
  assert got["far_mass_by_position"][:train_length // bucket] == [0.0] * (train_length // bucket)


def test_run_diagnostics_measures_the_reach_of_every_layer():
  config = run_config.load_config("kna_rope")
  config.model_size, config.train_length = "tiny", 16
  config.model.kernel = TEST_KERNEL   # the tiny runs' kernel (train_helpers.py says why)
  config = run_config.resolve(config)
  params = run_config.build_model(config).init(jax.random.PRNGKey(0),
                                               jnp.zeros([1, 16], jnp.int32))["params"]
  tokens = np.random.default_rng(0).integers(0, 256, size=400)
  run = types.SimpleNamespace(config=config, params=params)
  found = run_diagnostics(run, lengths=[64], tokens=tokens, num_windows=2)[64]["layers"]
  for layer in found.values():
    reach = layer["reach"]
    assert len(reach["mean_distance_by_position"]) == 64 // 2          # blocks of 16 / 8 tokens
    assert len(reach["mass_by_block_distance_beyond_train"]) == 64 // 2
    assert sum(reach["mass_by_block_distance_beyond_train"]) == pytest.approx(1.0, abs=1e-5)
    assert 0.0 < reach["far_mass_beyond_train"] < 1.0
    assert 0.0 < reach["mean_distance_within_train"] < reach["mean_distance_beyond_train"]
