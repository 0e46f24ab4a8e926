"""The CPU seam (keynorm_jax/cpu/, the `cpu` kernel; benchmarks/PROFILE_NOTES.md) against the plain
reference paths it replaces: outputs and gradients within float32 rounding. (The `cpu` kernel's
numbers on every attention setting: test_kernels.py. Whether the layout pays is a timing:
benchmarks/profile_step.py --ab=reference.)"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.cpu import boundary, products
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

  fast = loss(products.probs_times_values, products.query_key_scores)
  reference = loss(products.einsum_probs_times_values, products.einsum_scores)
  _close(jax.jit(jax.grad(fast, (0, 1, 2)))(probs, values, q),
         jax.grad(reference, (0, 1, 2))(probs, values, q))
  _close(products.probs_times_values(probs, values),
         np.einsum("bhqk,bkhe->bqhe", probs, values), rtol=1e-5, atol=1e-5)
  _close(products.query_key_scores(q, values), np.einsum("bqhs,bkhs->bhqk", q, values),
         rtol=1e-5, atol=1e-5)


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
