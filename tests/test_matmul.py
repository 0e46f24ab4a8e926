"""The dense products' custom backward (cpu/dense.py) against autodiff of the einsum it replaces.
(Through whole models' gradients: test_cpu_fast_paths.py.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax.cpu.dense import dense_matmul, reference_matmul


def _loss(fn, x, kernel):
  return jnp.sum(jnp.sin(fn(x, kernel, jnp.float32)))


@pytest.mark.parametrize("shape", [(6, 5), (2, 7, 5), (2, 3, 4, 5)])
def test_dense_matmul_gradients_match_autodiff(shape):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=shape), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(shape[-1], 3)), jnp.float32)
  np.testing.assert_allclose(dense_matmul(x, kernel, jnp.float32),
                             reference_matmul(x, kernel, jnp.float32), rtol=1e-6)
  fast = jax.jit(jax.grad(lambda *a: _loss(dense_matmul, *a), argnums=(0, 1)))(x, kernel)
  reference = jax.grad(lambda *a: _loss(reference_matmul, *a), argnums=(0, 1))(x, kernel)
  for got, want in zip(fast, reference):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
