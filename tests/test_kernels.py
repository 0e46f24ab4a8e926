"""Every registered attention kernel against the reference kernel, on the shared case table
(attention_cases.py): outputs, entropies (where the kernel gives them) and gradients, or a refusal
with its reason where the kernel cannot express the case; and the choice among them (`select`)."""

import functools
import logging
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import attention
from keynorm_jax.attention import kernels
from keynorm_jax.attention.kernels import dot_product
from keynorm_jax.attention.kernels.base import Shape
from attention_cases import CASES, attend_options, inputs, mods_of
from shapes import BLOCKS, E, H, S, T

# Kernel -> the cases it refuses (a reason each). The blocked kernel runs a case in its BLOCKS
# (_seed).
REFUSED = {
    "reference": set(),
    "cpu": set(),
    "blocked": {"stickbreaking_window_rope", "cope_kna_window"},  # whole rows of keys
    # A window or ReRoPE over explicit positions (the calls count indices).
    # ReRoPE with a score bias (not composed).
    # FoX's data-dependent bias; scale-invariant's factor on each score; stick-breaking; PaTH's
    # transform of each pair.
    "xla": {"shifted_positions", "random_positions_per_row", "random_positions_rerope",
            "rerope_alibi", "fox_window_kna", "scale_invariant_sinks", "stickbreaking_window_rope",
            "cope_kna_window", "dca", "path_kna_logn_window", "path_fox_cosa_ssmax"},
    "cudnn": set(CASES) | {"values_wider"},   # refused on a CPU: "cuDNN runs on a GPU only"
}
# The same cases with the GAU's layout (values wider than q and k) for the shape refusals.
ALL_CASES = sorted(CASES) + ["values_wider"]
# A variant reaches a kernel as q's per-query multiplier (prepare.py: the same for every kernel and
# variant), so one variant with log n and SSMax's learnable scale holds the kernels' gradient
# through it (qna: q normalized too); the others' multipliers differ only in number.
GRADIENT_CASES = ["kna_rope", "rerope", "leaky_rerope", "sinks_over_a_block", "window_alibi",
                  "xpos", "random_positions_per_row", "ssmax", "cosa_rope_logn", "fire_sinks",
                  "fire", "values_wider", "fox_window_kna", "scale_invariant_sinks",
                  "stickbreaking_window_rope", "cope_kna_window", "dca", "qna_rope_logn_ssmax",
                  "path_fox_cosa_ssmax"]
# Computed forward only (two calls merged by log-sum-exps): differentiating them raises.
FORWARD_ONLY = {"xla": {"rerope", "leaky_rerope", "sinks_over_a_block", "fire_sinks",
                        "self_extend", "string"}}


def _seed(case):
  """A case's own seed (its inputs, and the blocked kernel's blocks: BLOCKS[seed % 4]), from its
  name: a case added to the table changes no other case's inputs."""
  return zlib.crc32(case.encode())


@functools.cache
def _case(case):
  """q, k, v (4 query heads sharing 2 key/value heads; values as wide as q and k, or wider as the
  GAU's) and the options of a case (made once: the reference's results and the gradient loss read
  the same case)."""
  if case == "values_wider":
    return (*inputs(11, kv_heads=2, value_size=3 * S), CASES["kna_rope"])
  return (*inputs(_seed(case), kv_heads=2, value_size=S), CASES[case])


def _reason(name, q, k, v, options, need_entropy=False):
  return kernels.refusal(kernels.KERNELS[name], mods_of(**options), Shape.of(q, k, v),
                         need_entropy)


def _jitted(q, k, v, **options):
  """attend_options compiled as one program (not run op by op)."""
  return jax.jit(lambda q, k, v: attend_options(q, k, v, **options))(q, k, v)


def _run(name, q, k, v, options, case_index=0):
  blocks = dict(zip(("query_block", "key_block"), BLOCKS[case_index % len(BLOCKS)]))
  return _jitted(q, k, v, kernel=name, need_entropy=False, **options,
                 **(blocks if name == "blocked" else {}))


def test_every_kernel_has_a_row():
  assert set(REFUSED) == set(kernels.KERNELS)


@functools.cache
def _reference_output(case):
  """The reference kernel's output and entropy of a case, computed once for every kernel that runs
  the case."""
  q, k, v, options = _case(case)
  return _jitted(q, k, v, kernel="reference", **options)


@pytest.mark.parametrize("name", [n for n in kernels.KERNELS if n != "reference"])
@pytest.mark.parametrize("case", ALL_CASES)
def test_kernel_matches_reference_or_refuses(name, case):
  q, k, v, options = _case(case)
  reason = _reason(name, q, k, v, options)
  if case in REFUSED[name]:
    assert reason, f"{name} runs {case}: update REFUSED"
    return
  assert reason is None, reason
  out, entropy = _run(name, q, k, v, options, _seed(case))
  want_out, want_entropy = _reference_output(case)
  np.testing.assert_allclose(np.asarray(out), np.asarray(want_out), atol=2e-5, rtol=2e-5)
  if kernels.KERNELS[name].gives_entropy:
    np.testing.assert_allclose(np.asarray(entropy), np.asarray(want_entropy), atol=2e-5)
  else:
    assert entropy is None


