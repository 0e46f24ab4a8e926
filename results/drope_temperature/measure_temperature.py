"""One-off diagnostic (2026-11-27): what DroPE's inference temperature does to each layer's attention.

DroPE (Gelberg et al. 2025) multiplies every attention score by beta = 1 + c ln s at inference
(s = length / train_length; keynorm_jax.positions.inference.temperature). This loads a trained DroPE
run, evaluates four held-out non-repeated 4096-token windows (trained at 512; `eval_windows` with
count 4, spread over the held-out text, where the study's 8x figures average 16) with the reference
kernel as trained (beta = 1), with beta in every layer, and with beta in one layer at a
time, and records per layer, for the
queries beyond the training length: the spread of the scores, the attention entropy, the mass at
distances never seen in training, the mean attention distance, and the accuracy of each pass. It
patches one library function for the capture and the scaling, so it is a measurement kept with its
outputs.

  PYTHONPATH=. python results/drope_temperature/measure_temperature.py RUN_WORKDIR NAME OUTPUT_DIR
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
state = {"betas": None, "layers": []}   # betas: one factor per layer


def scaled_and_captured(mods, scores_BxHxQxK, keep_Bx1xQxK):
  """The softmax of this layer's beta times the kept scores; the unscaled scores and the weights
  are kept."""
  beta = state["betas"][len(state["layers"])]
  scaled = jnp.where(keep_Bx1xQxK, beta * scores_BxHxQxK, scores_BxHxQxK)
  probs, entropy = original_normalized(mods, scaled, keep_Bx1xQxK)
  state["layers"].append({"scores": np.asarray(scores_BxHxQxK[0], np.float64),
                          "keep": np.asarray(keep_Bx1xQxK[0, 0]),
                          "probs": np.asarray(probs[0], np.float64)})
  return probs, entropy


def layer_stats(layer, train_length):
  """Means over heads and the queries beyond train_length."""
  keep, scores, probs = (layer[k][..., train_length:, :] if k != "keep" else
                         layer[k][train_length:] for k in ("keep", "scores", "probs"))
  distance = (np.arange(train_length, train_length + keep.shape[0])[:, None]
              - np.arange(keep.shape[1])[None, :])
  kept = np.broadcast_to(keep, scores.shape)
  count = keep.sum(-1)
  mean = np.where(kept, scores, 0).sum(-1) / count
  spread = np.sqrt(np.where(kept, (scores - mean[..., None])**2, 0).sum(-1) / count)
  logs = np.log(np.where(kept & (probs > 0), probs, 1.0))
  return {"score_std": float(spread.mean()),
          "score_max_minus_mean": float((np.where(kept, scores, -np.inf).max(-1) - mean).mean()),
          "entropy": float(-(probs * logs).sum(-1).mean()),
          "far_mass": float(np.where(distance >= train_length, probs, 0).sum(-1).mean()),
          "mean_distance": float((probs * np.maximum(distance, 0)).sum(-1).mean())}


def one_pass(model, params, windows, betas, train_length):
  state["betas"], per_window, hits = betas, [], []
  for window in windows:
    state["layers"] = []
    with jax.disable_jit():
      logits = model.apply({"params": params}, jnp.asarray(window[None, :-1]))
    hits.append(np.asarray(logits)[0].argmax(-1) == window[1:])
    per_window.append([layer_stats(layer, train_length) for layer in state["layers"]])
  hits = np.stack(hits)
  layers = {f"layer_{i}": {key: float(np.mean([w[i][key] for w in per_window]))
                           for key in per_window[0][i]} for i in range(len(per_window[0]))}
  return {"betas": list(betas), "accuracy_inside": float(hits[:, :train_length].mean()),
          "accuracy_beyond": float(hits[:, train_length:].mean()), "layers": layers}


def main(workdir, name, output_dir):
  run, model = reference_run(workdir)
  reference.normalized_with_entropy = scaled_and_captured
  train_length = run.config.train_length
  windows = held_out_windows(run.config, WINDOW, WINDOWS)
  beta = DropeTemperature().scale(WINDOW / train_length)   # the library's rule and its default c
  depth = run.config.model.num_layers
  # As trained, beta in every layer (DroPE's rule), then beta in one layer at a time.
  settings = [[1.0] * depth, [beta] * depth] + [
      [beta if i == layer else 1.0 for i in range(depth)] for layer in range(depth)]
  result = {"run": name, "step": run.step, "window": WINDOW, "windows": WINDOWS,
            "train_length": train_length,
            "passes": [one_pass(model, run.params, windows, b, train_length) for b in settings]}
  with open(f"{output_dir}/{name}.json", "w") as f:
    json.dump(result, f, indent=1)
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  main(*sys.argv[1:4])
