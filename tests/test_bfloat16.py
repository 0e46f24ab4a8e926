"""model.compute_dtype=bfloat16 (keynorm_jax/precision.py): every large product takes bfloat16
inputs and sums in float32, forward and backward, while the loss, the parameters and the optimizer
state stay float32; and the bfloat16 step computes the float32 step's numbers within bfloat16's
rounding, on both architectures and every kernel that runs on a CPU.

The tolerances, from what was measured here on the tiny models at initialization (random tokens,
every parameter's gradient) and kept with margin: the loss's relative error at most 8e-5 (bound
1e-3); each parameter's gradient at cosine similarity 0.9997 or more to its float32 gradient (bound
0.999: 1 - cos at a third of its bound), the whole gradient at a relative error of 0.6% (GAU) and
1.9% (Transformer) (bound 5%). bfloat16 keeps 8 significant bits, a relative rounding of 2^-9 (0.2%)
per value; a gradient passes through a few dozen rounded products, so errors of a few tenths of a
percent to a few percent are bfloat16's, while a wrong product or a lost term moves a gradient far
past these bounds. The attention kernels alone (T = 37, blocks that split it; inputs already in
bfloat16): output and gradients at relative errors of 0.18-0.29% and 0.30-0.41% and cosines of
0.99999 or more (bounds 1% and 0.9999).

On the code before (a5b641e) the dense layers' products were bfloat16 x bfloat16 -> bfloat16 and
attention's and the head's float32 x float32: the checks of the products' dtypes here (the whole
step's and each kernel's) fail there, while its numbers pass (it rounded less).
"""

import collections
import dataclasses
import functools
import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import models, precision, run_config
from keynorm_jax.cpu import features
from keynorm_jax.models import init_params
from keynorm_jax.scoring import token_scores
from keynorm_jax.training.loop import init_state, make_train_step
from keynorm_jax.training.optimizer import make_optimizer
from attention_cases import CASES, attend_options, inputs
from shapes import BLOCKS, S
from train_helpers import tiny_config

ARCHITECTURES = ("kna_rope", "transformer_kna_rope")   # the GAU and the Transformer
CPU_KERNELS = ("reference", "cpu", "blocked")
LOSS_RTOL = 1e-3
MIN_COSINE = 0.999
GRADIENT_RTOL = 5e-2
# attention alone (fewer rounded products): output and gradients
ATTENTION_MIN_COSINE = 0.9999
ATTENTION_RTOL = 1e-2


def _model(name, kernel, dtype, **model_fields):
  """(model, config) of the tiny `name` with model.kernel, model.compute_dtype and any other model
  fields set."""
  config = run_config.resolve(tiny_config(name))
  model_config = dataclasses.replace(run_config.model_config(config), kernel=kernel,
                                     compute_dtype=dtype, **model_fields)
  return models.build_model(model_config), config


def _loss_fn(name, kernel, dtype, init=init_params, **model_fields):
  """(the training loss of fixed random tokens as a function of the parameters, the parameters:
  init(model, seed, length))."""
  model, config = _model(name, kernel, dtype, **model_fields)
  batch = np.random.default_rng(1).integers(0, 256, size=(4, config.train_length + 1),
                                            dtype=np.int32)
  loss = lambda p: token_scores(model.apply({"params": p}, batch[:, :-1]), batch[:, 1:])[1].mean()
  return loss, init(model, 0, config.train_length)


@functools.cache
def _loss_and_grads(name, kernel, dtype, tie_embeddings=False):
  loss, params = _loss_fn(name, kernel, dtype, tie_embeddings=tie_embeddings)
  return jax.jit(jax.value_and_grad(loss))(params)


def _cosine(a, b):
  a, b = np.ravel(np.asarray(a, np.float64)), np.ravel(np.asarray(b, np.float64))
  return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _relative(a, b):
  """|a - b| / |b| over all of both (pytrees of arrays)."""
  flat = lambda t: np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(t)])
  return float(np.linalg.norm(flat(a) - flat(b)) / np.linalg.norm(flat(b)))


def _assert_close_gradients(got, want, min_cosine=MIN_COSINE, rtol=GRADIENT_RTOL):
  """Each array's cosine similarity and the whole gradient's relative error, within the bounds."""
  for path, g in jax.tree_util.tree_leaves_with_path(got):
    w = functools.reduce(lambda t, key: t[key.key if hasattr(key, "key") else key.idx], path, want)
    assert g.dtype == w.dtype and g.shape == w.shape, jax.tree_util.keystr(path)
    assert _cosine(g, w) > min_cosine, (jax.tree_util.keystr(path), _cosine(g, w))
  assert _relative(got, want) < rtol, _relative(got, want)


