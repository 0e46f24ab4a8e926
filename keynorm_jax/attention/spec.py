"""What one attention call is: a `Spec` (fixed per layer and length) and its `Learned` arrays.

`Spec` holds every setting of the score a_ij besides the arrays a layer's parameters produce, with
every default already resolved (models/attention_block.py resolves it once from the config, the
position method and the evaluation column) and every value checked in its own constructor: a
setting out of range, or one without its partner, is a ValueError naming it. `Learned` holds the
arrays (bias functions, forget gates, CoPE's embeddings, SSMax's scale). prepare.py computes with
both; what the kernels need to know (`Mods`) is derived here, never restated by a caller.

A `Spec` is a JAX pytree: its inference-time numbers (`NUMBERS`) are its leaves, every other field
its static structure. Passed to a jitted function as an argument, the numbers enter the compiled
program as arguments rather than constants, and settings that differ only in them share one
program (models/attention_block.py: GIVEN_SPECS; the evaluator's columns).
"""

import dataclasses
import math
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

VARIANTS = ("baseline", "qna", "kna", "cosa", "stickbreaking")


def cosa_default_scale(train_length: int) -> float:
  """CosA's lambda = 4 log n with n = half the training length."""
  return 4.0 * math.log(train_length / 2)


class Mods(NamedTuple):
  """What a kernel adds to or masks in q . k x multiplier (static, except the arrays named)."""
  alibi_slopes: Optional[jax.Array] = None   # [H] float32: -m_h (distance) added
  score_bias: Optional[Callable] = None      # learned bias(distance [B, Q, K], query positions)
  window: Optional[int] = None               # keep 0 <= p_i - p_j < window
  sink_tokens: Optional[int] = None          # with window: also keep p_j < sink_tokens
  far_from: Optional[int] = None             # distance from which the far rotation scores
  explicit_positions: bool = False           # positions were given (not 0..T-1 by index)
  forget_gate: bool = False                  # FoX: c_i - c_j of the sides' decay added
  scale_invariant_tau: Optional[float] = None  # a_t score + m_t at distance t (scores.py)
  stick_breaking: bool = False               # stick-breaking weights instead of the softmax
  cope_embeddings: Optional[jax.Array] = None  # [S, npos]: CoPE's position embeddings
  dca_chunk: Optional[int] = None            # DCA: near within a chunk, far / farthest across


class Learned(NamedTuple):
  """The arrays of a layer's own parameters that enter its scores (None: the layer has none).

  score_bias: bias(distance [B, Q, K] float32, query positions [B, Q]) -> [B, H, Q, K] (KERPLE,
    FIRE). log_forget: [B, T, H] FoX's log forget gates. cope_embeddings: [S, npos] CoPE's
    position embeddings. ssmax_scale: [H] SSMax's s.
  """
  score_bias: Optional[Callable] = None
  log_forget: Optional[jax.Array] = None
  cope_embeddings: Optional[jax.Array] = None
  ssmax_scale: Optional[jax.Array] = None


def _at_least(name, value, low, *, strict=False):
  if value is not None and not (value > low if strict else value >= low):
    raise ValueError(f"{name} must be {'>' if strict else '>='} {low}, got {value}.")


