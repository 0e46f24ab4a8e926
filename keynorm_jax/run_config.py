"""Configs: the model-size presets, name resolution (`--config=kna_rope`), checks and conversion.

`--config` takes a name (configs/named.py: `[transformer_]<attention>[_logn]_<position>`) or a
config file defining get_config() -> ml_collections.ConfigDict. `resolve` fills the fields left at 0
from the model_size preset of the model's architecture, `validate` rejects what cannot run with a
message that says what to do, and `model_config` gives the model's static description.
"""

import copy
import difflib
import importlib.util
import pathlib
import sys
import traceback

import ml_collections

from keynorm_jax import config_fields, positions
from keynorm_jax.data.retrieval import check_tasks, task
from keynorm_jax.data.tokenizer import VOCAB_SIZE
from keynorm_jax.errors import ConfigError
from keynorm_jax.models import ModelConfig, build_model as _build_model

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "configs"
NAMED_CONFIGS = CONFIG_DIR / "named.py"

# Per architecture and size: model shape (the `model` section) and training defaults.
MODEL_SIZES = {
    "gau": {
        # For tests: a step in well under a second on CPU.
        "tiny": dict(model=dict(num_layers=2, d_model=32, expansion=64, qk_size=16),
                     batch_size=8, num_train_steps=20, learning_rate=3e-3),
        # Laptop / 2-core CPU: about 10 minutes (0.4 s a step of 8 x 512 tokens on 2 cores).
        "cpu": dict(model=dict(num_layers=4, d_model=256, expansion=512, qk_size=128),
                    batch_size=8, num_train_steps=1500, learning_rate=2e-3),
        # ~25 M parameters, for one accelerator (the retrieval study's larger size).
        "medium": dict(model=dict(num_layers=12, d_model=576, expansion=1152, qk_size=128),
                       batch_size=16, num_train_steps=8000, learning_rate=1e-3),
        # The seed's ~100M GAU (24 layers, d 768, e 1536, s 128) for accelerators.
        "seed": dict(model=dict(num_layers=24, d_model=768, expansion=1536, qk_size=128),
                     batch_size=32, num_train_steps=20000, learning_rate=5e-4),
        # ~1.0 B parameters, for several accelerators with --config.fsdp (benchmarks/fsdp_memory.py).
        "1b": dict(model=dict(num_layers=40, d_model=2048, expansion=4096, qk_size=128),
                   batch_size=64, num_train_steps=20000, learning_rate=3e-4),
    },
    "transformer": {
        # For tests: 2 heads of 16, SwiGLU 88; 42 K parameters.
        "tiny": dict(model=dict(num_layers=2, d_model=32, num_heads=2),
                     batch_size=8, num_train_steps=20, learning_rate=3e-3),
        # The GAU cpu size's cost: 3 heads of 64, SwiGLU 512; 1.87 M parameters (GAU: 1.84 M),
        # a jitted step of 8 x 512 about 1.1x the GAU's (1.05-1.2x measured on 2 CPU cores).
        "cpu": dict(model=dict(num_layers=4, d_model=192, num_heads=3),
                    batch_size=8, num_train_steps=1500, learning_rate=2e-3),
        # 8 heads of 64, SwiGLU 1368; ~25 M parameters, the GAU medium's size, for one accelerator.
        "medium": dict(model=dict(num_layers=8, d_model=512, num_heads=8),
                       batch_size=16, num_train_steps=8000, learning_rate=1e-3),
        # GPT-2 small's shape: 12 heads of 64, SwiGLU 2048; 85 M parameters (byte vocabulary).
        "seed": dict(model=dict(num_layers=12, d_model=768, num_heads=12),
                     batch_size=32, num_train_steps=20000, learning_rate=5e-4),
        # ~1.0 B parameters: 20 layers, 16 heads of 128, SwiGLU 5504 (benchmarks/fsdp_memory.py).
        "1b": dict(model=dict(num_layers=20, d_model=2048, num_heads=16),
                   batch_size=64, num_train_steps=20000, learning_rate=3e-4),
    },
}


def available_configs():
  """Every config name (configs/named.py)."""
  _put_repo_on_path()
  from configs import named  # pylint: disable=g-import-not-at-top
  return sorted(named.named_configs())