def _subjaxprs(eqn):
  """The jaxprs inside an equation (conditionals, loops, custom rules)."""
  return [getattr(v, "jaxpr", v) for value in eqn.params.values()
          for v in (value if isinstance(value, (tuple, list)) else (value,))
          if hasattr(getattr(v, "jaxpr", v), "eqns")]


def dot_generals(jaxpr) -> list:
  """Every dot_general of a jaxpr and the jaxprs inside it (conditionals, loops, custom rules):
  [((input dtypes), output dtype, preferred_element_type)]."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      found.append((tuple(str(v.aval.dtype) for v in eqn.invars), str(eqn.outvars[0].aval.dtype),
                    str(eqn.params.get("preferred_element_type"))))
    for inner in _subjaxprs(eqn):
      found += dot_generals(inner)
  return found


@pytest.mark.parametrize("kernel", CPU_KERNELS)
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_every_product_of_a_bfloat16_step_takes_bfloat16_and_sums_in_float32(name, kernel):
  """The traced loss and gradient of a bfloat16 model: every dot_general (the dense layers, the
  head, q . k and probabilities x values, and all of their backward products) has bfloat16 inputs
  and a float32 result, and the loss and every gradient are float32."""
  shapes = lambda *a: jax.eval_shape(functools.partial(init_params, *a))   # traced, not run
  loss, params = _loss_fn(name, kernel, "bfloat16", init=shapes)
  traced = jax.make_jaxpr(jax.value_and_grad(loss))(params)
  found = collections.Counter(dot_generals(traced.jaxpr))
  assert found and set(found) == {(("bfloat16", "bfloat16"), "float32", "float32")}, found
  assert {str(v.aval.dtype) for v in traced.jaxpr.outvars} == {"float32"}


# What may give a bfloat16 result on the CPU seam: rounding and moving values, no arithmetic.
MOVES = {"convert_element_type", "reshape", "transpose", "broadcast_in_dim", "slice", "squeeze",
         "concatenate", "pad", "dynamic_slice", "dynamic_update_slice", "copy", "copy_p",
         "select_n", "split"}


def bfloat16_arithmetic(jaxpr) -> collections.Counter:
  """The primitives of a jaxpr (and those inside it) other than MOVES with a bfloat16 result."""
  found = collections.Counter()
  for eqn in jaxpr.eqns:
    inner = _subjaxprs(eqn)
    for sub in inner:
      found += bfloat16_arithmetic(sub)
    if not inner and eqn.primitive.name not in MOVES and any(
        v.aval.dtype == jnp.bfloat16 for v in eqn.outvars):
      found[eqn.primitive.name] += 1
  return found


# The two architectures, and the parts that read activations besides the dense layers: the GAU's
# MLP, the Transformer's output gate, q/k/v biases, tied head, and FoX's forget gates.
ELEMENTWISE_CASES = [("kna_rope", {}), ("transformer_kna_rope", {}), ("kna_rope", {"gau_mlp": True}),
                     ("transformer_kna_rope", {"output_gate": True, "qkv_bias": True,
                                               "tie_embeddings": True}),
                     ("transformer_kna_fox", {})]


@pytest.mark.parametrize("name, fields", ELEMENTWISE_CASES,
                         ids=[f"{n}-{'-'.join(f) or 'plain'}" for n, f in ELEMENTWISE_CASES])
def test_on_the_cpu_seam_a_bfloat16_step_does_its_elementwise_work_in_float32(name, fields):
  """ModelConfig.activation_dtype: on the CPU seam the arrays between the products are float32 (XLA's
  CPU backend computes bfloat16 arithmetic in float32 and rounds each result back, outside
  YNNPACK); the products alone read bfloat16. Elsewhere (the reference kernel here, as on the
  accelerators) the activations are bfloat16: the check finds their arithmetic there."""
  shapes = lambda *a: jax.eval_shape(functools.partial(init_params, *a))
  found = {}
  for kernel in ("cpu", "reference"):
    loss, params = _loss_fn(name, kernel, "bfloat16", init=shapes, **fields)
    found[kernel] = bfloat16_arithmetic(jax.make_jaxpr(jax.value_and_grad(loss))(params).jaxpr)
  assert not found["cpu"], found["cpu"]
  assert found["reference"]["mul"] > 0, found["reference"]   # the check sees bfloat16 work


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_the_compiled_bfloat16_step_on_the_cpu_seam_reads_bfloat16_in_every_dot(name):
  """What XLA compiles, not only what is traced: every dot of the compiled loss and gradient reads
  bfloat16 operands. The dense layers' weight gradient read x^T from a conditional whose result
  layout assignment left column-major; XLA then ran that dot in float32, its operands converted
  (17 of the cpu GAU step's 147 products; cpu/boundary.py's `transposed` now returns a row-major
  array). XLA decides whether YNNPACK takes a dot from its dtypes, shapes and layouts
  (ynn_support.cc reads no processor flag), so the check is meant to hold on any x86 CPU."""
  loss, params = _loss_fn(name, "cpu", "bfloat16")
  hlo = jax.jit(jax.value_and_grad(loss)).lower(params).compile().as_text()
  dtypes = dict(re.findall(r"%([\w.\-]+) = (\w+)\[", hlo))
  dots = re.findall(r"= (\w+)\[[^\n]*? dot\(%([\w.\-]+), %([\w.\-]+)\)", hlo)
  found = collections.Counter((dtypes[a], dtypes[b], result) for result, a, b in dots)
  assert found and set(found) == {("bf16", "bf16", "f32")}, found


@pytest.mark.parametrize("kernel", CPU_KERNELS)
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_a_bfloat16_step_gives_the_float32_steps_loss_and_gradients(name, kernel):
  """Loss and every parameter's gradient against the float32 step (the reference kernel's: the
  kernels agree in float32 within float32 rounding, test_kernels.py)."""
  loss, grads = _loss_and_grads(name, kernel, "bfloat16")
  want_loss, want_grads = _loss_and_grads(name, "reference", "float32")
  assert loss.dtype == jnp.float32
  assert abs(float(loss) - float(want_loss)) < LOSS_RTOL * abs(float(want_loss))
  _assert_close_gradients(grads, want_grads)


def test_the_tied_head_takes_bfloat16_and_sums_in_float32_too():
  """model.tie_embeddings: the head is the embedding's transpose, its product in the rule too."""
  shapes = lambda *a: jax.eval_shape(functools.partial(init_params, *a))
  loss, params = _loss_fn("kna_rope", "reference", "bfloat16", init=shapes, tie_embeddings=True)
  found = set(dot_generals(jax.make_jaxpr(jax.value_and_grad(loss))(params).jaxpr))
  assert found == {(("bfloat16", "bfloat16"), "float32", "float32")}, found
  loss, grads = _loss_and_grads("kna_rope", "reference", "bfloat16", tie_embeddings=True)
  want_loss, want_grads = _loss_and_grads("kna_rope", "reference", "float32", tie_embeddings=True)
  assert abs(float(loss) - float(want_loss)) < LOSS_RTOL * abs(float(want_loss))
  _assert_close_gradients(grads, want_grads)


