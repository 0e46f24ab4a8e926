"""Logit temperatures: every score times a factor of the length (YaRN's and DroPE's rules), or query
i's scores times a factor of its position i (Llama 4's tuning, post-hoc SSMax)."""

import dataclasses
import math

from keynorm_jax.positions.inference.base import (InferenceMethod, Scaled, check_positive, register,
                                                  unset_or)
from keynorm_jax.positions.registry import knob


@dataclasses.dataclass(frozen=True)
class Temperature(Scaled):
  """Every score times a factor of s = length / train_length (`scale(s)`); weights unchanged."""

  def apply(self, spec, train_length):
    return spec.replace(logit_scale=spec.logit_scale * self.scale(self.factor))


@register
@dataclasses.dataclass(frozen=True)
class YarnTemperature(Temperature):
  name = "yarn_temperature"
  summary = "YaRN's temperature alone: scores times (0.1 ln s + 1)^2, frequencies unchanged"
  paper = "Peng et al. 2023, YaRN (arXiv 2309.00071): sqrt(1/t) = 0.1 ln s + 1"

  def scale(self, s):
    return (0.1 * math.log(s) + 1.0)**2 if s > 1.0 else 1.0


@register
@dataclasses.dataclass(frozen=True)
class DropeTemperature(Temperature):
  name = "drope_temperature"
  summary = "DroPE's logit scale: scores times beta = 1 + c ln s"
  paper = "Gelberg et al. 2025, DroPE (arXiv 2512.12167), appendix C.2"
  drope_c: float = knob(0.412, "DroPE's c in beta = 1 + c ln s (0.412: the paper's fit for its "
                        "from-scratch model; 0.103 for SmolLM)")

  def __post_init__(self):
    super().__post_init__()
    if not self.drope_c >= 0:
      raise ValueError(f"drope_c must be >= 0, got {self.drope_c}.")

  def scale(self, s):
    return 1.0 + self.drope_c * math.log(s)


@register
@dataclasses.dataclass(frozen=True)
class Llama4Temperature(InferenceMethod):
  """Llama 4's attention temperature tuning (HF transformers' Llama4TextAttention), on the layers
  without RoPE as there: query i's scores times 1 + a log(1 + floor((i + 1) / F)). Llama 4 scales q
  (F = 8192, a = 0.1); scaling the scores is the same for Baseline and KNA. F defaults to the
  training length here (Llama 4's 8192 at this project's scale)."""
  name = "llama4_temperature"
  summary = "layers without RoPE: query i's scores times 1 + a log(1 + floor((i + 1) / F))"
  paper = "Meta 2025, Llama 4 (HF transformers Llama4TextAttention: attn_temperature_tuning)"
  llama4_attn_scale: float = knob(0.1, "Llama 4's a (attn_scale)")
  llama4_floor_scale: int | None = knob(None, "Llama 4's F (floor_scale; 8192 there); default "
                                        "train_length")

  def __post_init__(self):
    if not self.llama4_attn_scale >= 0:
      raise ValueError(f"llama4_attn_scale must be >= 0, got {self.llama4_attn_scale}.")
    check_positive("llama4_floor_scale", self.llama4_floor_scale)

  def at(self, length, train_length):
    return dataclasses.replace(self,
                               llama4_floor_scale=unset_or(self.llama4_floor_scale, train_length))

  def skip_reason(self, method, num_heads, trained_scaling="none"):
    if method.layers_without_rope:
      return None
    return f"Llama 4 tunes the layers without RoPE, and every {method.name} layer has RoPE"

  def apply(self, spec, train_length):
    if spec.rotary is not None:
      return spec
    return spec.replace(llama4_temperature=(self.llama4_attn_scale,
                                            float(self.llama4_floor_scale)))


@register
@dataclasses.dataclass(frozen=True)
class PosthocSSMax(InferenceMethod):
  """SSMax's factor without training it: query i's scores times s log(i + 1), s = 1 / log(train
  length) by default (the factor is 1 at the training length; unlike post-hoc log n it also
  lowers the scores of the queries before it)."""
  name = "posthoc_ssmax"
  summary = "query i's scores times s log(i + 1) (SSMax's form, untrained)"
  paper = "Nakanishi 2025, Scalable-Softmax Is Superior for Attention (arXiv 2501.19399)"
  ssmax_s: float | None = knob(None, "post-hoc SSMax s; default 1 / log(train_length)")

  def __post_init__(self):
    if self.ssmax_s is not None and not self.ssmax_s > 0:
      raise ValueError(f"ssmax_s must be > 0, got {self.ssmax_s}.")

  def at(self, length, train_length):
    return dataclasses.replace(self, ssmax_s=unset_or(self.ssmax_s, 1.0 / math.log(train_length)))

  def apply(self, spec, train_length):
    return spec.replace(posthoc_ssmax=self.ssmax_s)
