"""A Hugging Face folder as a run the evaluator takes like one of ours (`folder_source`, a source of
runs/source.py that eval.py hands evaluation/command.py).

The run's config is this project's base config with the model section and training length of the
folder's config.json (hf_config.py) and, for the data, the folder's tokenizer.json (read offline
by the `tokenizers` library) with its eos_token_id as the document separator: the held-out text is
the same text as for our runs, in the model's own tokens. Everything is checked before any work:
config.json, every weight's header (llama.py), and a tokenizer that reads and whose ids all fit
the model's vocabulary (an id past vocab_size would index past the embedding: a NaN loss).
"""

import pathlib

import jax

from keynorm_jax import run_config
from keynorm_jax.errors import ConfigError
from keynorm_jax.huggingface.hf_config import (eos_token_id, one_x, read_config, refuse,
                                               stored_dtype)
from keynorm_jax.huggingface.llama import check_headers, read_params
from keynorm_jax.runs import RunSource, TrainedRun
from keynorm_jax.storage import disk

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


def check_tokenizer(folder: pathlib.Path, vocab_size: int) -> None:
  """Refuses a tokenizer.json that is missing or unreadable, or whose ids reach past the model's
  vocab_size (transformers' embedding raises on such an id)."""
  path = folder / "tokenizer.json"
  if not path.is_file():
    refuse(folder, "it has no tokenizer.json (the evaluator reads the model's tokenizer from it, "
                   "offline)")
  from tokenizers import Tokenizer  # pylint: disable=g-import-not-at-top
  try:
    tokenizer = Tokenizer.from_file(str(path))
  except Exception as e:  # pylint: disable=broad-except
    # The tokenizers library's parser of a file from outside raises a bare Exception.
    refuse(folder, f"its tokenizer.json cannot be read ({str(e).strip() or type(e).__name__})")
  largest = max(tokenizer.get_vocab(with_added_tokens=True).values(), default=-1)
  if largest >= vocab_size:
    refuse(folder, f"its tokenizer.json has token id {largest}, past config.json's vocab_size "
                   f"{vocab_size} (the tokenizer belongs to another model)")


def hf_run(folder, *, data_dir: str = "", dtype: str = "auto", train_length: int | None = None,
           check=None) -> TrainedRun:
  """The TrainedRun of a local Llama-family folder (see llama.load_llama for what loads), in
  `dtype` (resolve_dtype); the held-out text from the embedded corpus, TFDS data in `data_dir`
  ("" = the TFDS default).

  Its config.train_length is the model's 1x (hf_config.one_x: `train_length` where given, else
  original_max_position_embeddings of its rope parameters, else max_position_embeddings; the run's
  `one_x` says which): the length the evaluation's multiples, inference-time methods and
  repeated set count from. The model is the folder's whatever its 1x: its own RoPE scaling keeps
  the length it scales from (original_length). check: called with the run's config once the
  folder's settings and tokenizer are read, before any weight is (eval.py: the lengths against
  the held-out text).
  """
  folder = pathlib.Path(folder)
  dtype = resolve_dtype(folder, dtype)
  cfg, raw = read_config(folder, dtype)
  check_headers(folder, cfg)
  check_tokenizer(folder, cfg.vocab_size)
  separator = eos_token_id(folder, raw, cfg.vocab_size)
  length, source = one_x(folder, raw, cfg.train_length, train_length)
  config = run_config.base_config(name=f"hf:{folder.name}", position="rope",
                                  architecture="transformer")
  for field in _MODEL_FIELDS:
    config.model[field] = getattr(cfg, field)
  scaling = dict(cfg.rope_scaling)
  if scaling and not scaling.get("original_length"):  # scaled from max_position_embeddings
    scaling["original_length"] = cfg.train_length
  config.model.rope_scaling.update(scaling)
  config.train_length = length
  config.data.data_dir = data_dir
  config.data.tokenizer = str(folder / "tokenizer.json")
  config.data.separator_id = separator
  config = run_config.resolve(config)
  if check is not None:
    check(config)
  return TrainedRun(name=folder.name, workdir=folder, config=config, step=0,
                    params=read_params(folder, cfg, dtype), one_x=source)


def folder_source(hf_checkpoint, workdir, *, data_dir: str = "", dtype: str = "auto",
                  train_length: int | None = None, check=None) -> RunSource:
  """--hf_checkpoint's folder as the evaluator's one run (hf_run: its 1x `train_length` or the
  folder's own; `check` before the weights are read), loaded and checked now, before any work (a
  folder that cannot be loaded is a ConfigError: nothing is written), evaluated at the lengths
  asked only (not its 1x), below or above its max_position_embeddings; its results default to
  <workdir>/hf_<folder name>/eval, beside our runs' results. ConfigError for an empty flag or a
  path that is not a folder."""
  disk.check_folder_flag("hf_checkpoint", hf_checkpoint, "pass the folder of a Hugging Face "
                         "model (config.json, *.safetensors, tokenizer.json), or leave it unset")
  folder = pathlib.Path(hf_checkpoint)
  if not folder.is_dir():
    raise ConfigError(f"--hf_checkpoint={hf_checkpoint} is not a folder: pass the folder of a "
                      "Hugging Face model (config.json, *.safetensors, tokenizer.json).")
  run = hf_run(folder, data_dir=data_dir, dtype=dtype, train_length=train_length, check=check)
  return RunSource(((run.name, lambda: run),), pathlib.Path(workdir) / f"hf_{run.name}" / "eval",
                   at_train_length=False)
