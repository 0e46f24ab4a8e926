"""One of our Transformer runs as a Llama-format Hugging Face folder, where it is expressible.

The inverse of llama.py's mapping: config.json (model_type llama, this run's sizes, rms_norm_eps,
rope_theta, max_position_embeddings = its training length, grouped-query heads, tied or untied
head, its own RoPE scaling as rope_scaling), model.safetensors in the PyTorch layout (Linear
weights [out, in], float32), the byte tokenizer as tokenizer.json (ids = UTF-8 bytes, <sep> = 256)
with tokenizer_config.json, and generation_config.json. <sep> ends each document of the training
stream and so starts the next: it is both the eos and the bos token. config.json is written in the
older layout (top-level rope_theta and rope_scaling), which transformers 4 reads and transformers 5
reads the same way (its legacy reading; hf_config.py reads both); tokenizer_config.json names
PreTrainedTokenizerFast, which both load, so `AutoTokenizer` and `generate()` need no arguments.
Only a run whose
model Llama computes exports: a Transformer with Baseline attention, RoPE without options, RMSNorm,
SwiGLU, no QK-norm, log n, SSMax or q/k/v biases; any other is refused with the reason.
"""

import json
import pathlib

import numpy as np
from safetensors.numpy import save_file

from keynorm_jax import positions
from keynorm_jax.data.tokenizer import SEPARATOR_ID, VOCAB_SIZE
from keynorm_jax.errors import ConfigError
from keynorm_jax.huggingface.byte_tokenizer import SEPARATOR, byte_tokenizer
from keynorm_jax.huggingface.hf_config import ROPE_TYPES
from keynorm_jax.models.config import ModelConfig


def refusal(cfg: ModelConfig):
  """Why Llama cannot compute this model (None: it can)."""
  checks = [
      (cfg.architecture == "transformer", f"it is a {cfg.architecture.upper()}, not a Transformer"),
      (cfg.attention == "baseline", f"its attention is {cfg.attention.upper()} (Llama's is "
                                    "Baseline: q . k / sqrt(d), no normalization)"),
      (cfg.position == "rope" and not cfg.position_options,
       f"its positions are {cfg.position!r}{' with options' if cfg.position_options else ''} "
       "(Llama's are plain RoPE)"),
      (not cfg.position_indices.explicit, f"its position indices are {cfg.indices!r} (Llama's "
                                          "are 0, 1, 2, ...)"),
      (cfg.qk_norm == "none", f"it has QK-norm ({cfg.qk_norm})"),
      (not cfg.logn and not cfg.ssmax, "it scales scores by log n or SSMax"),
      (cfg.norm == "rmsnorm" and cfg.norm_position == "pre", "its norms are not pre-norm RMSNorm"),
      (cfg.mlp == "swiglu", f"its MLP is {cfg.mlp}, not SwiGLU"),
      (not cfg.qkv_bias, "its q, k and v have biases (Llama's have none)"),
      (not cfg.output_gate, "its attention output is gated (Llama's is not)"),
      (_hf_rope_scaling(cfg) is not False, "Hugging Face's rope_scaling has no kind that computes "
                                           "its own RoPE scaling (ntk, or dynamic or yarn from "
                                           "another length than the training length)"),
  ]
  return next((reason for ok, reason in checks if not ok), None)


def _hf_rope_scaling(cfg: ModelConfig):
  """config.json's rope_scaling of the model's own scaling (None without one; False where Hugging
  Face has no rope_type for it); llama.ROPE_TYPES read backwards."""
  scaling = cfg.trained_rope_scaling
  if scaling is None:
    return None
  kind = {ours: hf for hf, ours in ROPE_TYPES.items()}.get(scaling["type"])
  original = positions.scaled_from(scaling["original_length"], cfg.train_length)
  # dynamic scales from max_position_embeddings (the training length); so does yarn without
  # original_max_position_embeddings, which newer transformers versions would read as
  # factor = max_position_embeddings / original_max_position_embeddings.
  if kind is None or (kind in ("dynamic", "yarn") and original != cfg.train_length):
    return False
  out = {"rope_type": kind, "factor": scaling["factor"]}
  if kind == "yarn":
    out.update(beta_fast=scaling["beta_fast"], beta_slow=scaling["beta_slow"])
  if kind == "llama3":
    out.update(low_freq_factor=scaling["low_freq_factor"],
               high_freq_factor=scaling["high_freq_factor"],
               original_max_position_embeddings=original)
  return out


