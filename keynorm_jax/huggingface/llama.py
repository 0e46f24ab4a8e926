"""A local Hugging Face Llama-family folder -> (ModelConfig, TransformerLM parameters).

The Llama architecture is this project's Transformer (pre-norm RMSNorm, SwiGLU, rotate-half RoPE,
grouped-query attention, no biases) with Baseline attention and the `rope` position method, so a
folder's weights load unchanged:

  model.embed_tokens.weight [V, d]                 embedder/embed/embedding
  lm_head.weight [V, d] (absent when tied)         embedder/head/kernel (transposed)
  model.norm.weight                                final_norm/scale
  model.layers.N.input_layernorm.weight            layer_N/attention_norm/scale
  model.layers.N.post_attention_layernorm.weight   layer_N/mlp_norm/scale
  model.layers.N.self_attn.{q,k,v,o}_proj.weight   layer_N/{query,key,value,out}/kernel (transposed)
  model.layers.N.mlp.{gate,up,down}_proj.weight    layer_N/mlp/{gate,up,down}/kernel (transposed)

config.json's hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
num_key_value_heads, head_dim, vocab_size, rms_norm_eps, rope_theta and tie_word_embeddings become
the ModelConfig's fields; max_position_embeddings its training length (what the inference-time
RoPE scalings scale from). Weights are read with `safetensors` (one file, or shards listed by
model.safetensors.index.json), in their own dtype, and kept as float32 parameters. What the
Transformer cannot represent is refused with the reason (ConfigError): another model_type, a
sliding-window Mistral, mixture-of-experts, q/k/v or MLP biases (Qwen2), a trained RoPE scaling,
an activation other than SiLU, a missing file.
"""

import json
import pathlib

import numpy as np
from safetensors import safe_open

from keynorm_jax.errors import ConfigError
from keynorm_jax.models.config import ModelConfig

FAMILIES = ("llama", "mistral")   # model_type values that load (Mistral without a sliding window)
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
      _refuse(folder, f"{bias} is set (the Transformer has no biases)")
  scaling = hf.get("rope_scaling")
  if scaling:
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
    _refuse(folder, f"it was trained with a RoPE scaling ({kind}), which is not carried over yet")
  if hf.get("hidden_act", "silu") != "silu":
    _refuse(folder, f"its activation is {hf['hidden_act']!r}, not SwiGLU's silu")


def model_config(hf: dict) -> ModelConfig:
  """The ModelConfig of a Llama-family config.json (already checked)."""
  heads = hf["num_attention_heads"]
  return ModelConfig(
      architecture="transformer", vocab_size=hf["vocab_size"], num_layers=hf["num_hidden_layers"],
      d_model=hf["hidden_size"], num_heads=heads,
      head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
      num_kv_heads=hf.get("num_key_value_heads") or heads, mlp="swiglu",
      mlp_size=hf["intermediate_size"], norm="rmsnorm", norm_eps=float(hf["rms_norm_eps"]),
      tie_embeddings=bool(hf.get("tie_word_embeddings", False)), attention="baseline",
      position="rope", rope_theta=float(hf.get("rope_theta", 10000.0)),
      train_length=int(hf.get("max_position_embeddings", 2048)))


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


def _read_weights(folder: pathlib.Path) -> dict:
  """{name: float32 numpy array} of every tensor in the folder's safetensors files."""
  tensors = {}
  for path in _weight_files(folder):
    with safe_open(path, framework="flax") as f:
      for name in f.keys():
        tensors[name] = np.asarray(f.get_tensor(name), np.float32)
  return tensors


def load_llama(folder) -> tuple[ModelConfig, dict]:
  """(ModelConfig, parameters of TransformerLM) of a local Llama-family folder; ConfigError names
  what cannot be loaded."""
  folder = pathlib.Path(folder)
  hf = _read_config(folder)
  _check(folder, hf)
  cfg = model_config(hf)
  weights = _read_weights(folder)

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
    params[f"layer_{i}"] = {
        "attention_norm": {"scale": take(p + "input_layernorm.weight")},
        "mlp_norm": {"scale": take(p + "post_attention_layernorm.weight")},
        "query": linear("self_attn.q_proj"), "key": linear("self_attn.k_proj"),
        "value": linear("self_attn.v_proj"), "out": linear("self_attn.o_proj"),
        "mlp": {"gate": linear("mlp.gate_proj"), "up": linear("mlp.up_proj"),
                "down": linear("mlp.down_proj")}}
  unused = sorted(name for name in weights if not name.endswith("rotary_emb.inv_freq"))
  if unused:
    _refuse(folder, f"its weights hold {len(unused)} tensor(s) the Transformer has no place for "
                    f"(e.g. {unused[0]})")
  return cfg, params
