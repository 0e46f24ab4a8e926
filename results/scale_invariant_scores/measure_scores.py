"""One-off diagnostic (2026-11-27): the scores S that scale-invariant attention transforms.

Captures S, the argument of keynorm_jax.attention.scores.scale_invariant (the logits before
a_t S + m_t), in each layer of a trained run on one held-out 4096-token window, with the model's
attention probabilities, and writes their statistics and two counterfactual far-attention masses
(a_t, m_t frozen at t = 511; plain softmax of S) as JSON. It patches two functions of the library
for the capture, so it is a measurement kept with its outputs, not part of the library.

  PYTHONPATH=. python results/scale_invariant_scores/measure_scores.py RUN_WORKDIR NAME OUTPUT_DIR
"""
import json
import sys
import numpy as np
import jax, jax.numpy as jnp

from keynorm_jax import run_config
from keynorm_jax.attention import scores as scores_mod
from keynorm_jax.attention.kernels import reference
from keynorm_jax.data.eval_sets import eval_windows
from keynorm_jax.evaluation.evaluate import held_out_tokens
from keynorm_jax.evaluation.run_loading import load_run

LENGTH, TRAIN = 4096, 512
captured = []          # per call: dict
orig_si = scores_mod.scale_invariant
orig_norm = reference.normalized_with_entropy

def patched_si(scores_BxHxQxK, distance_BxQxK, tau):
  captured.append({"S": np.asarray(scores_BxHxQxK), "dist": np.asarray(distance_BxQxK), "tau": tau})
  return orig_si(scores_BxHxQxK, distance_BxQxK, tau)

def patched_norm(mods, s, keep):
  probs, ent = orig_norm(mods, s, keep)
  captured[-1]["probs"] = np.asarray(probs)
  return probs, ent


def stats(x):
  return {"mean": float(x.mean()), "std": float(x.std()), "n": int(x.size)}

def transformed(scores, distance, tau):
  """a_t S + m_t, the NumPy form of the paper's eq. 14 and 16 (a_0 = 1, m_0 = 0)."""
  log_term = np.log1p(np.maximum(distance, 0) / tau)
  return np.sqrt(1 + 2 * log_term) * scores - 2 * log_term


def far_mass(logits, causal, far):
  """Mean over queries of the softmax mass (over causal keys) on the `far` keys."""
  z = np.where(causal, logits, -np.inf)
  e = np.exp(z - z.max(1, keepdims=True))
  return float(((e * far).sum(1) / e.sum(1)).mean())


def summarize(c):
  S = c["S"][0]; d = c["dist"][0]; P = c["probs"][0]     # [H,Q,K], [Q,K], [H,Q,K]
  H, Q, K = S.shape
  causal = d >= 0
  out = {}
  for h in range(H):
    s = S[h].astype(np.float64); p = P[h].astype(np.float64)
    res = {}
    for qname, qs in (("q<512", slice(0, TRAIN)), ("q>=512", slice(TRAIN, Q))):
      sq, dq, cq, pq = s[qs], d[qs], causal[qs], p[qs]
      r = {}
      for kname, km in (("all", cq), ("dist<512", cq & (dq < TRAIN)), ("dist>=512", cq & (dq >= TRAIN))):
        if not km.any(): continue
        vals = sq[km]
        masked = np.where(km, sq, -np.inf)
        rowmax = masked.max(axis=1); rows = np.isfinite(rowmax)
        r[kname] = {**stats(vals), "mean_rowmax": float(rowmax[rows].mean()),
                    "p99": float(np.percentile(vals, 99))}
      far = cq & (dq >= TRAIN)
      T = transformed(sq, dq, c["tau"])
      tmax_near = np.where(cq & (dq < TRAIN), T, -np.inf).max(1)
      tmax_far = np.where(far, T, -np.inf).max(1)
      r["mean_rowmax_transformed_near"] = float(tmax_near.mean())
      if np.isfinite(tmax_far).any():
        ok = np.isfinite(tmax_far)
        r["mean_rowmax_transformed_far"] = float(tmax_far[ok].mean())
        r["frac_queries_argmax_far"] = float((tmax_far[ok] > tmax_near[ok]).mean())
      # mass at distance >= 512 from the model's own probabilities, and self-check from T
      r["mass_dist>=512"] = float(np.where(far, pq, 0).sum(1).mean())
      r["mass_dist>=512_recomputed"] = far_mass(T, cq, far)
      # counterfactual (same S): a_t, m_t frozen at t = 511 for farther keys
      r["mass_far_if_at_mt_frozen_at_511"] = far_mass(
          transformed(sq, np.minimum(dq, TRAIN - 1), c["tau"]), cq, far)
      # counterfactual: plain softmax of S (no a_t, m_t at all)
      r["mass_far_plain_softmax_S"] = far_mass(sq, cq, far)
      res[qname] = r
    out[f"head{h}"] = res
  return out

def main(workdir, name, output_dir):
  run = load_run(workdir)
  scores_mod.scale_invariant = patched_si
  reference.normalized_with_entropy = patched_norm
  cfg = run.config
  with cfg.unlocked():
    cfg.model.kernel = "reference"
  model = run_config.build_model(cfg)
  tokens = held_out_tokens(cfg)
  windows = eval_windows(tokens, kind="non_repeated", length=LENGTH, count=4, train_length=TRAIN)
  inputs = jnp.asarray(windows[:1, :-1])
  with jax.disable_jit():
    logits = model.apply({"params": run.params}, inputs)
  logits = np.asarray(logits)[0]
  tgt = windows[0, 1:]
  acc = (logits.argmax(-1) == tgt)
  result = {"run": name, "step": run.step, "calls": len(captured),
            "acc_q<512": float(acc[:TRAIN].mean()), "acc_q>=512": float(acc[TRAIN:].mean()),
            "layers": {}}
  for i, c in enumerate(captured):
    result["layers"][f"layer_{i}"] = summarize(c)
  json.dump(result, open(f"{output_dir}/{name}.json", "w"), indent=1)
  print(json.dumps(result, indent=1))

if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2], sys.argv[3])
