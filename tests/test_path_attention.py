"""PaTH and PaTH-FoX by chunks (keynorm_jax/attention/path.py) against the NumPy reference written
from the definition with explicit matrix products (tests/numpy_path_reference.py): the compact form
of a chunk's product, every score and the outputs for several chunk sizes (1, dividing T or not,
longer than T), grouped-query heads, windows, gates (per query head or per key/value head), the
trained log n and the variants; gradients against central differences of the float64 reference; the
conventions (order of the product, the empty product at j = i) against mutated definitions; and
memory linear in T, forward and backward, from XLA's compiled memory analysis.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numpy_path_reference as ref
from keynorm_jax.attention import path

B, T, H, G, S, E = 2, 11, 4, 2, 6, 5
LOGN_BASE = 6
# Jitted once per shape and setting (tests that share them share the compiled program).
path_scores = jax.jit(path.path_scores, static_argnames=("scale", "window", "chunk"))
path_attention = jax.jit(path.path_attention, static_argnames=("scale", "window", "chunk"))


def _inputs(seed, *, heads=H, kv_heads=G, length=T, gates_per="query"):
  """float64 inputs: unit w, beta in (0, 2) away from its ends, forget gates in (0.6, 1)."""
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(B, length, kv_heads, S))
  gate_heads = heads if gates_per == "query" else kv_heads
  return dict(q=rng.normal(size=(B, length, heads, S)), k=rng.normal(size=(B, length, kv_heads, S)),
              v=rng.normal(size=(B, length, kv_heads, E)),
              w=w / np.linalg.norm(w, axis=-1, keepdims=True),
              beta=rng.uniform(0.05, 1.95, size=(B, length, kv_heads)),
              log_forget=np.log(rng.uniform(0.6, 1.0, size=(B, length, gate_heads))))


def _reference_options(variant="baseline", logn=False, gates=True, window=None):
  return dict(variant=variant, cosa_scale=3.0 if variant == "cosa" else None,
              logn_base=LOGN_BASE if logn else None, window=window, gates=gates)


def _reference(x, *, gates, **options):
  log_forget = x["log_forget"]
  if gates and log_forget.shape[2] != x["q"].shape[2]:   # per key/value head: shared by its group
    log_forget = np.repeat(log_forget, x["q"].shape[2] // log_forget.shape[2], axis=2)
  return dict(log_forget=log_forget if gates else None, **options)


def _path_arguments(x, *, variant, cosa_scale, logn_base, window, gates):
  """path.py's arguments for a variant: q and k normalized before the path (as prepare does),
  the variant's scale, log n as a multiplier per query."""
  q, k = jnp.asarray(x["q"], jnp.float32), jnp.asarray(x["k"], jnp.float32)
  unit = lambda y: y / jnp.linalg.norm(y, axis=-1, keepdims=True)
  if variant in ("qna", "cosa"):
    q = unit(q)
  if variant in ("kna", "cosa"):
    k = unit(k)
  scale = {"baseline": 1 / math.sqrt(S), "qna": 1.0, "kna": 1.0, "cosa": cosa_scale}[variant]
  batch, length, heads, _ = q.shape
  multiplier = None
  if logn_base is not None:
    log_n = jnp.log(jnp.arange(length, dtype=jnp.float32) + 1) / math.log(logn_base)
    multiplier = jnp.broadcast_to(log_n[None, :, None], (batch, length, heads))
  f32 = lambda name: jnp.asarray(x[name], jnp.float32)
  # FoX's c_t = sum_{l<=t} log f_l, as prepare.py gives it to path.py.
  decay = jnp.cumsum(f32("log_forget"), axis=1) if gates else None
  return (q, k, f32("w"), f32("beta")), dict(decay=decay, scale=scale, multiplier=multiplier,
                                             window=window)


def _check_scores(got, expected, atol=2e-5):
  got = np.asarray(got)
  kept = np.isfinite(expected)
  assert np.all(got[~kept] == path.MASKED)
  np.testing.assert_allclose(got[kept], expected[kept], atol=atol, rtol=atol)


def test_compact_form_is_the_product_of_its_factors():
  x = _inputs(0, length=7)
  w, beta = x["w"][0, :, 0], x["beta"][0, :, 0]                    # [C, S], [C]
  t = np.asarray(path.compact_form(jnp.asarray(w, jnp.float32), jnp.asarray(beta, jnp.float32)))
  np.testing.assert_allclose(t, np.tril(t), atol=0)                 # lower triangular
  product = path.chunk_product(jnp.asarray(w, jnp.float32), jnp.asarray(beta, jnp.float32))
  np.testing.assert_allclose(product, ref.path_product(w, beta, 6, -1), atol=1e-5)
  for a, b in ((0, 3), (2, 6), (4, 4)):   # any run H_b ... H_a: the block of T on rows a..b
    run = np.eye(S) - w[a:b + 1].T @ t[a:b + 1, a:b + 1] @ w[a:b + 1]
    np.testing.assert_allclose(run, ref.path_product(w, beta, b, a - 1), atol=1e-5)


