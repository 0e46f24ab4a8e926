"""The one function a model calls: `attend` prepares q, k, v once and runs the chosen kernel."""

import jax.numpy as jnp

from keynorm_jax.attention import kernels
from keynorm_jax.attention.kernels.base import FULL_SQUARE_MAX_LENGTH, Shape
from keynorm_jax.attention.kernels.blocked import DEFAULT_BLOCK
from keynorm_jax.attention.prepare import prepare
from keynorm_jax.attention.spec import Learned, Spec


def query_block_size(length: int) -> int:
  """Queries per block: all at once up to FULL_SQUARE_MAX_LENGTH tokens, else DEFAULT_BLOCK."""
  return length if length <= FULL_SQUARE_MAX_LENGTH else DEFAULT_BLOCK


def block_sizes(length: int, query_block=None, key_block=None):
  """(queries, keys) per block of `attend`, or (None, None) for every score at once.

  Default: all at once up to FULL_SQUARE_MAX_LENGTH tokens, else DEFAULT_BLOCK x DEFAULT_BLOCK.
  Either size given alone sets the other.
  """
  if query_block is None and key_block is None:
    query_block = query_block_size(length)
    key_block = length if query_block >= length else DEFAULT_BLOCK
  query_block = query_block or key_block
  key_block = key_block or query_block
  if query_block < 1 or key_block < 1:
    raise ValueError(f"Block sizes must be >= 1, got {query_block} queries x {key_block} keys.")
  if query_block >= length and key_block >= length:
    return None, None
  return min(query_block, length), min(key_block, length)


def attend(q, k, v, spec: Spec, learned: Learned = Learned(), *, positions=None, kernel="auto",
           need_entropy=True, query_block=None, key_block=None):
  """Causal attention; returns (o, attention entropy in nats, or None where the kernel gives none).

  q, k: [B, T, S] queries and keys before RoPE ([B, T, H, S] for several heads; keys and values
    may have fewer heads: grouped-query attention). v: [B, T, E] ([B, T, Hkv, E]).
  spec: the call's settings (attention.Spec, defaults resolved); learned: the arrays of the
    layer's parameters that enter the scores (attention.Learned).
  positions: [T] or [B, T] positions (None: 0..T-1, the sequence index).
  kernel: a name of kernels.NAMES ("auto": see kernels/__init__.py).
  need_entropy: the caller reads the entropy (kernels that give none are passed over).
  query_block, key_block: queries and keys per block, with kernel "auto" or "blocked": shorter than
    T, the blocked kernel runs with them; as long as T, auto's full-square kernel (the numbers are
    the same).

  Returns:
    o with v's layout and dtype; entropy [B, T] (or [B, T, H]) or None.
  """
  single_head = q.ndim == 3
  if single_head:
    q, k, v = q[:, :, None], k[:, :, None], v[:, :, None]
  shape = Shape.of(q, k, v)
  length = shape.length
  blocks = block_sizes(length, query_block, key_block)
  explicit_blocks = query_block is not None or key_block is not None
  if explicit_blocks and kernel not in ("auto", "blocked"):
    raise ValueError("query_block and key_block set the blocked kernel's blocks; "
                     f"kernel={kernel!r} has none (pass kernel='auto' or 'blocked').")
  if explicit_blocks:   # blocks shorter than the sequence: blocked; else every score at once
    kernel = "blocked" if blocks != (None, None) else "auto"
  mods = spec.mods(learned, explicit_positions=positions is not None)
  chosen = kernels.select(kernel, mods, shape, need_entropy=need_entropy)
  prepared = prepare(q, k, v, spec, learned, mods, positions=positions,
                     cpu_layout=chosen.cpu_layout)
  out, entropy = chosen(prepared, None if blocks == (None, None) else blocks)
  out = out.astype(v.dtype)
  if single_head:
    return out[:, :, 0], None if entropy is None else entropy[:, :, 0]
  return out, entropy


def causal_attention(q, k, v, spec: Spec, learned: Learned = Learned(), **options):
  """attend's output alone (see attend for the arguments)."""
  return attend(q, k, v, spec, learned, need_entropy=False, **options)[0]