def hf_config(cfg: ModelConfig) -> dict:
  return {
      "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "float32",
      "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model,
      "intermediate_size": cfg.resolved_mlp_size, "num_hidden_layers": cfg.num_layers,
      "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads,
      "head_dim": cfg.head_size, "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta,
      "max_position_embeddings": cfg.train_length, "hidden_act": "silu",
      "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": cfg.tie_embeddings,
      "rope_scaling": _hf_rope_scaling(cfg), "eos_token_id": SEPARATOR_ID,
      "bos_token_id": SEPARATOR_ID,
  }


def tokenizer_config(cfg: ModelConfig) -> dict:
  """tokenizer_config.json of the byte tokenizer: its special token and the training length."""
  return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SEPARATOR,
          "eos_token": SEPARATOR, "model_max_length": cfg.train_length,
          "clean_up_tokenization_spaces": False}


def generation_config() -> dict:
  """generation_config.json: generate() stops at <sep>, the end of a document."""
  return {"bos_token_id": SEPARATOR_ID, "eos_token_id": SEPARATOR_ID}


def hf_weights(cfg: ModelConfig, params) -> dict:
  """{name: float32 array} in the Hugging Face PyTorch layout."""
  f32 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  t = lambda x: f32(np.asarray(x, np.float32).T)
  out = {"model.embed_tokens.weight": f32(params["embedder"]["embed"]["embedding"]),
         "model.norm.weight": f32(params["final_norm"]["scale"])}
  if not cfg.tie_embeddings:
    out["lm_head.weight"] = t(params["embedder"]["head"]["kernel"])
  for i in range(cfg.num_layers):
    layer, p = params[f"layer_{i}"], f"model.layers.{i}."
    out |= {p + "input_layernorm.weight": f32(layer["attention_norm"]["scale"]),
            p + "post_attention_layernorm.weight": f32(layer["mlp_norm"]["scale"]),
            p + "self_attn.q_proj.weight": t(layer["query"]["kernel"]),
            p + "self_attn.k_proj.weight": t(layer["key"]["kernel"]),
            p + "self_attn.v_proj.weight": t(layer["value"]["kernel"]),
            p + "self_attn.o_proj.weight": t(layer["out"]["kernel"]),
            p + "mlp.gate_proj.weight": t(layer["mlp"]["gate"]["kernel"]),
            p + "mlp.up_proj.weight": t(layer["mlp"]["up"]["kernel"]),
            p + "mlp.down_proj.weight": t(layer["mlp"]["down"]["kernel"])}
  return out


FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
         "tokenizer_config.json")  # what export writes


def export(cfg: ModelConfig, params, out) -> pathlib.Path:
  """Writes the folder `out` (refused if the model is not expressible or `out` holds files)."""
  reason = refusal(cfg)
  if reason:
    raise ConfigError(f"This run cannot be written as a Llama model: {reason}.")
  if cfg.vocab_size != VOCAB_SIZE:
    raise ConfigError(f"This run's vocabulary has {cfg.vocab_size} tokens; the export writes the "
                      f"byte tokenizer's {VOCAB_SIZE}.")
  out = pathlib.Path(out)
  if out.exists() and any(out.iterdir()):
    raise ConfigError(f"--out={out} is not empty: pass a new folder (nothing is overwritten).")
  out.mkdir(parents=True, exist_ok=True)
  for name, content in (("config.json", hf_config(cfg)),
                        ("tokenizer_config.json", tokenizer_config(cfg)),
                        ("generation_config.json", generation_config())):
    (out / name).write_text(json.dumps(content, indent=1, sort_keys=True) + "\n")
  save_file(hf_weights(cfg, params), out / "model.safetensors", metadata={"format": "pt"})
  byte_tokenizer().save(str(out / "tokenizer.json"))
  return out

