"""The CPU seam (keynorm_jax/cpu/, the `cpu` kernel; benchmarks/PROFILE_NOTES.md) against the plain
reference paths it replaces: outputs and gradients within float32 rounding. (The `cpu` kernel's
numbers on every attention setting: test_kernels.py. Whether the layout pays is a timing:
benchmarks/profile_step.py --ab=reference.)"""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import attention, run_config
from keynorm_jax.attention import prepare, scores
from keynorm_jax.cpu import boundary, products, rows
from keynorm_jax.cpu.dense import dense_matmul
from keynorm_jax.models import init_params
from train_helpers import tiny_config


def _close(a, b, rtol=1e-5, atol=1e-6):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=rtol, atol=atol), a, b)


@pytest.mark.parametrize("heads,width", [(1, 256), (3, 6)])
def test_products_match_einsum_values_and_gradients(heads, width):
  """probs x values and q k^T with their row-major custom backward passes (P^T and dS^T as their
  own copies) against jnp.einsum differentiated by autodiff: values and gradients of both
  operands."""
  rng = np.random.default_rng(2)
  probs = jnp.asarray(rng.uniform(size=(2, heads, 7, 9)), jnp.float32)
  values = jnp.asarray(rng.normal(size=(2, 9, heads, width)), jnp.float32)
  q = jnp.asarray(rng.normal(size=(2, 7, heads, width)), jnp.float32)

  def loss(probs_times_values, scores):
    return lambda p, v, q: (jnp.sum(jnp.sin(probs_times_values(p, v)))
                            + jnp.sum(jnp.sin(scores(q, v))))

  f32 = jnp.float32
  fast = loss(lambda p, v: products.probs_times_values(p, v, f32),
              lambda q, k: products.query_key_scores(q, k, f32))
  reference = loss(products.einsum_probs_times_values, products.einsum_scores)
  _close(jax.jit(jax.grad(fast, (0, 1, 2)))(probs, values, q),
         jax.grad(reference, (0, 1, 2))(probs, values, q))
  _close(products.probs_times_values(probs, values, f32),
         np.einsum("bhqk,bkhe->bqhe", probs, values), rtol=1e-5, atol=1e-5)
  _close(products.query_key_scores(q, values, f32), np.einsum("bqhs,bkhs->bhqk", q, values),
         rtol=1e-5, atol=1e-5)


def _bf16(x):
  """x rounded to bfloat16 (round to nearest even), back in float32: numpy's own rounding."""
  bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
  bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
  return bits.astype(np.uint32).view(np.float32)


# (product, a's shape, b's shape, einsum of a . b, of g . b -> da, of a . g -> db)
ROUNDING_PRODUCTS = {
    "probs_times_values": (products.probs_times_values, (1, 1, 5, 6), (1, 6, 1, 4),
                           "bhqk,bkhe->bqhe", "bqhe,bkhe->bhqk", "bhqk,bqhe->bkhe"),
    "query_key_scores": (products.query_key_scores, (1, 5, 2, 4), (1, 6, 2, 4),
                         "bqhs,bkhs->bhqk", "bhqk,bkhs->bqhs", "bqhs,bhqk->bkhs"),
    "dense_matmul": (dense_matmul, (2, 5, 4), (4, 3), "bnd,df->bnf", "bnf,df->bnd",
                     "bnd,bnf->df"),
}


@pytest.mark.parametrize("name", ROUNDING_PRODUCTS)
def test_bfloat16_products_round_inside_and_return_float32_gradients(name):
  """With dtype bfloat16 and float32 inputs, each CPU product rounds its inputs and the cotangent
  to bfloat16, sums in float32 and returns float32 gradients, not rounded to bfloat16: what lets
  the `cpu` kernel's query blocks add their gradients of one key or value in float32, and the
  weights' gradients reach the optimizer unrounded. Against numpy: the same roundings (numpy's
  own round-to-nearest-even), float64 sums."""
  product, a_shape, b_shape, forward, grad_a_spec, grad_b_spec = ROUNDING_PRODUCTS[name]
  rng = np.random.default_rng(3)
  a, b = (rng.normal(size=shape).astype(np.float32) for shape in (a_shape, b_shape))
  out, vjp = jax.vjp(lambda x, y: product(x, y, jnp.bfloat16), a, b)
  g = rng.normal(size=out.shape).astype(np.float32)
  grad_a, grad_b = vjp(jnp.asarray(g))
  assert out.dtype == grad_a.dtype == grad_b.dtype == jnp.float32
  a64, b64, g64 = (_bf16(x).astype(np.float64) for x in (a, b, g))
  close = lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  close(out, np.einsum(forward, a64, b64))
  close(grad_a, np.einsum(grad_a_spec, g64, b64))
  close(grad_b, np.einsum(grad_b_spec, a64, g64))
  # the gradients keep float32's digits: rounded to bfloat16 they would differ
  assert not np.array_equal(np.asarray(grad_b), _bf16(grad_b))