@pytest.mark.parametrize("size", [1, 2, 5, 16, 64])
def test_unit_lower_inverse_is_numpys_inverse(size):
  # Random rows, and nearly equal w with beta near 2 (neighbouring factors almost the same
  # reflection: the inverse's entries alternate in sign, a hard case for products of powers).
  rng = np.random.default_rng(size)
  similar = np.repeat(rng.normal(size=(1, S)), size, axis=0) + 0.01 * rng.normal(size=(size, S))
  for w, beta in ((rng.normal(size=(size, S)), rng.uniform(0.05, 1.95, size)),
                  (similar, np.full(size, 1.99))):
    w = w / np.linalg.norm(w, axis=-1, keepdims=True)
    lower = np.eye(size) + np.tril(w @ w.T, -1) * beta[:, None]
    above = np.triu(rng.normal(size=(size, size)), 1)   # not read: the matrix is lower triangular
    got = path.unit_lower_inverse(jnp.asarray(lower + above, jnp.float32)[None])[0]
    expected = np.linalg.inv(lower)
    np.testing.assert_allclose(got, expected, atol=5e-5 * np.abs(expected).max())


def test_the_products_preserve_norms_only_where_beta_is_0_or_2():
  x = _inputs(1, length=7)
  w = jnp.asarray(x["w"][0, :, 0], jnp.float32)
  reflections = jnp.asarray([0.0, 2.0, 2.0, 0.0, 2.0, 2.0, 2.0])
  product = np.asarray(path.chunk_product(w, reflections))
  np.testing.assert_allclose(product.T @ product, np.eye(S), atol=1e-5)
  singular = np.linalg.svd(np.asarray(path.chunk_product(w, jnp.asarray(x["beta"][0, :, 0]))),
                           compute_uv=False)
  assert singular.max() <= 1 + 1e-5 and singular.min() < 0.99   # a contraction, not orthogonal


@pytest.mark.parametrize("chunk", [1, 4, 5, 16])
def test_scores_match_the_definition(chunk):
  # GQA, gates, a window and the trained log n; chunks of 1, of 4 and 5 (not dividing T = 11),
  # longer than T.
  x = _inputs(2)
  options = _reference_options("baseline", logn=True, window=7)
  expected = ref.scores(x["q"], x["k"], x["w"], x["beta"], **_reference(x, **options))
  arrays, kwargs = _path_arguments(x, **options)
  _check_scores(path_scores(*arrays, chunk=chunk, **kwargs), expected)


def test_scores_with_chunks_dividing_the_length():
  x = _inputs(3, length=20, kv_heads=1)
  options = _reference_options("kna", gates=True)
  expected = ref.scores(x["q"], x["k"], x["w"], x["beta"], **_reference(x, **options))
  arrays, kwargs = _path_arguments(x, **options)
  _check_scores(path_scores(*arrays, chunk=5, **kwargs), expected)


OUTPUT_CASES = {
    # name: (chunk, reference options, input options)
    "baseline_gqa_gates": (4, _reference_options("baseline"), {}),
    "kna_logn_window": (3, _reference_options("kna", logn=True, gates=False, window=5), {}),
    "qna_gates_per_kv_head": (5, _reference_options("qna"), dict(gates_per="kv")),
    "cosa_logn_window_one_chunk": (16, _reference_options("cosa", logn=True, window=4),
                                   dict(heads=2, kv_heads=2)),
    "baseline_chunks_of_one_window_2": (1, _reference_options("baseline", window=2), {}),
}


@pytest.mark.parametrize("case", sorted(OUTPUT_CASES))
def test_outputs_and_entropy_match_the_definition(case):
  chunk, options, input_options = OUTPUT_CASES[case]
  x = _inputs(4, **input_options)
  out, weights = ref.attention(x["q"], x["k"], x["v"], x["w"], x["beta"],
                               **_reference(x, **options))
  arrays, kwargs = _path_arguments(x, **options)
  got_out, got_entropy = path_attention(arrays[0], arrays[1], jnp.asarray(x["v"], jnp.float32),
                                        *arrays[2:], chunk=chunk, **kwargs)
  np.testing.assert_allclose(got_out, out, atol=2e-5, rtol=2e-5)
  logs = np.log(np.where(weights > 0, weights, 1.0))
  entropy = np.moveaxis(-np.sum(weights * logs, axis=-1), 1, 2)      # [B, T, H]
  np.testing.assert_allclose(got_entropy, entropy, atol=2e-5, rtol=2e-5)


