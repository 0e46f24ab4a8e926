"""One-off diagnostic (2026-11-27): where CoPE's contextual positions fall beyond the training length.

CoPE (Golovneva et al. 2024) gives key j of query i the position p_ij = sum over t = j..i of
sigmoid(s_it) and adds q_i . e[p_ij], with p capped at npos - 1 (keynorm_jax.attention.scores.cope).
This loads a trained run, evaluates one held-out 4096-token window (the first of the field study's
non-repeated 8x windows) with the reference kernel, and records for each layer: the positions the
layer counts for queries inside the training length and beyond it, how many keys reach the cap,
the attention mass those keys and the keys counted beyond any position reached inside 512 receive,
the position term q . e they get, and the norm of the learned embeddings by position. It patches
two library functions for the capture, so it is a measurement kept with its outputs.

  PYTHONPATH=. python results/cope_positions/measure_positions.py RUN_WORKDIR NAME OUTPUT_DIR
"""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from keynorm_jax.attention import scores
from keynorm_jax.attention.kernels import reference
from results.probing import held_out_windows, reference_run

WINDOW = 4096
layers = []  # one dict per attention call: the CoPE inputs, then the probabilities


def capture_cope(scores_BxHxQxK, keep_Bx1xQxK, q_BxQxHxS, embeddings_SxP):
  term = original_cope(scores_BxHxQxK, keep_Bx1xQxK, q_BxQxHxS, embeddings_SxP)
  layers.append({"scores": np.asarray(scores_BxHxQxK[0], np.float64),
                 "keep": np.asarray(keep_Bx1xQxK[0, 0]),
                 "term": np.asarray(term[0], np.float64),
                 "queries": np.asarray(q_BxQxHxS[0], np.float64),
                 "embeddings": np.asarray(embeddings_SxP, np.float64)})
  return term


def capture_probs(mods, scores_BxHxQxK, keep_Bx1xQxK):
  probs, entropy = original_normalized(mods, scores_BxHxQxK, keep_Bx1xQxK)
  layers[-1]["probs"] = np.asarray(probs[0], np.float64)
  return probs, entropy


original_cope, original_normalized = scores.cope, reference.normalized_with_entropy


def counted_positions(layer):
  """p_ij uncapped [H, Q, K]: the reverse cumulative sum of the kept gates along the keys."""
  gates = np.where(layer["keep"], 1.0 / (1.0 + np.exp(-layer["scores"])), 0.0)
  return np.flip(np.cumsum(np.flip(gates, -1), -1), -1), gates


def far_mass(logits_HxQxK, keep_QxK, far_QxK):
  """Mean over heads and queries of the softmax mass (over the kept keys) on the `far` keys."""
  z = np.where(keep_QxK, logits_HxQxK, -np.inf)
  e = np.exp(z - z.max(-1, keepdims=True))
  return float(((e * far_QxK).sum(-1) / e.sum(-1)).mean())


def term_at(layer, position):
  """q_i . e interpolated at one (fractional) position, for every query [H, Q, 1]."""
  logits_HxQxP = np.einsum("qhs,sp->hqp", layer["queries"], layer["embeddings"])
  below = int(np.floor(position))
  weight = position - below
  above = min(below + 1, logits_HxQxP.shape[-1] - 1)
  return (weight * logits_HxQxP[..., above] + (1 - weight) * logits_HxQxP[..., below])[..., None]


def layer_summary(layer, train_length):
  npos = layer["embeddings"].shape[1]
  positions, gates = counted_positions(layer)
  keep, probs, term = layer["keep"], layer["probs"], layer["term"]
  distance = np.arange(keep.shape[0])[:, None] - np.arange(keep.shape[1])[None, :]
  inside = slice(0, train_length)
  beyond = slice(train_length, keep.shape[0])
  seen = float(positions[:, inside][:, keep[inside]].max())
  out = {"npos": npos, "max_position_counted_inside_train_length": seen}
  for name, rows in (("queries_inside", inside), ("queries_beyond", beyond)):
    k, p, w, t = keep[rows], positions[:, rows], probs[:, rows], term[:, rows]
    capped = k & (p >= npos - 1)
    unseen = k & (p > seen)
    near, far = k & (distance[rows] < train_length), k & (distance[rows] >= train_length)
    out[name] = {
        "mean_gate_dist<train": float(gates[:, rows][:, near].mean()),
        "mean_gate_dist>=train": float(gates[:, rows][:, far].mean()) if far.any() else None,
        "max_position_counted": float(p[:, k].max()),
        "median_keys_before_cap": float(np.median((k & (p < npos - 1)).sum(-1))),
        "fraction_keys_capped": float(capped.sum() / k.sum() / p.shape[0]),
        "mass_on_capped_keys": float(np.where(capped, w, 0).sum(-1).mean()),
        "mass_on_positions_beyond_seen": float(np.where(unseen, w, 0).sum(-1).mean()),
        "mass_dist>=train": float(np.where(far, w, 0).sum(-1).mean()),
        "mean_term_capped": float(t[capped].mean()) if capped.any() else None,
        "mean_term_not_capped": float(t[k & ~capped].mean()),
    }
  # One layer recomputed from its own scores (the layers after it are not): the model's far mass,
  # and the far mass if every key counted beyond `seen` had the term of position `seen`.
  rows, k, p, far = beyond, keep[beyond], positions[:, beyond], distance[beyond] >= train_length
  s, t = layer["scores"][:, rows], term[:, rows]
  clamped = np.where(p > seen, term_at(layer, seen)[:, rows], t)
  out["queries_beyond"]["mass_dist>=train_recomputed"] = far_mass(s + t, k, far)
  out["queries_beyond"]["mass_dist>=train_if_positions_capped_at_seen"] = far_mass(s + clamped, k, far)
  norms = np.linalg.norm(layer["embeddings"], axis=0)
  edges = list(range(0, npos, 64)) + [npos]
  out["embedding_norm_by_position"] = {
      f"{lo}-{hi - 1}": float(norms[lo:hi].mean()) for lo, hi in zip(edges[:-1], edges[1:])}
  out["last_position_with_nonzero_embedding"] = int(np.nonzero(norms)[0].max()) if norms.any() else -1
  return out


def main(workdir, name, output_dir):
  run, model = reference_run(workdir)
  scores.cope, reference.normalized_with_entropy = capture_cope, capture_probs
  train_length = run.config.train_length
  window = held_out_windows(run.config, WINDOW, count=4)[:1]
  with jax.disable_jit():
    logits = model.apply({"params": run.params}, jnp.asarray(window[:, :-1]))
  hit = np.asarray(logits)[0].argmax(-1) == window[0, 1:]
  result = {"run": name, "step": run.step, "window": WINDOW, "train_length": train_length,
            "accuracy_inside": float(hit[:train_length].mean()),
            "accuracy_beyond": float(hit[train_length:].mean()),
            "layers": {f"layer_{i}": layer_summary(layer, train_length)
                       for i, layer in enumerate(layers)}}
  with open(f"{output_dir}/{name}.json", "w") as f:
    json.dump(result, f, indent=1)
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  main(*sys.argv[1:4])