@pytest.mark.parametrize("name", ["kna_rope", "transformer_kna_rope"])
def test_model_with_the_cpu_kernel_matches_the_reference(name):
  """Whole tiny models: model.kernel=cpu (the dense layers' and attention's CPU paths) against
  model.kernel=reference: loss and every parameter's gradient."""
  config = run_config.resolve(tiny_config(name))
  tokens = np.random.default_rng(1).integers(0, 256, size=(2, config.train_length),
                                             dtype=np.int32)
  results = {}
  for kernel in ("cpu", "reference"):
    model_config = dataclasses.replace(run_config.model_config(config), kernel=kernel)
    assert model_config.cpu_ops == (kernel == "cpu")
    model = run_config.build_model(config).__class__(model_config)
    params = init_params(model, 0, config.train_length)
    loss = lambda p, m=model: jnp.mean(m.apply({"params": p}, tokens) ** 2)
    results[kernel] = jax.jit(jax.value_and_grad(loss))(params)
  _close(results["cpu"], results["reference"], rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("shape, axes", [((37, 20), None), ((2, 3, 7, 9), (0, 1, 3, 2))])
def test_transposed_is_the_transpose_as_its_own_copy(shape, axes):
  """boundary.transposed: numpy's transpose exactly, of a value computed in the same function (the
  case XLA would fuse), and its gradient."""
  x = np.random.default_rng(5).normal(size=shape).astype(np.float32)
  fast = jax.jit(lambda a: boundary.transposed(a * 2.0 - 1.0, axes))
  np.testing.assert_array_equal(fast(x), np.transpose(x * 2.0 - 1.0, axes))
  weights = np.random.default_rng(6).normal(size=np.transpose(x, axes).shape).astype(np.float32)
  grad = jax.grad(lambda a: jnp.sum(boundary.transposed(a, axes) * weights))(x)
  np.testing.assert_array_equal(grad, np.transpose(weights, np.argsort(axes) if axes else None))


def test_the_boundary_is_a_conditional_in_a_traced_program_and_none_when_eager():
  """Traced (under jit, grad, make_jaxpr) own_op's work sits in a conditional, the boundary XLA's
  fusion stops at; called eagerly it is the function itself, on the concrete array: a conditional
  there would compile anew at each call (new branch functions) and stop no fusion."""
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  seen = []
  double = lambda a: seen.append(type(a)) or a * 2.0
  assert "cond[" in str(jax.make_jaxpr(lambda a: boundary.own_op(double, a))(x))
  assert seen and all(issubclass(t, jax.core.Tracer) for t in seen)   # traced once or twice
  seen.clear()
  np.testing.assert_array_equal(boundary.own_op(double, jnp.asarray(x)), x * 2.0)
  assert seen == [type(jnp.asarray(x))]


@pytest.mark.parametrize("shape", [(2, 1, 5, 7), (2, 6, 1, 4), (1, 3, 1, 5), (2, 3, 5)])
def test_softmax_and_norm_by_rows_match_numpy(shape):
  """cpu/rows.by_rows around the softmax (with its entropy) and the L2 norm: numpy's numbers in
  float64, and the plain functions' gradients."""
  rng = np.random.default_rng(7)
  x, weights = (rng.normal(size=shape).astype(np.float32) for _ in range(2))
  x64 = x.astype(np.float64)
  exp = np.exp(x64 - x64.max(-1, keepdims=True))
  probs = exp / exp.sum(-1, keepdims=True)
  plain_softmax = lambda a: jax.nn.softmax(a, axis=-1)
  fast_softmax = lambda a: rows.by_rows(plain_softmax, a)
  np.testing.assert_allclose(jax.jit(fast_softmax)(x), probs, rtol=1e-5, atol=1e-7)
  if len(shape) == 4:   # as the cpu kernel calls it: scores [B, H, Q, K], keep [B, 1, Q, K]
    keep = np.ones(shape[:1] + (1,) + shape[2:], bool)
    fast_probs, entropy = jax.jit(lambda a: scores.softmax_with_entropy(a, keep, rows.by_rows))(x)
    np.testing.assert_allclose(fast_probs, probs, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(entropy, np.moveaxis(-(probs * np.log(probs)).sum(-1), 1, 2),
                               rtol=1e-5, atol=1e-6)
  norm = lambda a: rows.by_rows(prepare.l2_normalize, a)
  np.testing.assert_allclose(jax.jit(norm)(x), x64 / np.sqrt((x64 * x64).sum(-1, keepdims=True)),
                             rtol=1e-5, atol=1e-7)
  loss = lambda f: (lambda a: jnp.sum(f(a) * weights))
  for fast, plain in ((fast_softmax, plain_softmax), (norm, prepare.l2_normalize)):
    _close(jax.grad(loss(fast))(x), jax.grad(loss(plain))(x))


def _reductions_keeping_a_size_one_axis(program: str) -> list:
  """The reductions of a lowered (StableHLO) program whose result keeps an axis of size 1."""
  found = re.findall(r"stablehlo\.reduce\(.* across dimensions = \[([\d, ]*)\] : "
                     r"\(tensor<([\dx]*)x\w+>", program)
  assert len(found) == program.count("stablehlo.reduce("), "a reduction the pattern missed"
  kept = [[n for i, n in enumerate(dims.split("x")) if str(i) not in axes.split(", ")]
          for axes, dims in found]
  return [k for k in kept if "1" in k]


def test_the_cpu_kernel_reduces_no_size_one_axis_of_a_single_head():
  """KNA attention of one head with the `cpu` kernel, forward and gradient as handed to XLA: no
  reduction keeps a size-1 axis (YNNPACK reduces [B, 1, Q, K] and [B, T, 1, S] rows several times
  slower; PROFILE_NOTES.md, round 8), where the reference kernel's does."""
  q, k, v = (np.random.default_rng(i).normal(size=(2, 16, 8)).astype(np.float32)
             for i in range(3))
  spec = attention.Spec(variant="kna", inv_freq=1.0 / 10000 ** (np.arange(4) / 4))
  def lowered(kernel):
    loss = lambda q, k, v: jnp.sum(attention.causal_attention(q, k, v, spec, kernel=kernel) ** 2)
    return jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, k, v).as_text()
  assert _reductions_keeping_a_size_one_axis(lowered("reference"))
  assert not _reductions_keeping_a_size_one_axis(lowered("cpu"))