def test_a_bfloat16_training_step_keeps_parameters_optimizer_state_and_metrics_float32():
  """The real training step (AdamW, clipping) of a bfloat16 model: the new parameters, the
  optimizer state and the metrics are float32, and its loss is the float32 step's."""
  losses = {}
  for dtype in ("float32", "bfloat16"):
    model, config = _model("kna_rope", "auto", dtype)
    tx = make_optimizer(config)
    state = init_state(model, tx, 0, config.train_length)
    batch = np.random.default_rng(2).integers(
        0, 256, size=(config.batch_size, config.train_length + 1), dtype=np.int32)
    state, metrics = jax.jit(make_train_step(model, tx, jax.random.PRNGKey(1)))(state, batch)
    losses[dtype] = float(metrics["loss"])
  floats = {str(x.dtype) for x in jax.tree.leaves((state, metrics))
            if jnp.issubdtype(x.dtype, jnp.floating)}
  assert floats == {"float32"}
  assert abs(losses["bfloat16"] - losses["float32"]) < LOSS_RTOL * losses["float32"]


ATTENTION_CASES = ("kna_rope", "rerope", "dca", "window_alibi", "kerple")


@pytest.mark.parametrize("kernel", CPU_KERNELS)
@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_a_kernel_in_bfloat16_gives_its_float32_numbers(case, kernel):
  """attend on bfloat16 q, k, v (4 query heads sharing 2 key/value heads) against attend on the
  same values in float32: output and the gradients of q, k and v (the blocked kernel in blocks
  that split the sequence); and its products take bfloat16 inputs and sum in float32."""
  index = ATTENTION_CASES.index(case)
  arrays = inputs(index, kv_heads=2, value_size=S)
  blocks = dict(zip(("query_block", "key_block"), BLOCKS[index % len(BLOCKS)]))
  options = {**CASES[case], "kernel": kernel, **(blocks if kernel == "blocked" else {})}
  weights = np.random.default_rng(9).normal(size=arrays[0].shape).astype(np.float32)

  def attend(q, k, v):
    return attend_options(q, k, v, need_entropy=False, **options)[0]

  def loss(q, k, v):
    return jnp.sum(attend(q, k, v) * weights)

  rounded = [jnp.asarray(x, jnp.bfloat16) for x in arrays]
  exact = [x.astype(jnp.float32) for x in rounded]
  out, want = jax.jit(attend)(*rounded), jax.jit(attend)(*exact)
  assert out.dtype == jnp.bfloat16
  assert _relative(out, want) < ATTENTION_RTOL
  gradient = jax.grad(loss, argnums=(0, 1, 2))
  jitted = jax.jit(gradient)
  grads, want_grads = jitted(*rounded), jitted(*exact)
  _assert_close_gradients([g.astype(jnp.float32) for g in grads], list(want_grads),
                          ATTENTION_MIN_COSINE, ATTENTION_RTOL)
  found = set(dot_generals(jax.make_jaxpr(gradient)(*rounded).jaxpr))
  assert found == {(("bfloat16", "bfloat16"), "float32", "float32")}, found


