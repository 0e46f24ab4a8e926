"""A Llama-family folder's config.json, read as transformers reads it, as this project's ModelConfig.

transformers' own config classes (`AutoConfig`, offline) parse the file, so both layouts read
alike: transformers 5's `rope_parameters` block ({"rope_type": ..., "factor": ..., "rope_theta":
...}) and the older top-level `rope_theta` and `rope_scaling`, which transformers 5 folds into the
same block. Before that the raw file is checked, so that a broken file is refused in one line
naming it: a JSON object, a known family, every size field present as a positive integer (where
transformers would fill a missing one with its own default). A key that could change the model and
that this importer does not read is refused by name, never ignored; metadata keys pass.

What the Transformer cannot represent is refused with the reason (ConfigError): another
model_type, a sliding window, mixture-of-experts, an output or MLP bias, an activation other than
SiLU, partial rotary dimensions, RoPE per layer type, a RoPE kind other than default, linear,
dynamic, yarn and llama3, or a knob of one that rope.py does not compute (YaRN's mscale,
attention_factor, truncate false).
"""

import json
import os
import pathlib

from keynorm_jax.errors import ConfigError
from keynorm_jax.models.config import ModelConfig

FAMILIES = ("llama", "mistral", "qwen2")  # model_type values that load (Mistral and Qwen2 without a
                                         # sliding window)
QKV_BIAS_FAMILIES = ("qwen2",)           # whose q, k and v projections have biases
# Hugging Face rope_type -> model.rope_scaling.type (keynorm_jax/rope.py has the formulas).
ROPE_TYPES = {"default": "none", "linear": "linear", "dynamic": "dynamic_ntk", "yarn": "yarn",
              "llama3": "llama3"}
