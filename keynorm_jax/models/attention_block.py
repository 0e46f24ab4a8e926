"""Attention with the model's variant and position method, for one layer of either architecture.

Given q, k, v per head and this layer's position spec (`layer_specs`, once per call of the LM: the
position method's spec, rewritten by the evaluation column, an inference-time method), it resolves
the attention's own `attention.Spec` at the sequence's length (`attention_spec`: the one hop from
the config to the kernel), builds the layer's `attention.Learned` from position_bias.LEARNED, and
calls attention.attend with the model's kernel (`model.kernel`; attention/kernels/). While the
diagnostics collect "intermediates" it also records per head (`sow`) the key norms, the attention
entropy and the attention's reach (attention/reach.py: the mass on each block of `reach_bucket` keys
and the mean key index, for every query); the kernel chosen then is one that gives the entropy.
A caller may give the layer its attention.Spec instead (`given`, an argument of the model's call:
models.given_specs), so that a jitted function takes the specs' numbers as arguments (the
evaluator: one compiled program for its columns that differ only in numbers).
"""

import dataclasses

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from keynorm_jax import attention, positions
from keynorm_jax.attention.reach import attend_with_reach
from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.position_bias import LEARNED



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
    specs.append(column.apply(spec.with_rope_scaling(**scaling) if scaling else spec,
                              cfg.train_length))
  return tuple(specs)


# How each field of a layer's positions.AttentionSpec reaches its attention: attention.ScoreRules'
# fields, declared once there for both records, are taken as they are (AS_GIVEN); the others are
# resolved with the model's settings (RESOLVED: RoPE's frequencies at the head size and length,
# log n's n0, ALiBi's slopes as an array) or build the layer's Learned arrays (LEARNED_FROM:
# position_bias.LEARNED). tests/test_model.py checks that every field is one of them.
AS_GIVEN = tuple(f.name for f in dataclasses.fields(attention.ScoreRules))
RESOLVED = ("rotary", "logn", "posthoc_logn", "alibi_slopes")
LEARNED_FROM = ("learned_bias", "forget_gate", "cope_positions", "path")


def attention_spec(cfg: ModelConfig, spec: positions.AttentionSpec, seq_length: int
                   ) -> attention.Spec:
  """The attention.Spec of a layer with position spec `spec` in a model of `cfg`, for a sequence of
  `seq_length` tokens (dynamic NTK's base depends on it)."""
  settings = {name: getattr(spec, name) for name in AS_GIVEN}
  rotary = spec.rotary
  if rotary is not None:
    settings["inv_freq"], settings["attention_factor"] = positions.rotary_inv_freq(
        rotary, rotary_dim=cfg.head_size, train_length=cfg.train_length, seq_length=seq_length)
    if rotary.xpos_gamma is not None:
      settings.update(xpos_gamma=rotary.xpos_gamma, xpos_scale_base=rotary.xpos_scale_base)
  if spec.alibi_slopes is not None:
    settings["alibi_slopes"] = np.asarray(spec.alibi_slopes, np.float32)
  logn_base = {True: cfg.default_logn_base, False: None, None: cfg.resolved_logn_base}[spec.logn]
  return attention.Spec(
      variant=cfg.attention, cosa_scale=cfg.resolved_cosa_scale, logn_base=logn_base,
      posthoc_logn_length=cfg.train_length if spec.posthoc_logn else None, **settings)


def resolved_specs(cfg: ModelConfig, column: positions.EvalColumn, length: int) -> tuple:
  """Every layer's attention.Spec under `column` for a sequence of `length`, as the layers resolve
  them (layer_specs, then attention_spec)."""
  return tuple(attention_spec(cfg, spec, length) for spec in layer_specs(cfg, column, length))


class PositionalAttention(nn.Module):
  """q [B, T, H, S], k [B, T, Hkv, S], v [B, T, Hkv, E] -> [B, T, H, E]."""
  config: ModelConfig
  spec: positions.AttentionSpec

  @nn.compact
  def __call__(self, q, k, v, positions_BxT, x, given: attention.Spec | None = None):
    """x [B, T, d]: the layer's input, which the learned parts may read (FoX's forget gates).
    given: the layer's attention.Spec, resolved already (models.given_specs), or None: resolved
    here (attention_spec), as in training."""
    cfg = self.config
    # The kernels take the products' input dtype from v's (and return the output in it): the
    # compute dtype; q and k enter as they are (float32 on the CPU seam: ModelConfig.
    # activation_dtype), rounded where the products read them.
    v = v.astype(cfg.product_dtype)
    spec = attention_spec(cfg, self.spec, q.shape[1]) if given is None else given
    learned = attention.Learned(**{name: build(cfg, self.spec, q.shape[-1], x)
                                   for name, build in LEARNED.items()})
    # Positions are 0..T-1 unless the model's indices are other ones: say so (None), so that a
    # kernel can count a window by index.
    at = positions_BxT if cfg.position_indices.explicit else None
    self.sow("intermediates", "key_norm", jnp.linalg.norm(k.astype(jnp.float32), axis=-1))
    if not self.is_mutable_collection("intermediates"):
      return attention.attend(q, k, v, spec, learned, positions=at, kernel=cfg.kernel,
                              need_entropy=False)[0]
    out, entropy, reach = attend_with_reach(q, k, v, spec, learned,
                                            bucket=reach_bucket(cfg.train_length), positions=at,
                                            kernel=cfg.kernel)
    self.sow("intermediates", "attention_entropy", entropy)
    self.sow("intermediates", "attention_reach", reach)
    return out
