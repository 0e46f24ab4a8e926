"""`jax.nn.dot_product_attention` on pre-scaled queries and keys: the `cudnn` and `xla` kernels.

Standard causal attention softmax(q' . k' + bias) is what the kernel computes. Prepared
(attention/prepare.py), q' = multiplier x q (the variant's scale, YaRN's attention_factor^2, the
log n factors and SSMax per query and head) and k' = k, so q' . k' is exactly the reference's score
before biases, and the kernel is called with scale=1.0 (softmax in float32). Each call also returns
the log-sum-exp of its scores where needed (`return_residual`), so that settings the kernel cannot
express in one call become several calls merged: with lse_a, lse_b the log-sum-exps of two disjoint
key sets, o = (o_a e^lse_a + o_b e^lse_b) / (e^lse_a + e^lse_b). Exact in float32; the kernel
returns the log-sum-exp in the inputs' dtype, so with cuDNN (bfloat16) the weights carry its
rounding (about |lse| 2^-8 relative: a ReRoPE merge measured 0.037 from the reference on a CPU
with the log-sum-exps rounded so, against 0.008 for rounding the output alone).

  plain, window      one call (`local_window_size` for the window)
  ReRoPE (forward)   keys with i - j < w by a windowed call on the near rotation, the rest by a
                     causal call of q_far[w:] against k_far[:T - w] (key j <= i - w), merged
  sinks (forward)    the window by a windowed call, the sink keys outside it (a few) scored in XLA
                     by attention/scores.py (at the far rule's rotation), merged
  ALiBi, KERPLE,     query chunks of CHUNK, each against the keys it can reach, with the chunk's
  FIRE               bias and mask built in XLA by attention/scores.py (no T x T array)
  values wider       (the GAU's 1536 beside q and k of 128) split into heads as wide as q, every
                     one sharing q and k, joined after
Grouped query heads go in as they are (the kernel shares key/value heads itself). The merges are
forward only (the evaluator's inference methods): the kernel's log-sum-exp carries no gradient, so
differentiating one raises; every other form has the kernel's own gradients.

Refused, with the reason: the attention entropy (the diagnostics), a window or ReRoPE over
explicit positions (the calls count indices), ReRoPE with a window or a score bias, values not a
multiple of q's size. `select` then takes another kernel.

- `cudnn`: cuDNN flash attention, on a GPU, in bfloat16 / float16. Where cuDNN refuses a call at
  run time, XLA's implementation runs it instead with a log line, or past FULL_SQUARE_MAX_LENGTH
  tokens the blocked kernel computes the whole attention. q', k' and the bias enter in the values'
  dtype: in bfloat16 that rounds them, which the reference (all float32) does not. Not run here
  (no GPU was lent to the session that wrote it).
- `xla`: XLA's implementation, any backend and dtype: the same compositions, tested on the CPU
  against the reference (tests/test_kernels.py), which is how the cuDNN kernel's composition is
  tested without a GPU. A call scores its whole square at once, so it is refused past
  FULL_SQUARE_MAX_LENGTH; measured slower than `cpu` on a CPU (forward and backward of 8 x 512
  tokens, 4 heads of 48: 0.34 s against 0.20 s, 2-core CPU, jax 0.10.2), so `auto` never picks it.
"""

from absl import logging
import jax
import jax.numpy as jnp

from keynorm_jax.attention.kernels import blocked
from keynorm_jax.attention.kernels.base import (FULL_SQUARE_MAX_LENGTH, Kernel,
                                                 longer_than_full_square)
from keynorm_jax.attention.prepare import Side
from keynorm_jax.attention.scores import (MASKED, bias_and_keep, block_scores,
                                          grouped_probs_times_values, needs_whole_rows)

CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)
CHUNK = 512   # queries per call where a bias is built in XLA
_logged: set = set()


