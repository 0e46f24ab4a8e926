"""Every config field's type and valid range, in one table, checked before any work.

`FIELDS` maps each dotted key of configs/base.py to a `Field` (0 is allowed where it means "from
the model_size preset" or another default, which run_config.resolve fills in);
tests/test_config_fields.py fails for a key of the base config that has no entry here, so a new
field cannot be added without its check. A position method's own knobs
(`model.position_options.*`) and the indices' (`model.indices_options.*`) are checked by their
classes (keynorm_jax/positions/). Rules between
fields (e.g. the retrieval episode's length) live in run_config.validate, which calls `check`.
"""

import dataclasses
import math

from keynorm_jax.errors import ConfigError

_INF = math.inf


@dataclasses.dataclass(frozen=True)
class Field:
  """A config field's type (bool, int, float or str) and its valid values.

  low / high: bounds (included unless low_open / high_open); choices: the allowed strings;
  nonempty: a string that must not be ""; optional: None (unset) is allowed too; meaning: a few
  words shown with a refusal.
  """
  kind: type
  low: float = -_INF
  high: float = _INF
  low_open: bool = False
  high_open: bool = False
  choices: tuple = ()
  nonempty: bool = False
  optional: bool = False
  meaning: str = ""

  def valid(self) -> str:
    """The valid values in words, e.g. 'a number > 0' or 'one of gau, transformer'."""
    if self.choices:
      return f"one of {', '.join(self.choices)}"
    if self.kind is bool:
      return "true or false"
    if self.kind is str:
      return "a non-empty string" if self.nonempty else "a string"
    noun = "an integer" if self.kind is int else "a finite number"
    low = f"{'>' if self.low_open else '>='} {self.low:g}" if self.low > -_INF else ""
    high = f"{'<' if self.high_open else '<='} {self.high:g}" if self.high < _INF else ""
    unset = " (or unset)" if self.optional else ""
    if low and high:
      return f"{noun} {low} and {high}{unset}"
    return f"{noun} {low or high}".rstrip() + unset

  def accepts(self, value) -> bool:
    if value is None:
      return self.optional
    if self.kind is bool:
      return isinstance(value, bool)
    if self.kind is str:
      return (isinstance(value, str) and (not self.nonempty or value != "")
              and (not self.choices or value in self.choices))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      return False
    if self.kind is int and not isinstance(value, int):
      return False
    if not math.isfinite(value):
      return False
    above = value > self.low if self.low_open else value >= self.low
    below = value < self.high if self.high_open else value <= self.high
    return above and below


def _count(low=1, meaning=""):
  return Field(int, low=low, meaning=meaning)


def _share(meaning):
  return Field(float, low=0.0, high=1.0, meaning=meaning)


def _text(meaning="", **kwargs):
  return Field(str, meaning=meaning, **kwargs)


