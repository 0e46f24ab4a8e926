"""What one attention call is: a `Spec` (fixed per layer and length) and its `Learned` arrays.

`Spec` holds every setting of the score a_ij besides the arrays a layer's parameters produce, with
every default already resolved (models/attention_block.py resolves it once from the config, the
position method and the evaluation column) and every value checked in its own constructor: a
setting out of range, or one without its partner, is a ValueError naming it. A far rotation is one
value, `far` (attention/far.py: ReRoPE, Self-Extend, STRING, dual chunk attention or StreamingLLM's
cache, each with its own parameters). `Learned` holds the arrays (bias functions, forget gates,
CoPE's embeddings, SSMax's scale, PaTH's Householder factors). prepare.py computes with both; what
the kernels need to know (`Mods`) is derived here, never restated by a caller.

A `Spec` is a JAX pytree: its inference-time numbers (`NUMBERS`, with its far rule's: ReRoPE's
leak) are its leaves, every other field its static structure. Passed to a jitted function as an
argument, the numbers enter the compiled program as arguments rather than constants, and settings
that differ only in them share one program (models.given_specs; the evaluator's columns).
"""

import dataclasses
import math
import typing
from typing import Callable, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from keynorm_jax.attention.far import Far
from keynorm_jax.attention.pytree import register_record

Variant = Literal["baseline", "qna", "kna", "cosa", "stickbreaking"]
VARIANTS: tuple[str, ...] = typing.get_args(Variant)


def cosa_default_scale(train_length: int) -> float:
  """CosA's lambda = 4 log n with n = half the training length."""
  return 4.0 * math.log(train_length / 2)


class Mods(NamedTuple):
  """What a kernel adds to or masks in q . k x multiplier (static, except the arrays named)."""
  alibi_slopes: jax.Array | None = None      # [H] float32: -m_h (distance) added
  score_bias: Callable | None = None         # learned bias(distance [B, Q, K], query positions)
  window: int | None = None                  # keep 0 <= p_i - p_j < window
  sink_tokens: int | None = None             # with window: also keep p_j < sink_tokens
  far: Far | None = None                     # the far rule (attention/far.py)
  explicit_positions: bool = False           # positions were given (not 0..T-1 by index)
  forget_gate: bool = False                  # FoX: c_i - c_j of the sides' decay added
  scale_invariant_tau: float | None = None   # a_t score + m_t at distance t (scores.py)
  stick_breaking: bool = False               # stick-breaking weights instead of the softmax
  cope_embeddings: jax.Array | None = None   # [S, npos]: CoPE's position embeddings
  path: bool = False                         # PaTH: q_i^T H_i ... H_{j+1} k_j (Prepared.path)


class PathFactors(NamedTuple):
  """PaTH's Householder factors H_t = I - beta_t w_t w_t^T of a layer (attention/path.py), per
  key/value head: w [B, T, Hkv, S] (unit vectors), beta [B, T, Hkv] (in (0, 2))."""
  w: jax.Array
  beta: jax.Array


class Learned(NamedTuple):
  """The arrays of a layer's own parameters that enter its scores (None: the layer has none).

  score_bias: bias(distance [B, Q, K] float32, query positions [B, Q]) -> [B, H, Q, K] (KERPLE,
    FIRE). log_forget: [B, T, H] FoX's log forget gates. cope_embeddings: [S, npos] CoPE's
    position embeddings. ssmax_scale: [H] SSMax's s. path: PaTH's factors (PathFactors).
  """
  score_bias: Callable | None = None
  log_forget: jax.Array | None = None
  cope_embeddings: jax.Array | None = None
  ssmax_scale: jax.Array | None = None
  path: PathFactors | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class ScoreRules:
  """The settings a position method gives a layer's scores that its attention takes as they are:
  declared once, here, for both records (positions.AttentionSpec and Spec inherit them).

  logit_scale: every score times this; llama4_temperature: (a, F): query i's scores times
  1 + a log(1 + floor((i + 1) / F)); posthoc_ssmax: s: query i's scores times s log(i + 1).
  far: the far rule (attention/far.py), or None. window: keep 0 <= p_i - p_j < window;
  sink_tokens: with window, also keep p_j < sink_tokens (attention sinks).
  scale_invariant_tau: scale-invariant attention's tau (a score S at distance t: a_t S + m_t).
  """
  logit_scale: float = 1.0
  llama4_temperature: tuple[float, float] | None = None
  posthoc_ssmax: float | None = None
  far: Far | None = None
  window: int | None = None
  sink_tokens: int | None = None
  scale_invariant_tau: float | None = None


def _at_least(name, value, low, *, strict=False):
  if value is not None and not (value > low if strict else value >= low):
    raise ValueError(f"{name} must be {'>' if strict else '>='} {low}, got {value}.")


