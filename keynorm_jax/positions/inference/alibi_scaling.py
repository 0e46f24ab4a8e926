"""ALiBi's slopes scaled for a longer context."""

import dataclasses

from keynorm_jax.positions.inference.base import Scaled, register
from keynorm_jax.positions.training_methods import ALiBi


@dataclasses.dataclass(frozen=True)
class AlibiScaling(Scaled):
  def skip_reason(self, method, num_heads, trained_scaling="none"):
    return None if isinstance(method, ALiBi) else f"{method.name} has no ALiBi slopes"

  # Each subclass defines scaled(slopes) -> new slopes.

  def apply(self, spec, train_length):
    if spec.alibi_slopes is None:
      return spec
    return spec.replace(alibi_slopes=tuple(self.scaled(spec.alibi_slopes)))


@register
@dataclasses.dataclass(frozen=True)
class AlibiInterpolate(AlibiScaling):
  name = "alibi_interpolate"
  summary = "ALiBi slopes divided by s"
  paper = "Al-Khateeb et al. 2023, Position Interpolation Improves ALiBi Extrapolation (arXiv 2310.13017)"

  def scaled(self, slopes):
    return [m / self.factor for m in slopes]


@register
@dataclasses.dataclass(frozen=True)
class NTKAlibi(AlibiScaling):
  name = "ntk_alibi"
  summary = "first head's slope kept, last head's divided by s, geometric between"
  paper = "keezen/ntk_alibi (GitHub, 2023): m_h / s^(h / (H - 1))"

  def skip_reason(self, method, num_heads, trained_scaling="none"):
    if num_heads < 2:
      return "ntk_alibi keeps the first head and interpolates the last: it needs several heads"
    return super().skip_reason(method, num_heads, trained_scaling)

  def scaled(self, slopes):
    last = len(slopes) - 1
    return [m / self.factor**(h / last) for h, m in enumerate(slopes)]
