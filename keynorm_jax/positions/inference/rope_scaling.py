"""RoPE scalings: new frequencies for every rotation (linear, NTK, dynamic NTK, YaRN, llama3)."""

import dataclasses

from keynorm_jax.positions.inference.base import Scaled, register
from keynorm_jax.positions.registry import knob


@dataclasses.dataclass(frozen=True)
class RopeScaling(Scaled):
  """A change of RoPE frequencies (rope.rope_inv_freq's scaling of the same name)."""

  def skip_reason(self, method, num_heads, trained_scaling="none"):
    if not method.rotary:
      return f"{method.name} has no RoPE to scale"
    if trained_scaling != "none":
      return (f"the model has its own {trained_scaling} RoPE scaling (model.rope_scaling); a "
              f"second scaling on top of it is not defined")
    return None

  def rotary_changes(self) -> dict:
    return dict(scaling=self.name, factor=self.factor)

  def apply(self, spec, train_length):
    if spec.rotary is None:
      return spec
    return spec.replace(rotary=dataclasses.replace(spec.rotary, **self.rotary_changes()))


@register
@dataclasses.dataclass(frozen=True)
class Linear(RopeScaling):
  name = "linear"
  summary = "positions divided by s (position interpolation)"
  paper = "Chen et al. 2023, Extending Context Window via Positional Interpolation (arXiv 2306.15595)"


@register
@dataclasses.dataclass(frozen=True)
class NTK(RopeScaling):
  name = "ntk"
  summary = "base times s^(d/(d-2))"
  paper = "bloc97 2023, NTK-aware scaled RoPE (reddit r/LocalLLaMA)"


@register
@dataclasses.dataclass(frozen=True)
class DynamicNTK(RopeScaling):
  name = "dynamic_ntk"
  summary = "NTK with the base of the current length (one base per window here)"
  paper = "emozilla 2023, Dynamically scaled RoPE (HF transformers `dynamic`)"
  factor: float | None = knob(None, "scaling factor s; default 1 (the base already grows with "
                              "the length)")

  def default_factor(self, length, train_length):
    return 1.0  # the base already grows with the length, as in HF transformers


@register
@dataclasses.dataclass(frozen=True)
class YaRN(RopeScaling):
  name = "yarn"
  summary = "ramped interpolation plus attention temperature"
  paper = "Peng et al. 2023, YaRN (arXiv 2309.00071)"
  beta_fast: float = knob(32.0, "YaRN beta_fast (rotations bounding the ramp from above)")
  beta_slow: float = knob(1.0, "YaRN beta_slow (rotations bounding the ramp from below)")

  def __post_init__(self):
    super().__post_init__()
    if not self.beta_slow > 0:
      raise ValueError(f"beta_slow must be above 0 (rotations over the training length), got "
                       f"{self.beta_slow:g}.")
    if not self.beta_fast >= self.beta_slow:
      raise ValueError(f"beta_fast must be at least beta_slow ({self.beta_slow:g}): the ramp runs "
                       f"from beta_fast rotations down to beta_slow; got {self.beta_fast:g}.")

  def rotary_changes(self):
    return dict(super().rotary_changes(), beta_fast=self.beta_fast, beta_slow=self.beta_slow)


@register
@dataclasses.dataclass(frozen=True)
class Llama3(RopeScaling):
  name = "llama3"
  summary = "wavelength-banded interpolation (Llama 3.1)"
  paper = "Meta 2024, The Llama 3 Herd of Models (arXiv 2407.21783); HF rope_type='llama3'"
  low_freq_factor: float = knob(1.0, "llama3 low_freq_factor")
  high_freq_factor: float = knob(4.0, "llama3 high_freq_factor")

  def rotary_changes(self):
    return dict(super().rotary_changes(), low_freq_factor=self.low_freq_factor,
                high_freq_factor=self.high_freq_factor)
