"""Positions added to the scores, or folded into them, against the independent NumPy references
(tests/numpy_bias_reference.py): ALiBi (and its inference-time slopes), KERPLE, FIRE,
scale-invariant attention, stick-breaking, CoPE and FoX's forget gates; and that the biases depend
only on relative position. Every attention check runs full and in query blocks that really split
the queries (T = 12 in blocks of 5). The other kinds: test_positions_rotary.py,
test_positions_scaling.py; the registry's rules: test_positions.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import positions
from keynorm_jax.attention import far
from attention_cases import attend_options, layer_options
from keynorm_jax.models.position_bias import FireBias, ForgetGate, KerpleLogBias
import numpy_attention_reference as attention_ref
import numpy_bias_reference as bias_ref
import numpy_rotary_reference as rotary_ref
from positions_helpers import B, BLOCKS, E, H, INV, S, T, check, inputs, per_head_reference


@pytest.mark.parametrize("heads", [1, 2, 3, 4, 5, 6, 8, 12, 16])
def test_alibi_slopes_match_the_paper(heads):
  np.testing.assert_allclose(positions.alibi_slopes(heads), bias_ref.alibi_slopes(heads), rtol=1e-12)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("variant", ["baseline", "kna"])
def test_alibi_attention(variant, block):
  q, k, v = inputs(1)
  slopes = np.array(positions.alibi_slopes(H), np.float32)
  got, _ = attend_options(q, k, v, variant=variant, alibi_slopes=slopes, query_block=block)
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant=variant, bias=bias_ref.alibi_bias(T, slopes[h])))
  check(got, expected)


def test_alibi_inference_slopes():
  slopes = positions.alibi_slopes(8)
  spec = positions.AttentionSpec(alibi_slopes=slopes)
  interpolated = positions.inference_method("alibi_interpolate").at(2048, 512).apply(spec, 512)
  np.testing.assert_allclose(interpolated.alibi_slopes, bias_ref.alibi_interpolated_slopes(slopes, 4))
  ntk = positions.inference_method("ntk_alibi", factor=3.0).apply(spec, 512)
  np.testing.assert_allclose(ntk.alibi_slopes, bias_ref.ntk_alibi_slopes(slopes, 3.0), rtol=1e-12)


def _init_bias(module):
  return module.init(jax.random.PRNGKey(3))


@pytest.mark.parametrize("block", BLOCKS)
def test_kerple_log(block):
  q, k, v = inputs(4)
  module = KerpleLogBias(H)
  params = _init_bias(module)
  r1, r2 = (np.asarray(params["params"][n]) for n in ("r1", "r2"))
  assert (r1 > 0).all() and (r2 > 0).all() and r1.std() > 0  # random per-head init, as the paper
  bias = module.apply(params)
  got, _ = attend_options(q, k, v, variant="kna", score_bias=bias, query_block=block)
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant="kna", bias=bias_ref.kerple_log_bias(T, max(r1[h], 1e-2), max(r2[h], 1e-2))))
  check(got, expected)


def _fire(train_length=8):
  module = FireBias(H, train_length)
  params = _init_bias(module)
  p = jax.tree.map(np.asarray, params["params"])
  # c and l as the test sets them, away from the init so a wrong formula cannot hide.
  p["c"], p["l"] = np.float32(0.3), np.float32(1.25)
  params = {"params": p}

  def f(x, h):  # the MLP 1 -> 32 (ReLU) -> H, in NumPy from its weights
    hidden = np.maximum(x * p["w_in"] + p["b_in"], 0.0)
    return float(hidden @ p["w_out"][:, h] + p["b_out"][h])

  return module, params, f, 0.3, 1.25 * train_length


@pytest.mark.parametrize("block", BLOCKS)
def test_fire(block):
  q, k, v = inputs(5)
  module, params, f, c, threshold = _fire()
  got, _ = attend_options(q, k, v, variant="baseline", score_bias=module.apply(params),
                  query_block=block)
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant="baseline", bias=bias_ref.fire_bias(T, c, threshold, lambda x: f(x, h), eps=1e-6)))
  check(got, expected)


def test_biases_depend_only_on_relative_position():
  q, k, v = inputs(6)
  kerple = KerpleLogBias(H)
  module, params, _, _, threshold = _fire(train_length=64)  # shifts stay below L: psi(L) fixed
  biases = {"alibi": dict(alibi_slopes=np.array(positions.alibi_slopes(H), np.float32)),
            "kerple": dict(score_bias=kerple.apply(_init_bias(kerple))),
            "fire": dict(score_bias=module.apply(params))}
  assert T + 37 < threshold
  for name, kwargs in biases.items():
    a, _ = attend_options(q, k, v, variant="baseline", **kwargs)
    b, _ = attend_options(q, k, v, variant="baseline", positions=np.arange(T) + 37, **kwargs)
    check(np.asarray(b), np.asarray(a), atol=1e-5)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("opts", [dict(tau=10.0), dict(tau=0.5, window=5, sink_tokens=2)])
def test_scale_invariant(opts, block):
  """Scale-invariant p-RoPE (the training method's spec) against the paper's general form."""
  opts = dict(opts)
  tau = opts.pop("tau")
  method = positions.training_method("scale_invariant", {"tau": tau})
  spec = method.layer_spec(layer=0, num_layers=1, num_heads=H, rope_theta=100.0, train_length=T)
  kwargs = layer_options(spec, rotary_dim=S, train_length=T, seq_length=T,
                                      logn_base=None)
  q, k, v = inputs(7)
  cache = ({"far": far.StreamingCache(opts["sink_tokens"], opts["window"])}
           if "sink_tokens" in opts else {})   # StreamingLLM: the sinks at their cache distance
  got, _ = attend_options(q, k, v, variant="baseline", query_block=block,
                          **{**kwargs, **opts, **cache})
  expected = per_head_reference(q, k, v, lambda h: dict(
      variant="baseline", inv_freq=rotary_ref.p_rope_inv_freq(S, 100.0, 0.5),
      logit_transform=bias_ref.scale_invariant_logit(tau), **opts))
  check(got, expected)
  with pytest.raises(ValueError, match="tau must be > 0"):
    positions.training_method("scale_invariant", {"tau": -1.0})


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("opts", [dict(), dict(window=4, rope=True)])
def test_stick_breaking(opts, block):
  """Stick-breaking attention against explicit products (the first query attends nothing)."""
  rope = opts.get("rope", False)
  q, k, v = inputs(9)
  inv = INV.astype(np.float32) if rope else None
  got, _ = attend_options(q, k, v, variant="stickbreaking", inv_freq=inv, window=opts.get("window"),
                  query_block=block)
  expected = np.zeros(q.shape[:3] + (E,))
  for b in range(B):
    for h in range(H):
      expected[b, :, h] = bias_ref.stick_breaking_attention(q[b, :, h], k[b, :, h], v[b, :, h],
                                                       INV if rope else None, opts.get("window"))
  check(got, expected)


def test_stick_breaking_is_stable_at_16k_tokens():
  """The last queries of a 16,384-token sequence, scores of a wide spread: every weight finite and
  each row summing to at most 1."""
  from keynorm_jax.attention.scores import stick_breaking_with_entropy  # pylint: disable=g-import-not-at-top
  length = 16384
  scores = np.random.default_rng(0).normal(0.0, 8.0, size=(1, 2, 4, length)).astype(np.float32)
  query_index = np.arange(length - 4, length)
  keep = (query_index[:, None] > np.arange(length)[None, :])[None, None]
  weights, entropy = stick_breaking_with_entropy(jnp.asarray(scores), jnp.asarray(keep))
  weights = np.asarray(weights, np.float64)
  assert np.isfinite(weights).all() and np.isfinite(np.asarray(entropy)).all()
  assert (weights >= 0).all() and (weights.sum(-1) <= 1 + 1e-5).all()
  assert weights.sum(-1).min() > 0.5   # the mass sits on the keys, not lost to underflow


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("variant, npos, window", [("baseline", 16, None), ("kna", 4, 6)])
def test_cope(variant, npos, window, block):
  """CoPE against explicit sums (with the cap at npos - 1 reached in the second case)."""
  q, k, v = inputs(12)
  e = np.random.default_rng(13).normal(size=(S, npos)).astype(np.float32)
  got, _ = attend_options(q, k, v, variant=variant, cope_embeddings=e, window=window, query_block=block)
  expected = np.zeros(q.shape[:3] + (E,))
  for b in range(B):
    for h in range(H):
      expected[b, :, h] = bias_ref.cope_attention(q[b, :, h], k[b, :, h], v[b, :, h], e, variant,
                                             window)
  check(got, expected)
  with pytest.raises(ValueError, match="cope_npos must be at least 2"):
    positions.training_method("cope", {"cope_npos": 1})


def _forget_gate():
  """FoX's ForgetGate, its input x [B, T, S] and its own parameters redrawn away from the init
  (w ~ N(0, 0.5^2), b ~ U(0.5, 2.5): gates from about 0.2 to 0.99, so the decay bites)."""
  module = ForgetGate(H)
  rng = np.random.default_rng(15)
  x = rng.normal(size=(B, T, S)).astype(np.float32)
  params = module.init(jax.random.PRNGKey(0), x)
  w_shape, b_shape = (params["params"][n].shape for n in ("w", "b"))
  params = {"params": {"w": (0.5 * rng.normal(size=w_shape)).astype(np.float32),
                       "b": rng.uniform(0.5, 2.5, size=b_shape).astype(np.float32)}}
  return module, params, x


def _numpy_log_forget(params, x):
  """[B, T, H] log f from the module's parameters, by the NumPy reference."""
  w, b = (np.asarray(params["params"][n], np.float64) for n in ("w", "b"))
  return np.stack([bias_ref.fox_log_forget(x[row].astype(np.float64), w, b) for row in range(B)])


def test_fox_forget_gates():
  """FoX's gates (Lin et al. 2025): log f_t = log sigmoid(w_h . x_t + b_h), one per head."""
  module, params, x = _forget_gate()
  got = module.apply(params, x)
  assert got.shape == (B, T, H)
  check(got, _numpy_log_forget(params, x), atol=1e-6)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("variant, window", [("baseline", None), ("kna", 6)])
def test_fox_attention(variant, window, block):
  """FoX's attention, o_i = sum_j softmax_j(score_ij + D_ij) v_j with D_ij = sum over l = j+1..i
  of log f_l (the explicit sums, not the library's cumulative ones), on the gates of the module:
  the paper's q.k / sqrt(S), and KNA in a window."""
  module, params, x = _forget_gate()
  q, k, v = inputs(16)
  got, _ = attend_options(q, k, v, variant=variant, window=window,
                          log_forget=module.apply(params, x), query_block=block)
  log_forget = _numpy_log_forget(params, x)
  expected = np.zeros(q.shape[:3] + (E,))
  for row in range(B):
    bias = bias_ref.fox_bias(log_forget[row])                     # [H, T, T]
    for h in range(H):
      expected[row, :, h] = attention_ref.attention(q[row, :, h], k[row, :, h], v[row, :, h],
                                          variant=variant, window=window, bias=bias[h])
  check(got, expected)
  plain, _ = attend_options(q, k, v, variant=variant, window=window, query_block=block)
  assert np.abs(np.asarray(plain) - expected).max() > 1e-2    # the gates change the output
