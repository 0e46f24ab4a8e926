"""GAU language model (GAU-alpha / bert4keras GatedAttentionUnit), single head, no biases.

  h = swish(x W_i); u, v, z = split(h, [e, e, s])   (computed as three products x W_i[:, part])
  q = z * gamma_q + beta_q ; k = z * gamma_k + beta_k     (QK-norm: a norm with gain on q, k)
  (model.gau_qk=separate: h = swish(x W_i) split [e, e, s, s] into u, v, z_q, z_k, and
   q = z_q * gamma_q + beta_q ; k = z_k * gamma_k + beta_k: q and k no longer share z)
  o = (u * attention(q, k, v)) W_o
  (model.gau_heads=H: q, k split into H heads of s / H and v into H heads of e / H, each head
   attending on its own, their outputs concatenated back to e before the gate u; the seed's H = 1)
  x = RMSNorm(x + dropout(o))                            (post-norm; pre-norm is an option)
  (model.gau_mlp: then x = RMSNorm(x + dropout(MLP(x))), the Transformer's MLP (model.mlp,
   mlp_size) as a second residual step of the layer, in the same norm position; the seed's: none)

The token embedding is followed by the same parameter-free RMSNorm (post-norm). The output head is
untied by default (`tie_embeddings` ties it).
"""

import flax.linen as nn
import jax.numpy as jnp

from keynorm_jax import positions
from keynorm_jax.models.attention_block import PositionalAttention
from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.layers import MLP, ScaleOffset, norm_layer, rms_norm
from keynorm_jax.models.lm_parts import LanguageModel
from keynorm_jax.models.linear import linear, matmul


class SplitDense(nn.Module):
  """x W without bias, as nn.Dense(sum(features)) (the same "kernel" parameter and init), returned
  as one product per group of W's columns: the [B, T, 2e + s] product is never materialized whole.
  (At 65,536 tokens the GAU's h before and after swish, 288 MiB each, were alive at once with its
  slices: a third of evaluation's peak memory.)"""
  features: tuple
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (x.shape[-1], sum(self.features)))
    cfg = self.config
    splits = [sum(self.features[:i + 1]) for i in range(len(self.features) - 1)]
    # each product rounds x and its columns of W to the compute dtype itself, so that x's gradient
    # sums the products' gradients in x's dtype (float32 on the CPU seam)
    return [matmul(x, w, cfg.product_dtype, cfg.cpu_ops, cfg.activation_dtype)
            for w in jnp.split(kernel, splits, axis=-1)]


class GAULayer(nn.Module):
  """One GAU layer with its residual and norm; the submodules are created in `unit`."""
  config: ModelConfig
  spec: positions.AttentionSpec

  @nn.compact
  def __call__(self, x, positions_BxT, deterministic: bool, given=None):
    """x -> the next layer's x: RMSNorm(x + f(x)) post-norm, x + f(RMSNorm(x)) pre-norm, with f
    the gated attention unit, then (model.gau_mlp) the same step with f the MLP. given: the
    layer's attention.Spec, or None (PositionalAttention)."""
    x = self.residual(x, lambda h: self.unit(h, positions_BxT, deterministic, given))
    if self.config.gau_mlp:
      mlp = MLP(self.config, name="mlp")
      x = self.residual(x, lambda h: nn.Dropout(self.config.dropout)(
          mlp(h), deterministic=deterministic))
    return x

  def residual(self, x, f):
    if self.config.norm_position == "post":
      return rms_norm(x + f(x))
    return x + f(rms_norm(x))

  def unit(self, x, positions_BxT, deterministic: bool, given=None):
    """f(x): the gated attention unit, after dropout."""
    cfg = self.config
    u, v, z_q, *z_k = (nn.swish(part) for part in SplitDense(cfg.gau_parts, cfg, name="wi")(x))
    z_k = z_k[0] if z_k else z_q   # gau_qk=separate: k has its own z
    q, k = ScaleOffset(name="q_scale_offset")(z_q), ScaleOffset(name="k_scale_offset")(z_k)
    heads = lambda a: a.reshape(*a.shape[:2], cfg.heads, -1)   # [B, T, H, size / H]
    q, k, v = heads(q), heads(k), heads(v)
    if cfg.qk_norm != "none":   # per head, as the Transformer's
      q, k = norm_layer(cfg.qk_norm, "q_norm")(q), norm_layer(cfg.qk_norm, "k_norm")(k)
    out = PositionalAttention(cfg, self.spec, name="attention")(q, k, v, positions_BxT, x, given)
    out = out.reshape(*out.shape[:2], -1)
    out = linear(x.shape[-1], cfg, "wo")(u * out)
    return nn.Dropout(cfg.dropout)(out, deterministic=deterministic)


class GAULM(LanguageModel):
  """Byte-level causal LM of GAU layers: tokens [B, T] -> logits [B, T, vocab] (float32). The
  embedding is followed by the parameter-free RMSNorm (post-norm), or the last layer (pre-norm)."""
  layer = GAULayer

  def before_layers(self, x):
    return rms_norm(x) if self.config.norm_position == "post" else x

  def after_layers(self, x):
    return x if self.config.norm_position == "post" else rms_norm(x)
