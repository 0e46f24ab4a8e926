"""One-off diagnostic (2026-11-27): how far DroPE's temperature moves each attention output.

measure_temperature.py found that DroPE's beta (every score times 1 + c ln s, 1.86 at 8x) costs the
GAU's KNA DroPE run as much inside the training length as beyond, and far more than its Baseline
twin, although it lowers the attention entropy by about as much in both. This asks how far beta
moves each layer's attention output (before the GAU's gate and output projection): for each layer,
with every layer's input as trained (one pass, beta nowhere), it computes from the captured scores
and values the attention output o_i = sum_j a_ij v_j with the trained weights and with
softmax(beta s_ij), and records, per query and then averaged over heads and the queries inside and
beyond the training length:
  - change: |o'_i - o_i| / |o_i|, how far beta moves the output, relative to its size;
  - agreement: |o_i| / sum_j a_ij |v_j|, 1 where the weighted values point one way, near 0 where
    they cancel (an output that is a small remainder of large values moves more for a given
    reweighting);
  - drift: from a second pass with beta in every layer (DroPE's rule), |o''_i - o_i| / |o_i|, how
    far each layer's attention output ends up from the trained pass's once the layers before it
    have moved too (against change, the same layer's move alone: the compounding).
It patches two library functions for the capture, so it is a measurement kept with its outputs.

  PYTHONPATH=. python results/drope_temperature/measure_sensitivity.py RUN_WORKDIR NAME OUTPUT_DIR
"""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from keynorm_jax.attention.kernels import reference
from keynorm_jax.positions.inference.temperature import DropeTemperature
from results.probing import held_out_windows, reference_run

WINDOW, WINDOWS = 4096, 4
original_normalized = reference.normalized_with_entropy
original_times_values = reference.grouped_probs_times_values
layers = []   # per layer of the current window: scores [H, Q, K], keep [Q, K], values [K, G, E],
              # the attention output [H, Q, E]
applied = {"beta": 1.0}   # the factor the pass applies to every kept score


def captured_scores(mods, scores_BxHxQxK, keep_Bx1xQxK):
  layers.append({"scores": np.asarray(scores_BxHxQxK[0], np.float64),
                 "keep": np.asarray(keep_Bx1xQxK[0, 0])})
  scaled = jnp.where(keep_Bx1xQxK, applied["beta"] * scores_BxHxQxK, scores_BxHxQxK)
  return original_normalized(mods, scaled, keep_Bx1xQxK)


def captured_values(probs_BxHxQxK, values_BxKxGxE):
  out_BxQxHxE = original_times_values(probs_BxHxQxK, values_BxKxGxE)
  layers[-1]["values"] = np.asarray(values_BxKxGxE[0], np.float64)
  layers[-1]["out"] = np.moveaxis(np.asarray(out_BxQxHxE[0], np.float64), 0, 1)
  return out_BxQxHxE


def softmax(scores_HxQxK, keep_QxK):
  masked = np.where(keep_QxK, scores_HxQxK, -np.inf)
  weights = np.exp(masked - masked.max(-1, keepdims=True))
  return weights / weights.sum(-1, keepdims=True)


def layer_measures(layer, beta):
  """Per head and query: (change, agreement), each [H, Q]."""
  scores, keep, values = layer["scores"], layer["keep"], layer["values"]
  heads, groups = scores.shape[0], values.shape[1]
  values_HxKxE = np.repeat(np.moveaxis(values, 1, 0), heads // groups, axis=0)
  probs, scaled = softmax(scores, keep), softmax(beta * scores, keep)
  out, out_scaled = probs @ values_HxKxE, scaled @ values_HxKxE
  size = np.linalg.norm(out, axis=-1)
  change = np.linalg.norm(out_scaled - out, axis=-1) / size
  agreement = size / (probs @ np.linalg.norm(values_HxKxE, axis=-1)[..., None])[..., 0]
  return change, agreement


def attention_outputs(model, params, window, beta):
  """The captured layers of one pass with every kept score times beta."""
  layers.clear()
  applied["beta"] = beta
  with jax.disable_jit():
    model.apply({"params": params}, jnp.asarray(window[None, :-1]))
  return list(layers)


def drift(trained, moved):
  """|o'' - o| / |o| per head and query, [H, Q]."""
  return (np.linalg.norm(moved["out"] - trained["out"], axis=-1)
          / np.linalg.norm(trained["out"], axis=-1))


def main(workdir, name, output_dir):
  run, model = reference_run(workdir)
  reference.normalized_with_entropy = captured_scores
  reference.grouped_probs_times_values = captured_values
  train_length = run.config.train_length
  beta = DropeTemperature().scale(WINDOW / train_length)   # the library's rule and its default c
  per_window = []
  for window in held_out_windows(run.config, WINDOW, WINDOWS):
    trained = attention_outputs(model, run.params, window, 1.0)
    moved = attention_outputs(model, run.params, window, beta)
    per_window.append([layer_measures(layer, beta) + (drift(layer, again),)
                       for layer, again in zip(trained, moved)])
  result = {"run": name, "step": run.step, "window": WINDOW, "windows": WINDOWS,
            "train_length": train_length, "beta": beta, "layers": {}}
  for i in range(len(per_window[0])):
    change = np.stack([w[i][0] for w in per_window])     # [windows, H, Q]
    agreement = np.stack([w[i][1] for w in per_window])
    moved = np.stack([w[i][2] for w in per_window])
    result["layers"][f"layer_{i}"] = {
        f"{measure}_{part}": float(values[..., span].mean())
        for measure, values in (("change", change), ("agreement", agreement), ("drift", moved))
        for part, span in (("inside", slice(0, train_length)),
                           ("beyond", slice(train_length, None)))}
  with open(f"{output_dir}/{name}_sensitivity.json", "w") as f:
    json.dump(result, f, indent=1)
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  main(*sys.argv[1:4])
