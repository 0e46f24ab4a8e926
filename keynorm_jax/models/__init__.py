"""The language models: the seed's single-head GAU and a multi-head pre-norm Transformer."""

import jax
import jax.numpy as jnp

from keynorm_jax import positions
from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.gau import GAULM


def build_model(cfg: ModelConfig, column: positions.EvalColumn = positions.EvalColumn()):
  """The Flax LM of `cfg`, run under an evaluation column (default: as trained)."""
  if cfg.architecture == "gau":
    return GAULM(cfg, column)
  from keynorm_jax.models.transformer import TransformerLM  # pylint: disable=g-import-not-at-top
  return TransformerLM(cfg, column)


def init_params(model, seed: int, length: int):
  """Freshly initialized parameters of `model` (built by build_model), in its param_dtype."""
  params = model.init(jax.random.PRNGKey(seed), jnp.zeros([1, length], jnp.int32))["params"]
  return jax.tree.map(lambda p: p.astype(model.config.param_dtype), params)


def count_params(params) -> int:
  return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))


__all__ = ["ModelConfig", "GAULM", "build_model", "count_params", "init_params"]
