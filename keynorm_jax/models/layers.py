"""Small layers shared by both architectures: norms, scale-offset, the MLP, absolute position
embeddings."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.linear import linear


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


def norm_layer(kind: str, name: str) -> nn.Module:
  """A norm with a learnable gain: "rmsnorm", or "layernorm" (mean-subtracted, gain and bias)."""
  if kind == "rmsnorm":
    return nn.RMSNorm(epsilon=1e-6, name=name)
  if kind == "layernorm":
    return nn.LayerNorm(epsilon=1e-6, name=name)
  raise ValueError(f"Unknown norm {kind!r}; choose rmsnorm or layernorm.")


class MLP(nn.Module):
  """SwiGLU or GELU feed-forward block, no biases: the Transformer's, and the GAU's with
  model.gau_mlp."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    cfg = self.config
    dense = lambda features, name: linear(features, cfg, name)
    width = cfg.resolved_mlp_size
    if cfg.mlp == "swiglu":
      hidden = nn.silu(dense(width, "gate")(x)) * dense(width, "up")(x)
    else:
      hidden = nn.gelu(dense(width, "up")(x), approximate=False)
    return dense(x.shape[-1], "down")(hidden)


def sinusoidal_embedding(positions_BxT, dim: int):
  """[B, T, dim] Vaswani et al.: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i + 1) = cos(...)."""
  inv_freq = 10000.0**(-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
  angles = positions_BxT.astype(jnp.float32)[..., None] * inv_freq
  out = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)
  return out.reshape(positions_BxT.shape + (-1,))[..., :dim]


class SinusoidalPositions(nn.Module):
  """Vaswani et al.'s sinusoids added to the token embedding, scaled by d^-1/2: token embeddings are
  initialised with std d^-1/2 and the sinusoids have unit amplitude, so this is the ratio of
  sqrt(d) x embedding + PE."""
  train_length: int

  @nn.compact
  def __call__(self, x_BxTxD, positions_BxT):
    dim = x_BxTxD.shape[-1]
    return x_BxTxD + (sinusoidal_embedding(positions_BxT, dim) / math.sqrt(dim)).astype(
        x_BxTxD.dtype)


class LearnedPositions(nn.Module):
  """A learned table of train_length positions added to the token embedding (std d^-1/2 init)."""
  train_length: int

  @nn.compact
  def __call__(self, x_BxTxD, positions_BxT):
    dim, length = x_BxTxD.shape[-1], x_BxTxD.shape[1]
    if length > self.train_length:
      raise ValueError(f"learned absolute positions have {self.train_length} rows (the training "
                       f"length); a sequence of {length} tokens is past the table.")
    table = nn.Embed(self.train_length, dim, name="table",
                     embedding_init=nn.initializers.normal(stddev=dim**-0.5))
    return x_BxTxD + table(positions_BxT).astype(x_BxTxD.dtype)


# A position method's `absolute` kind -> its module, built with the training length.
ABSOLUTE_POSITIONS = {"sinusoidal": SinusoidalPositions, "learned": LearnedPositions}
