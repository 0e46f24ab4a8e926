"""One-off diagnostic (2026-11-27): does RNoPE-SWA's full NoPE layer matter, and does its far reach?

RNoPE-SWA (keynorm_jax.positions.training_methods) interleaves RoPE sliding-window layers with
full-attention NoPE layers. This loads a trained run and evaluates four held-out non-repeated windows
at 1x and 8x its training length with the reference kernel, first as trained, then with every full
(window-less) layer's attention cut to the keys less than W tokens back (renormalized over them),
then with those layers' attention output set to zero (the layer keeps its residual path, and in the
Transformer its MLP; the GAU's gate multiplies zero). The window layers are left as trained. It patches one library function, so it is a
measurement kept with its outputs.

  PYTHONPATH=. python results/rnope_swa_ablation/measure_ablation.py RUN_WORKDIR NAME OUTPUT_DIR
"""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from keynorm_jax.attention import scores
from keynorm_jax.attention.kernels import reference
from results.probing import held_out_windows, reference_run

WINDOWS, SCALES = 4, (1, 8)
original_normalized = reference.normalized_with_entropy
setting = {"full_layers": None}   # None: as trained; an int W: keys < W back; "off": output zero


def ablated(mods, scores_BxHxQxK, keep_Bx1xQxK):
  """The weights of a layer; a full layer's are cut as `setting` says."""
  cut = setting["full_layers"]
  if mods.window is not None or cut is None:
    return original_normalized(mods, scores_BxHxQxK, keep_Bx1xQxK)
  if cut == "off":
    probs, entropy = original_normalized(mods, scores_BxHxQxK, keep_Bx1xQxK)
    return jnp.zeros_like(probs), jnp.zeros_like(entropy)
  length = scores_BxHxQxK.shape[-1]
  distance = jnp.arange(length)[:, None] - jnp.arange(length)[None, :]
  keep = keep_Bx1xQxK & (distance < cut)
  return original_normalized(mods, jnp.where(keep, scores_BxHxQxK, scores.MASKED), keep)


def accuracy(model, params, windows):
  apply = jax.jit(lambda x: model.apply({"params": params}, x))   # traced again per setting
  hits = [np.asarray(apply(jnp.asarray(w[None, :-1])))[0].argmax(-1) == w[1:] for w in windows]
  return float(np.mean(hits))


def main(workdir, name, output_dir):
  run, model = reference_run(workdir)
  reference.normalized_with_entropy = ablated
  train_length = run.config.train_length
  result = {"run": name, "step": run.step, "windows": WINDOWS, "train_length": train_length,
            "accuracy": {}}
  for scale in SCALES:
    windows = held_out_windows(run.config, scale * train_length, WINDOWS)
    for cut in (None, train_length // 2, 64, "off"):
      setting["full_layers"] = cut
      label = {None: "as trained", "off": "full layers off"}.get(cut, f"full layers window {cut}")
      result["accuracy"][f"{scale}x, {label}"] = accuracy(model, run.params, windows)
      print(scale, label, result["accuracy"][f"{scale}x, {label}"], flush=True)
  with open(f"{output_dir}/{name}.json", "w") as f:
    json.dump(result, f, indent=1)


if __name__ == "__main__":
  main(*sys.argv[1:4])
