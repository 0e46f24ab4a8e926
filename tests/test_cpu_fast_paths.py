"""The CPU training step's fast paths (benchmarks/PROFILE_NOTES.md, issue 13) against the plain
reference paths they replace: outputs and gradients within float32 rounding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import fusion_boundary, run_config
from keynorm_jax.attention import attend, products
from keynorm_jax.models import init_params
from keynorm_jax.trace_switch import jit_now
from train_helpers import tiny_config


def _close(a, b, rtol=1e-5, atol=1e-6):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=rtol, atol=atol), a, b)


def _model_loss(name):
  """(loss(params), params): a tiny model's mean squared logits on random tokens. Each
  jax.value_and_grad(loss) is a new function, traced under the switches of its call."""
  config = run_config.resolve(tiny_config(name))
  model = run_config.build_model(config)
  params = init_params(model, 0, config.train_length)
  tokens = np.random.default_rng(1).integers(0, 256, size=(2, config.train_length), dtype=np.int32)
  loss = lambda p: jnp.mean(model.apply({"params": p}, tokens) ** 2)
  return loss, params


@pytest.mark.parametrize("heads", [1, 3])
def test_probs_times_values_matches_einsum(heads):
  """probs x values (CPU: P as the dot's lhs) against jnp.einsum's order: values and gradients."""
  rng = np.random.default_rng(0)
  probs = jnp.asarray(rng.uniform(size=(2, heads, 7, 9)), jnp.float32)
  values = jnp.asarray(rng.normal(size=(2, 9, heads, 5)), jnp.float32)
  loss = lambda p, v: jnp.sum(jnp.sin(products.probs_times_values(p, v)))
  traced = lambda: (jit_now(products.probs_times_values)(probs, values),
                    jit_now(jax.grad(loss, (0, 1)))(probs, values))
  fast = traced()
  with products.einsum_operand_order():
    reference = traced()
  assert fast[0].shape == (2, 7, heads, 5)
  _close(fast, reference)
  np.testing.assert_allclose(reference[0], jnp.einsum("bhqk,bkhe->bqhe", probs, values),
                             rtol=1e-6, atol=1e-6)
  if jax.default_backend() == "cpu":  # the fast path is the one traced: P is the dot's lhs
    jaxpr = str(jax.make_jaxpr(products.probs_times_values)(probs, values))
    assert f"f32[2,{heads},7,5] = dot_general" in jaxpr, jaxpr


@pytest.mark.parametrize("shape", [(2, 37, 8, 20), (2, 37, 8, 256), (2, 37, 2, 8, 8)])
def test_attend_with_ordered_product_matches_einsum_order(shape):
  """attend (one head with values wider than q, as the GAU's; or two heads) against the same
  function traced with jnp.einsum's operand order: outputs, entropies and gradients."""
  rng = np.random.default_rng(4)
  *lead, size, value_size = shape
  q, k = (jnp.asarray(rng.normal(size=(*lead, size)), jnp.float32) for _ in range(2))
  v = jnp.asarray(rng.normal(size=(*lead, value_size)), jnp.float32)
  inv_freq = 1.0 / 10000.0**(jnp.arange(size // 2) / (size // 2))
  run = lambda q, k, v: attend(q, k, v, variant="kna", inv_freq=inv_freq)
  loss = lambda q, k, v: jnp.sum(jnp.sin(run(q, k, v)[0])) + jnp.sum(run(q, k, v)[1])
  traced = lambda: (jit_now(run)(q, k, v), jit_now(jax.grad(loss, (0, 1, 2)))(q, k, v))
  fast = traced()
  with products.einsum_operand_order():
    reference = traced()
  _close(fast, reference)


@pytest.mark.parametrize("name", ["kna_rope", "transformer_kna_rope"])
def test_model_gradients_with_ordered_product(name):
  loss, params = _model_loss(name)
  fast = jax.jit(jax.value_and_grad(loss))(params)
  with products.einsum_operand_order():
    reference = jax.jit(jax.value_and_grad(loss))(params)
  _close(fast, reference, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("heads,width", [(1, 256), (3, 6)])
def test_products_backward_matches_autodiff(heads, width):
  """The custom backward passes of probs x values and q k^T (P^T and dS^T as their own copies)
  against autodiff of the same products: gradients of both operands."""
  rng = np.random.default_rng(2)
  probs = jnp.asarray(rng.uniform(size=(2, heads, 7, 9)), jnp.float32)
  values = jnp.asarray(rng.normal(size=(2, 9, heads, width)), jnp.float32)
  q = jnp.asarray(rng.normal(size=(2, 7, heads, width)), jnp.float32)
  loss = lambda p, v, q: (jnp.sum(jnp.sin(products.probs_times_values(p, v)))
                          + jnp.sum(jnp.sin(products.query_key_scores(q, v))))
  fast = jax.jit(jax.grad(loss, (0, 1, 2)))(probs, values, q)
  with products.autodiff_products():
    reference = jax.jit(jax.grad(loss, (0, 1, 2)))(probs, values, q)
  np.testing.assert_allclose(jit_now(products.query_key_scores)(q, values),
                             np.einsum("bqhs,bkhs->bhqk", q, values), rtol=1e-5, atol=1e-5)
  _close(fast, reference)
  if jax.default_backend() == "cpu":  # the custom backward passes are the ones traced
    for one in (lambda p, v, q: jnp.sum(jnp.sin(products.probs_times_values(p, v))),
                lambda p, v, q: jnp.sum(jnp.sin(products.query_key_scores(q, v)))):
      assert "cond[" in str(jax.make_jaxpr(jax.grad(one, (0, 1, 2)))(probs, values, q))


@pytest.mark.parametrize("name", ["kna_rope", "transformer_kna_rope"])
def test_model_gradients_with_products_backward(name):
  """Whole tiny models with both attention products through their custom backward passes against
  autodiff's."""
  loss, params = _model_loss(name)
  fast = jax.jit(jax.value_and_grad(loss))(params)
  with products.autodiff_products():
    reference = jax.jit(jax.value_and_grad(loss))(params)
  _close(fast, reference, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("shape, axes", [((37, 20), None), ((2, 3, 7, 9), (0, 1, 3, 2))])
def test_transposed_is_the_transpose_as_its_own_copy(shape, axes):
  """fusion_boundary.transposed: numpy's transpose exactly, of a value computed in the same
  function (the case XLA would fuse), and on the CPU a conditional in the compiled program (the
  fusion boundary), which the reference (fused_everywhere) does not have."""
  x = np.random.default_rng(5).normal(size=shape).astype(np.float32)
  fn = lambda a: fusion_boundary.transposed(a * 2.0 - 1.0, axes)
  fast = jit_now(fn)(x)
  np.testing.assert_array_equal(fast, np.transpose(x * 2.0 - 1.0, axes))
  with fusion_boundary.fused_everywhere():
    np.testing.assert_array_equal(jit_now(fn)(x), fast)
    reference_hlo = jax.jit(lambda a: fn(a)).lower(x).compile().as_text()
  if jax.default_backend() == "cpu":
    assert "conditional(" in jax.jit(lambda a: fn(a)).lower(x).compile().as_text()
    assert "conditional(" not in reference_hlo


@pytest.mark.parametrize("positions, options", [("default", dict()),
                                                ("per_row", dict(rerope_window=6)),
                                                ("default", dict(xpos_gamma=0.4))])
def test_attend_with_one_rope_table_matches_fused_rope(positions, options):
  """attend with RoPE's cos and sin computed once as their own op (fusion_boundary.own_op) against
  the same function with XLA fusing them where it likes: outputs, entropies and gradients; with
  positions [T] (the table over T) and [B, T] (randomized positions: a table per row), passed in
  as the model passes them (an argument, not a constant XLA could fold the table from)."""
  rng = np.random.default_rng(6)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 37, 2, 8)), jnp.float32) for _ in range(3))
  inv_freq = 1.0 / 10000.0**(jnp.arange(4) / 4)
  at = (jnp.arange(37) if positions == "default"
        else jnp.asarray(np.sort(rng.integers(0, 90, (2, 37)))))
  run = lambda q, k, v, at: attend(q, k, v, variant="baseline", inv_freq=inv_freq, positions=at,
                                   **options)
  loss = lambda q, k, v, at: jnp.sum(jnp.sin(run(q, k, v, at)[0])) + jnp.sum(run(q, k, v, at)[1])
  traced = lambda: (jit_now(run)(q, k, v, at), jit_now(jax.grad(loss, (0, 1, 2)))(q, k, v, at))
  fast = traced()
  with fusion_boundary.fused_everywhere():
    reference = traced()
  _close(fast, reference)
  if jax.default_backend() == "cpu":  # the table is its own op in the compiled program
    assert "conditional(" in jax.jit(lambda *a: run(*a)).lower(q, k, v, at).compile().as_text()