def test_einsum_in_float32_is_the_plain_einsum_and_refuses_what_it_cannot_transpose():
  """precision.einsum: in float32 jnp.einsum itself (its jaxpr, differentiated by autodiff); in
  bfloat16 the gradients of autodiff on the rounded inputs, within bfloat16's rounding; a spec
  whose transposes do not exist is refused in one line."""
  rng = np.random.default_rng(4)
  a, b = rng.normal(size=(3, 5, 4)).astype(np.float32), rng.normal(size=(4, 6)).astype(np.float32)
  spec = "...d,df->...f"
  plain = lambda x, y: jnp.sum(jnp.sin(jnp.einsum(spec, x, y)))
  ours = lambda dtype: lambda x, y: jnp.sum(jnp.sin(precision.einsum(spec, x, y, dtype)))
  assert (str(jax.make_jaxpr(jax.grad(ours(jnp.float32), (0, 1)))(a, b))
          == str(jax.make_jaxpr(jax.grad(plain, (0, 1)))(a, b)))
  rounded = [np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32)) for x in (a, b)]
  got = jax.grad(ours(jnp.bfloat16), (0, 1))(a, b)
  want = jax.grad(plain, (0, 1))(*rounded)
  _assert_close_gradients(list(got), list(want))
  with pytest.raises(ValueError, match="cannot transpose"):
    precision.einsum("ij,jk->k", a[0], b, jnp.bfloat16)   # i is summed within the first input


@pytest.mark.parametrize("flags, dtype, said", [
    (("avx2", "avx512f"), "bfloat16", True), (("avx2", "avx512_bf16"), "bfloat16", False),
    (("avx2", "amx_bf16"), "bfloat16", False), (("avx2",), "float32", False),
    ((), "bfloat16", False)])   # flags unknown
def test_a_bfloat16_model_on_a_cpu_without_bf16_units_says_so_once(flags, dtype, said, caplog,
                                                                    monkeypatch):
  """Building bfloat16 models on a CPU without bfloat16 units logs one line, once per process;
  with the units, in float32, or where the flags are unknown, nothing."""
  monkeypatch.setattr(features, "_cpuinfo", lambda: ("AMD EPYC 7B13", flags))
  monkeypatch.setattr(models, "_SAID", set())
  with caplog.at_level(logging.WARNING):
    for _ in range(2):
      _model("kna_rope", "auto", dtype)
  lines = [r.getMessage() for r in caplog.records if "compute_dtype=bfloat16" in r.getMessage()]
  assert lines == ([features.slow_bfloat16()] if said else [])
  if said:
    assert "\n" not in lines[0] and "AMD EPYC 7B13 (no bf16 units)" in lines[0]
