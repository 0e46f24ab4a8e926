"""A Hugging Face folder as a run the evaluator takes like one of ours (evaluation/command.py).

The run's config is this project's base config with the model section and training length of the
folder's config.json (llama.py) and, for the data, the folder's tokenizer.json (read offline by the
`tokenizers` library) with its eos_token_id as the document separator: the held-out text is the
same text as for our runs, in the model's own tokens.
"""

import json
import pathlib

from keynorm_jax import run_config
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.run_loading import TrainedRun
from keynorm_jax.huggingface.llama import load_llama

_MODEL_FIELDS = ("architecture", "num_layers", "d_model", "num_heads", "head_dim", "num_kv_heads",
                 "mlp", "mlp_size", "norm", "norm_eps", "tie_embeddings", "attention", "position",
                 "rope_theta", "vocab_size")


def _separator(folder: pathlib.Path) -> int:
  """The eos_token_id of config.json (the first, where it lists several)."""
  eos = json.loads((folder / "config.json").read_text()).get("eos_token_id")
  if isinstance(eos, list):
    eos = eos[0] if eos else None
  if not isinstance(eos, int):
    raise ConfigError(f"{folder}/config.json has no eos_token_id to end each document with.")
  return eos


def hf_run(folder, *, data_dir: str = "") -> TrainedRun:
  """The TrainedRun of a local Llama-family folder (see llama.load_llama for what loads); the
  held-out text from the embedded corpus, TFDS data in `data_dir` ("" = the TFDS default)."""
  folder = pathlib.Path(folder)
  cfg, params = load_llama(folder)
  if not (folder / "tokenizer.json").is_file():
    raise ConfigError(f"{folder} has no tokenizer.json (the evaluator reads the model's tokenizer "
                      "from it, offline).")
  config = run_config.base_config(name=f"hf:{folder.name}", position="rope",
                                  architecture="transformer")
  for field in _MODEL_FIELDS:
    config.model[field] = getattr(cfg, field)
  config.train_length = cfg.train_length
  config.data.data_dir = data_dir
  config.data.tokenizer = str(folder / "tokenizer.json")
  config.data.separator_id = _separator(folder)
  return TrainedRun(name=folder.name, workdir=folder, config=run_config.resolve(config), step=0,
                    params=params)
