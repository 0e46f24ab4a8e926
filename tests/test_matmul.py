"""The dense products' custom backward (models/matmul.py) against autodiff of the einsum it replaces,
alone and through whole models' gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.models import init_params
from keynorm_jax.models.matmul import autodiff_backward, dense_matmul, reference_matmul
from train_helpers import tiny_config


def _loss(fn, x, kernel):
  return jnp.sum(jnp.sin(fn(x, kernel)))


@pytest.mark.parametrize("shape", [(6, 5), (2, 7, 5), (2, 3, 4, 5)])
def test_dense_matmul_gradients_match_autodiff(shape):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=shape), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(shape[-1], 3)), jnp.float32)
  np.testing.assert_allclose(dense_matmul(x, kernel), reference_matmul(x, kernel), rtol=1e-6)
  fast = jax.jit(jax.grad(lambda *a: _loss(dense_matmul, *a), argnums=(0, 1)))(x, kernel)
  reference = jax.grad(lambda *a: _loss(reference_matmul, *a), argnums=(0, 1))(x, kernel)
  for got, want in zip(fast, reference):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["kna_rope", "transformer_kna_rope"])
def test_model_gradients_match_autodiff(name):
  config = run_config.resolve(tiny_config(name))
  model = run_config.build_model(config)
  params = init_params(model, 0, config.train_length)
  tokens = np.random.default_rng(1).integers(0, 256, size=(2, config.train_length), dtype=np.int32)

  def loss(p):
    return jnp.mean(model.apply({"params": p}, tokens) ** 2)

  fast = jax.jit(jax.grad(loss))(params)
  with autodiff_backward():
    reference = jax.jit(jax.grad(loss))(params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7), fast,
               reference)
