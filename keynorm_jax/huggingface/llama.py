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

config.json becomes the ModelConfig (hf_config.py: read through transformers' own config classes,
both layouts). Weights are read with `safetensors` (one file, or the shards listed by
model.safetensors.index.json): every file's header is read first and each tensor's name, shape and
dtype compared with what config.json implies, so a folder whose weights do not fit its config is
refused naming the tensor before any tensor data is read; then kept as float32 or bfloat16
parameters (`dtype`).
"""

import json
import pathlib

import jax.numpy as jnp
import numpy as np
from safetensors import SafetensorError, safe_open

from keynorm_jax.huggingface.hf_config import read_config, refuse
from keynorm_jax.models.config import ModelConfig

_INDEX = "model.safetensors.index.json"
FLOAT_DTYPES = ("F32", "F16", "BF16")           # safetensors' names of the dtypes that load
_IGNORED_SUFFIX = "rotary_emb.inv_freq"         # a buffer older checkpoints saved; recomputed


def expected_shapes(cfg: ModelConfig) -> dict:
  """{tensor name: shape} that a folder of this config holds, in the Hugging Face layout."""
  d, f, v = cfg.d_model, cfg.resolved_mlp_size, cfg.vocab_size
  q, kv = cfg.heads * cfg.head_size, cfg.kv_heads * cfg.head_size
  out = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
  if not cfg.tie_embeddings:
    out["lm_head.weight"] = (v, d)
  for i in range(cfg.num_layers):
    p = f"model.layers.{i}."
    out |= {p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q, d), p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, q),
            p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f)}
    if cfg.qkv_bias:
      out |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
              p + "self_attn.v_proj.bias": (kv,)}
  return out


def _weight_files(folder: pathlib.Path) -> list:
  index = folder / _INDEX
  if index.is_file():
    try:
      names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (OSError, KeyError, TypeError, AttributeError, UnicodeDecodeError,
            json.JSONDecodeError) as e:
      refuse(folder, f"its {_INDEX} cannot be read ({type(e).__name__}: {e})")
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
      refuse(folder, f"the shard(s) {', '.join(missing)} listed in {_INDEX} are missing")
    return [folder / name for name in names]
  single = folder / "model.safetensors"
  if not single.is_file():
    refuse(folder, "it has neither model.safetensors nor model.safetensors.index.json")
  return [single]


def _headers(folder: pathlib.Path) -> dict:
  """{tensor name: (file, shape, safetensors dtype)} from every weight file's header (no data)."""
  found = {}
  for path in _weight_files(folder):
    try:
      with safe_open(path, framework="numpy") as f:
        for name in f.keys():
          part = f.get_slice(name)
          found[name] = (path, tuple(part.get_shape()), part.get_dtype())
    except (SafetensorError, OSError) as e:
      refuse(folder, f"its weight file {path.name} cannot be read ({e}); it is truncated or "
                     "not a safetensors file")
  return found


def check_weights(folder, cfg: ModelConfig, found: dict) -> None:
  """Refuses weights that do not fit config.json: a missing or unexpected tensor, a shape other
  than the config's, or a dtype that is not a float; each named with what was found and expected."""
  expected = expected_shapes(cfg)
  missing = [name for name in expected if name not in found]
  if missing:
    refuse(folder, f"its weights have no {missing[0]}"
                   + (f" (and {len(missing) - 1} more tensors)" if len(missing) > 1 else ""))
  unused = sorted(name for name in found
                  if name not in expected and not name.endswith(_IGNORED_SUFFIX))
  if unused:
    refuse(folder, f"its weights hold {len(unused)} tensor(s) the Transformer has no place for "
                   f"(e.g. {unused[0]})")
  for name, shape in expected.items():
    path, got, dtype = found[name]
    if got != shape:
      refuse(folder, f"{path.name}'s {name} has shape {list(got)}, and config.json implies "
                     f"{list(shape)}")
    if dtype not in FLOAT_DTYPES:
      refuse(folder, f"{path.name}'s {name} is stored as {dtype}, not a float type "
                     f"({', '.join(FLOAT_DTYPES)}); quantized weights do not load")


def check_headers(folder, cfg: ModelConfig) -> None:
  """check_weights on the headers of the folder's weight files (no tensor data is read)."""
  check_weights(folder, cfg, _headers(pathlib.Path(folder)))


def _read_weights(folder: pathlib.Path, cfg: ModelConfig, dtype: str) -> dict:
  """{name: numpy array in `dtype`} of the expected tensors, checked first (check_weights)."""
  found = _headers(folder)
  check_weights(folder, cfg, found)
  tensors = {}
  for path in sorted({path for path, _, _ in found.values()}):
    try:
      with safe_open(path, framework="flax") as f:
        for name in f.keys():
          if not name.endswith(_IGNORED_SUFFIX):
            tensors[name] = np.asarray(f.get_tensor(name)).astype(jnp.dtype(dtype))
    except (SafetensorError, OSError) as e:
      refuse(folder, f"its weight file {path.name} cannot be read ({e})")
  return tensors


def load_llama(folder, dtype: str = "float32") -> tuple[ModelConfig, dict]:
  """(ModelConfig, parameters of TransformerLM) of a local Llama-family folder, parameters and
  computation in `dtype` (float32 or bfloat16); ConfigError names what cannot be loaded."""
  folder = pathlib.Path(folder)
  cfg, _ = read_config(folder, dtype)
  return cfg, read_params(folder, cfg, dtype)


def read_params(folder, cfg: ModelConfig, dtype: str = "float32") -> dict:
  """The parameters of TransformerLM of a folder whose config.json gave `cfg` (read_config), in
  `dtype`; ConfigError names a weight that cannot be loaded."""
  folder = pathlib.Path(folder)
  weights = _read_weights(folder, cfg, dtype)

  def take(name, transpose=False):
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
  return params
