"""Windows at inference: a sliding window, and attention sinks (StreamingLLM): a window, the first
tokens kept besides it, and a far rule for the keys outside it (attention.far)."""

import dataclasses

from keynorm_jax.attention import far
from keynorm_jax.positions.inference.base import InferenceMethod, check_positive, register
from keynorm_jax.positions.registry import knob


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
    return dataclasses.replace(self, window=self.window or train_length)

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
    return dataclasses.replace(self, window=self.window or max(1, train_length - self.sink_tokens))

  def apply(self, spec, train_length):
    window = self.window if spec.window is None else min(spec.window, self.window)
    return spec.replace(window=window, sink_tokens=self.sink_tokens,
                        far=far.StreamingCache(self.sink_tokens, window))

