"""Fused causal attention: `jax.nn.dot_product_attention` on pre-scaled queries and keys.

Many settings reduce to standard causal attention softmax(q' . k' + bias) once q and k are prepared
as `einsum.attend` prepares them (in float32):

  q, k normalized per the variant (QNA, KNA, CosA), then RoPE (and xPos's factors) applied;
  q' = q x (variant scale x attention_factor^2 x trained log n x post-hoc log n x SSMax), per query
  and head, so that q' . k' is exactly einsum.attend's score before biases; k' = k.

ALiBi becomes the bias -m_h (p_i - p_j), a window the kernel's local window (keys with
0 <= i - j < w), and the kernel is called with scale=1.0 (softmax in float32). It cannot express
ReRoPE (two rotations joined by distance), attention sinks (re-placed keys), learned bias functions
(KERPLE, FIRE), values of another size than q and k (the GAU) or a window over explicit positions;
those, and the attention entropy the diagnostics record, stay on the einsum path.

The kernel: cuDNN flash attention on a GPU in bfloat16 / float16; where cuDNN refuses the shape
or dtype, XLA's, with a log line. XLA's kernel scores all T x T pairs at once, so it is refused
(CannotFuse) past the length at which einsum.attend switches to query blocks. q', k' (and, for
cuDNN, the ALiBi bias) enter the kernel in the inputs' dtype; in bfloat16 that rounds them, which
einsum.attend (all float32) does not.

When it is worth it (`worth_fusing`): with cuDNN only. XLA's kernel computes what einsum.attend
computes (einsum, mask, float32 softmax, einsum) and was measured slower on CPU (forward and
backward of 8 x 512 tokens, 4 heads of 48: 0.34 s against einsum.attend's 0.20 s, 2-core CPU,
jax 0.10.2), so the models use it only if FUSE_ON_XLA is set.
"""

from absl import logging
import jax
import jax.numpy as jnp

from keynorm_jax.attention.einsum import (_check_options, _query_multiplier, _score_scale,
                                          _xpos_scale, l2_normalize, query_block_size)
from keynorm_jax.rope import apply_rope

_CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)
FUSE_ON_XLA = False  # models fuse with XLA's kernel too (not faster than einsum.attend on CPU)
_logged: set = set()


class CannotFuse(Exception):
  """The setting, shape or backend is one the fused kernel cannot express; use einsum.attend."""


def fuse_refusal(kwargs) -> str | None:
  """Why attend's keyword arguments `kwargs` cannot run fused (None: they can, shapes permitting)."""
  given = lambda name: kwargs.get(name) is not None
  if given("rerope_window"):
    return "ReRoPE scores far keys with a second rotation"
  if given("sink_tokens"):
    return "attention sinks re-place far keys in the cache"
  if given("score_bias"):
    return "a learned score bias (KERPLE, FIRE) is a function of distance"
  if given("window") and given("positions"):
    return "the kernel's window counts indices, not explicit positions"
  return None


def can_fuse(kwargs) -> bool:
  """Whether attend's keyword arguments can run fused (shapes are checked by fused_attention)."""
  return fuse_refusal(kwargs) is None


def _log_once(message):
  if message not in _logged:
    _logged.add(message)
    logging.warning("%s", message)


def implementation_for(dtype) -> str:
  """The kernel fused_attention picks for inputs of `dtype`: 'cudnn' on a GPU in bfloat16 /
  float16, else 'xla'."""
  if jax.default_backend() == "gpu" and any(dtype == d for d in _CUDNN_DTYPES):
    return "cudnn"
  return "xla"


def worth_fusing(dtype) -> bool:
  """Whether a model should take the fused path for inputs of `dtype` (see the module's note)."""
  return FUSE_ON_XLA or implementation_for(dtype) == "cudnn"


