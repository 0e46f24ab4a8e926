"""Where attention goes: each query's attention mass on every block of keys, and its mean key index.

Attention is linear in v, so one `attend` call with extra value channels measures it exactly:
a one-hot of the key's block (mass per block of `bucket` keys) and the key's index j (so the
mean attention distance is i - sum_j p_ij j). The model's own output comes from the first channels,
unchanged; every path of `attend` (full, blocked, ReRoPE, windows) measures the same way.
"""

import jax
import jax.numpy as jnp

from keynorm_jax.attention.api import attend


def key_channels(length: int, bucket: int):
  """[T, C] float32: one-hot of key j's block (C - 1 = ceil(T / bucket) blocks), then j itself."""
  index = jnp.arange(length)
  blocks = -(-length // bucket)
  one_hot = jax.nn.one_hot(index // bucket, blocks, dtype=jnp.float32)
  return jnp.concatenate([one_hot, index[:, None].astype(jnp.float32)], axis=-1)


def attend_with_reach(q, k, v, spec, learned, *, bucket: int, **kwargs):
  """`attend`'s (o, entropy) and reach [B, T, H, C]: for query i and head h, the attention mass on
  each block of `bucket` keys (C - 1 of them), then the mean key index sum_j p_ij j.

  q [B, T, H, S], k [B, T, Hkv, S], v [B, T, Hkv, E] (the multi-head layout)."""
  batch, length, kv_heads, width = v.shape
  extra = jnp.broadcast_to(key_channels(length, bucket)[None, :, None, :],
                           (batch, length, kv_heads, -(-length // bucket) + 1))
  out, entropy = attend(q, k, jnp.concatenate([v.astype(jnp.float32), extra], axis=-1), spec,
                        learned, **kwargs)
  return out[..., :width].astype(v.dtype), entropy, out[..., width:]