def expressible(mods, shape):
  """Why the compositions cannot express `mods` with `shape` (None: they can)."""
  start = None if mods.far is None else mods.far.start   # from this distance the far rotation
  rerope = start is not None and mods.sink_tokens is None
  if mods.explicit_positions and (mods.window is not None or rerope):
    return "the calls count a window or ReRoPE's distance by index, not by explicit positions"
  if rerope and mods.window is not None:
    return "ReRoPE with a window is not composed"
  if mods.sink_tokens is not None and start is not None and start < mods.window:
    return "a far rotation from inside the sinks' window is not composed"
  if mods.forget_gate:
    return "FoX's forget-gate bias depends on the data (the blocked kernel takes it)"
  if mods.scale_invariant_tau is not None:
    return "scale-invariant attention multiplies each score by a factor of its distance"
  if needs_whole_rows(mods):
    return needs_whole_rows(mods)
  if mods.far is not None and start is None:
    return "dual chunk attention chooses among three rotations by chunk"
  if rerope and (mods.alibi_slopes is not None or mods.score_bias is not None):
    return "ReRoPE with a score bias (ALiBi, KERPLE, FIRE) is not composed"
  if shape.value_size % shape.size:
    return (f"values of size {shape.value_size} are not a multiple of the queries' and keys' "
            f"size {shape.size}")
  return None


def _xla_refusal(mods, shape):
  return expressible(mods, shape) or longer_than_full_square(shape)


def _cudnn_refusal(mods, shape):
  if jax.default_backend() != "gpu":
    return "cuDNN runs on a GPU only"
  if not any(jnp.dtype(shape.dtype) == d for d in CUDNN_DTYPES):
    return f"cuDNN attention takes bfloat16 or float16, not {jnp.dtype(shape.dtype).name}"
  return expressible(mods, shape)


def _log_once(message):
  if message not in _logged:
    _logged.add(message)
    logging.warning("%s", message)


class _TooLongForXla(Exception):
  """cuDNN refused a call that XLA's implementation would score whole: the kernel gives way."""


def _one_call(implementation):
  """call(q [B, Q, H, S], k, v [B, K, Hkv, S], bias, window, lse) -> (o [B, Q, H, S] float32,
  log-sum-exp [B, Q, H] float32 if lse else None): causal (query i sees keys <= i) unless a bias
  is given, which then carries the mask. The log-sum-exp comes back in the inputs' dtype (bfloat16
  with cuDNN), so a merge's weights carry its rounding; in float32 (xla) the merges are exact."""

  def call(q, k, v, bias=None, window=None, lse=False):
    dtype = v.dtype
    if bias is not None:   # no -inf in a float16 bias: the lowest half of the dtype's range
      bias = jnp.maximum(bias, jnp.finfo(dtype).min / 2)
    run = lambda impl: jax.nn.dot_product_attention(
        q.astype(dtype), k.astype(dtype), v,
        bias=None if bias is None else bias.astype(dtype if impl == "cudnn" else jnp.float32),
        scale=1.0, is_causal=bias is None,
        local_window_size=None if window is None else (window - 1, 0),
        implementation=impl, return_residual=lse)
    if implementation == "xla":
      found = run("xla")
    else:
      try:
        found = run("cudnn")
      except Exception as e:  # pylint: disable=broad-except  (any refusal: fall back, never crash)
        refusal = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if max(q.shape[1], k.shape[1]) > FULL_SQUARE_MAX_LENGTH:
          _log_once(f"cuDNN attention refused {tuple(q.shape)} {jnp.dtype(dtype).name} "
                    f"({refusal}); using the blocked kernel instead.")
          raise _TooLongForXla() from None
        _log_once(f"cuDNN attention refused {tuple(q.shape)} {jnp.dtype(dtype).name} "
                  f"({refusal}); using XLA instead.")
        found = run("xla")
    out, log_sum_exp = found if lse else (found, None)
    return out.astype(jnp.float32), None if log_sum_exp is None else log_sum_exp.astype(
        jnp.float32)

  return call