def fused_attention(q, k, v, *, variant, inv_freq=None, positions=None, logn_base=None,
                    attention_factor=1.0, rerope_window=None, leaky_rerope_factor=None,
                    cosa_scale=None, posthoc_logn_length=None, alibi_slope=None, window=None,
                    sink_tokens=None, xpos_gamma=None, xpos_scale_base=512.0, score_bias=None,
                    ssmax_scale=None, query_block=None, implementation=None):
  """einsum.attend's output (not its entropy) through jax.nn.dot_product_attention.

  Same arguments as einsum.attend, plus implementation (None: chosen as above; "xla"; "cudnn").
  positions=None means 0..T-1 (needed with a window). Raises CannotFuse where the kernel cannot
  express the setting (see fuse_refusal), the values' size differs from q's, or XLA's kernel would
  score more queries at once than einsum.attend does (query_block, default query_block_size(T)).
  """
  _check_options(variant, cosa_scale, rerope_window, leaky_rerope_factor, logn_base, window,
                 sink_tokens, inv_freq, xpos_gamma)
  reason = fuse_refusal(dict(rerope_window=rerope_window, sink_tokens=sink_tokens,
                             score_bias=score_bias, window=window, positions=positions))
  if reason:
    raise CannotFuse(reason)
  single_head = q.ndim == 3
  if single_head:
    q, k, v = q[:, :, None], k[:, :, None], v[:, :, None]
  batch, length, heads, size = q.shape
  if v.shape[-1] != size:
    raise CannotFuse(f"values of size {v.shape[-1]} beside queries and keys of size {size}")
  if heads % k.shape[2]:
    raise ValueError(f"{heads} query heads cannot share {k.shape[2]} key/value heads evenly.")
  implementation = implementation or implementation_for(v.dtype)
  if implementation not in ("xla", "cudnn"):
    raise ValueError(f"implementation must be xla or cudnn (or None), got {implementation!r}.")
  xla_fits = (query_block or query_block_size(length)) >= length
  if implementation == "xla" and not xla_fits:
    raise CannotFuse(f"XLA's kernel scores all {length} x {length} pairs at once")

  q, k = q.astype(jnp.float32), k.astype(jnp.float32)
  positions_BxT = jnp.broadcast_to(jnp.arange(length) if positions is None else positions,
                                   (batch, length))
  if variant in ("qna", "cosa"):
    q = l2_normalize(q)
  if variant in ("kna", "cosa"):
    k = l2_normalize(k)
  if inv_freq is not None:
    q = apply_rope(q, positions_BxT[:, :, None], inv_freq)
    k = apply_rope(k, positions_BxT[:, :, None], inv_freq)
    if xpos_gamma is not None:
      q = q * _xpos_scale(positions_BxT, inv_freq, xpos_gamma, xpos_scale_base, 1.0)
      k = k * _xpos_scale(positions_BxT, inv_freq, xpos_gamma, xpos_scale_base, -1.0)
  scale = _score_scale(variant, size, cosa_scale) * attention_factor**2
  multiplier_BxTxH = jnp.broadcast_to(
      scale * _query_multiplier(positions_BxT, logn_base, posthoc_logn_length, ssmax_scale),
      (batch, length, heads))
  q = q * multiplier_BxTxH[..., None]
  bias = None
  if alibi_slope is not None:
    slopes_H = jnp.broadcast_to(jnp.asarray(alibi_slope, jnp.float32), (heads,))
    p = jnp.arange(length)[None] if positions is None else positions_BxT
    relative = (p[:, :, None] - p[:, None, :]).astype(jnp.float32)             # [B or 1, T, T]
    bias = -slopes_H[None, :, None, None] * relative[:, None]
  dtype = v.dtype
  call = lambda impl: jax.nn.dot_product_attention(
      q.astype(dtype), k.astype(dtype), v,
      bias=None if bias is None else bias.astype(dtype if impl == "cudnn" else jnp.float32),
      scale=1.0, is_causal=True, local_window_size=None if window is None else (window - 1, 0),
      implementation=impl)
  if implementation == "cudnn":
    try:
      out = call("cudnn")
    except Exception as e:  # pylint: disable=broad-except  (any refusal: fall back, never crash)
      refusal = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
      _log_once(f"cuDNN attention refused {tuple(q.shape)} {jnp.dtype(dtype).name} ({refusal}); "
                f"using {'XLA' if xla_fits else 'einsum.attend in query blocks'} instead.")
      if not xla_fits:
        raise CannotFuse(f"cuDNN refused ({refusal}) and XLA's kernel would score all "
                         f"{length} x {length} pairs at once") from None
      out = call("xla")
  else:
    out = call("xla")
  return out[:, :, 0] if single_head else out