@dataclasses.dataclass(frozen=True, eq=False)
class Spec(ScoreRules):
  """One attention call's settings, defaults resolved (see attention/prepare.py for the formulas):
  ScoreRules' (a far rule that re-places rotations needs inv_freq), and

  variant: one of VARIANTS. cosa_scale: CosA's lambda (needed by cosa).
  inv_freq: [S / 2] RoPE frequencies (None: no rotation); attention_factor: YaRN's, every score
    times its square; xpos_gamma, xpos_scale_base: xPos's decay (needs inv_freq).
  logn_base: n0 of the trained log n (None: off); posthoc_logn_length: the inference-only log n's
    L_train (None: off). (SSMax's s is learned: Learned.ssmax_scale.)
  alibi_slopes: [H] (or one) ALiBi slopes.
  """
  variant: Variant = "baseline"
  cosa_scale: float | None = None
  inv_freq: np.ndarray | jax.Array | None = None
  attention_factor: float = 1.0
  xpos_gamma: float | None = None
  xpos_scale_base: float = 512.0
  logn_base: float | None = None
  posthoc_logn_length: int | None = None
  alibi_slopes: np.ndarray | jax.Array | float | None = None

  def __post_init__(self):
    if self.variant not in VARIANTS:
      raise ValueError(f"Unknown attention variant {self.variant!r}; choose one of "
                       f"{', '.join(VARIANTS)}.")
    if self.variant == "cosa" and self.cosa_scale is None:
      raise ValueError("variant 'cosa' needs cosa_scale (lambda, e.g. 4 log(train_length / 2)).")
    _at_least("logn_base (n0)", self.logn_base, 1, strict=True)
    _at_least("window", self.window, 1)
    if self.sink_tokens is not None and self.window is None:
      raise ValueError("sink_tokens needs window (StreamingLLM keeps the sinks plus a window).")
    if self.xpos_gamma is not None and self.inv_freq is None:
      raise ValueError("xpos_gamma needs inv_freq (xPos is a RoPE).")
    if self.far is not None and self.far.rotates and self.inv_freq is None:
      raise ValueError(f"far={self.far} re-places RoPE's rotation of the far keys: it needs "
                       f"inv_freq.")
    _at_least("scale_invariant_tau (tau of log(1 + t / tau))", self.scale_invariant_tau, 0,
              strict=True)

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
    preparing; attend derives it once per call and hands it to prepare). A ValueError where
    PaTH's factors meet a setting they do not compose with (`path_conflicts`)."""
    if learned.path is not None:
      conflicts = path_conflicts(self, learned, explicit_positions)
      if conflicts:
        raise ValueError(f"PaTH (Learned.path) scores q_i^T H_i ... H_{{j+1}} k_j by chunks with "
                         f"only a window, a factor per query and FoX's gates besides; it does not "
                         f"compose with {', '.join(conflicts)}: drop them.")
    slopes = None if self.alibi_slopes is None else jnp.asarray(self.alibi_slopes, jnp.float32)
    return Mods(alibi_slopes=slopes, score_bias=learned.score_bias, window=self.window,
                sink_tokens=self.sink_tokens, far=self.far,
                explicit_positions=explicit_positions, forget_gate=learned.log_forget is not None,
                scale_invariant_tau=(None if self.scale_invariant_tau is None else
                                     float(self.scale_invariant_tau)),
                stick_breaking=self.variant == "stickbreaking",
                cope_embeddings=(None if learned.cope_embeddings is None else
                                 jnp.asarray(learned.cope_embeddings)),
                path=learned.path is not None)


def path_conflicts(spec: Spec, learned: Learned, explicit_positions: bool) -> list[str]:
  """The settings of a call that PaTH's chunked scores cannot join (attention/path.py: its
  Householder products are the positions, a window is counted by sequence index, and every query's
  scores are summed in an online softmax)."""
  present = {"RoPE (inv_freq)": spec.inv_freq is not None, "a far rule (far)": spec.far is not None,
             "attention sinks (sink_tokens)": spec.sink_tokens is not None,
             "ALiBi (alibi_slopes)": spec.alibi_slopes is not None,
             "a learned score bias (score_bias)": learned.score_bias is not None,
             "CoPE (cope_embeddings)": learned.cope_embeddings is not None,
             "scale-invariant attention (scale_invariant_tau)":
                 spec.scale_invariant_tau is not None,
             "stick-breaking (variant)": spec.variant == "stickbreaking",
             "a window over explicit positions": explicit_positions and spec.window is not None}
  return [name for name, found in present.items() if found]


# The fields that may be traced (the pytree's leaves, with the far rule's own): numbers that only
# enter arithmetic on the scores or the rotation, so a compiled program can take them as
# arguments. Every other field is static (the pytree's structure): the variant, a knob that is
# absent or present (None or not), the windows and integer positions (`window`, `sink_tokens`, the
# far rule's windows and sizes: the kernels choose blocks, skip them and call cuDNN's sliding
# window from them in Python), and the training-time numbers (`cosa_scale`, `logn_base`,
# `posthoc_logn_length`, `xpos_*`, `scale_invariant_tau`, fixed by the model: kept as constants so
# that training computes exactly as before).
NUMBERS = ("inv_freq", "attention_factor", "logit_scale", "llama4_temperature", "posthoc_ssmax",
           "alibi_slopes", "far")
register_record(Spec, NUMBERS)
