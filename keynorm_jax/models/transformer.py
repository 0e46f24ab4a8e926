"""Multi-head pre-norm Transformer language model, no biases (but q, k, v's with model.qkv_bias).

  x = x + dropout(W_o Attn(q, k, v)),   q, k, v = Norm(x) W_q, W_k, W_v (+ b_q, b_k, b_v)
      (model.output_gate: W_o (Attn(q, k, v) * sigmoid(Norm(x) W_gate)), Qiu et al. 2025's G1)
  x = x + dropout(MLP(Norm(x)))
  SwiGLU: (silu(x W_gate) * (x W_up)) W_down     GELU: gelu(x W_up) W_down   (exact GELU)
  logits = head(Norm(x))                         (tied to the embedding as an option)

Norm is RMSNorm with a gain (LayerNorm with a gain as an option; no bias anywhere). Attention is
causal and per head: H query heads, num_kv_heads key/value heads (grouped-query attention when
fewer), the variant, QK-norm (per head over the head size, one gain shared by the heads), SSMax
and the position method as in the GAU (models/attention_block.py); absolute positions are added to
the token embedding by the Embedder.
"""

import flax.linen as nn

from keynorm_jax import positions
from keynorm_jax.models.attention_block import PositionalAttention
from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.layers import MLP, norm_layer
from keynorm_jax.models.linear import linear
from keynorm_jax.models.lm_parts import LanguageModel


def block_norm(cfg: ModelConfig, name: str) -> nn.Module:
  """The pre-norm of a block and the final norm: RMSNorm or LayerNorm, gain only (no bias), with
  model.norm_eps."""
  if cfg.norm == "layernorm":
    return nn.LayerNorm(epsilon=cfg.norm_eps, use_bias=False, name=name)
  return nn.RMSNorm(epsilon=cfg.norm_eps, name=name)


class TransformerBlock(nn.Module):
  config: ModelConfig
  spec: positions.AttentionSpec

  @nn.compact
  def __call__(self, x, positions_BxT, deterministic: bool, given=None):
    cfg = self.config
    dense = lambda features, name, bias=False: linear(features, cfg, name, bias)
    batch, length, _ = x.shape
    heads, kv_heads, size = cfg.heads, cfg.kv_heads, cfg.head_size
    h = block_norm(cfg, "attention_norm")(x)
    q = dense(heads * size, "query", cfg.qkv_bias)(h).reshape(batch, length, heads, size)
    k = dense(kv_heads * size, "key", cfg.qkv_bias)(h).reshape(batch, length, kv_heads, size)
    v = dense(kv_heads * size, "value", cfg.qkv_bias)(h).reshape(batch, length, kv_heads, size)
    if cfg.qk_norm != "none":
      q, k = norm_layer(cfg.qk_norm, "q_norm")(q), norm_layer(cfg.qk_norm, "k_norm")(k)
    out = PositionalAttention(cfg, self.spec, name="attention")(q, k, v, positions_BxT, h, given)
    out = out.reshape(batch, length, heads * size)
    if cfg.output_gate:   # G1 of Qiu et al. 2025: elementwise, per head, from the normed input
      out = out * nn.sigmoid(dense(heads * size, "output_gate")(h))
    out = dense(x.shape[-1], "out")(out)
    x = x + nn.Dropout(cfg.dropout)(out, deterministic=deterministic)
    out = MLP(cfg, name="mlp")(block_norm(cfg, "mlp_norm")(x))
    return x + nn.Dropout(cfg.dropout)(out, deterministic=deterministic)


class TransformerLM(LanguageModel):
  """Byte-level causal LM of Transformer blocks: tokens [B, T] -> logits [B, T, vocab] (float32);
  the final norm (a gain: `final_norm`) after the last block."""
  layer = TransformerBlock

  def after_layers(self, x):
    return block_norm(self.config, "final_norm")(x)
