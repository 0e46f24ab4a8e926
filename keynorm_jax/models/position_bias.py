"""The learned parts of a layer's scores, as Flax modules, and `LEARNED`: the one table that builds
a layer's attention.Learned from its position spec and the model config.

KERPLE and FIRE return a callable(distance [B, Q, K], query positions [B, Q]) -> [B, H, Q, K]
(Learned.score_bias; distance is the key's relative, or StreamingLLM cache, distance); FoX's forget
gates, CoPE's position embeddings and SSMax's learnable scale return arrays, PaTH's Householder
factors an attention.PathFactors.
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from keynorm_jax.attention import PathFactors, l2_normalize

_MIN_POSITIVE = 1e-2  # KERPLE keeps r1, r2 at or above this (its reference code clamps them)


class KerpleLogBias(nn.Module):
  """KERPLE-log (Chi et al. 2022): -r1_h log(1 + r2_h (i - j)), r1, r2 > 0 learnable per head.

  Initialised as in the paper's code: r1 ~ U(0, 2), r2 ~ U(0, 1).
  """
  num_heads: int

  @nn.compact
  def __call__(self):
    uniform = lambda high: (lambda key, shape: nn.initializers.uniform(high)(key, shape))
    r1 = jnp.maximum(self.param("r1", uniform(2.0), (self.num_heads,)), _MIN_POSITIVE)
    r2 = jnp.maximum(self.param("r2", uniform(1.0), (self.num_heads,)), _MIN_POSITIVE)

    def bias(distance_BxQxK, query_positions_BxQ):
      del query_positions_BxQ
      d = jnp.maximum(distance_BxQxK, 0.0)[:, None]
      return -r1[None, :, None, None] * jnp.log1p(r2[None, :, None, None] * d)

    return bias


class FireBias(nn.Module):
  """FIRE (Li et al. 2023): f(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1).

  f is an MLP 1 -> hidden (ReLU) -> H, one per layer for all heads; c > 0 and the threshold
  L = |l| x train_length > 0 are learnable. Initialised as the FIRE reference code: c = 0.1, l = 1
  (L = the training length); psi's denominator gets 1e-6, as there.
  """
  num_heads: int
  train_length: int
  hidden: int = 32

  @nn.compact
  def __call__(self):
    c = jnp.abs(self.param("c", nn.initializers.constant(0.1), ()))
    threshold = jnp.abs(self.param("l", nn.initializers.ones, ())) * self.train_length
    # The MLP's weights as plain parameters (PyTorch's default init U(+-1/sqrt(fan_in)), as the
    # reference code), so the bias is a pure function that can run inside attention's block loop.
    w_in = self.param("w_in", _torch_default(1), (self.hidden,))
    b_in = self.param("b_in", _torch_default(1), (self.hidden,))
    w_out = self.param("w_out", _torch_default(self.hidden), (self.hidden, self.num_heads))
    b_out = self.param("b_out", _torch_default(self.hidden), (self.num_heads,))

    def bias(distance_BxQxK, query_positions_BxQ):
      psi = lambda x: jnp.log(c * x + 1.0)
      i = query_positions_BxQ.astype(jnp.float32)[:, :, None]
      normalized = psi(jnp.maximum(distance_BxQxK, 0.0)) / (psi(jnp.maximum(threshold, i)) + 1e-6)
      hidden_BxQxKxM = nn.relu(normalized[..., None] * w_in + b_in)
      out_BxQxKxH = hidden_BxQxKxM @ w_out + b_out
      return jnp.moveaxis(out_BxQxKxH, -1, 1)

    return bias


def _torch_default(fan_in: int):
  """PyTorch's default Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
  bound = 1.0 / math.sqrt(fan_in)
  return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


class ForgetGate(nn.Module):
  """FoX's forget gates (Lin et al. 2025): log f_t = log sigmoid(w_h . x_t + b_h) [B, T, H] of the
  layer's input x_t, one gate per head, for attention.attend's `log_forget`.

  Initialised as the paper's code (zhixuan-lin/forgetting-transformer, the default "full" gate):
  w ~ N(0, 0.02^2), b = 0 (every gate starts near sigmoid(0) = 1/2).
  """
  num_heads: int

  @nn.compact
  def __call__(self, x_BxTxD):
    d = x_BxTxD.shape[-1]
    w = self.param("w", nn.initializers.normal(0.02), (d, self.num_heads))
    b = self.param("b", nn.initializers.zeros, (self.num_heads,))
    return jax.nn.log_sigmoid(x_BxTxD.astype(jnp.float32) @ w + b)