@pytest.mark.parametrize("name, case", [
    (n, c) for n in kernels.KERNELS if n != "reference" for c in GRADIENT_CASES
    if c not in REFUSED[n] | FORWARD_ONLY.get(n, set())])
def test_kernel_gradients_match_reference(name, case):
  """Gradients of q, k, v and of the learnable arrays among the options (SSMax's scale, FoX's
  log forget gates, CoPE's embeddings, PaTH's factors)."""
  gives_entropy = kernels.KERNELS[name].gives_entropy
  got = jax.jit(jax.grad(functools.partial(_gradient_loss, case, name, gives_entropy),
                         argnums=(0, 1, 2, 3)))(*_gradient_inputs(case))
  want = _reference_gradients(case, gives_entropy)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-4)


# The options a gradient is taken of (where the case has them).
LEARNABLE = ("ssmax_scale", "log_forget", "cope_embeddings", "path")


def _gradient_inputs(case):
  """q, k, v and the learnable arrays among a case's options."""
  q, k, v, options = _case(case)
  return q, k, v, {n: options[n] for n in LEARNABLE if n in options}


def _gradient_loss(case, kernel, with_entropy, q, k, v, arrays):
  """A weighted sum of the output (and of the entropy, where the kernel gives it) of `kernel` on
  the case with these q, k, v and learnable arrays (the blocked kernel in its blocks)."""
  fixed = {n: x for n, x in _case(case)[3].items() if n not in LEARNABLE}
  blocks = dict(zip(("query_block", "key_block"), BLOCKS[_seed(case) % len(BLOCKS)]))
  out, entropy = attend_options(q, k, v, kernel=kernel, need_entropy=with_entropy, **fixed,
                                **arrays, **(blocks if kernel == "blocked" else {}))
  total = jnp.sum(out * jnp.cos(jnp.arange(out.size).reshape(out.shape)))
  if with_entropy:
    total += jnp.sum(entropy * jnp.sin(jnp.arange(entropy.size).reshape(entropy.shape)))
  return total


@functools.cache
def _reference_gradients(case, with_entropy):
  """The reference kernel's gradients of the same loss, computed once for every kernel that runs
  the case."""
  return jax.jit(jax.grad(functools.partial(_gradient_loss, case, "reference", with_entropy),
                          argnums=(0, 1, 2, 3)))(*_gradient_inputs(case))


@pytest.mark.parametrize("case", sorted(FORWARD_ONLY["xla"]))
def test_a_forward_only_composition_refuses_to_be_differentiated(case):
  q, k, v, options = _case(case)
  loss = lambda q: jnp.sum(attend_options(q, k, v, kernel="xla", need_entropy=False, **options)[0])
  with pytest.raises(dot_product.ForwardOnly, match="forward only"):
    jax.eval_shape(jax.grad(loss), q)   # raised where the backward pass is traced, as under jit


def test_auto_on_a_cpu():
  shape = lambda length: Shape(1, length, H, H, S, E, np.float32)
  plain = mods_of()
  assert attention.select("auto", plain, shape(512)).name == "cpu"
  assert attention.select("auto", plain, shape(4096)).name == "blocked"
  assert attention.select("reference", plain, shape(4096)).name == "reference"   # named: as told
  # PaTH: by chunks at every length (memory linear in T), never the full square unless named.
  path = mods_of(path=CASES["path_kna_logn_window"]["path"])
  assert [attention.select("auto", path, shape(n)).name for n in (16, 4096)] == ["blocked"] * 2
  assert attention.select("cpu", path, shape(512)).name == "cpu"
  assert attention.select("reference", path, shape(512)).name == "reference"


def test_a_named_kernel_that_refuses_gives_way_with_a_warning(caplog, monkeypatch):
  monkeypatch.setattr(kernels, "_warned", set())
  shape = Shape(1, T, H, H, S, E, np.float32)
  with caplog.at_level(logging.WARNING):
    chosen = attention.select("xla", mods_of(window=4, positions=np.arange(T)), shape)
  assert chosen.name == "cpu" and "not by explicit positions" in caplog.text
  assert "using 'cpu'" in caplog.text
  assert attention.select("xla", mods_of(), shape, need_entropy=True).name == "cpu"
  with pytest.raises(ValueError, match="Unknown attention kernel 'flash'; choose one of auto"):
    attention.select("flash", mods_of(), shape)


def test_blocks_go_with_the_blocked_kernel_only():
  q, k, v, options = _case("kna_rope")
  with pytest.raises(ValueError, match="blocked kernel's blocks; kernel='xla'"):
    attend_options(q, k, v, kernel="xla", query_block=8, **options)


def test_a_kernel_that_gives_no_entropy_says_so():
  q, k, v, options = _case("kna_rope")
  assert "no attention entropy" in _reason("xla", q, k, v, options, need_entropy=True)
  assert _reason("cpu", q, k, v, options, need_entropy=True) is None
