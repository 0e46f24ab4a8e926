"""What one attention layer needs from the position methods: an `AttentionSpec`.

A training-time method gives each layer its spec; an inference-time method rewrites it (weights
unchanged). The model resolves it, with its own settings, into the attention's `attention.Spec`
(models/attention_block.py: attention_spec).
"""

import dataclasses
import math

import numpy as np

from keynorm_jax import rope
from keynorm_jax.attention.spec import ScoreRules


@dataclasses.dataclass(frozen=True)
class RotarySpec:
  """RoPE of one layer: its base, frequency scaling, p-RoPE fraction and xPos decay."""
  base: float = 10000.0
  scaling: str = "none"            # one of rope.SCALINGS
  factor: float = 1.0
  beta_fast: float = 32.0
  beta_slow: float = 1.0
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  fraction: float = 1.0            # p-RoPE: share of pairs rotated (the highest frequencies)
  xpos_gamma: float | None = None  # xPos decay zeta_m = (2m/S + gamma) / (1 + gamma)
  xpos_scale_base: float | None = None
  original_length: int | None = None  # the length `scaling` scales from; None: the training length

  def __post_init__(self):
    if self.original_length is not None and self.original_length < 1:
      raise ValueError(f"original_length must be at least 1 (or unset: the training length), got "
                       f"{self.original_length}.")


# The fields of a RotarySpec that the model's own (trained) RoPE scaling sets, besides `scaling`
# (config section model.rope_scaling, whose `type` is the scaling).
SCALING_KNOBS = ("factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor",
                 "original_length")


@dataclasses.dataclass(frozen=True)
class PathSpec:
  """PaTH's factors of one layer (models/position_bias.py builds them from the layer's input):
  w's projection of rank `w_rank` (0: one full projection) and causal convolution of `conv_size`
  with SiLU (0: none, and no SiLU)."""
  w_rank: int = 32
  conv_size: int = 3

  def __post_init__(self):
    for name, value, zero in (("path_w_rank", self.w_rank, "a full projection"),
                              ("path_conv_size", self.conv_size, "no convolution")):
      if value < 0:
        raise ValueError(f"{name} must be >= 0 (0: {zero}), got {value}.")


def scaled_from(original_length: int | None, train_length: int) -> int:
  """The length a RoPE scaling scales from: original_length, or (None) the training length."""
  return train_length if original_length is None else original_length


def rope_scaling_defaults() -> dict:
  """model.rope_scaling's fields and defaults: type "none" and RotarySpec's SCALING_KNOBS."""
  plain = RotarySpec()
  return {"type": plain.scaling, **{name: getattr(plain, name) for name in SCALING_KNOBS}}


@dataclasses.dataclass(frozen=True)
class AttentionSpec(ScoreRules):
  """Position settings of one attention layer: attention.ScoreRules' (its far rule, window, sinks,
  temperatures, scale-invariant's tau: the attention takes them as they are), and

  Attributes:
    rotary: RoPE settings, or None for no rotation (NoPE, absolute, bias methods).
    alibi_slopes: one slope per head; the bias -m (i - j) is added to the scores.
    learned_bias: "kerple_log" or "fire": the layer owns a learnable bias of that kind.
    forget_gate: FoX: the layer owns per-head forget gates f_t = sigmoid(w . x_t + b) on its input
      x_t, adding sum_{l=j+1..i} log f_l to the scores.
    cope_positions: CoPE: the layer owns position embeddings e [head size, cope_positions] and adds
      q_i . e[p_ij] at the contextual position p_ij (capped at cope_positions - 1).
    path: PaTH: the layer owns Householder factors H_t = I - beta_t w_t w_t^T of its input x_t per
      key/value head, and scores q_i^T H_i ... H_{j+1} k_j (attention/path.py).
    logn: trained log n on (True), off (False) or as the model is configured (None).
    posthoc_logn: inference-only max(1, log(i + 1) / log(L_train)) on the scores.
  """
  rotary: RotarySpec | None = None
  alibi_slopes: tuple[float, ...] | None = None
  learned_bias: str | None = None
  forget_gate: bool = False
  cope_positions: int | None = None
  path: PathSpec | None = None
  logn: bool | None = None
  posthoc_logn: bool = False

  def replace(self, **changes) -> "AttentionSpec":
    return dataclasses.replace(self, **changes)

  def with_rope_scaling(self, type: str, **knobs) -> "AttentionSpec":  # pylint: disable=redefined-builtin
    """This spec with a RoPE scaling (rope.SCALINGS; knobs from SCALING_KNOBS) on its rotation;
    a layer without RoPE is left as it is."""
    if self.rotary is None:
      return self
    return self.replace(rotary=dataclasses.replace(self.rotary, scaling=type, **knobs))


def rotary_inv_freq(rotary: RotarySpec, *, rotary_dim: int, train_length: int, seq_length: int):
  """(inv_freq [rotary_dim // 2] float32, attention_factor) of a RotarySpec.

  p-RoPE leaves the lowest frequencies (the last pairs) unrotated: their frequency is 0.
  """
  inv_freq, attention_factor = rope.rope_inv_freq(
      rotary_dim, base=rotary.base, scaling=rotary.scaling, factor=rotary.factor,
      train_length=scaled_from(rotary.original_length, train_length), seq_length=seq_length,
      beta_fast=rotary.beta_fast, beta_slow=rotary.beta_slow,
      low_freq_factor=rotary.low_freq_factor, high_freq_factor=rotary.high_freq_factor)
  if rotary.fraction < 1.0:
    inv_freq = inv_freq * np.asarray(rope.p_rope_mask(rotary_dim, rotary.fraction), np.float32)
  return inv_freq, attention_factor


def alibi_slopes(num_heads: int) -> tuple[float, ...]:
  """ALiBi's head slopes (Press et al. 2022): 2^(-8h/H), h = 1..H, for H a power of two; else the
  slopes of the nearest lower power of two followed by every other slope of the next one."""
  def power_of_two(n):
    return [2.0**(-8.0 * h / n) for h in range(1, n + 1)]
  if num_heads & (num_heads - 1) == 0:
    return tuple(power_of_two(num_heads))
  lower = 2**math.floor(math.log2(num_heads))
  return tuple(power_of_two(lower) + power_of_two(2 * lower)[0::2][:num_heads - lower])