class HouseholderFactors(nn.Module):
  """PaTH's factors H_t = I - beta_t w_t w_t^T of the layer's input x_t (Yang et al. 2025, as the
  authors' layer, fla's PaTHAttention, computes them), per key/value head:

    w_t    = L2norm(SiLU(causal depthwise conv_K(x_t W_down W_up)))   [B, T, G, S]
    beta_t = 2 sigmoid(x_t W_beta + b_beta)                           [B, T, G], in (0, 2)

  W_down [d, rank] and W_up [rank, G S] without biases (rank 0: one full projection W_w [d, G S]);
  the convolution of `conv_size` taps per channel without bias, K - 1 zeros before the first token
  (conv_size 0: none, and no SiLU, as fla without its short convolution). Initialised as fla's
  model: every weight N(0, 0.02^2), b_beta = 0 (beta starts near 1). In float32.
  """
  num_kv_heads: int
  size: int
  rank: int
  conv_size: int

  @nn.compact
  def __call__(self, x_BxTxD):
    x = x_BxTxD.astype(jnp.float32)
    batch, length, d = x.shape
    width = self.num_kv_heads * self.size
    init = nn.initializers.normal(0.02)
    if self.rank:
      w = (x @ self.param("w_down", init, (d, self.rank))) @ self.param("w_up", init,
                                                                         (self.rank, width))
    else:
      w = x @ self.param("w_proj", init, (d, width))
    if self.conv_size:   # y_t = sum_m taps[m] x_{t - K + 1 + m}, the last tap on x_t
      taps = self.param("w_conv", init, (self.conv_size, width))
      padded = jnp.pad(w, ((0, 0), (self.conv_size - 1, 0), (0, 0)))
      w = jax.nn.silu(sum(taps[m] * padded[:, m:m + length] for m in range(self.conv_size)))
    w = l2_normalize(w.reshape(batch, length, self.num_kv_heads, self.size))
    beta_w = self.param("beta_w", init, (d, self.num_kv_heads))
    beta_b = self.param("beta_b", nn.initializers.zeros, (self.num_kv_heads,))
    return PathFactors(w, 2.0 * jax.nn.sigmoid(x @ beta_w + beta_b))


class CopeEmbeddings(nn.Module):
  """CoPE's position embeddings e [head size, npos] of a layer, shared by its heads; zeros at first,
  as the paper's code."""
  size: int
  npos: int

  @nn.compact
  def __call__(self):
    return self.param("e", nn.initializers.zeros, (self.size, self.npos))


class SSMaxScale(nn.Module):
  """SSMax's s per head (Nakanishi 2025): scores of query i times s log(i + 1).

  Initialised at 1 / log(train_length), so at the training length the factor starts at 1.
  """
  num_heads: int
  train_length: int

  @nn.compact
  def __call__(self):
    init = nn.initializers.constant(1.0 / math.log(self.train_length))
    return self.param("s", init, (self.num_heads,))


# An AttentionSpec's `learned_bias` -> the layer's bias module, built from the model config (the
# parameter names, "kerple" and "fire", are those of the checkpoints).
LEARNED_BIASES = {
    "kerple_log": lambda cfg: KerpleLogBias(cfg.heads, name="kerple"),
    "fire": lambda cfg: FireBias(cfg.heads, cfg.train_length, name="fire"),
}

# attention.Learned's field -> its value in a layer: a function of (model config, the layer's
# position spec, head size, the layer's input x [B, T, d]) that builds the module (a child of the
# calling module) and returns its output, or None where the layer has no such part.
LEARNED = {
    "score_bias": lambda cfg, spec, size, x: (
        LEARNED_BIASES[spec.learned_bias](cfg)() if spec.learned_bias else None),
    "log_forget": lambda cfg, spec, size, x: (
        ForgetGate(cfg.heads, name="forget_gate")(x) if spec.forget_gate else None),
    "cope_embeddings": lambda cfg, spec, size, x: (
        CopeEmbeddings(size, spec.cope_positions, name="cope")() if spec.cope_positions else None),
    "ssmax_scale": lambda cfg, spec, size, x: (
        SSMaxScale(cfg.heads, cfg.train_length, name="ssmax")() if cfg.ssmax else None),
    "path": lambda cfg, spec, size, x: (
        HouseholderFactors(cfg.kv_heads, size, spec.path.w_rank, spec.path.conv_size,
                           name="path")(x) if spec.path else None),
}
