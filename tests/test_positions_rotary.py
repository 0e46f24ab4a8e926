"""RoPE and the methods that change its angles, against the independent NumPy references
(tests/numpy_rotary_reference.py): xPos (and ReRoPE on it), p-RoPE, Llama 3's frequencies,
and the inference-time rewrites of RoPE's relative positions (Self-Extend, STRING, DCA). Every
attention check runs full and in query blocks that really split the queries (T = 12 in blocks of
5). The other kinds: test_positions_bias.py, test_positions_scaling.py; the registry's rules:
test_positions.py; the position indices (randomized ones): test_position_indices.py."""

import math

import numpy as np
import pytest

from keynorm_jax import positions
from keynorm_jax.attention import far
from attention_cases import attend_options, layer_options
from keynorm_jax.rope import p_rope_mask, rope_inv_freq
import numpy_attention_reference as attention_ref
import numpy_rotary_reference as rotary_ref
from positions_helpers import B, BLOCKS, INV, S, T, check, column_kwargs, inputs, per_head_reference


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("rerope", [None, 4])
def test_xpos(block, rerope):
  """xPos, and ReRoPE on an xPos model: the decay at the distance the rotation uses (clipped)."""
  q, k, v = inputs(7, heads=1)
  got, _ = attend_options(q, k, v, variant="baseline", inv_freq=INV.astype(np.float32),
                          xpos_gamma=0.4, xpos_scale_base=8.0,   # a small scale base: strong decay
                          query_block=block, far=None if rerope is None else far.ReRoPE(rerope))
  relative = None if rerope is None else (lambda i, j: min(i - j, rerope))
  expected = np.zeros_like(np.asarray(got), dtype=np.float64)
  for b in range(B):
    qb, kb = q[b, :, 0].astype(np.float64), k[b, :, 0].astype(np.float64)
    scores = rotary_ref.xpos_scores(qb, kb, INV, 0.4, 8.0, relative) / math.sqrt(S)
    # attention_ref.attention without RoPE scores q.k / sqrt(S); the rest of the xPos score is the bias.
    expected[b, :, 0] = attention_ref.attention(qb, kb, v[b, :, 0], variant="baseline",
                                      bias=scores - qb @ kb.T / math.sqrt(S))
  check(got, expected)


def test_xpos_scores_depend_only_on_relative_position():
  q, k, v = inputs(8)
  kwargs = dict(variant="baseline", inv_freq=INV.astype(np.float32), xpos_gamma=0.4,
                xpos_scale_base=512.0)
  a, _ = attend_options(q, k, v, **kwargs)
  b, _ = attend_options(q, k, v, positions=np.arange(T) + 3000, **kwargs)
  check(np.asarray(b), np.asarray(a), atol=5e-4)  # float32 angles of ~3000 rad


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_p_rope_frequencies(fraction):
  inv, _ = rope_inv_freq(16, base=10000.0)
  np.testing.assert_allclose(np.asarray(inv) * p_rope_mask(16, fraction),
                             rotary_ref.p_rope_inv_freq(16, 10000.0, fraction), rtol=1e-6)


def test_p_rope_ends_are_rope_and_nope():
  q, k, v = inputs(9)
  spec = lambda p: positions.AttentionSpec(rotary=positions.RotarySpec(base=100.0, fraction=p))
  run = lambda spec: attend_options(q, k, v, variant="kna", **layer_options(
      spec, rotary_dim=S, train_length=T, seq_length=T, logn_base=None))[0]
  check(run(spec(1.0)), np.asarray(run(positions.AttentionSpec(rotary=positions.RotarySpec(
      base=100.0)))), atol=1e-6)
  check(run(spec(0.0)), np.asarray(run(positions.AttentionSpec())), atol=1e-6)


@pytest.mark.parametrize("setting", [
    (8, 10000.0, 8.0, 1.0, 4.0, 1024), (128, 500000.0, 8.0, 1.0, 4.0, 8192),
    (16, 10000.0, 4.0, 2.0, 8.0, 512), (128, 10000.0, 16.0, 1.0, 4.0, 512),
])
def test_llama3_matches_hf_formula(setting):
  dim, base, factor, low, high, original = setting
  got, attention_factor = rope_inv_freq(dim, base=base, scaling="llama3", factor=factor,
                                        train_length=original, low_freq_factor=low,
                                        high_freq_factor=high)
  np.testing.assert_allclose(np.asarray(got), rotary_ref.llama3_inv_freq(dim, base, factor, low, high,
                                                                  original), rtol=2e-6)
  assert attention_factor == 1.0


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("group, window", [(3, 4), (2, 5), (4, 1)])
def test_self_extend(group, window, block):
  """Self-Extend against the NumPy reference's grouped relative positions (LongLM's code)."""
  q, k, v = inputs(6)
  got, _ = attend_options(q, k, v, variant="kna", inv_freq=INV.astype(np.float32),
                          far=far.SelfExtend(window, group), query_block=block)
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant="kna", inv_freq=INV, relative=rotary_ref.self_extend_relative(group, window)))
  check(got, expected)


def test_self_extend_defaults_and_bad_knobs():
  method = positions.inference_method("self_extend").at(8192, 512)
  # W = 512 / 4 = 128; G the smallest with 128 + (8192 - 128) / G <= 2/3 x 512.
  assert (method.self_extend_window, method.self_extend_group) == (128, 38)
  assert 128 + (8192 - 128) / 38 <= 2 / 3 * 512 < 128 + (8192 - 128) / 37
  with pytest.raises(ValueError, match="self_extend_group must be at least 1"):
    positions.inference_method("self_extend", self_extend_group=0)
  with pytest.raises(ValueError, match="Self-Extend's group size G must be >= 1, got 0"):
    far.SelfExtend(4, 0)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("shift, window", [(5, 2), (4, 0), (3, 3)])
def test_string(shift, window, block):
  """STRING against the NumPy reference's shifted relative positions; its defaults and refusals."""
  kwargs, _ = column_kwargs("string", at=T, train_length=T, string_shift=shift,
                             string_window=window)
  q, k, v = inputs(10)
  got, _ = attend_options(q, k, v, variant="kna", query_block=block, **kwargs)
  check(got, per_head_reference(q, k, v, lambda h: dict(
      variant="kna", inv_freq=INV, relative=rotary_ref.string_relative(shift, window))))
  default = positions.inference_method("string").at(8192, 512)
  assert (default.string_shift, default.string_window) == (168, 128)
  with pytest.raises(ValueError, match="string_window W = 9 must be at most string_shift S = 4"):
    positions.inference_method("string", string_shift=4, string_window=9)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("chunk, train", [(3, 4), (4, 6), (2, 3)])
def test_dca(chunk, train, block):
  """Dual chunk attention against the NumPy reference's chunked relative positions (queries in
  their own, the next and later chunks at T = 12)."""
  kwargs, _ = column_kwargs("dca", at=T, train_length=train, dca_chunk=chunk)
  q, k, v = inputs(14)
  got, _ = attend_options(q, k, v, variant="kna", query_block=block, **kwargs)
  check(got, per_head_reference(q, k, v, lambda h: dict(
      variant="kna", inv_freq=INV, relative=rotary_ref.dca_relative(chunk, train))))
  assert positions.inference_method("dca").at(8192, 512).dca_chunk == 384
  with pytest.raises(ValueError, match="dca_chunk 6 must be below the training length 6"):
    positions.inference_method("dca", dca_chunk=6).at(T, 6)