def _describe_names() -> str:
  return ("names follow [transformer_]<attention>[_logn]_<position> with attention in baseline, "
          "qna, kna, cosa, qknorm, qkln, ssmax and position in "
          f"{', '.join(positions.TRAINING_METHODS.names())} (e.g. kna_rope, baseline_alibi, "
          "transformer_kna_rope)")


def base_config(**kwargs) -> ml_collections.ConfigDict:
  """configs/base.py's get_config(**kwargs): every field at its default."""
  _put_repo_on_path()
  from configs import base  # pylint: disable=g-import-not-at-top
  return base.get_config(**kwargs)


def _put_repo_on_path():
  """Config files import `configs.base`, so the repository root must be importable."""
  if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def config_path(name_or_path: str) -> str:
  """What ml_collections' --config flag takes: `configs/named.py:NAME` for a name, or the file;
  ConfigError with the naming rule and the closest names if neither exists."""
  looks_like_path = name_or_path.endswith(".py") or "/" in name_or_path
  if looks_like_path:
    if not pathlib.Path(name_or_path).is_file():
      raise ConfigError(f"No config file {name_or_path!r}.")
    return name_or_path
  names = available_configs()
  if name_or_path not in names:
    close = difflib.get_close_matches(name_or_path, names, n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"No config {name_or_path!r}.{hint} Config {_describe_names()}; or give "
                      f"a path to a config file.")
  return f"{NAMED_CONFIGS}:{name_or_path}"


def load_config(name_or_path: str) -> ml_collections.ConfigDict:
  """The ConfigDict of a config name or file (as `--config` takes it)."""
  target = config_path(name_or_path)
  path, _, argument = target.partition(":") if target.startswith(str(NAMED_CONFIGS)) \
      else (target, "", "")
  _put_repo_on_path()
  path = pathlib.Path(path)
  spec = importlib.util.spec_from_file_location(f"keynorm_config_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
    if not callable(getattr(module, "get_config", None)):
      raise ConfigError(f"{path} defines no get_config(); a config file must define "
                        f"get_config() returning an ml_collections.ConfigDict.")
    config = module.get_config(argument) if argument else module.get_config()
  except SyntaxError as e:
    raise ConfigError(f"{e.filename}:{e.lineno}: syntax error in config file: {e.msg}.") from None
  except Exception as e:  # pylint: disable=broad-except  # any error raised by the file's code
    if isinstance(e, ConfigError):
      raise
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(path)]
    where = f"{path}:{frames[-1].lineno}" if frames else str(path)
    raise ConfigError(f"{where}: loading the config failed: {type(e).__name__}: {e}") from None
  if not isinstance(config, ml_collections.ConfigDict):
    raise ConfigError(f"{path}: get_config() returned a {type(config).__name__}, not an "
                      f"ml_collections.ConfigDict; wrap it: return ml_collections.ConfigDict(...).")
  return config


def flat_keys(config) -> list[str]:
  """Dotted names of every field, e.g. 'train_length', 'data.dataset'."""
  return list(config_fields.leaves(config))


def check_override_keys(config, keys) -> None:
  """ConfigError naming an override key the config does not have, with the nearest names."""
  known = flat_keys(config)
  for key in keys:
    if key not in known:
      close = difflib.get_close_matches(key, known, n=3)
      hint = f" Did you mean {', '.join(close)}?" if close else ""
      raise ConfigError(f"Unknown config key {key!r}.{hint} Keys: {', '.join(known)}.")


