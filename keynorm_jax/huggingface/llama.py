"""A local Hugging Face Llama-family folder -> (ModelConfig, TransformerLM parameters).

The Llama architecture is this project's Transformer (pre-norm RMSNorm, SwiGLU, rotate-half RoPE,
grouped-query attention, no biases) with Baseline attention and the `rope` position method, so a
folder's weights load unchanged (Qwen2 adds biases to q, k and v: model.qkv_bias):

  model.embed_tokens.weight [V, d]                 embedder/embed/embedding
  lm_head.weight [V, d] (absent when tied)         embedder/head/kernel (transposed)
  model.norm.weight                                final_norm/scale
  model.layers.N.input_layernorm.weight            layer_N/attention_norm/scale
  model.layers.N.post_attention_layernorm.weight   layer_N/mlp_norm/scale
  model.layers.N.self_attn.{q,k,v,o}_proj.weight   layer_N/{query,key,value,out}/kernel (transposed)
  model.layers.N.self_attn.{q,k,v}_proj.bias       layer_N/{query,key,value}/bias (Qwen2)
  model.layers.N.mlp.{gate,up,down}_proj.weight    layer_N/mlp/{gate,up,down}/kernel (transposed)

config.json's hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
num_key_value_heads, head_dim, vocab_size, rms_norm_eps, rope_theta and tie_word_embeddings become
the ModelConfig's fields; max_position_embeddings its training length (what the inference-time
RoPE scalings scale from); rope_scaling (linear, dynamic, yarn, llama3: Llama 3.1 / 3.2) the
model's own scaling, model.rope_scaling, applied at every length. Weights are read with
`safetensors` (one file, or shards listed by model.safetensors.index.json) and kept as float32 or
bfloat16 parameters (`dtype`). What the Transformer cannot represent is refused with the reason
(ConfigError): another model_type, a sliding-window Mistral, mixture-of-experts, an output or MLP
bias, a RoPE scaling of another kind (longrope, mscale), an activation other than SiLU, a missing
file.
"""

import json
import pathlib

import jax.numpy as jnp
import numpy as np
from safetensors import safe_open

from keynorm_jax.errors import ConfigError
from keynorm_jax.models.config import ModelConfig

FAMILIES = ("llama", "mistral", "qwen2")  # model_type values that load (Mistral and Qwen2 without a
                                         # sliding window)
QKV_BIAS_FAMILIES = ("qwen2",)           # whose q, k and v projections have biases
# Hugging Face rope_type -> model.rope_scaling.type (keynorm_jax/rope.py has the formulas).
ROPE_TYPES = {"default": "none", "linear": "linear", "dynamic": "dynamic_ntk", "yarn": "yarn",
              "llama3": "llama3"}
_INDEX = "model.safetensors.index.json"


def _refuse(folder, reason: str):
  raise ConfigError(f"{folder} cannot be loaded as this project's Transformer: {reason}.")


