"""The script that collected toy_gau_ablation.json (kept as it ran, for a rerun of the ablation).

Each toy run was trained with toy_gau_ablation_sweep.sh NAME CONFIG 2000 [overrides] into
/tmp/exp/toy/NAME (its d_model 64 was overridden to 128 in every run: the JSON's "command"); the GAU
variants marked in HACK ran from toy_gau_ablation.patch with GAUHACK set to those words. This reads
each run's config.json and metrics.jsonl.
Usage: python toy_gau_ablation_collect.py > toy_gau_ablation.json
"""
import json, os, sys
T = "/tmp/exp/toy"
HACK = {"G128": "", "G128spq": "", "G128_linv": "linv", "G128_nogate": "nogate", "G128_linz": "linz",
        "G128_linv_nogate_linz": "linv nogate linz", "G128_mlp": "mlp",
        "G128_spq_mlp": "mlp linz linv", "G128_spq_mlpswish": "mlp", "G128_spq_lin": "linz linv",
        "G_spq_mlp_linz": "mlp linz", "G_spq_mlp_linv": "mlp linv", "G_mlp_lin": "mlp linz linv",
        "G_sep_mlp_linz": "mlp linz", "G_preh2_mlp_linz": "mlp linz", "G_spq_mlp_s1": "mlp",
        "G_sep_pre_mlp_linz": "mlp linz", "G_sep_h2_mlp_linz": "mlp linz", "G_sep_h2_mlp": "mlp",
        "G_sep_h2_linz": "linz", "G_sep_h2_mlp_s1": "mlp", "G_sep_h2_mlp_s2": "mlp",
        "T128": None, "T128_s1": None, "T128_s2": None}
HACK.update({n: "" for n in sys.argv[1:]})
runs = []
for name, hack in HACK.items():
  d = f"{T}/{name}"
  if not os.path.exists(f"{d}/metrics.jsonl"):
    continue
  cfg = json.load(open(f"{d}/config.json"))
  m = cfg["model"]
  ms = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
  train = {r["step"]: round(r["accuracy"], 4) for r in ms if "accuracy" in r}
  evals = [r["eval_accuracy"] for r in ms if "eval_accuracy" in r]
  last = [train[s] for s in sorted(train)[-8:]]
  arch = "transformer" if cfg["name"].startswith("transformer") else "gau"
  shape = ({k: m[k] for k in ("gau_qk", "gau_heads", "norm_position")} if arch == "gau"
           else {"num_heads": m["num_heads"]})
  runs.append(dict(run=name, architecture=arch, seed=cfg["seed"], **shape,
                   gau_patch=None if arch != "gau" else (hack.split() if hack else []),
                   train_accuracy_steps_1650_2000_mean=round(sum(last) / len(last), 3),
                   eval_accuracy_natural_text_step_2000=round(evals[-1], 3) if evals else None,
                   train_accuracy_by_step=train))
out = dict(
  what="toy copy probes: which parts of the GAU keep it from learning to copy? Every training window "
       "a synthetic copy (a prefix of 16 to 64 tokens tiled over 128), 2 layers, d_model 128 "
       "(GAU e 256, s 64; Transformer 2 heads of 64), 2000 steps, batch 8, lr 2e-3, KNA RoPE.",
  command="python train.py --config=kna_rope (or transformer_kna_rope) --config.data.copy_fraction=1.0 "
          "--config.num_train_steps=2000 --config.train_length=128 --config.model.num_layers=2 "
          "--config.model.d_model=128 [--config.model.expansion=256 --config.model.qk_size=64 "
          "--config.model.gau_qk=... --config.model.gau_heads=... --config.model.norm_position=...] "
          "[--config.model.num_heads=2] [--config.seed=k] --config.log_every_steps=50; "
          "gau_patch: the run used toy_gau_ablation.patch with GAUHACK set to these words",
  gau_patch_words={"linv": "v = x W_v, no swish", "linz": "z (z_q, z_k) = x W_z, no swish",
                   "nogate": "u = 1 (no gate)",
                   "mlp": "a swish MLP (hidden 2 d) added to the layer's output, read from "
                          "Norm(x + o): not model.gau_mlp's SwiGLU step"},
  device="cpu (2 cores), beside a study run", code="ce91272 (G128_s1, G128_s2: 3b45196, the same GAU computation; + the patch where gau_patch is set)",
  summary="train_accuracy_steps_1650_2000_mean: mean of the last 8 logged per-batch training "
          "accuracies (every 50 steps); a model that copies perfectly scores about 0.75-0.8 here "
          "(the first tile cannot be copied)",
  runs=runs)
json.dump(out, open(sys.stdout.fileno(), "w"), indent=1)
