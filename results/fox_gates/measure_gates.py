"""One-off diagnostic (2026-11-27): the forget gates a trained FoX run learned.

FoX (Lin et al. 2025; keynorm_jax.models.position_bias.ForgetGate) adds sum over l = j+1..i of
log f_l to the score of key j for query i, with f_t = sigmoid(w . x_t + b) per head, initialised
near 1/2. This loads a trained run, evaluates one held-out 4096-token window (the first of the field
study's non-repeated 8x windows) and records, per layer and head, the distribution of the gates
f_t over the window's tokens and what they make of a key k tokens back: the factor
exp(sum of log f) its attention weight is multiplied by, for k = 1, 4, 16, 64 and 512 (its log10,
mean and median over queries, and the share of queries for which it is above 0.01). It reads the gates with Flax's capture_intermediates, changing nothing in the library.

  PYTHONPATH=. python results/fox_gates/measure_gates.py RUN_WORKDIR NAME OUTPUT_DIR
"""
import json
import sys

import jax.numpy as jnp
import numpy as np

from keynorm_jax.models.position_bias import ForgetGate
from results.probing import held_out_windows, reference_run

WINDOW, BACK = 4096, (1, 4, 16, 64, 512)


def head_summary(log_f_T):
  """Statistics of one head's log gates over the window's tokens."""
  gates = np.exp(log_f_T)
  cumulative = np.concatenate([[0.0], np.cumsum(log_f_T)])   # c_t, as attention.prepare's
  decay = {}
  for back in BACK:   # sum over l = j+1..i of log f_l = c_{i+1} - c_{j+1}, with j = i - back
    summed = cumulative[back + 1:] - cumulative[1:-back]
    log10 = summed / np.log(10.0)
    decay[f"{back}_back"] = {"mean_log10_factor": float(log10.mean()),
                             "median_log10_factor": float(np.median(log10)),
                             "share_factor_above_0.01": float((log10 > -2).mean())}
  return {"gate_mean": float(gates.mean()),
          "gate_quantiles_10_50_90": [float(q) for q in np.quantile(gates, (0.1, 0.5, 0.9))],
          "mean_log_gate": float(log_f_T.mean()), **decay}


def main(workdir, name, output_dir):
  run, model = reference_run(workdir)
  window = held_out_windows(run.config, WINDOW, count=4)[:1]
  _, state = model.apply({"params": run.params}, jnp.asarray(window[:, :-1]),
                         capture_intermediates=lambda module, _: isinstance(module, ForgetGate))
  found = []
  def collect(tree, path):
    for key, value in tree.items():
      if key == "__call__":
        found.append((path, np.asarray(value[0], np.float64)[0]))    # [T, H]
      elif isinstance(value, dict):
        collect(value, f"{path}/{key}" if path else key)
  collect(jax_dict(state["intermediates"]), "")
  layers = {path: {f"head_{h}": head_summary(log_f[:, h]) for h in range(log_f.shape[1])}
            for path, log_f in found}
  params = {path: {"b": np.asarray(node["b"]).tolist(),
                   "w_norm": np.linalg.norm(np.asarray(node["w"]), axis=0).tolist()}
            for path, node in forget_gate_params(run.params)}
  result = {"run": name, "step": run.step, "window": WINDOW, "layers": layers, "params": params}
  with open(f"{output_dir}/{name}.json", "w") as f:
    json.dump(result, f, indent=1)
  print(json.dumps(result, indent=1))


def jax_dict(tree):
  """Plain nested dicts of a Flax collection (FrozenDict or dict)."""
  return {k: jax_dict(v) if hasattr(v, "items") else v for k, v in tree.items()}


def forget_gate_params(params, path=""):
  """(path, params) of every forget_gate module in the parameter tree."""
  for key, value in params.items():
    here = f"{path}/{key}" if path else key
    if key == "forget_gate":
      yield here, value
    elif hasattr(value, "items"):
      yield from forget_gate_params(value, here)


if __name__ == "__main__":
  main(*sys.argv[1:4])
