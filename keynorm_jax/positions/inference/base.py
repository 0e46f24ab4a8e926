"""The inference-method registry and its base classes: a method's knobs left None take their
default at the evaluated length (`at`); `skip_reason` says why a method does not apply to a model
(e.g. a RoPE scaling on an ALiBi model); `apply` rewrites a layer's AttentionSpec (a far rotation
is a rule of attention.far, set as the spec's `far`)."""

import dataclasses

from keynorm_jax.positions.registry import Method, Registry, knob
from keynorm_jax.positions.layer_spec import AttentionSpec
from keynorm_jax.positions.training_methods import TrainingMethod

INFERENCE_METHODS = Registry("inference method")
register = INFERENCE_METHODS.register


def check_factor(factor):
  if factor is not None and not factor >= 1.0:
    raise ValueError(f"factor must be >= 1 (or left unset for length / train_length), got "
                     f"{factor}.")


def unset_or(value, default):
  """A knob's value, or its default where it is unset (None; 0 is a value)."""
  return default if value is None else value


def check_positive(name, value):
  if value is not None and not value >= 1:
    raise ValueError(f"{name} must be at least 1 (or left unset for its default), got {value}.")


@dataclasses.dataclass(frozen=True)
class InferenceMethod(Method):
  """Base: the model as trained (no change)."""

  def at(self, length: int, train_length: int) -> "InferenceMethod":
    """A copy with every knob resolved for a model trained at train_length, run at length."""
    del length, train_length
    return self

  def skip_reason(self, method: TrainingMethod, num_heads: int,
                  trained_scaling: str = "none") -> str | None:
    """Why the method does not apply to a model with this position method, number of heads and
    own RoPE scaling (model.rope_scaling.type), or None."""
    del method, num_heads, trained_scaling
    return None

  def apply(self, spec: AttentionSpec, train_length: int) -> AttentionSpec:
    """A layer's spec rewritten by the method (knobs resolved by `at`) in a model trained at
    train_length."""
    del train_length
    return spec

  def knob_values(self) -> dict:
    return dataclasses.asdict(self)


@register
@dataclasses.dataclass(frozen=True)
class AsTrained(InferenceMethod):
  name = "none"
  summary = "the model as trained"
  paper = "-"


@dataclasses.dataclass(frozen=True)
class Scaled(InferenceMethod):
  """Base of the methods with a scaling factor s (default length / train_length)."""
  factor: float | None = knob(None, "scaling factor s; default length / train_length")

  def __post_init__(self):
    check_factor(self.factor)

  def default_factor(self, length, train_length):
    return max(1.0, length / train_length)

  def at(self, length, train_length):
    return dataclasses.replace(self, factor=unset_or(self.factor,
                                                     self.default_factor(length, train_length)))


def inference_method(name: str, **knobs) -> InferenceMethod:
  """The method `name` with the knobs it has among `knobs` (others are ignored; None = default)."""
  cls = INFERENCE_METHODS.get(name)
  own = {f.name for f in dataclasses.fields(cls)}
  return cls(**{k: v for k, v in knobs.items() if k in own and v is not None})