def _merged(first, second):
  """Two (o, lse) over disjoint key sets -> (o, lse) over both (an empty set: lse = -inf)."""
  (o_a, lse_a), (o_b, lse_b) = first, second
  lse = jnp.logaddexp(lse_a, lse_b)
  weight = lambda x: jnp.where(jnp.isfinite(x), jnp.exp(x - lse), 0.0)[..., None]
  return o_a * weight(lse_a) + o_b * weight(lse_b), lse


@jax.custom_vjp
def _merge(first, second):
  """_merged, forward only: jax.nn.dot_product_attention's log-sum-exp carries no gradient, so a
  gradient through a merge would be wrong; differentiating one raises instead."""
  return _merged(first, second)


def _merge_fwd(first, second):
  return _merged(first, second), None


class ForwardOnly(ValueError):
  """A gradient was asked of a composition the kernel computes forward only, by design."""


def _merge_bwd(residuals, cotangents):
  raise ForwardOnly(
      "The cudnn and xla kernels compute ReRoPE and attention sinks forward only (two calls merged "
      "by log-sum-exps that carry no gradient). Differentiate through model.kernel=blocked or "
      "reference instead.")


_merge.defvjp(_merge_fwd, _merge_bwd)


def _slice(side: Side, start: int, stop: int) -> Side:
  return jax.tree.map(lambda x: x[start:stop] if x.ndim == 1 else x[:, start:stop], side)


def _in_xla(mods, queries: Side, keys: Side, values, extra_keep=None):
  """(o, lse) of queries against a few keys, scored by attention/scores.py (the sinks)."""
  scores, keep = block_scores(mods, queries, keys)
  if extra_keep is not None:
    keep = keep & extra_keep
    scores = jnp.where(keep, scores, MASKED)
  lse = jax.nn.logsumexp(scores, axis=-1)                                      # [B, H, Q]
  lse = jnp.where(jnp.any(keep, axis=-1), lse, -jnp.inf)
  probs = jnp.where(keep, jnp.exp(scores - jnp.where(jnp.isfinite(lse), lse, 0.0)[..., None]), 0.0)
  out = grouped_probs_times_values(probs, values.astype(jnp.float32))
  return out, jnp.moveaxis(lse, 1, 2)


def _biased_chunks(call, mods, queries: Side, keys: Side, q, k, v, window, lse=False):
  """(o, lse) in query chunks, each against the keys it can reach, with the chunk's bias and mask
  (attention/scores.py) as the kernel's bias."""
  length, heads = q.shape[1], q.shape[2]
  pieces = []
  for start in range(0, length, CHUNK):
    stop = min(start + CHUNK, length)
    first_key = 0 if window is None else max(0, start - window + 1)
    bias, keep = bias_and_keep(mods, _slice(queries, start, stop), _slice(keys, first_key, stop),
                               heads)
    bias = jnp.where(keep, 0.0 if bias is None else bias, MASKED)
    pieces.append(call(q[:, start:stop], k[:, first_key:stop], v[:, first_key:stop], bias=bias,
                       lse=lse)[:2])
  if not lse:
    return jnp.concatenate([out for out, _ in pieces], axis=1), None
  return tuple(jnp.concatenate(parts, axis=1) for parts in zip(*pieces))


