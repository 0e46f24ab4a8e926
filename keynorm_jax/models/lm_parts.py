"""The language model's body, shared by both architectures, and its parts around the layers.

`LanguageModel` is the one body: tokens -> embedding (plus absolute positions) -> the
architecture's norm before the layers -> the stack of its layers -> its norm after them -> logits.
An architecture (gau.py, transformer.py) says only which layer it stacks and which norms it puts
before and after them.
"""

import flax.linen as nn
import jax.numpy as jnp

from keynorm_jax import positions, precision
from keynorm_jax.models.attention_block import layer_specs
from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.layer_stack import layer_stack
from keynorm_jax.models.layers import ABSOLUTE_POSITIONS
from keynorm_jax.models.linear import linear


def sequence_positions(module: nn.Module, cfg: ModelConfig, batch: int, length: int,
                       deterministic: bool):
  """[B, T] positions: the model's indices (positions/indices.py), drawn afresh for each training
  batch when they are random. Refuses a length past what the method can encode (a learned table's
  rows)."""
  limit = cfg.position_method.max_length(cfg.train_length)
  if limit is not None and length > limit:
    raise ValueError(f"{cfg.position} positions stop at {limit} tokens; a sequence of {length} "
                     f"is past them (not applicable).")
  indices = cfg.position_indices
  if not deterministic and indices.random:
    return indices.training(module.make_rng("positions"), batch, length, cfg.train_length)
  return indices.inference(batch, length, cfg.train_length)


class Embedder(nn.Module):
  """Tokens [B, T] -> [B, T, d] (compute dtype), plus absolute positions if the method has them;
  `logits` maps back to float32 logits through the tied or untied head (its product in the compute
  dtype, summed in float32: keynorm_jax/precision.py)."""
  config: ModelConfig

  def setup(self):
    cfg = self.config
    self.embed = nn.Embed(cfg.vocab_size, cfg.d_model, name="embed",
                          embedding_init=nn.initializers.normal(stddev=cfg.d_model**-0.5))
    absolute = cfg.position_method.absolute
    self.absolute = (ABSOLUTE_POSITIONS[absolute](cfg.train_length, name="positions")
                     if absolute else None)
    if not cfg.tie_embeddings:
      self.head = linear(cfg.vocab_size, cfg, "head", out_dtype=jnp.float32)

  def __call__(self, tokens_BxT, positions_BxT):
    x = self.embed(tokens_BxT).astype(self.config.activation_dtype)
    if self.absolute is not None:
      x = self.absolute(x, positions_BxT)
    return x

  def logits(self, x):
    if self.config.tie_embeddings:
      return precision.einsum("...d,vd->...v", x, self.embed.embedding, self.config.product_dtype)
    return self.head(x)


class LanguageModel(nn.Module):
  """Causal LM: tokens [B, T] -> logits [B, T, vocab] (float32). Subclasses set `layer` (a module
  class called as layer(config, spec)(x, positions, deterministic)) and may override
  `before_layers` and `after_layers` (identity here)."""
  config: ModelConfig
  column: positions.EvalColumn = positions.EvalColumn()
  layer = None

  def before_layers(self, x):
    return x

  def after_layers(self, x):
    return x

  @nn.compact
  def __call__(self, tokens_BxT, deterministic: bool = True, specs: tuple | None = None):
    """specs: every layer's attention.Spec, resolved by the caller (models.given_specs: its
    numbers then arguments of a jitted caller's program), or None: each layer resolves its own
    under `column`."""
    cfg = self.config
    batch, length = tokens_BxT.shape
    positions_BxT = sequence_positions(self, cfg, batch, length, deterministic)
    embedder = Embedder(cfg, name="embedder")
    x = self.before_layers(embedder(tokens_BxT, positions_BxT))
    x = layer_stack(self.layer, cfg, layer_specs(cfg, self.column, length), x, positions_BxT,
                    deterministic, specs)
    return embedder.logits(self.after_layers(x))