def resolve(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A copy with the fields left at 0 filled in from the model_size preset."""
  sizes = MODEL_SIZES.get(config.model.architecture)
  if sizes is None:
    raise ConfigError(f"Unknown model.architecture {config.model.architecture!r}; choose one of "
                      f"{', '.join(MODEL_SIZES)}.")
  if config.model_size not in sizes:
    raise ConfigError(f"Unknown model_size {config.model_size!r}; choose one of "
                      f"{', '.join(sizes)}.")
  config = ml_collections.ConfigDict(config.to_dict())
  preset = dict(sizes[config.model_size])
  for key, value in preset.pop("model").items():
    if not config.model[key]:
      config.model[key] = value
  for key, value in preset.items():
    if not config[key]:
      config[key] = value
  if not config.warmup_steps:
    config.warmup_steps = max(1, config.num_train_steps // 20)
  if not config.eval_every_steps:
    config.eval_every_steps = config.checkpoint_every_steps
  return config


def validate(config: ml_collections.ConfigDict, num_devices: int) -> None:
  """Raises ConfigError for a resolved config that cannot train on `num_devices` devices: the rules
  between fields, after each field's own type and range (config_fields.py)."""
  config_fields.check(config)
  model_config(config)
  if config.data.dataset == "text_folder" and not config.data.text_folder:
    raise ConfigError("data.dataset=text_folder reads the .txt files of data.text_folder, which "
                      "is not set: add --config.data.text_folder=DIR.")
  if config.data.copy_symbols and not config.data.copy_fraction:
    raise ConfigError("data.copy_symbols is a share of the synthetic copies, and there are none: "
                      "set data.copy_fraction > 0 too (e.g. --config.data.copy_fraction=0.5), or "
                      "data.copy_symbols=0.")
  if config.data.retrieval_fraction:
    names = check_tasks(config.data.retrieval_tasks.split(","), "data.retrieval_tasks")
    needed = max(task(t).min_length(0) for t in names)
    if config.train_length < needed:
      raise ConfigError(f"data.retrieval_fraction needs train_length >= {needed} (the longest "
                        f"retrieval episode of {config.data.retrieval_tasks}); got "
                        f"{config.train_length}.")
  if config.batch_size % num_devices:
    raise ConfigError(
        f"batch_size {config.batch_size} is not divisible by the {num_devices} devices; use a "
        f"multiple of {num_devices} (e.g. --config.batch_size={num_devices * max(1, config.batch_size // num_devices)}) "
        f"or --config.num_devices to use fewer devices.")


def model_config(config: ml_collections.ConfigDict) -> ModelConfig:
  """The model's static description from a resolved config (validated there)."""
  try:
    fields = config.model.to_dict()
    vocab_size = fields.pop("vocab_size", 0) or VOCAB_SIZE
    return ModelConfig(**fields, vocab_size=vocab_size, train_length=config.train_length)
  except TypeError as e:  # a field the model does not know
    raise ConfigError(f"The config's model section does not fit this code: {e}.") from None


def build_model(config: ml_collections.ConfigDict, column=positions.EvalColumn()):
  """The Flax LM of a resolved config, under an evaluation column (default: as trained)."""
  return _build_model(model_config(config), column)


# The model sections whose unset knobs are None (issue 68); a config saved before wrote 0 for them.
_KNOB_SECTIONS = ("position_options", "indices_options", "rope_scaling")


def _unset_knobs_as_none(saved: dict, expected: dict) -> dict:
  """A copy of a saved config with every unset knob None: a config written before "unset" became
  None wrote 0 for a knob left unset, and every such knob (its default None) refuses 0, so a saved
  0 there can only mean unset."""
  saved = copy.deepcopy(saved)
  for section in _KNOB_SECTIONS:
    knobs = saved.get("model", {}).get(section, {})
    for name, default in expected["model"][section].items():
      if default is None and knobs.get(name) == 0:
        knobs[name] = None
  return saved


def config_from_json_dict(saved: dict) -> ml_collections.ConfigDict:
  """A config saved with a checkpoint; ConfigError if its keys differ from the code's base config."""
  _put_repo_on_path()
  from configs import base  # pylint: disable=g-import-not-at-top

  position = saved.get("model", {}).get("position", "rope")
  if position not in positions.TRAINING_METHODS.names():
    raise ConfigError(f"The checkpoint's model uses position {position!r}, which this code does "
                      f"not have. Evaluate or resume it with the version of keynorm-jax that "
                      f"trained it.")
  expected = base.get_config(position=position).to_dict()  # its knobs are the method's own

  def keys(d, prefix=""):
    out = set()
    for k, v in d.items():
      out |= keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k}
    return out

  saved = _unset_knobs_as_none(saved, expected)
  unknown = keys(saved) - keys(expected)
  if unknown:
    raise ConfigError(
        f"The checkpoint's config does not match this code (unknown keys: {sorted(unknown)}). "
        f"Evaluate or resume it with the version of keynorm-jax that trained it, or retrain.")
  # Settings added since the checkpoint was written take their defaults, which are what the code
  # did before they existed (e.g. model.scan_layers=False).
  missing = sorted(keys(expected) - keys(saved))
  saved = ml_collections.ConfigDict(saved)
  for key in missing:
    section, value = saved, expected
    *parents, leaf = key.split(".")
    for parent in parents:
      value = value[parent]
      if parent not in section:
        section[parent] = ml_collections.ConfigDict()
      section = section[parent]
    section[leaf] = value[leaf]
  return saved