# Choices are listed where their code lives and imported here lazily (see _model_fields), so this
# module imports nothing of the model.
FIELDS = {
    "name": _text("the run's name", nonempty=True),
    "model_size": _text("a preset of keynorm_jax/run_config.py: MODEL_SIZES", nonempty=True),
    "train_length": _count(meaning="tokens per training window"),
    "batch_size": _count(low=0, meaning="windows per step; 0 = from model_size"),
    "num_train_steps": _count(low=0, meaning="training steps; 0 = from model_size"),
    "learning_rate": Field(float, low=0.0, meaning="the peak learning rate; 0 = from model_size"),
    "warmup_steps": _count(low=0, meaning="steps of linear warmup; 0 = 5% of num_train_steps"),
    "end_learning_rate_ratio": _share("the final learning rate as a share of the peak"),
    "weight_decay": Field(float, low=0.0, meaning="AdamW's decoupled weight decay"),
    "grad_clip_norm": Field(float, low=0.0, low_open=True,
                            meaning="the global gradient norm gradients are clipped to"),
    "seed": _count(low=0),
    # At most 64: each member is a TensorBoard folder (tensorboard/seed_<s>/) and a row of
    # metrics.jsonl per logged step; more seeds train as several groups (--config.seed moves on).
    "num_seeds": Field(int, low=1, high=64, meaning="seeds trained together as one group: seed, "
                       "seed + 1, ..., each with a TensorBoard folder of its own; more train as "
                       "several groups"),
    "num_devices": _count(low=0, meaning="0 = every device"),
    "fsdp": _count(meaning="devices sharing each parameter array"),
    "log_every_steps": _count(),
    "eval_every_steps": _count(low=0, meaning="0 = at every checkpoint"),
    "eval_windows": _count(meaning="validation windows"),
    "checkpoint_every_steps": _count(),
    "max_checkpoints_to_keep": _count(meaning="checkpoints kept on disk"),
    "data.dataset": _text("kjv, text_folder or a TFDS name", nonempty=True),
    "data.text_feature": _text("the TFDS feature holding the text", nonempty=True),
    "data.data_dir": _text("the TFDS data dir; empty = the TFDS default"),
    "data.text_folder": _text("a folder of .txt files, for data.dataset=text_folder"),
    "data.train_split": _text(nonempty=True),
    "data.validation_split": _text(nonempty=True),
    "data.test_split": _text(nonempty=True),
    "data.tokenizer": _text("a tokenizer.json; empty = bytes"),
    "data.separator_id": Field(int, low=-1, meaning="the id after each document; -1 = 256"),
    "data.copy_fraction": _share("the share of training windows made synthetic copies"),
    "data.copy_symbols": _share("the share of the copies that tile random characters"),
    "data.retrieval_fraction": _share("the share of the other windows given a retrieval episode"),
    "data.retrieval_tasks": _text("comma-separated retrieval tasks"),
    "model.architecture": _text(),
    "model.attention": _text(),
    "model.logn": Field(bool),
    "model.logn_base": Field(float, low=0.0, meaning="n0 of log n; 0 = half the training length"),
    "model.qk_norm": _text(),
    "model.ssmax": Field(bool),
    "model.cosa_scale": Field(float, low=0.0, meaning="CosA's lambda; 0 = 4 log(train_length / 2)"),
    "model.position": _text(),
    "model.indices": _text(),
    "model.rope_theta": Field(float, low=1.0, low_open=True, meaning="the RoPE base"),
    "model.rope_scaling.type": _text(),
    "model.rope_scaling.factor": Field(float, low=1.0, meaning="the trained RoPE scaling's factor"),
    "model.rope_scaling.original_length": Field(
        int, low=1, optional=True,
        meaning="the length the scaling scales from; unset: train_length"),
    "model.rope_scaling.beta_fast": Field(float, low=0.0, low_open=True, meaning="YaRN's beta_fast"),
    "model.rope_scaling.beta_slow": Field(float, low=0.0, low_open=True, meaning="YaRN's beta_slow"),
    "model.rope_scaling.low_freq_factor": Field(float, low=0.0, low_open=True,
                                                meaning="llama3's low_freq_factor"),
    "model.rope_scaling.high_freq_factor": Field(float, low=0.0, low_open=True,
                                                 meaning="llama3's high_freq_factor"),
    "model.num_layers": _count(low=0, meaning="0 = from model_size"),
    "model.d_model": _count(low=0, meaning="0 = from model_size"),
    "model.expansion": _count(low=0, meaning="the GAU's e"),
    "model.qk_size": _count(low=0, meaning="the GAU's s"),
    "model.norm_position": _text(),
    "model.gau_qk": _text(),
    "model.gau_heads": _count(low=1, meaning="the GAU's attention heads"),
    "model.gau_mlp": Field(bool),
    "model.num_heads": _count(low=0),
    "model.head_dim": _count(low=0, meaning="0 = d_model / num_heads"),
    "model.num_kv_heads": _count(low=0, meaning="0 = num_heads"),
    "model.mlp": _text(),
    "model.mlp_size": _count(low=0, meaning="0 = the MLP's default width"),
    "model.norm": _text(),
    "model.norm_eps": Field(float, low=0.0, low_open=True, meaning="the Transformer norms' epsilon"),
    "model.qkv_bias": Field(bool),
    "model.output_gate": Field(bool),
    "model.tie_embeddings": Field(bool),
    "model.dropout": Field(float, low=0.0, high=1.0, high_open=True,
                           meaning="the dropout rate"),
    "model.compute_dtype": _text(),
    "model.param_dtype": _text(),
    "model.kernel": _text(),
    "model.vocab_size": _count(low=0, meaning="0 = the byte vocabulary, 257"),
    "model.remat": Field(bool),
    "model.scan_layers": Field(bool),
}


def _model_fields() -> dict:
  """The model's choice fields, with the choices of the code that implements them."""
  from keynorm_jax import positions, rope  # pylint: disable=g-import-not-at-top
  from keynorm_jax.attention import KERNEL_NAMES, VARIANTS  # pylint: disable=g-import-not-at-top
  from keynorm_jax.models import config as model  # pylint: disable=g-import-not-at-top
  choices = {"architecture": model.ARCHITECTURES, "attention": VARIANTS,
             "qk_norm": model.QK_NORMS, "position": tuple(positions.TRAINING_METHODS.names()),
             "indices": tuple(positions.INDICES.names()),
             "norm_position": model.NORM_POSITIONS, "gau_qk": model.GAU_QK, "mlp": model.MLPS,
             "norm": model.NORMS,
             "compute_dtype": model.DTYPES, "param_dtype": model.DTYPES, "kernel": KERNEL_NAMES,
             "rope_scaling.type": rope.SCALINGS}
  return {f"model.{k}": dataclasses.replace(FIELDS[f"model.{k}"], choices=tuple(v))
          for k, v in choices.items()}


def fields() -> dict:
  return {**FIELDS, **_model_fields()}


# Checked by the position method and by the indices (see the docstring).
_OWN_KNOBS = ("model.position_options.", "model.indices_options.")


def leaves(config, prefix: str = "") -> dict:
  """{dotted key: value} of every field, e.g. {'train_length': 512, 'data.dataset': 'kjv'}."""
  out = {}
  for key, value in config.items():
    if hasattr(value, "items"):
      out.update(leaves(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def checked_leaves(config) -> dict:
  """leaves() without the position method's own knobs: the fields this table checks."""
  return {k: v for k, v in leaves(config).items() if not k.startswith(_OWN_KNOBS)}


def check(config) -> None:
  """ConfigError naming the first field of a config outside its valid values (run_config.validate
  calls it; resolving changes only the fields left at 0)."""
  table = fields()
  for key, value in checked_leaves(config).items():
    field = table.get(key)
    if field is None:
      raise ConfigError(f"Config field {key!r} has no entry in keynorm_jax/config_fields.py: "
                        f"add its type and range there.")
    if not field.accepts(value):
      meaning = f" ({field.meaning})" if field.meaning else ""
      raise ConfigError(f"--config.{key}={value!r} is not allowed: {key}{meaning} must be "
                        f"{field.valid()}.")
