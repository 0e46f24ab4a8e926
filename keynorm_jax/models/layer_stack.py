"""The stack of layers of either architecture: a Python loop, or one scanned layer.

A layer is a module class called as layer(config, spec)(x, positions, deterministic, given) -> x,
spec its AttentionSpec (attention_block.layer_specs: resolved once per call of the LM) and given
its attention.Spec when the caller gives it (models.given_specs), else None.
In a loop each layer is its own module `layer_{i}` (and its own compiled code). With
`model.scan_layers`, nn.scan runs one layer num_layers times over parameters stacked along a
leading axis (`layers/...`, [num_layers, ...]): one layer compiles, whatever the depth. Scanning
needs identical layers (ModelConfig refuses a method whose layers differ, e.g. HWFA). Layer remat
(`model.remat`) applies to both.
"""

import flax.linen as nn
import jax

from keynorm_jax import positions
from keynorm_jax.models.config import ModelConfig


def maybe_remat(layer_cls, remat: bool):
  """The layer class, rematerialised in the backward pass when `remat` (same parameters); its
  __call__ is (self, x, positions, deterministic, given), deterministic static."""
  return nn.remat(layer_cls, static_argnums=(3,)) if remat else layer_cls


class _ScanStep(nn.Module):
  """One step of the scan: (x, positions, given) -> (next x, nothing)."""
  layer_cls: type
  config: ModelConfig
  spec: positions.AttentionSpec
  deterministic: bool

  @nn.compact
  def __call__(self, x, positions_BxT, given):
    layer = maybe_remat(self.layer_cls, self.config.remat)(self.config, self.spec, name="layer")
    return layer(x, positions_BxT, self.deterministic, given), None


def layer_stack(layer_cls, cfg: ModelConfig, specs: tuple, x, positions_BxT, deterministic: bool,
                given: tuple | None = None):
  """x through cfg.num_layers layers (specs: one AttentionSpec each; given: one attention.Spec
  each, or None); call from a compact method (the modules are its children)."""
  if not cfg.scan_layers:
    for i in range(cfg.num_layers):
      x = maybe_remat(layer_cls, cfg.remat)(cfg, specs[i], name=f"layer_{i}")(
          x, positions_BxT, deterministic, None if given is None else given[i])
    return x
  if len(set(specs)) != 1:   # (ModelConfig refuses such a config before it gets here)
    raise ValueError("model.scan_layers needs identical layers; this model's layers differ.")
  scanned = nn.scan(_ScanStep, variable_axes={"params": 0, "intermediates": 0},
                    split_rngs={"params": True, "dropout": True}, in_axes=nn.broadcast,
                    length=cfg.num_layers)
  # Identical layers: layer 0's given spec is every layer's.
  x, _ = scanned(layer_cls, cfg, specs[0], deterministic, name="layers")(
      x, positions_BxT, None if given is None else given[0])
  return x


def layer_intermediates(collection, index: int):
  """Layer `index`'s part of a collection (e.g. "intermediates") of either layout."""
  if "layers" in collection:  # scanned: every leaf has a leading layer axis
    return jax.tree.map(lambda leaf: leaf[index], collection["layers"]["layer"])
  return collection[f"layer_{index}"]
