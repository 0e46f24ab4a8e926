"""Relative-position rewrites of the RoPE layers: the distance a query scores a key at is clipped
(ReRoPE), compressed (leaky ReRoPE), grouped (Self-Extend), chunked (DCA) or shifted (STRING)."""

import abc
import dataclasses
import math
import typing

from keynorm_jax.attention import far
from keynorm_jax.positions.inference.base import (InferenceMethod, check_positive, register,
                                                  unset_or)
from keynorm_jax.positions.registry import knob


@dataclasses.dataclass(frozen=True)
class RelativeRewrite(InferenceMethod, abc.ABC):
  """Base of the methods that change the relative positions a RoPE layer scores at (ReRoPE,
  Self-Extend, DCA, STRING): their far rule (attention.far, `far_rule`) on the layers with RoPE,
  the others as they are."""
  verb: typing.ClassVar[str] = "change"   # in the skip reason: "<method> has no RoPE to <verb>"

  def skip_reason(self, method, num_heads, trained_scaling="none"):
    return None if method.rotary else f"{method.name} has no RoPE to {self.verb}"

  @abc.abstractmethod
  def far_rule(self, train_length: int) -> far.Far:
    """This method's far rule for a model trained at train_length."""

  def apply(self, spec, train_length):
    return spec if spec.rotary is None else spec.replace(far=self.far_rule(train_length))


@register
@dataclasses.dataclass(frozen=True)
class ReRoPE(RelativeRewrite):
  name = "rerope"
  summary = "relative positions clipped at a window"
  paper = "Su 2023, kexue.fm/archives/9708 (bojone/rerope)"
  verb = "clip"
  rerope_window: int | None = knob(None, "ReRoPE window w; default train_length / 2")

  def __post_init__(self):
    check_positive("rerope_window", self.rerope_window)

  def at(self, length, train_length):
    return dataclasses.replace(self, rerope_window=unset_or(self.rerope_window, train_length // 2))

  def far_rule(self, train_length):
    return far.ReRoPE(self.rerope_window)


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
    check_positive("leaky_rerope_window", self.leaky_rerope_window)
    check_positive("leaky_rerope_factor", self.leaky_rerope_factor)

  def at(self, length, train_length):
    return dataclasses.replace(
        self, leaky_rerope_window=unset_or(self.leaky_rerope_window, train_length // 4))

  def far_rule(self, train_length):
    return far.ReRoPE(self.leaky_rerope_window, self.leaky_rerope_factor)


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
    check_positive("self_extend_window", self.self_extend_window)
    check_positive("self_extend_group", self.self_extend_group)

  def at(self, length, train_length):
    window = unset_or(self.self_extend_window, max(1, train_length // 4))
    room = max(1.0, 2 * train_length / 3 - window)
    group = unset_or(self.self_extend_group, max(1, math.ceil((length - window) / room)))
    return dataclasses.replace(self, self_extend_window=window, self_extend_group=group)

  def far_rule(self, train_length):
    return far.SelfExtend(self.self_extend_window, self.self_extend_group)


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
    check_positive("dca_chunk", self.dca_chunk)

  def at(self, length, train_length):
    chunk = unset_or(self.dca_chunk, max(1, 3 * train_length // 4))
    if chunk >= train_length:
      raise ValueError(f"dca_chunk {chunk} must be below the training length {train_length} "
                       f"(the successive chunk's queries sit up to c - 1).")
    return dataclasses.replace(self, dca_chunk=chunk)

  def far_rule(self, train_length):
    return far.DualChunk(self.dca_chunk, train_length)


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
    check_positive("string_shift", self.string_shift)
    if self.string_window is not None and self.string_window < 0:
      raise ValueError(f"string_window must be >= 0, got {self.string_window}.")
    if self.string_shift and self.string_window and self.string_window > self.string_shift:
      raise ValueError(f"string_window W = {self.string_window} must be at most string_shift S = "
                       f"{self.string_shift} (a shifted distance t - S + W stays below t).")

  def at(self, length, train_length):
    shift = unset_or(self.string_shift, max(1, int(0.33 * train_length)))
    window = self.string_window if self.string_window is not None else min(128, shift)
    return dataclasses.replace(self, string_shift=shift, string_window=window)

  def far_rule(self, train_length):
    return far.String(self.string_shift, self.string_window)
