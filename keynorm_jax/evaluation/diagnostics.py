"""Diagnostics of the seed's explanation: key-norm spread and attention entropy, per layer.

The seed argues that with ||k_j|| removed the model can only act through cos(q_i, k_j). We record,
per layer, the norms of the keys entering attention (after the variant's own normalization: KNA and
CosA keys are unit vectors, so their spread is 0 by construction; `raw` is before it) and the
entropy (nats) of each query's attention distribution, bucketed by query position; pooled over
heads, and per head (a Transformer's heads can differ widely).

Where the attention goes (`reach`, from attention/reach.py): by query position, the mean attention
distance i - sum_j p_ij j, the mass on the first block of keys (the first train_length / 8 tokens,
where attention sinks form) and the mass on keys at relative distances never seen in training
(blocks whose every key is at distance >= train_length: at block resolution, a lower bound);
and, for queries beyond vs inside the training length, the mass by block distance (query block
minus key block). This measures the seed's explanation instead of assuming it.
"""

import jax
import numpy as np

from keynorm_jax import run_config
from keynorm_jax.data.eval_sets import eval_windows
from keynorm_jax.models.attention_block import reach_bucket
from keynorm_jax.models.layer_stack import layer_intermediates


def _coefficient_of_variation(x):
  return float(np.std(x) / max(np.mean(x), 1e-12))


def _by_query_block(x_BxTxH, bucket):
  return [round(float(x_BxTxH[:, s:s + bucket].mean()), 6)
          for s in range(0, x_BxTxH.shape[1], bucket)]


def reach_summary(reach_BxTxHxC, *, train_length: int, bucket: int) -> dict:
  """Where the attention goes, from the reach channels (C - 1 key-block masses, then the mean key
  index) of every query: see the module's docstring."""
  reach = np.asarray(reach_BxTxHxC, dtype=np.float64)
  mass, mean_key = reach[..., :-1], reach[..., -1]
  length, blocks = reach.shape[1], mass.shape[-1]
  query = np.arange(length)
  distance = query[None, :, None] - mean_key
  # Key blocks wholly at distance >= train_length from query i: kb with (kb + 1) b - 1 <= i - L.
  far_blocks = np.maximum(0, (query - train_length + 1) // bucket)
  cumulative = np.concatenate([np.zeros(mass.shape[:-1] + (1,)), np.cumsum(mass, -1)], -1)
  far = np.take_along_axis(cumulative, np.broadcast_to(far_blocks[None, :, None, None],
                                                       mass.shape[:-1] + (1,)), -1)[..., 0]
  # Mass by block distance d = query block - key block.
  offsets = (query // bucket)[:, None] - np.arange(blocks)[None, :]          # [T, d]
  by_distance = np.take_along_axis(mass, np.broadcast_to(
      np.clip(offsets, 0, None)[None, :, None, :], mass.shape), -1) * (offsets >= 0)[None, :, None]
  inside, beyond = slice(0, train_length), slice(train_length, length)
  profile = lambda part, n: [round(float(v), 6) for v in by_distance[:, part].mean((0, 1, 2))[:n]]
  out = {
      "mean_distance_by_position": _by_query_block(distance, bucket),
      "sink_mass_by_position": _by_query_block(mass[..., 0], bucket),
      "far_mass_by_position": _by_query_block(far, bucket),
      "mean_distance_within_train": float(distance[:, inside].mean()),
      "sink_mass_within_train": float(mass[:, inside, :, 0].mean()),
      "mass_by_block_distance_within_train": profile(inside, -(-train_length // bucket)),
  }
  if length > train_length:
    out.update({
        "mean_distance_beyond_train": float(distance[:, beyond].mean()),
        "sink_mass_beyond_train": float(mass[:, beyond, :, 0].mean()),
        "far_mass_beyond_train": float(far[:, beyond].mean()),
        "mass_by_block_distance_beyond_train": profile(beyond, blocks),
    })
  return out


def run_diagnostics(run, *, lengths, tokens, num_windows: int = 4):
  """{length: {layer: {...}}} on non_repeated windows, scaling "none"."""
  config = run.config
  model_cfg = run_config.model_config(config)
  model = run_config.build_model(config)
  bucket = reach_bucket(config.train_length)
  normalized_keys = model_cfg.attention in ("kna", "cosa")

  @jax.jit
  def intermediates(params, inputs):
    _, state = model.apply({"params": params}, inputs, mutable=["intermediates"])
    return state["intermediates"]

  out = {}
  limit = model_cfg.position_method.max_length(config.train_length)
  for length in sorted({config.train_length, *lengths}):
    if limit is not None and length > limit:
      continue  # past what the positions encode (a learned table): not applicable
    windows = eval_windows(tokens, kind="non_repeated", length=length, count=num_windows,
                           train_length=config.train_length)
    found = jax.device_get(intermediates(run.params, windows[:, :-1]))
    layers = {}
    for i in range(model_cfg.num_layers):
      layer = layer_intermediates(found, i)["attention"]
      raw_norms = np.asarray(layer["key_norm"][0])                     # [B, T, kv heads]
      used_norms = np.ones_like(raw_norms) if normalized_keys else raw_norms
      entropy = np.asarray(layer["attention_entropy"][0])              # [B, T, heads]
      within, beyond = entropy[:, :config.train_length], entropy[:, config.train_length:]
      layers[f"layer_{i}"] = {
          "key_norm_cv": _coefficient_of_variation(used_norms),
          "raw_key_norm_cv": _coefficient_of_variation(raw_norms),
          "raw_key_norm_mean": float(raw_norms.mean()),
          "entropy_by_position": [float(entropy[:, s:s + bucket].mean())
                                  for s in range(0, length, bucket)],
          "entropy_beyond_train": (float(entropy[:, config.train_length:].mean())
                                   if length > config.train_length else None),
          "entropy_within_train": float(entropy[:, :config.train_length].mean()),
          # Per head (query heads; key norms per key/value head).
          "raw_key_norm_cv_by_kv_head": [_coefficient_of_variation(raw_norms[..., h])
                                         for h in range(raw_norms.shape[-1])],
          "entropy_within_train_by_head": within.mean(axis=(0, 1)).tolist(),
          "entropy_beyond_train_by_head": (beyond.mean(axis=(0, 1)).tolist() if beyond.size
                                           else None),
          "reach": reach_summary(layer["attention_reach"][0], train_length=config.train_length,
                                 bucket=bucket),
      }
    out[length] = {"position_bucket": bucket, "layers": layers}
  return out

