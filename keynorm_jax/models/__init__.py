"""The language models: the seed's single-head GAU and a multi-head pre-norm Transformer."""

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from keynorm_jax import positions
from keynorm_jax.cpu import features
from keynorm_jax.models.attention_block import resolved_specs
from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.gau import GAULM


_SAID: set = set()   # the notes said in this process (each once)


def build_model(cfg: ModelConfig, column: positions.EvalColumn = positions.EvalColumn()):
  """The Flax LM of `cfg`, run under an evaluation column (default: as trained). A bfloat16 model
  on a CPU without bfloat16 units says once that it will be slower than float32 there."""
  if cfg.compute_dtype == "bfloat16" and jax.default_backend() == "cpu":
    note = features.slow_bfloat16()
    if note and note not in _SAID:
      _SAID.add(note)
      logging.warning(note)
  if cfg.architecture == "gau":
    return GAULM(cfg, column)
  from keynorm_jax.models.transformer import TransformerLM  # pylint: disable=g-import-not-at-top
  return TransformerLM(cfg, column)


def given_specs(cfg: ModelConfig, column: positions.EvalColumn, length: int) -> tuple:
  """Every layer's attention.Spec under `column` for sequences of `length`, to give the model as
  trained (build_model(cfg)) as its call's `specs`: passed to a jitted function, their numbers
  (attention.spec.NUMBERS) are arguments, not constants, and columns that differ only in numbers
  share one compiled program. (A column rewrites the attention alone, never a layer's learned
  parts, so the model as trained is the column's model.)"""
  # Every number as a float32 array: one argument type whatever Python type a method computed it
  # in (a Python float would be a weakly typed argument, a program of its own).
  return jax.tree.map(lambda x: np.asarray(x, np.float32), resolved_specs(cfg, column, length))


def init_params(model, seed: int, length: int):
  """Freshly initialized parameters of `model` (built by build_model), in its param_dtype.

  Flax's lazy_init runs the initializers as `model.init` does (outside jit, op by op: the same
  numbers bit for bit) and only traces the forward pass on the tokens, which `model.init` would
  compute op by op for nothing (most of a tiny run's start-up on the CPU)."""
  params = model.lazy_init(jax.random.PRNGKey(seed),
                           jax.ShapeDtypeStruct((1, length), jnp.int32))["params"]
  return jax.tree.map(lambda p: p.astype(model.config.param_dtype), params)


def count_params(params) -> int:
  return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))


__all__ = ["ModelConfig", "GAULM", "build_model", "count_params", "given_specs", "init_params"]
