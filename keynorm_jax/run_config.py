"""Configs: the model-size presets, name resolution (`--config=kna_rope`), checks and conversion.

A config file in configs/ defines get_config() -> ml_collections.ConfigDict. `resolve` fills the
fields left at 0 from the model_size preset, `validate` rejects what cannot run with a message that
says what to do, and `gau_config` gives the model's static description.
"""

import difflib
import importlib.util
import pathlib
import sys
import traceback

import ml_collections

from keynorm_jax.attention import VARIANTS
from keynorm_jax.model import NORM_POSITIONS, POSITIONS, GAUConfig
from keynorm_jax.tokenizer import VOCAB_SIZE

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "configs"

# Per size: model shape and the training defaults it is meant to be run with.
MODEL_SIZES = {
    # For tests: a step in well under a second on CPU.
    "tiny": dict(num_layers=2, d_model=32, expansion=64, qk_size=16,
                 batch_size=8, num_train_steps=20, learning_rate=3e-3),
    # Laptop / 2-core CPU: about 10 minutes (0.4 s a step of 8 x 512 tokens on 2 cores).
    "cpu": dict(num_layers=4, d_model=256, expansion=512, qk_size=128,
                batch_size=8, num_train_steps=1500, learning_rate=2e-3),
    # The seed's ~100M GAU (24 layers, d 768, e 1536, s 128) for accelerators.
    "seed": dict(num_layers=24, d_model=768, expansion=1536, qk_size=128,
                 batch_size=32, num_train_steps=20000, learning_rate=5e-4),
}


class ConfigError(ValueError):
  """A config that cannot run; the message says what to change."""


def available_configs():
  return sorted(p.stem for p in CONFIG_DIR.glob("*.py") if p.stem not in ("__init__", "base"))


def _put_repo_on_path():
  """Config files import `configs.base`, so the repository root must be importable."""
  if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def config_path(name_or_path: str) -> pathlib.Path:
  """configs/<name>.py for a bare name, or the path itself; ConfigError listing names if absent."""
  looks_like_path = name_or_path.endswith(".py") or "/" in name_or_path
  path = pathlib.Path(name_or_path) if looks_like_path else CONFIG_DIR / f"{name_or_path}.py"
  if not path.is_file():
    raise ConfigError(f"No config {name_or_path!r}. Available: {', '.join(available_configs())} "
                      f"(or a path to a config file).")
  return path


def load_config(name_or_path: str) -> ml_collections.ConfigDict:
  """The ConfigDict of a config name or file (as `--config` takes it)."""
  path = config_path(name_or_path)
  _put_repo_on_path()
  spec = importlib.util.spec_from_file_location(f"keynorm_config_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
    if not callable(getattr(module, "get_config", None)):
      raise ConfigError(f"{path} defines no get_config(); a config file must define "
                        f"get_config() returning an ml_collections.ConfigDict.")
    return module.get_config()
  except SyntaxError as e:
    raise ConfigError(f"{e.filename}:{e.lineno}: syntax error in config file: {e.msg}.") from None
  except Exception as e:  # pylint: disable=broad-except  # any error raised by the file's code
    if isinstance(e, ConfigError):
      raise
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(path)]
    where = f"{path}:{frames[-1].lineno}" if frames else str(path)
    raise ConfigError(f"{where}: loading the config failed: {type(e).__name__}: {e}") from None


def flat_keys(config) -> list[str]:
  """Dotted names of every field, e.g. 'train_length', 'data.dataset'."""
  out = []
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      out += [f"{key}.{sub}" for sub in flat_keys(value)]
    else:
      out.append(key)
  return out


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
  if config.model_size not in MODEL_SIZES:
    raise ConfigError(f"Unknown model_size {config.model_size!r}; choose one of "
                      f"{', '.join(MODEL_SIZES)}.")
  config = ml_collections.ConfigDict(config.to_dict())
  for key, value in MODEL_SIZES[config.model_size].items():
    if not config[key]:
      config[key] = value
  if not config.warmup_steps:
    config.warmup_steps = max(1, config.num_train_steps // 20)
  if not config.eval_every_steps:
    config.eval_every_steps = config.checkpoint_every_steps
  return config


def _choice(config, key, choices):
  if config[key] not in choices:
    raise ConfigError(f"{key}={config[key]!r} is not one of {', '.join(map(str, choices))}.")


def validate(config: ml_collections.ConfigDict, num_devices: int) -> None:
  """Raises ConfigError for a resolved config that cannot train on `num_devices` devices."""
  _choice(config, "attention", VARIANTS)
  _choice(config, "position", POSITIONS)
  _choice(config, "norm_position", NORM_POSITIONS)
  _choice(config, "compute_dtype", ("float32", "bfloat16"))
  for key in ("train_length", "batch_size", "num_train_steps", "checkpoint_every_steps",
              "log_every_steps", "eval_windows", "num_layers", "d_model", "expansion", "qk_size"):
    if config[key] < 1:
      raise ConfigError(f"{key} must be at least 1, got {config[key]}.")
  if config.learning_rate <= 0:
    raise ConfigError(f"learning_rate must be positive, got {config.learning_rate}.")
  if config.qk_size % 2:
    raise ConfigError(f"qk_size must be even (RoPE rotates pairs), got {config.qk_size}.")
  if config.batch_size % num_devices:
    raise ConfigError(
        f"batch_size {config.batch_size} is not divisible by the {num_devices} devices; use a "
        f"multiple of {num_devices} (e.g. --config.batch_size={num_devices * max(1, config.batch_size // num_devices)}) "
        f"or --config.num_devices to use fewer devices.")
  if config.logn and config.logn_base and config.logn_base <= 1:
    raise ConfigError(f"logn_base must be > 1 (or 0 for half the training length), got "
                      f"{config.logn_base}.")


def gau_config(config: ml_collections.ConfigDict) -> GAUConfig:
  """The model's static description from a resolved config."""
  return GAUConfig(
      vocab_size=VOCAB_SIZE, num_layers=config.num_layers, d_model=config.d_model,
      expansion=config.expansion, qk_size=config.qk_size, dropout=config.dropout,
      norm_position=config.norm_position, tie_embeddings=config.tie_embeddings,
      attention=config.attention, logn=config.logn, logn_base=config.logn_base or None,
      qk_norm=config.qk_norm, position=config.position, rope_theta=config.rope_theta,
      cosa_scale=config.cosa_scale or None, train_length=config.train_length,
      compute_dtype=config.compute_dtype)


def config_from_json_dict(saved: dict) -> ml_collections.ConfigDict:
  """A config saved with a checkpoint; ConfigError if its keys differ from the code's base config."""
  _put_repo_on_path()
  from configs import base  # pylint: disable=g-import-not-at-top

  expected = base.get_config().to_dict()

  def keys(d, prefix=""):
    out = set()
    for k, v in d.items():
      out |= keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k}
    return out

  unknown, missing = keys(saved) - keys(expected), keys(expected) - keys(saved)
  if unknown or missing:
    raise ConfigError(
        f"The checkpoint's config does not match this code (unknown keys: "
        f"{sorted(unknown) or 'none'}; missing keys: {sorted(missing) or 'none'}). Evaluate it "
        f"with the version of keynorm-jax that trained it, or retrain.")
  return ml_collections.ConfigDict(saved)
