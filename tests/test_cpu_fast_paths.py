"""The CPU training step's fast paths (benchmarks/PROFILE_NOTES.md, issue 13) against the plain
reference paths they replace: outputs and gradients within float32 rounding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.attention import attend, probs_values
from keynorm_jax.models import init_params
from train_helpers import tiny_config


def _close(a, b, rtol=1e-5, atol=1e-6):
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=rtol, atol=atol), a, b)


def _model_loss(name, **overrides):
  """(loss(params), params): a tiny model's mean squared logits on random tokens. Each
  jax.jit(jax.value_and_grad(loss)) is a new function, traced under the switches of its call."""
  config = run_config.resolve(tiny_config(name, **overrides))
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
  loss = lambda p, v: jnp.sum(jnp.sin(probs_values.probs_times_values(p, v)))
  fast = jax.jit(probs_values.probs_times_values)(probs, values), jax.jit(jax.grad(loss, (0, 1)))(
      probs, values)
  with probs_values.einsum_operand_order():
    reference = jax.jit(probs_values.probs_times_values)(probs, values), jax.jit(
        jax.grad(loss, (0, 1)))(probs, values)
  assert fast[0].shape == (2, 7, heads, 5)
  _close(fast, reference)
  np.testing.assert_allclose(reference[0], jnp.einsum("bhqk,bkhe->bqhe", probs, values),
                             rtol=1e-6, atol=1e-6)
  if jax.default_backend() == "cpu":  # the fast path is the one traced: P is the dot's lhs
    jaxpr = str(jax.make_jaxpr(probs_values.probs_times_values)(probs, values))
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
  fast = jax.jit(run)(q, k, v), jax.jit(jax.grad(loss, (0, 1, 2)))(q, k, v)
  with probs_values.einsum_operand_order():
    reference = jax.jit(run)(q, k, v), jax.jit(jax.grad(loss, (0, 1, 2)))(q, k, v)
  _close(fast, reference)


@pytest.mark.parametrize("name", ["kna_rope", "transformer_kna_rope"])
def test_model_gradients_with_ordered_product(name):
  loss, params = _model_loss(name)
  fast = jax.jit(jax.value_and_grad(loss))(params)
  with probs_values.einsum_operand_order():
    reference = jax.jit(jax.value_and_grad(loss))(params)
  _close(fast, reference, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("heads,width", [(1, 256), (3, 6)])
def test_probs_values_backward_matches_autodiff(monkeypatch, heads, width):
  """The custom backward of probs x values (P^T materialized for dV) against autodiff of the same
  product: gradients of both operands. (3, 6): the width bound lowered to take it."""
  monkeypatch.setattr(probs_values, "PROBS_VALUES_VJP_MIN_WIDTH", min(width, 256))
  rng = np.random.default_rng(2)
  probs = jnp.asarray(rng.uniform(size=(2, heads, 7, 9)), jnp.float32)
  values = jnp.asarray(rng.normal(size=(2, 9, heads, width)), jnp.float32)
  loss = lambda p, v: jnp.sum(jnp.sin(probs_values.probs_times_values(p, v)))
  fast = jax.jit(jax.grad(loss, (0, 1)))(probs, values)
  with probs_values.autodiff_probs_values():
    reference = jax.jit(jax.grad(loss, (0, 1)))(probs, values)
  _close(fast, reference)
  if jax.default_backend() == "cpu":  # the custom backward is the one traced
    jaxpr = str(jax.make_jaxpr(jax.grad(loss, (0, 1)))(probs, values))
    assert "optimization_barrier" in jaxpr, jaxpr


@pytest.mark.parametrize("name", ["kna_rope", "transformer_kna_rope"])
def test_model_gradients_with_probs_values_backward(monkeypatch, name):
  """Whole tiny models with every probs x values through the custom backward (width bound 1)
  against autodiff's."""
  monkeypatch.setattr(probs_values, "PROBS_VALUES_VJP_MIN_WIDTH", 1)
  loss, params = _model_loss(name)
  fast = jax.jit(jax.value_and_grad(loss))(params)
  with probs_values.autodiff_probs_values():
    reference = jax.jit(jax.value_and_grad(loss))(params)
  _close(fast, reference, rtol=1e-4, atol=1e-7)