# The keys of rope_parameters each rope_type reads (besides rope_type, its legacy alias type and
# rope_theta); any other key is refused by name.
ROPE_KNOBS = {"default": (), "linear": ("factor",),
              "dynamic": ("factor", "original_max_position_embeddings"),
              "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                       "truncate"),
              "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                         "original_max_position_embeddings")}
SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads")                  # required: transformers would default them
OPTIONAL_SIZES = ("num_key_value_heads", "head_dim", "max_position_embeddings")
# Keys read here, or checked to hold a value the Transformer computes (a default or null).
READ = set(SIZES) | set(OPTIONAL_SIZES) | {
    "model_type", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
    "tie_word_embeddings", "eos_token_id", "bos_token_id", "pad_token_id", "hidden_act",
    "attention_bias", "mlp_bias", "sliding_window", "use_sliding_window", "max_window_layers",
    "layer_types", "num_local_experts", "num_experts", "partial_rotary_factor"}
# Keys that do not change the forward pass at inference (metadata, training-only settings).
METADATA = {"architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype",
            "initializer_range", "use_cache", "attention_dropout", "pretraining_tp",
            "chunk_size_feed_forward", "id2label", "label2id", "is_encoder_decoder",
            "output_attentions", "output_hidden_states", "problem_type", "return_dict",
            "tokenizer_class", "bos_token", "eos_token", "model_max_length"}


def refuse(folder, reason: str):
  raise ConfigError(f"{folder} cannot be loaded as this project's Transformer: "
                    f"{reason.rstrip('.')}.")


def read_json(folder: pathlib.Path, name: str = "config.json") -> dict:
  """The JSON object in folder/name; ConfigError naming the file when it is missing, unreadable
  or not an object."""
  path = folder / name
  if not path.is_file():
    refuse(folder, f"it has no {name} (pass the folder of a Hugging Face model)")
  try:
    value = json.loads(path.read_text())
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    refuse(folder, f"its {name} cannot be read ({e})")
  if not isinstance(value, dict):
    refuse(folder, f"its {name} holds a JSON {type(value).__name__}, not an object of settings")
  return value


def _positive_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_raw(folder, raw: dict) -> None:
  """Refuses a config.json that transformers would misread or fill in, or that sets what the
  Transformer cannot compute, naming the key."""
  kind = raw.get("model_type")
  if kind not in FAMILIES:
    refuse(folder, f"config.json's model_type {kind!r} is not one of the families that load "
                   f"({', '.join(FAMILIES)})")
  for name in SIZES + OPTIONAL_SIZES:
    if (name in SIZES or raw.get(name) is not None) and not _positive_int(raw.get(name)):
      found = "no value" if name not in raw else f"{raw[name]!r} ({type(raw[name]).__name__})"
      refuse(folder, f"config.json's {name} must be a positive integer, found {found}")
  _check_heads(folder, raw)
  eps = raw.get("rms_norm_eps", 1e-6)
  if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
    refuse(folder, f"config.json's rms_norm_eps must be a positive number, found {eps!r}")
  if raw.get("sliding_window") is not None and raw.get("use_sliding_window", True):
    refuse(folder, f"it attends in a sliding window of {raw['sliding_window']} tokens (a "
                   "Mistral or Qwen2 with sliding_window set)")
  if any(t != "full_attention" for t in raw.get("layer_types") or ()):
    refuse(folder, "its layer_types mix attention kinds (sliding-window layers)")
  if raw.get("num_local_experts") or raw.get("num_experts"):
    refuse(folder, "it is a mixture of experts")
  for bias in ("attention_bias", "mlp_bias"):
    if raw.get(bias):
      refuse(folder, f"{bias} is set (the Transformer's only biases are Qwen2's on q, k and v)")
  if raw.get("hidden_act", "silu") != "silu":
    refuse(folder, f"its activation is {raw['hidden_act']!r}, not SwiGLU's silu")
  block = raw.get("rope_parameters") or raw.get("rope_scaling")
  kind = (block.get("rope_type") or block.get("type")) if isinstance(block, dict) else None
  if kind is not None and not isinstance(kind, dict) and kind not in ROPE_TYPES:
    refuse(folder, f"its RoPE kind {kind!r} is not one of {', '.join(ROPE_TYPES)}")
  unknown = sorted(set(raw) - READ - METADATA)
  if unknown:
    refuse(folder, f"config.json sets {', '.join(unknown)}, which this importer does not read "
                   "(remove the key if it does not change the model)")


def _check_heads(folder, raw: dict) -> None:
  """Refuses heads that do not divide what they share, naming the sizes and the fix (transformers
  says it in a nested error whose first line alone lost the reason)."""
  heads, hidden = raw["num_attention_heads"], raw["hidden_size"]
  if raw.get("head_dim") is None and hidden % heads:
    refuse(folder, f"config.json's hidden_size {hidden} is not a multiple of num_attention_heads "
                   f"{heads} (without head_dim each head has hidden_size / num_attention_heads "
                   f"dimensions); set head_dim, or a num_attention_heads that divides hidden_size")
  kv_heads = raw.get("num_key_value_heads") or heads
  if heads % kv_heads:
    refuse(folder, f"config.json's num_attention_heads {heads} is not a multiple of "
                   f"num_key_value_heads {kv_heads} (each key/value head serves an equal group of "
                   f"query heads); set num_key_value_heads to a divisor of num_attention_heads")


def _error_text(error: Exception) -> str:
  """An error's message on one line: every line of it (transformers nests the reason under a
  first line that names only its validator)."""
  return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def _parsed(folder: pathlib.Path):
  """transformers' config object of the folder (offline; its own parsing and defaults)."""
  os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # "PyTorch was not found"
  from transformers import AutoConfig  # pylint: disable=g-import-not-at-top
  try:
    return AutoConfig.from_pretrained(folder, local_files_only=True)
  except Exception as e:  # pylint: disable=broad-except
    # transformers' own parser of a file from outside: any of its errors means a bad file.
    refuse(folder, f"transformers cannot read its config.json ({type(e).__name__}: "
                   f"{_error_text(e)}); fix the setting it names")


def rope_scaling(folder, hf) -> tuple[float, dict]:
  """(rope_theta, model.rope_scaling) of transformers' standardized rope_parameters ({} for no
  scaling); refuses a layout, kind or knob that rope.py does not compute, naming it."""
  params = dict(hf.rope_parameters or {})
  if any(isinstance(value, dict) for value in params.values()):
    refuse(folder, f"its rope_parameters differ per layer type ({', '.join(sorted(params))})")
  kind = params.pop("rope_type", None) or params.get("type") or "default"
  params.pop("type", None)
  if kind not in ROPE_TYPES:
    refuse(folder, f"its RoPE kind {kind!r} is not one of {', '.join(ROPE_TYPES)}")
  theta = params.pop("rope_theta", None)
  if theta is None:
    theta = 10000.0
  if params.pop("partial_rotary_factor", 1.0) != 1.0:
    refuse(folder, "it rotates only part of each head (partial_rotary_factor)")
  extra = sorted(k for k, v in params.items() if k not in ROPE_KNOBS[kind] and v is not None)
  if extra:
    refuse(folder, f"its {kind} RoPE sets {', '.join(extra)}, which this importer does not "
                   "carry over")
  if params.get("truncate", True) is not True:
    refuse(folder, f"its {kind} RoPE sets truncate false, which rope.py does not compute")
  if kind == "default":
    return float(theta), {}
  length = int(hf.max_position_embeddings)
  original = int(params.get("original_max_position_embeddings") or length)
  factor = params.get("factor")
  if factor is None and kind == "yarn":  # transformers' rule for a yarn block without a factor
    factor = length / original
  if factor is None or (kind == "llama3" and None in (params.get("low_freq_factor"),
                                                       params.get("high_freq_factor"))):
    refuse(folder, f"its {kind} RoPE has no factor" if factor is None else
                   f"its llama3 RoPE needs low_freq_factor and high_freq_factor")
  out = {"type": ROPE_TYPES[kind], "factor": float(factor)}
  if kind == "yarn":
    out.update(beta_fast=float(params.get("beta_fast") or 32.0),
               beta_slow=float(params.get("beta_slow") or 1.0), original_length=original)
  if kind == "llama3":
    out.update(low_freq_factor=float(params["low_freq_factor"]),
               high_freq_factor=float(params["high_freq_factor"]), original_length=original)
  # dynamic: transformers scales from max_position_embeddings (the training length), whatever
  # original_max_position_embeddings says.
  return float(theta), out


def one_x(folder, raw: dict, max_positions: int,
          train_length: int | None = None) -> tuple[int, str]:
  """(the model's 1x, the length an evaluation's multiples count from, and where it comes from):
  train_length where given (eval.py --hf_train_length), else its original pretraining length,
  original_max_position_embeddings of its rope parameters (Llama 3.1: 8192, extended to 131072),
  else max_position_embeddings (max_positions: as transformers reads it). ConfigError for a given
  length below 1 or an original_max_position_embeddings that is not a positive integer."""
  if train_length is not None:
    if not _positive_int(train_length):
      raise ConfigError(f"--hf_train_length must be a positive number of tokens (the model's 1x), "
                        f"got {train_length}; or leave it unset for the folder's own.")
    return train_length, "--hf_train_length"
  for key in ("rope_parameters", "rope_scaling"):
    block = raw.get(key)
    if isinstance(block, dict) and block.get("original_max_position_embeddings") is not None:
      original = block["original_max_position_embeddings"]
      if not _positive_int(original):
        refuse(folder, f"config.json's {key}.original_max_position_embeddings must be a positive "
                       f"integer, found {original!r}")
      return original, f"original_max_position_embeddings of config.json's {key}"
  given = "" if "max_position_embeddings" in raw else " (transformers' default: it gives none)"
  return max_positions, (f"max_position_embeddings of config.json{given}; its rope parameters "
                         f"give no original_max_position_embeddings")


def eos_token_id(folder, raw: dict, vocab_size: int) -> int:
  """config.json's eos_token_id (the first, where it lists several): the document separator."""
  eos = raw.get("eos_token_id")
  if isinstance(eos, list):
    eos = eos[0] if eos else None
  if not isinstance(eos, int) or isinstance(eos, bool):
    raise ConfigError(f"{folder}/config.json has no eos_token_id to end each document with.")
  if not 0 <= eos < vocab_size:
    raise ConfigError(f"{folder}/config.json's eos_token_id {eos} is outside the model's "
                      f"vocabulary (vocab_size {vocab_size}).")
  return eos


def read_config(folder, dtype: str = "float32") -> tuple[ModelConfig, dict]:
  """(ModelConfig with parameters and computation in `dtype`, config.json's raw object) of a
  Llama-family folder; ConfigError names what cannot be loaded."""
  folder = pathlib.Path(folder)
  raw = read_json(folder)
  _check_raw(folder, raw)
  hf = _parsed(folder)
  theta, scaling = rope_scaling(folder, hf)
  heads = hf.num_attention_heads
  try:
    cfg = ModelConfig(
        architecture="transformer", vocab_size=hf.vocab_size, num_layers=hf.num_hidden_layers,
        d_model=hf.hidden_size, num_heads=heads,
        head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // heads,
        num_kv_heads=hf.num_key_value_heads or heads, mlp="swiglu",
        mlp_size=hf.intermediate_size, norm="rmsnorm", norm_eps=float(hf.rms_norm_eps),
        tie_embeddings=bool(hf.tie_word_embeddings), attention="baseline", position="rope",
        rope_theta=theta, rope_scaling=scaling, qkv_bias=raw["model_type"] in QKV_BIAS_FAMILIES,
        train_length=int(hf.max_position_embeddings), param_dtype=dtype, compute_dtype=dtype)
  except ConfigError as e:  # sizes the Transformer cannot take, e.g. heads not a multiple
    refuse(folder, f"its config.json gives {e}")
  return cfg, raw


def stored_dtype(folder) -> str:
  """The dtype config.json says the weights are stored in (torch_dtype, or dtype in newer files)."""
  raw = read_json(pathlib.Path(folder))
  return str(raw.get("dtype") or raw.get("torch_dtype") or "float32")