def _attention(call, prepared):
  """o [B, T, H, E] float32 of a Prepared whose values are as wide as q."""
  queries, keys, mods, v = prepared.queries, prepared.keys, prepared.mods, prepared.values
  multiplier = queries.multiplier[..., None]
  q, k = queries.near * multiplier, keys.near
  length = q.shape[1]
  biased = mods.alibi_slopes is not None or mods.score_bias is not None
  if mods.sink_tokens is not None:
    near_mods = mods._replace(sink_tokens=None, far=None)
    near = (_biased_chunks(call, near_mods, queries, keys, q, k, v, mods.window, lse=True)
            if biased else call(q, k, v, window=mods.window, lse=True))
    sinks = min(mods.sink_tokens, length)
    outside = ((queries.index[:, None] - keys.index[None, :sinks]) >= mods.window)[None, None]
    return _merge(near, _in_xla(mods, queries, _slice(keys, 0, sinks), v[:, :sinks], outside))[0]
  if biased:
    return _biased_chunks(call, mods, queries, keys, q, k, v, mods.window)[0]
  if mods.far is None or mods.far.start >= length:
    return call(q, k, v, window=mods.window)[0]
  w = mods.far.start
  near = call(q, k, v, window=w, lse=True)
  far_out, far_lse = call(queries.far[:, w:] * multiplier[:, w:], keys.far[:, :length - w],
                          v[:, :length - w], lse=True)
  pad = lambda x, fill: jnp.concatenate(
      [jnp.full((x.shape[0], w) + x.shape[2:], fill, x.dtype), x], axis=1)
  return _merge(near, (pad(far_out, 0.0), pad(far_lse, -jnp.inf)))[0]


def _run(implementation, prepared):
  """The kernel: (out [B, T, H, E] in the values' dtype, None). Where cuDNN refuses a call longer
  than XLA's implementation may score whole, the blocked kernel computes the attention instead."""
  try:
    return _split_values(_one_call(implementation), prepared), None
  except _TooLongForXla:
    out, _ = blocked.KERNEL.run(prepared)
    return out.astype(prepared.values.dtype), None


def _split_values(call, prepared):
  """The output [B, T, H, E] in the values' dtype; values wider than q and k (the GAU) as one head
  per slice of q's size, every one sharing q and k."""
  q = prepared.queries.near
  batch, length, heads, size = q.shape
  width = prepared.values.shape[-1]
  if width == size:
    return _attention(call, prepared).astype(prepared.values.dtype)
  # Values wider than q and k (the GAU): one head per slice of `size` values, sharing q and k.
  parts = width // size
  per_head = lambda x: None if x is None else jnp.repeat(
      jnp.repeat(x, heads // x.shape[2], axis=2), parts, axis=2)
  queries = prepared.queries._replace(
      near=jnp.repeat(q, parts, axis=2), multiplier=jnp.repeat(prepared.queries.multiplier,
                                                               parts, axis=2),
      far=None if prepared.queries.far is None else jnp.repeat(prepared.queries.far, parts, axis=2))
  keys = prepared.keys._replace(near=per_head(prepared.keys.near), far=per_head(prepared.keys.far))
  values = jnp.repeat(prepared.values, heads // prepared.values.shape[2], axis=2)
  values = values.reshape(batch, length, heads * parts, size)
  mods = prepared.mods
  if mods.alibi_slopes is not None:
    mods = mods._replace(alibi_slopes=jnp.repeat(
        jnp.broadcast_to(mods.alibi_slopes, (heads,)), parts))
  if mods.score_bias is not None:
    learned = mods.score_bias
    mods = mods._replace(score_bias=lambda d, p: jnp.repeat(
        jnp.broadcast_to(learned(d, p), (d.shape[0], heads) + d.shape[1:]), parts, axis=1))
  out = _attention(call, prepared._replace(queries=queries, keys=keys, values=values, mods=mods))
  return out.reshape(batch, length, heads, width).astype(prepared.values.dtype)


XLA = Kernel("xla", "jax.nn.dot_product_attention, XLA's implementation, on pre-scaled q and k",
             lambda prepared, blocks=None: _run("xla", prepared), refusal=_xla_refusal,
             gives_entropy=False)
CUDNN = Kernel("cudnn", "cuDNN flash attention through jax.nn.dot_product_attention (GPU, "
               "bfloat16 / float16)", lambda prepared, blocks=None: _run("cudnn", prepared),
               refusal=_cudnn_refusal, gives_entropy=False)
