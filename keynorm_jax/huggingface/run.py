"""A Hugging Face folder as a run the evaluator takes like one of ours (evaluation/command.py).

The run's config is this project's base config with the model section and training length of the
folder's config.json (llama.py) and, for the data, the folder's tokenizer.json (read offline by the
`tokenizers` library) with its eos_token_id as the document separator: the held-out text is the
same text as for our runs, in the model's own tokens.
"""

import json
import pathlib

import jax

from keynorm_jax import run_config
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.run_loading import TrainedRun
from keynorm_jax.huggingface.llama import load_llama, stored_dtype

_MODEL_FIELDS = ("architecture", "num_layers", "d_model", "num_heads", "head_dim", "num_kv_heads",
                 "mlp", "mlp_size", "norm", "norm_eps", "qkv_bias", "tie_embeddings", "attention",
                 "position", "rope_theta", "vocab_size", "param_dtype", "compute_dtype")
DTYPES = ("auto", "float32", "bfloat16")


def resolve_dtype(folder, dtype: str) -> str:
  """float32 or bfloat16: `dtype` itself, or for "auto" bfloat16 where the folder stores bfloat16
  weights and the backend is an accelerator (half the memory), float32 otherwise (a CPU computes
  bfloat16 slowly)."""
  if dtype not in DTYPES:
    raise ConfigError(f"--hf_dtype={dtype!r} is not one of {', '.join(DTYPES)}.")
  if dtype != "auto":
    return dtype
  on_accelerator = jax.default_backend() != "cpu"
  return "bfloat16" if on_accelerator and stored_dtype(folder) == "bfloat16" else "float32"


def _separator(folder: pathlib.Path) -> int:
  """The eos_token_id of config.json (the first, where it lists several)."""
  eos = json.loads((folder / "config.json").read_text()).get("eos_token_id")
  if isinstance(eos, list):
    eos = eos[0] if eos else None
  if not isinstance(eos, int):
    raise ConfigError(f"{folder}/config.json has no eos_token_id to end each document with.")
  return eos


def hf_run(folder, *, data_dir: str = "", dtype: str = "auto") -> TrainedRun:
  """The TrainedRun of a local Llama-family folder (see llama.load_llama for what loads), in
  `dtype` (resolve_dtype); the held-out text from the embedded corpus, TFDS data in `data_dir`
  ("" = the TFDS default)."""
  folder = pathlib.Path(folder)
  cfg, params = load_llama(folder, resolve_dtype(folder, dtype))
  if not (folder / "tokenizer.json").is_file():
    raise ConfigError(f"{folder} has no tokenizer.json (the evaluator reads the model's tokenizer "
                      "from it, offline).")
  config = run_config.base_config(name=f"hf:{folder.name}", position="rope",
                                  architecture="transformer")
  for field in _MODEL_FIELDS:
    config.model[field] = getattr(cfg, field)
  config.model.rope_scaling.update(dict(cfg.rope_scaling))
  config.train_length = cfg.train_length
  config.data.data_dir = data_dir
  config.data.tokenizer = str(folder / "tokenizer.json")
  config.data.separator_id = _separator(folder)
  return TrainedRun(name=folder.name, workdir=folder, config=run_config.resolve(config), step=0,
                    params=params)
