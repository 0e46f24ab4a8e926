"""One-off diagnostic (2026-11-27): the forget gates a trained FoX run learned.

FoX (Lin et al. 2025; keynorm_jax.models.position_bias.ForgetGate) adds sum over l = j+1..i of
log f_l to the score of key j for query i, with f_t = sigmoid(w . x_t + b) per head, initialised
near 1/2. This loads a trained run, evaluates one held-out 4096-token window (the first of the field
study's non-repeated 8x windows) and records, per layer and head, the distribution of the gates
f_t over the window's tokens and what they make of a key k tokens back: the factor
exp(sum of log f) its attention weight is multiplied by, for k = 1, 4, 16, 64 and 512 (its log10,
mean and median over queries, and the share of queries for which it is above 0.01). It reads the
gates with Flax's capture_intermediates, changing nothing in the library.

  PYTHONPATH=. python results/fox_gates/measure_gates.py RUN_WORKDIR NAME OUTPUT_DIR
"""
import json
import sys

import jax.numpy as jnp
import numpy as np
from flax import traverse_util

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
  layers = {}
  for path, outputs in traverse_util.flatten_dict(state["intermediates"], sep="/").items():
    if not path.endswith("/forget_gate/__call__"):   # the model's own sown diagnostics
      continue
    log_f_TxH = np.asarray(outputs[0], np.float64)[0]
    layers[path.removesuffix("/__call__")] = {f"head_{h}": head_summary(log_f_TxH[:, h])
                                              for h in range(log_f_TxH.shape[1])}
  flat = traverse_util.flatten_dict(run.params, sep="/")
  params = {path.removesuffix("/b"): {"b": np.asarray(b).tolist(),
                                      "w_norm": np.linalg.norm(flat[path[:-1] + "w"],
                                                               axis=0).tolist()}
            for path, b in flat.items() if path.endswith("forget_gate/b")}
  result = {"run": name, "step": run.step, "window": WINDOW, "layers": layers, "params": params}
  with open(f"{output_dir}/{name}.json", "w") as f:
    json.dump(result, f, indent=1)
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  main(*sys.argv[1:4])
