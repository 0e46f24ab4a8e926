"""Diagnostics of the seed's explanation: key-norm spread and attention entropy, per layer.

The seed argues that with ||k_j|| removed the model can only act through cos(q_i, k_j). We record,
per layer, the norms of the keys entering attention (after the variant's own normalization: KNA and
CosA keys are unit vectors, so their spread is 0 by construction; `raw` is before it) and the
entropy (nats) of each query's attention distribution, bucketed by query position; pooled over
heads, and per head (a Transformer's heads can differ widely).
"""

import jax
import numpy as np

from keynorm_jax import run_config
from keynorm_jax.eval_sets import eval_windows


def _coefficient_of_variation(x):
  return float(np.std(x) / max(np.mean(x), 1e-12))


def run_diagnostics(run, *, lengths, tokens, num_windows: int = 4):
  """{length: {layer: {...}}} on non_repeated windows, scaling "none"."""
  config = run.config
  model_cfg = run_config.model_config(config)
  model = run_config.build_model(config)
  bucket = max(1, config.train_length // 8)
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
      layer = found[f"layer_{i}"]["attention"]
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
      }
    out[length] = {"position_bucket": bucket, "layers": layers}
  return out