@dataclasses.dataclass(frozen=True, eq=False)
class Spec:
  """One attention call's settings, defaults resolved (see attention/prepare.py for the formulas).

  variant: one of VARIANTS. cosa_scale: CosA's lambda (needed by cosa).
  inv_freq: [S / 2] RoPE frequencies (None: no rotation); attention_factor: YaRN's, every score
    times its square; xpos_gamma, xpos_scale_base: xPos's decay (needs inv_freq).
  logn_base: n0 of the trained log n (None: off); posthoc_logn_length: the inference-only log n's
    L_train (None: off). (SSMax's s is learned: Learned.ssmax_scale.)
  logit_scale: every score times this; llama4_temperature: (a, F); posthoc_ssmax: s.
  rerope_window, leaky_rerope_factor: ReRoPE; self_extend_group, string_window, dca_chunk with
    dca_length: Self-Extend, STRING, dual chunk attention (all need inv_freq to matter).
  window, sink_tokens: sliding window, StreamingLLM's sinks. alibi_slopes: [H] ALiBi slopes.
  scale_invariant_tau: scale-invariant attention's tau.
  """
  variant: str = "baseline"
  cosa_scale: Optional[float] = None
  inv_freq: Optional[np.ndarray] = None
  attention_factor: float = 1.0
  xpos_gamma: Optional[float] = None
  xpos_scale_base: float = 512.0
  logn_base: Optional[float] = None
  posthoc_logn_length: Optional[int] = None
  logit_scale: float = 1.0
  llama4_temperature: Optional[tuple] = None
  posthoc_ssmax: Optional[float] = None
  rerope_window: Optional[int] = None
  leaky_rerope_factor: Optional[float] = None
  self_extend_group: Optional[int] = None
  string_window: Optional[int] = None
  dca_chunk: Optional[int] = None
  dca_length: Optional[int] = None
  window: Optional[int] = None
  sink_tokens: Optional[int] = None
  alibi_slopes: Optional[tuple] = None
  scale_invariant_tau: Optional[float] = None

  def __post_init__(self):
    if self.variant not in VARIANTS:
      raise ValueError(f"Unknown attention variant {self.variant!r}; choose one of "
                       f"{', '.join(VARIANTS)}.")
    if self.variant == "cosa" and self.cosa_scale is None:
      raise ValueError("variant 'cosa' needs cosa_scale (lambda, e.g. 4 log(train_length / 2)).")
    if self.leaky_rerope_factor is not None and self.rerope_window is None:
      raise ValueError("leaky_rerope_factor needs rerope_window (the window w).")
    _at_least("rerope_window", self.rerope_window, 1)
    _at_least("leaky_rerope_factor", self.leaky_rerope_factor, 1)
    _at_least("logn_base (n0)", self.logn_base, 1, strict=True)
    _at_least("window", self.window, 1)
    if self.sink_tokens is not None and self.window is None:
      raise ValueError("sink_tokens needs window (StreamingLLM keeps the sinks plus a window).")
    if self.sink_tokens is not None and self.rerope_window is not None:
      raise ValueError("sink_tokens and rerope_window cannot be combined (both re-place far "
                       "keys).")
    if self.xpos_gamma is not None and self.inv_freq is None:
      raise ValueError("xpos_gamma needs inv_freq (xPos is a RoPE).")
    _at_least("scale_invariant_tau (tau of log(1 + t / tau))", self.scale_invariant_tau, 0,
              strict=True)
    if self.string_window is not None:
      if (self.rerope_window is None or self.leaky_rerope_factor is not None
          or self.self_extend_group is not None):
        raise ValueError("string_window needs rerope_window (STRING's shift S) and neither "
                         "leaky_rerope_factor nor self_extend_group.")
      if not 0 <= self.string_window <= self.rerope_window:
        raise ValueError(f"string_window (STRING's local window W) must be in [0, S = "
                         f"{self.rerope_window}] (shifted distances stay below the unshifted "
                         f"ones), got {self.string_window}.")
    if self.self_extend_group is not None:
      if self.rerope_window is None or self.leaky_rerope_factor is not None:
        raise ValueError("self_extend_group needs rerope_window (Self-Extend's neighbor window) "
                         "and no leaky_rerope_factor.")
      _at_least("self_extend_group (Self-Extend's group size G)", self.self_extend_group, 1)
    if self.dca_chunk is not None and (self.dca_length is None
                                       or not 1 <= self.dca_chunk < self.dca_length
                                       or self.rerope_window is not None
                                       or self.sink_tokens is not None):
      raise ValueError(f"dca_chunk (DCA's chunk size s) needs dca_length (the pretraining length "
                       f"c) with 1 <= s < c and no rerope_window or sink_tokens; got s = "
                       f"{self.dca_chunk}, c = {self.dca_length}.")

  def replace(self, **changes) -> "Spec":
    return dataclasses.replace(self, **changes)

  @property
  def rotary(self) -> bool:
    return self.inv_freq is not None

  def score_scale(self, size: int) -> float:
    """The variant's factor on q . k (S = head size), times YaRN's attention factor squared and
    the logit scale."""
    variant_scale = {"baseline": 1.0 / math.sqrt(size), "qna": 1.0, "kna": 1.0,
                     "cosa": self.cosa_scale, "stickbreaking": 1.0 / math.sqrt(size)}[self.variant]
    return variant_scale * self.attention_factor**2 * self.logit_scale

  def mods(self, learned: Learned = Learned(), *, explicit_positions: bool = False) -> Mods:
    """What the kernels add or mask (no array work: a kernel is chosen from it before
    preparing)."""
    far_from = None
    if self.rotary and self.rerope_window is not None:
      far_from = self.rerope_window
    elif self.rotary and self.sink_tokens is not None:
      far_from = self.window     # q sits at the cache's last slot k + w - 1, a sink key at p_j
    slopes = None if self.alibi_slopes is None else jnp.asarray(self.alibi_slopes, jnp.float32)
    return Mods(alibi_slopes=slopes, score_bias=learned.score_bias, window=self.window,
                sink_tokens=self.sink_tokens, far_from=far_from,
                explicit_positions=explicit_positions, forget_gate=learned.log_forget is not None,
                scale_invariant_tau=(None if self.scale_invariant_tau is None else
                                     float(self.scale_invariant_tau)),
                stick_breaking=self.variant == "stickbreaking",
                cope_embeddings=(None if learned.cope_embeddings is None else
                                 jnp.asarray(learned.cope_embeddings)),
                dca_chunk=self.dca_chunk if self.rotary else None)


# The fields that may be traced (the pytree's leaves): numbers that only enter arithmetic on the
# scores or the rotation, so a compiled program can take them as arguments. Every other field is
# static (the pytree's structure): the variant, a knob that is absent or present (None or not), the
# windows and integer positions (`window`, `sink_tokens`, `rerope_window`, `self_extend_group`,
# `string_window`, `dca_chunk`, `dca_length`: the kernels choose blocks, skip them and call cuDNN's
# sliding window from them in Python), and the training-time numbers (`cosa_scale`, `logn_base`,
# `posthoc_logn_length`, `xpos_*`, `scale_invariant_tau`, fixed by the model: kept as constants so
# that training computes exactly as before).
NUMBERS = ("inv_freq", "attention_factor", "logit_scale", "llama4_temperature", "posthoc_ssmax",
           "leaky_rerope_factor", "alibi_slopes")
_STATIC = tuple(f.name for f in dataclasses.fields(Spec) if f.name not in NUMBERS)


def _flatten(spec: Spec):
  return (tuple(getattr(spec, name) for name in NUMBERS),
          tuple(getattr(spec, name) for name in _STATIC))


def _unflatten(static, numbers) -> Spec:
  """A Spec from its parts without __post_init__: the values were checked when it was made, and
  inside a trace the numbers are tracers (or JAX's placeholders), which no check can read."""
  spec = object.__new__(Spec)
  for name, value in zip(_STATIC + NUMBERS, static + tuple(numbers)):
    object.__setattr__(spec, name, value)
  return spec


jax.tree_util.register_pytree_node(Spec, _flatten, _unflatten)
