"""GAU language model (GAU-alpha / bert4keras GatedAttentionUnit), single head, no biases.

  h = swish(x W_i); u, v, z = split(h, [e, e, s])
  q = z * gamma_q + beta_q ; k = z * gamma_k + beta_k     (QK-norm: a norm with gain on q, k)
  o = (u * attention(q, k, v)) W_o
  x = RMSNorm(x + dropout(o))                            (post-norm; pre-norm is an option)

The token embedding is followed by the same parameter-free RMSNorm (post-norm). The output head is
untied by default (`tie_embeddings` ties it).
"""

import flax.linen as nn
import jax.numpy as jnp

from keynorm_jax import positions
from keynorm_jax.models.attention_block import PositionalAttention
from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.layers import ScaleOffset, maybe_remat, norm_layer, rms_norm
from keynorm_jax.models.lm_parts import Embedder, sequence_positions


class GAULayer(nn.Module):
  config: ModelConfig
  layer: int
  column: positions.EvalColumn

  @nn.compact
  def __call__(self, x, positions_BxT, deterministic: bool):
    cfg = self.config
    dtype = jnp.dtype(cfg.compute_dtype)
    dense = lambda features, name: nn.Dense(features, use_bias=False, dtype=dtype, name=name)
    h_BxTxH = nn.swish(dense(2 * cfg.expansion + cfg.qk_size, "wi")(x))
    u, v, z = jnp.split(h_BxTxH, [cfg.expansion, 2 * cfg.expansion], axis=-1)
    q, k = ScaleOffset(name="q_scale_offset")(z), ScaleOffset(name="k_scale_offset")(z)
    if cfg.qk_norm != "none":
      q, k = norm_layer(cfg.qk_norm, "q_norm")(q), norm_layer(cfg.qk_norm, "k_norm")(k)
    out = PositionalAttention(cfg, self.layer, self.column, name="attention")(
        q[:, :, None], k[:, :, None], v[:, :, None], positions_BxT)[:, :, 0]
    out = dense(x.shape[-1], "wo")(u * out)
    return nn.Dropout(cfg.dropout)(out, deterministic=deterministic)


class GAULM(nn.Module):
  """Byte-level causal LM: tokens [B, T] -> logits [B, T, vocab] (float32)."""
  config: ModelConfig
  column: positions.EvalColumn = positions.EvalColumn()

  @nn.compact
  def __call__(self, tokens_BxT, deterministic: bool = True):
    cfg = self.config
    batch, length = tokens_BxT.shape
    positions_BxT = sequence_positions(self, cfg, batch, length, deterministic)
    column = self.column.at(length, cfg.train_length)
    embedder = Embedder(cfg, name="embedder")
    x = embedder(tokens_BxT, positions_BxT)
    post = cfg.norm_position == "post"
    if post:
      x = rms_norm(x)
    for i in range(cfg.num_layers):
      layer = maybe_remat(GAULayer, cfg.remat)(cfg, i, column, name=f"layer_{i}")
      if post:
        x = rms_norm(x + layer(x, positions_BxT, deterministic))
      else:
        x = x + layer(rms_norm(x), positions_BxT, deterministic)
    if not post:
      x = rms_norm(x)
    return embedder.logits(x)