def _read_config(folder: pathlib.Path) -> dict:
  path = folder / "config.json"
  if not path.is_file():
    _refuse(folder, "it has no config.json (pass the folder of a Hugging Face model)")
  try:
    return json.loads(path.read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    _refuse(folder, f"its config.json cannot be read ({e})")


def _check(folder, hf: dict) -> None:
  """Refuses what the Transformer cannot represent, naming it."""
  kind = hf.get("model_type")
  if kind not in FAMILIES:
    _refuse(folder, f"model_type {kind!r} is not one of the families that load "
                    f"({', '.join(FAMILIES)})")
  if hf.get("sliding_window") is not None and hf.get("use_sliding_window", True):
    _refuse(folder, f"it attends in a sliding window of {hf['sliding_window']} tokens during "
                    "training (a Mistral with sliding_window set)")
  if hf.get("num_local_experts") or hf.get("num_experts"):
    _refuse(folder, "it is a mixture of experts")
  for bias in ("attention_bias", "mlp_bias"):
    if hf.get(bias):
      _refuse(folder, f"{bias} is set (the Transformer's only biases are Qwen2's on q, k and v)")
  if hf.get("hidden_act", "silu") != "silu":
    _refuse(folder, f"its activation is {hf['hidden_act']!r}, not SwiGLU's silu")


def rope_scaling(folder, hf: dict) -> dict:
  """model.rope_scaling of a config.json's rope_scaling ({} for none); refuses a kind or a knob
  that rope.py does not compute."""
  scaling = hf.get("rope_scaling")
  if not scaling:
    return {}
  kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
  if kind not in ROPE_TYPES:
    _refuse(folder, f"its RoPE scaling {kind!r} is not one of {', '.join(ROPE_TYPES)}")
  if kind == "default":
    return {}
  needed = ("factor",) + (("low_freq_factor", "high_freq_factor",
                           "original_max_position_embeddings") if kind == "llama3" else ())
  missing = [k for k in needed if scaling.get(k) is None]
  if missing:
    _refuse(folder, f"its {kind} rope_scaling has no {', '.join(missing)}")
  extra = sorted(k for k in ("attention_factor", "mscale", "mscale_all_dim", "short_factor",
                             "long_factor") if scaling.get(k) is not None)
  if extra or scaling.get("truncate", True) is not True:
    _refuse(folder, f"its {kind} RoPE scaling sets {', '.join(extra) or 'truncate'}, which is not "
                    "carried over")
  out = {"type": ROPE_TYPES[kind], "factor": float(scaling["factor"])}
  if kind == "yarn":
    out.update(beta_fast=float(scaling.get("beta_fast") or 32.0),
               beta_slow=float(scaling.get("beta_slow") or 1.0),
               original_length=int(scaling.get("original_max_position_embeddings") or 0))
  if kind == "llama3":
    out.update(low_freq_factor=float(scaling["low_freq_factor"]),
               high_freq_factor=float(scaling["high_freq_factor"]),
               original_length=int(scaling["original_max_position_embeddings"]))
  return out


def model_config(folder, hf: dict, dtype: str = "float32") -> ModelConfig:
  """The ModelConfig of a Llama-family config.json (already checked), with parameters and
  computation in `dtype`."""
  heads = hf["num_attention_heads"]
  return ModelConfig(
      architecture="transformer", vocab_size=hf["vocab_size"], num_layers=hf["num_hidden_layers"],
      d_model=hf["hidden_size"], num_heads=heads,
      head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
      num_kv_heads=hf.get("num_key_value_heads") or heads, mlp="swiglu",
      mlp_size=hf["intermediate_size"], norm="rmsnorm", norm_eps=float(hf["rms_norm_eps"]),
      tie_embeddings=bool(hf.get("tie_word_embeddings", False)), attention="baseline",
      position="rope", rope_theta=float(hf.get("rope_theta", 10000.0)),
      rope_scaling=rope_scaling(folder, hf), qkv_bias=hf["model_type"] in QKV_BIAS_FAMILIES,
      train_length=int(hf.get("max_position_embeddings", 2048)), param_dtype=dtype,
      compute_dtype=dtype)


def _weight_files(folder: pathlib.Path) -> list:
  index = folder / _INDEX
  if index.is_file():
    try:
      names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (OSError, KeyError, json.JSONDecodeError) as e:
      _refuse(folder, f"its {_INDEX} cannot be read ({e})")
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
      _refuse(folder, f"the shard(s) {', '.join(missing)} listed in {_INDEX} are missing")
    return [folder / name for name in names]
  single = folder / "model.safetensors"
  if not single.is_file():
    _refuse(folder, "it has neither model.safetensors nor model.safetensors.index.json")
  return [single]


def _read_weights(folder: pathlib.Path, dtype: str) -> dict:
  """{name: numpy array in `dtype`} of every tensor in the folder's safetensors files."""
  tensors = {}
  for path in _weight_files(folder):
    with safe_open(path, framework="flax") as f:
      for name in f.keys():
        tensors[name] = np.asarray(f.get_tensor(name)).astype(jnp.dtype(dtype))
  return tensors


def stored_dtype(folder) -> str:
  """The dtype config.json says the weights are stored in (torch_dtype, or dtype in newer files)."""
  hf = _read_config(pathlib.Path(folder))
  return str(hf.get("torch_dtype") or hf.get("dtype") or "float32")


def load_llama(folder, dtype: str = "float32") -> tuple[ModelConfig, dict]:
  """(ModelConfig, parameters of TransformerLM) of a local Llama-family folder, parameters and
  computation in `dtype` (float32 or bfloat16); ConfigError names what cannot be loaded."""
  folder = pathlib.Path(folder)
  hf = _read_config(folder)
  _check(folder, hf)
  cfg = model_config(folder, hf, dtype)
  weights = _read_weights(folder, dtype)

  def take(name, transpose=False):
    if name not in weights:
      _refuse(folder, f"its weights have no {name}")
    array = weights.pop(name)
    return np.ascontiguousarray(array.T) if transpose else array

  params = {"embedder": {"embed": {"embedding": take("model.embed_tokens.weight")}},
            "final_norm": {"scale": take("model.norm.weight")}}
  if not cfg.tie_embeddings:
    params["embedder"]["head"] = {"kernel": take("lm_head.weight", transpose=True)}
  for i in range(cfg.num_layers):
    p = f"model.layers.{i}."
    linear = lambda name: {"kernel": take(p + name + ".weight", transpose=True)}
    projection = lambda name: {**linear(name), **(
        {"bias": take(p + name + ".bias")} if cfg.qkv_bias else {})}
    params[f"layer_{i}"] = {
        "attention_norm": {"scale": take(p + "input_layernorm.weight")},
        "mlp_norm": {"scale": take(p + "post_attention_layernorm.weight")},
        "query": projection("self_attn.q_proj"), "key": projection("self_attn.k_proj"),
        "value": projection("self_attn.v_proj"), "out": linear("self_attn.o_proj"),
        "mlp": {"gate": linear("mlp.gate_proj"), "up": linear("mlp.up_proj"),
                "down": linear("mlp.down_proj")}}
  unused = sorted(name for name in weights if not name.endswith("rotary_emb.inv_freq"))
  if unused:
    _refuse(folder, f"its weights hold {len(unused)} tensor(s) the Transformer has no place for "
                    f"(e.g. {unused[0]})")
  return cfg, params
