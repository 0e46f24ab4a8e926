"""GAU language model (GAU-alpha / bert4keras GatedAttentionUnit), single head, no biases.

  h = swish(x W_i); u, v, z = split(h, [e, e, s])
  q = z * gamma_q + beta_q ; k = z * gamma_k + beta_k     (QK-norm: RMSNorm with gain on q, k)
  o = (u * attention(q, k, v)) W_o
  x = RMSNorm(x + dropout(o))                            (post-norm; pre-norm is an option)

The token embedding is followed by the same parameter-free RMSNorm (post-norm). The output head is
untied by default (`tie_embeddings` ties it).
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from keynorm_jax.attention import VARIANTS, attend, cosa_default_scale
from keynorm_jax.inference_scaling import InferenceScaling, rope_settings

POSITIONS = ("rope", "nope")
NORM_POSITIONS = ("post", "pre")


@dataclasses.dataclass(frozen=True)
class GAUConfig:
  """Static description of a GAU LM; see configs/base.py for the meaning of each field."""
  vocab_size: int = 257
  num_layers: int = 2
  d_model: int = 32
  expansion: int = 64
  qk_size: int = 16
  dropout: float = 0.0
  norm_position: str = "post"
  tie_embeddings: bool = False
  attention: str = "baseline"
  logn: bool = False
  logn_base: float | None = None
  qk_norm: bool = False
  position: str = "rope"
  rope_theta: float = 10000.0
  cosa_scale: float | None = None
  train_length: int = 512
  compute_dtype: str = "float32"

  def __post_init__(self):
    if self.attention not in VARIANTS:
      raise ValueError(f"Unknown attention {self.attention!r}; choose one of {', '.join(VARIANTS)}.")
    if self.position not in POSITIONS:
      raise ValueError(f"Unknown position {self.position!r}; choose one of {', '.join(POSITIONS)}.")
    if self.norm_position not in NORM_POSITIONS:
      raise ValueError(f"Unknown norm_position {self.norm_position!r}; choose 'post' or 'pre'.")
    if self.qk_size % 2:
      raise ValueError(f"qk_size must be even for RoPE, got {self.qk_size}.")

  @property
  def resolved_logn_base(self):
    """n0 of the trained log n (default half the training length), or None when it is off."""
    if not self.logn:
      return None
    return self.logn_base or self.train_length / 2

  @property
  def resolved_cosa_scale(self):
    if self.attention != "cosa":
      return None
    return self.cosa_scale or cosa_default_scale(self.train_length)


def rms_norm(x, eps=1e-6):
  """Parameter-free RMSNorm: x / sqrt(mean(x^2) + eps)."""
  x32 = x.astype(jnp.float32)
  return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)).astype(x.dtype)


class ScaleOffset(nn.Module):
  """Per-dimension gamma * x + beta (gamma init 1, beta init 0)."""

  @nn.compact
  def __call__(self, x):
    gamma = self.param("gamma", nn.initializers.ones, (x.shape[-1],))
    beta = self.param("beta", nn.initializers.zeros, (x.shape[-1],))
    return x * gamma.astype(x.dtype) + beta.astype(x.dtype)


class GainRMSNorm(nn.Module):
  """RMSNorm with a learnable per-dimension gain (QK-norm)."""

  @nn.compact
  def __call__(self, x):
    gain = self.param("gain", nn.initializers.ones, (x.shape[-1],))
    return rms_norm(x) * gain.astype(x.dtype)


class GAULayer(nn.Module):
  config: GAUConfig
  scaling: InferenceScaling

  @nn.compact
  def __call__(self, x, deterministic: bool):
    cfg = self.config
    dtype = jnp.dtype(cfg.compute_dtype)
    dense = lambda features, name: nn.Dense(features, use_bias=False, dtype=dtype, name=name)
    h_BxTxH = nn.swish(dense(2 * cfg.expansion + cfg.qk_size, "wi")(x))
    u, v, z = jnp.split(h_BxTxH, [cfg.expansion, 2 * cfg.expansion], axis=-1)
    q, k = ScaleOffset(name="q_scale_offset")(z), ScaleOffset(name="k_scale_offset")(z)
    if cfg.qk_norm:
      q, k = GainRMSNorm(name="q_norm")(q), GainRMSNorm(name="k_norm")(k)
    length = x.shape[1]
    rope = {}
    if cfg.position == "rope":
      rope = rope_settings(self.scaling, rotary_dim=cfg.qk_size, base=cfg.rope_theta,
                           train_length=cfg.train_length, seq_length=length)
    elif self.scaling.posthoc_logn:
      rope = dict(posthoc_logn_length=cfg.train_length)
    out, entropy_BxT = attend(q, k, v, variant=cfg.attention, logn_base=cfg.resolved_logn_base,
                              cosa_scale=cfg.resolved_cosa_scale, **rope)
    self.sow("intermediates", "key_norm", jnp.linalg.norm(k.astype(jnp.float32), axis=-1))
    self.sow("intermediates", "attention_entropy", entropy_BxT)
    out = dense(x.shape[-1], "wo")(u * out)
    return nn.Dropout(cfg.dropout)(out, deterministic=deterministic)


class GAULM(nn.Module):
  """Byte-level causal LM: tokens [B, T] -> logits [B, T, vocab] (float32)."""
  config: GAUConfig
  scaling: InferenceScaling = InferenceScaling()

  @nn.compact
  def __call__(self, tokens_BxT, deterministic: bool = True):
    cfg = self.config
    embed = nn.Embed(cfg.vocab_size, cfg.d_model, name="embed",
                     embedding_init=nn.initializers.normal(stddev=cfg.d_model**-0.5))
    x = embed(tokens_BxT).astype(jnp.dtype(cfg.compute_dtype))
    post = cfg.norm_position == "post"
    if post:
      x = rms_norm(x)
    for i in range(cfg.num_layers):
      layer = GAULayer(cfg, self.scaling, name=f"layer_{i}")
      x = rms_norm(x + layer(x, deterministic)) if post else x + layer(rms_norm(x), deterministic)
    if not post:
      x = rms_norm(x)
    if cfg.tie_embeddings:
      logits = embed.attend(x.astype(jnp.float32))
    else:
      logits = nn.Dense(cfg.vocab_size, use_bias=False, name="head")(x.astype(jnp.float32))
    return logits.astype(jnp.float32)


def count_params(params) -> int:
  return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))
