"""Windows at inference: a sliding window, attention sinks (StreamingLLM) and LM-Infinite's
Lambda-shaped mask, each a window, the first tokens kept besides it, and a far rule for the keys
outside it (attention.far). The sinks do not apply to PaTH (`sinks_skip_reason`)."""

import dataclasses

from keynorm_jax.attention import far
from keynorm_jax.positions.inference.base import (InferenceMethod, check_positive, register,
                                                  unset_or)
from keynorm_jax.positions.registry import knob


def sinks_skip_reason(method) -> str | None:
  """Why attention sinks do not apply to a model with this training method, or None."""
  if method.path:
    return (f"{method.name} moves a key through the Householder factors of every token between it "
            f"and the query, and a sink outside the window has no such pass here")
  return None


@register
@dataclasses.dataclass(frozen=True)
class Window(InferenceMethod):
  name = "window"
  summary = "sliding-window attention (keys with i - j < w)"
  paper = "Su 2023, kexue.fm/archives/9431 (window attention with log n)"
  window: int | None = knob(None, "attention window w (window, streaming); default train_length "
                            "(streaming: train_length - sink_tokens)")

  def __post_init__(self):
    check_positive("window", self.window)

  def at(self, length, train_length):
    return dataclasses.replace(self, window=unset_or(self.window, train_length))

  def apply(self, spec, train_length):
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
    check_positive("window", self.window)
    if self.sink_tokens < 0:
      raise ValueError(f"sink_tokens must be >= 0, got {self.sink_tokens}.")

  def at(self, length, train_length):
    return dataclasses.replace(
        self, window=unset_or(self.window, max(1, train_length - self.sink_tokens)))

  def skip_reason(self, method, num_heads, trained_scaling="none"):
    return sinks_skip_reason(method)

  def apply(self, spec, train_length):
    window = self.window if spec.window is None else min(spec.window, self.window)
    return spec.replace(window=window, sink_tokens=self.sink_tokens,
                        far=far.StreamingCache(self.sink_tokens, window))


@register
@dataclasses.dataclass(frozen=True)
class LMInfinite(InferenceMethod):
  """LM-Infinite: a Lambda-shaped mask, the first n_global tokens and the last n_local, and every
  distance capped at the training length L (its distance limit: a key at t >= L scored at L,
  rotated as the paper's code does, the query at L against the key unrotated, and biased at L, as
  its ALiBi code caps the bias). The paper's defaults: n_local = L (the pretraining length) and
  n_global = 10 (its code's; 10 to 100 "give generally similar effect"). On every layer, with
  RoPE or a bias or neither (the mask alone)."""
  name = "lm_infinite"
  summary = ("Lambda-shaped mask (the first n_global tokens plus the last n_local), distances "
             "capped at train_length")
  paper = "Han et al. 2024, LM-Infinite (NAACL 2024, arXiv 2308.16137)"
  n_global: int = knob(10, "LM-Infinite's global branch: the first tokens every query keeps")
  n_local: int | None = knob(None, "LM-Infinite's local branch: the last tokens every query "
                             "keeps; default train_length")

  def __post_init__(self):
    check_positive("n_local", self.n_local)
    if self.n_global < 0:
      raise ValueError(f"n_global must be >= 0, got {self.n_global}.")

  def at(self, length, train_length):
    n_local = unset_or(self.n_local, train_length)
    if n_local > train_length:
      raise ValueError(f"n_local {n_local} must be at most the training length {train_length} "
                       f"(the local branch's distances stay within the distance limit).")
    return dataclasses.replace(self, n_local=n_local)

  def skip_reason(self, method, num_heads, trained_scaling="none"):
    return sinks_skip_reason(method)

  def apply(self, spec, train_length):
    window = self.n_local if spec.window is None else min(spec.window, self.n_local)
    return spec.replace(window=window, sink_tokens=self.n_global,
                        far=far.DistanceLimit(train_length))
