"""Inference-time position methods (the evaluator's columns; weights unchanged), one class each.

A method's knobs left None take their default at the evaluated length (`at`). `skip_reason` says why
a method does not apply to a model (e.g. a RoPE scaling on an ALiBi model); `apply` rewrites a
layer's AttentionSpec.
"""

import dataclasses
import math
import typing

from keynorm_jax.positions.registry import Method, Registry, knob
from keynorm_jax.positions.spec import AttentionSpec
from keynorm_jax.positions.training_methods import ALiBi, TrainingMethod

INFERENCE_METHODS = Registry("inference method")
register = INFERENCE_METHODS.register


def _check_factor(factor):
  if factor is not None and not factor >= 1.0:
    raise ValueError(f"factor must be >= 1 (or left unset for length / train_length), got "
                     f"{factor}.")


def _check_positive(name, value):
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

  def apply(self, spec: AttentionSpec) -> AttentionSpec:
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
    _check_factor(self.factor)

  def default_factor(self, length, train_length):
    return max(1.0, length / train_length)

  def at(self, length, train_length):
    return dataclasses.replace(self, factor=self.factor or self.default_factor(length,
                                                                               train_length))


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

  def apply(self, spec):
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


@dataclasses.dataclass(frozen=True)
class RelativeRewrite(InferenceMethod):
  """Base of the methods that change the relative positions a RoPE layer scores at (ReRoPE,
  Self-Extend, DCA, STRING): `spec_changes()` on the layers with RoPE, the others as they are."""
  verb: typing.ClassVar[str] = "change"   # in the skip reason: "<method> has no RoPE to <verb>"

  def skip_reason(self, method, num_heads, trained_scaling="none"):
    return None if method.rotary else f"{method.name} has no RoPE to {self.verb}"

  def apply(self, spec):
    return spec if spec.rotary is None else spec.replace(**self.spec_changes())


