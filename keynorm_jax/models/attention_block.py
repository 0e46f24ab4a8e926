"""Attention with the model's variant and position method, for one layer of either architecture.

Given q, k, v per head and this layer's AttentionSpec (resolved once per call of the LM by
`layer_specs`: the position method's spec, rewritten by the evaluation column, an inference-time
method, at the sequence's length), it builds the learned biases and calls
attention.attend with the model's kernel (`model.kernel`; attention/kernels/). While the
diagnostics collect "intermediates" it also records per head (`sow`) the key norms, the attention
entropy and the attention's reach (attention/reach.py: the mass on each block of `reach_bucket` keys
and the mean key index, for every query); the kernel chosen then is one that gives the entropy.
"""

import flax.linen as nn
import jax.numpy as jnp

from keynorm_jax import positions
from keynorm_jax.attention import attend
from keynorm_jax.attention.reach import attend_with_reach
from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.position_bias import (LEARNED_BIASES, CopeEmbeddings, ForgetGate,
                                              SSMaxScale)


def reach_bucket(train_length: int) -> int:
  """Keys (and queries) per block in the diagnostics: an eighth of the training length."""
  return max(1, train_length // 8)


def layer_specs(cfg: ModelConfig, column: positions.EvalColumn, length: int) -> tuple:
  """Every layer's AttentionSpec for a sequence of `length`: the position method's, with the model's
  own RoPE scaling (model.rope_scaling), under an evaluation column."""
  column = column.at(length, cfg.train_length)
  scaling = cfg.trained_rope_scaling
  specs = []
  for layer in range(cfg.num_layers):
    spec = cfg.position_method.layer_spec(layer=layer, num_layers=cfg.num_layers,
                                          num_heads=cfg.heads, rope_theta=cfg.rope_theta,
                                          train_length=cfg.train_length)
    specs.append(column.apply(spec.with_rope_scaling(**scaling) if scaling else spec))
  return tuple(specs)


class PositionalAttention(nn.Module):
  """q [B, T, H, S], k [B, T, Hkv, S], v [B, T, Hkv, E] -> [B, T, H, E]."""
  config: ModelConfig
  spec: positions.AttentionSpec

  @nn.compact
  def __call__(self, q, k, v, positions_BxT, x=None):
    """x [B, T, d]: the layer's input to q, k and v, which FoX's forget gates read."""
    cfg, spec = self.config, self.spec
    kwargs = positions.attention_kwargs(spec, rotary_dim=q.shape[-1], train_length=cfg.train_length,
                                        seq_length=q.shape[1], logn_base=cfg.resolved_logn_base)
    if spec.forget_gate:
      kwargs["log_forget"] = ForgetGate(cfg.heads, name="forget_gate")(x)
    if spec.cope_positions:
      kwargs["cope_embeddings"] = CopeEmbeddings(q.shape[-1], spec.cope_positions, name="cope")()
    score_bias = LEARNED_BIASES[spec.learned_bias](cfg)() if spec.learned_bias else None
    ssmax = SSMaxScale(cfg.heads, cfg.train_length, name="ssmax")() if cfg.ssmax else None
    # Positions are 0..T-1 unless the method draws random training positions: say so (None), so
    # that a kernel can count a window by index.
    at = positions_BxT if cfg.position_method.random_positions else None
    kwargs.update(variant=cfg.attention, cosa_scale=cfg.resolved_cosa_scale,
                  score_bias=score_bias, ssmax_scale=ssmax, positions=at, kernel=cfg.kernel)
    self.sow("intermediates", "key_norm", jnp.linalg.norm(k.astype(jnp.float32), axis=-1))
    if not self.is_mutable_collection("intermediates"):
      return attend(q, k, v, need_entropy=False, **kwargs)[0]
    out, entropy, reach = attend_with_reach(q, k, v, bucket=reach_bucket(cfg.train_length),
                                            **kwargs)
    self.sow("intermediates", "attention_entropy", entropy)
    self.sow("intermediates", "attention_reach", reach)
    return out