def test_gradients_match_central_differences_of_the_reference():
  # float32 autodiff against float64 central differences (h = 1e-6: truncation ~1e-12, rounding
  # ~1e-10) of the reference; the tolerance is float32's (the loss sums ~100 terms of order 1).
  x = _inputs(5, heads=2, kv_heads=1, length=9)
  options = _reference_options("kna", logn=True, window=6)
  rng = np.random.default_rng(6)
  out_weights = rng.normal(size=(B, 9, 2, E))
  entropy_weights = rng.normal(size=(B, 9, 2))

  def reference_loss(y):
    out, p = ref.attention(y["q"], y["k"], y["v"], y["w"], y["beta"], **_reference(y, **options))
    entropy = np.moveaxis(-np.sum(p * np.log(np.where(p > 0, p, 1.0)), axis=-1), 1, 2)
    return np.sum(out * out_weights) + np.sum(entropy * entropy_weights)

  def path_loss(y):
    arrays, kwargs = _path_arguments(y, **options)
    out, entropy = path.path_attention(arrays[0], arrays[1], y["v"], *arrays[2:], chunk=4,
                                       **kwargs)
    return jnp.sum(out * out_weights) + jnp.sum(entropy * entropy_weights)

  names = ("q", "k", "v", "w", "beta", "log_forget")
  grads = jax.jit(jax.grad(lambda y: path_loss(y)))({n: jnp.asarray(x[n], jnp.float32)
                                                     for n in names})
  h = 1e-6
  for name in names:
    for _ in range(2):
      entry = tuple(int(rng.integers(0, n)) for n in x[name].shape)
      plus = {n: x[n].copy() for n in names}
      minus = {n: x[n].copy() for n in names}
      plus[name][entry] += h
      minus[name][entry] -= h
      expected = (reference_loss(plus) - reference_loss(minus)) / (2 * h)
      np.testing.assert_allclose(grads[name][entry], expected, atol=2e-5, rtol=1e-4,
                                 err_msg=f"d loss / d {name}{entry}")


@pytest.mark.parametrize("mutation", [dict(order="earliest_left"), dict(from_key=True)])
def test_a_changed_order_or_diagonal_convention_fails(mutation):
  # The tests above compare with the definition. Were the product's order (H_{j+1} ... H_i) or
  # its start (H_j ... H_i: a factor even at j = i) changed, they would fail: the chunked scores
  # match the definition and are far from either mutated one, both within chunks (chunk 4) and
  # across them. (Mutating path.py itself, e.g. T^T for T in the sweep or the factor after the
  # key kept in k~, fails test_scores_match_the_definition: docs/path.md.)
  x = _inputs(7)
  options = _reference_options("baseline", logn=True, window=7)   # (test_scores_...'s program)
  arrays, kwargs = _path_arguments(x, **options)
  got = np.asarray(path_scores(*arrays, chunk=4, **kwargs))
  right = ref.scores(x["q"], x["k"], x["w"], x["beta"], **_reference(x, **options))
  wrong = ref.scores(x["q"], x["k"], x["w"], x["beta"], **_reference(x, **options), **mutation)
  _check_scores(got, right)
  kept = np.isfinite(right)
  assert np.abs(got - wrong)[kept].max() > 0.1
  if mutation.get("from_key"):   # the diagonal alone already differs
    diagonal = np.abs(np.diagonal(got - wrong, axis1=2, axis2=3))
    assert diagonal.max() > 0.1


def test_memory_is_linear_in_the_length():
  # XLA's temporary buffers of the gradient (its program holds the forward too) at 256 and 1024
  # tokens: x4 for linear memory (a T x T array of scores would make it x16). docs/path.md has
  # the forward's and the gradient's at 1024 and 4096.
  def arrays(length):
    f = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    return (f(1, length, 2, 8), f(1, length, 1, 8), f(1, length, 1, 8), f(1, length, 1, 8),
            f(1, length, 1), f(1, length, 2))

  def loss(q, k, v, w, beta, decay):
    return jnp.sum(path.path_attention(q, k, v, w, beta, decay=decay, chunk=16)[0] ** 2)

  grad = jax.jit(jax.grad(loss, argnums=tuple(range(6))))
  temp = [grad.lower(*arrays(n)).compile().memory_analysis().temp_size_in_bytes
          for n in (256, 1024)]
  assert temp[1] < 5 * temp[0], temp