@register
@dataclasses.dataclass(frozen=True)
class ReRoPE(RelativeRewrite):
  name = "rerope"
  summary = "relative positions clipped at a window"
  paper = "Su 2023, kexue.fm/archives/9708 (bojone/rerope)"
  verb = "clip"
  rerope_window: int | None = knob(None, "ReRoPE window w; default train_length / 2")

  def __post_init__(self):
    _check_positive("rerope_window", self.rerope_window)

  def at(self, length, train_length):
    return dataclasses.replace(self, rerope_window=self.rerope_window or train_length // 2)

  def spec_changes(self):
    return dict(rerope_window=self.rerope_window)


@register
@dataclasses.dataclass(frozen=True)
class LeakyReRoPE(RelativeRewrite):
  name = "leaky_rerope"
  summary = "relative positions past a window compressed by k"
  paper = "Su 2023, kexue.fm/archives/9708 (bojone/rerope)"
  verb = "clip"
  leaky_rerope_window: int | None = knob(None, "leaky ReRoPE window; default train_length / 4")
  leaky_rerope_factor: float = knob(16.0, "leaky ReRoPE k: t -> w + (t - w) / k")

  def __post_init__(self):
    _check_positive("leaky_rerope_window", self.leaky_rerope_window)
    _check_positive("leaky_rerope_factor", self.leaky_rerope_factor)

  def at(self, length, train_length):
    return dataclasses.replace(
        self, leaky_rerope_window=self.leaky_rerope_window or train_length // 4)

  def spec_changes(self):
    return dict(rerope_window=self.leaky_rerope_window,
                        leaky_rerope_factor=self.leaky_rerope_factor)


@register
@dataclasses.dataclass(frozen=True)
class SelfExtend(RelativeRewrite):
  """Self-Extend: exact positions within the neighbor window, grouped ones beyond it.

  The paper's code defaults (G = 8, W = 1024) are for 4k-token Llamas; here W defaults to a quarter
  of the training length and G to the smallest group that keeps every grouped distance inside
  2/3 of the training length (LongLM's guidance: 2/3 L > W + (N - W) / G at length N).
  """
  name = "self_extend"
  summary = "exact positions within a neighbor window, floor(p / G) beyond it"
  paper = "Jin et al. 2024, LLM Maybe LongLM: Self-Extend (arXiv 2401.01325)"
  verb = "group"
  self_extend_window: int | None = knob(None, "Self-Extend neighbor window W; default "
                                        "train_length / 4")
  self_extend_group: int | None = knob(None, "Self-Extend group size G; default the smallest with "
                                       "W + (length - W) / G <= 2/3 train_length")

  def __post_init__(self):
    _check_positive("self_extend_window", self.self_extend_window)
    _check_positive("self_extend_group", self.self_extend_group)

  def at(self, length, train_length):
    window = self.self_extend_window or max(1, train_length // 4)
    room = max(1.0, 2 * train_length / 3 - window)
    group = self.self_extend_group or max(1, math.ceil((length - window) / room))
    return dataclasses.replace(self, self_extend_window=window, self_extend_group=group)

  def spec_changes(self):
    return dict(rerope_window=self.self_extend_window,
                        self_extend_group=self.self_extend_group)


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
    _check_positive("llama4_floor_scale", self.llama4_floor_scale)

  def at(self, length, train_length):
    return dataclasses.replace(self, llama4_floor_scale=self.llama4_floor_scale or train_length)

  def skip_reason(self, method, num_heads, trained_scaling="none"):
    if method.layers_without_rope:
      return None
    return f"Llama 4 tunes the layers without RoPE, and every {method.name} layer has RoPE"

  def apply(self, spec):
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
    return dataclasses.replace(self, ssmax_s=self.ssmax_s or 1.0 / math.log(train_length))

  def apply(self, spec):
    return spec.replace(posthoc_ssmax=self.ssmax_s)


@register
@dataclasses.dataclass(frozen=True)
class DCA(RelativeRewrite):
  """Dual chunk attention, as the paper's equations 2-8 with its local window w = c - s: keys at
  p_j mod s; a query scores its own chunk at the true positions, the previous chunk from
  min(s + p_i mod s, c - 1) and every earlier chunk from c - 1 (c = the training length). The
  paper's s is 3/4 of c; its released code differs (s' = 5c/8, and a temperature), not followed."""
  name = "dca"
  summary = "dual chunk attention: intra-, successive- and inter-chunk position indices"
  paper = "An et al. 2024, Training-Free Long-Context Scaling of Large Language Models (arXiv 2402.17463)"
  verb = "chunk"
  dca_chunk: int | None = knob(None, "DCA chunk size s; default 3/4 of train_length")

  def __post_init__(self):
    _check_positive("dca_chunk", self.dca_chunk)

  def at(self, length, train_length):
    chunk = self.dca_chunk or max(1, 3 * train_length // 4)
    if chunk >= train_length:
      raise ValueError(f"dca_chunk {chunk} must be below the training length {train_length} "
                       f"(the successive chunk's queries sit up to c - 1).")
    return dataclasses.replace(self, dca_chunk=chunk)

  def spec_changes(self):
    return dict(dca_chunk=self.dca_chunk)


@register
@dataclasses.dataclass(frozen=True)
class String(RelativeRewrite):
  """STRING: relative distances from S on are shifted down to t - S + W, so the largest distances
  (the least trained) are replaced by well-trained ones; the defaults are HKUNLP/STRING's (S a
  third of the training length, W 128, no more than S). Its code also multiplies cos and sin by
  1 + 0.1 ln 2; that extra is not applied here."""
  name = "string"
  summary = "distances t >= S shifted to t - S + W (STRING)"
  paper = "An et al. 2024, Why Does the Effective Context Length of LLMs Fall Short? (arXiv 2410.18745)"
  verb = "shift"
  string_shift: int | None = knob(None, "STRING shift S; default a third of train_length")
  string_window: int | None = knob(None, "STRING local window W; default 128 (at most S)")

  def __post_init__(self):
    _check_positive("string_shift", self.string_shift)
    if self.string_window is not None and self.string_window < 0:
      raise ValueError(f"string_window must be >= 0, got {self.string_window}.")
    if self.string_shift and self.string_window and self.string_window > self.string_shift:
      raise ValueError(f"string_window W = {self.string_window} must be at most string_shift S = "
                       f"{self.string_shift} (a shifted distance t - S + W stays below t).")

  def at(self, length, train_length):
    shift = self.string_shift or max(1, int(0.33 * train_length))
    window = self.string_window if self.string_window is not None else min(128, shift)
    return dataclasses.replace(self, string_shift=shift, string_window=window)

  def spec_changes(self):
    return dict(rerope_window=self.string_shift, string_window=self.string_window)


@dataclasses.dataclass(frozen=True)
class Temperature(Scaled):
  """Every score times a factor of s = length / train_length (`scale(s)`); weights unchanged."""

  def apply(self, spec):
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
class Window(InferenceMethod):
  name = "window"
  summary = "sliding-window attention (keys with i - j < w)"
  paper = "Su 2023, kexue.fm/archives/9431 (window attention with log n)"
  window: int | None = knob(None, "attention window w (window, streaming); default train_length "
                            "(streaming: train_length - sink_tokens)")

  def __post_init__(self):
    _check_positive("window", self.window)

  def at(self, length, train_length):
    return dataclasses.replace(self, window=self.window or train_length)

  def apply(self, spec):
    window = self.window if spec.window is None else min(spec.window, self.window)
    return spec.replace(window=window)


@register
@dataclasses.dataclass(frozen=True)
class Streaming(InferenceMethod):
  name = "streaming"
  summary = "attention sinks: the first k tokens plus the last w, cache positions"
  paper = "Xiao et al. 2023, Efficient Streaming Language Models with Attention Sinks (arXiv 2309.17453)"
  window: int | None = knob(None, "recent window w; default train_length - sink_tokens")
  sink_tokens: int = knob(4, "attention-sink tokens kept by streaming")

  def __post_init__(self):
    _check_positive("window", self.window)
    if self.sink_tokens < 0:
      raise ValueError(f"sink_tokens must be >= 0, got {self.sink_tokens}.")

  def at(self, length, train_length):
    return dataclasses.replace(self, window=self.window or max(1, train_length - self.sink_tokens))

  def apply(self, spec):
    window = self.window if spec.window is None else min(spec.window, self.window)
    return spec.replace(window=window, sink_tokens=self.sink_tokens)


@dataclasses.dataclass(frozen=True)
class AlibiScaling(Scaled):
  def skip_reason(self, method, num_heads, trained_scaling="none"):
    return None if isinstance(method, ALiBi) else f"{method.name} has no ALiBi slopes"

  # Each subclass defines scaled(slopes) -> new slopes.

  def apply(self, spec):
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


def inference_method(name: str, **knobs) -> InferenceMethod:
  """The method `name` with the knobs it has among `knobs` (others are ignored; None = default)."""
  cls = INFERENCE_METHODS.get(name)
  own = {f.name for f in dataclasses.fields(cls)}
  return cls(**{k: v for k, v in knobs.items() if k in own and v is not None})


@dataclasses.dataclass(frozen=True)
class EvalColumn:
  """One column of the evaluator: an inference method, optionally with post-hoc log n."""
  method: InferenceMethod = AsTrained()
  posthoc_logn: bool = False

  @property
  def label(self) -> str:
    """Short column name, e.g. 'yarn' or 'rerope+logn'."""
    return self.method.name + ("+logn" if self.posthoc_logn else "")

  def at(self, length: int, train_length: int) -> "EvalColumn":
    return dataclasses.replace(self, method=self.method.at(length, train_length))

  def apply(self, spec: AttentionSpec) -> AttentionSpec:
    spec = self.method.apply(spec)
    return spec.replace(posthoc_logn=True) if self.posthoc_logn else spec

  def record(self) -> dict:
    return {"method": self.method.name, **self.method.knob_values(),
            "posthoc_logn": self.posthoc_logn}
