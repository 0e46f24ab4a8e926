"""Inference-time position scalings: which RoPE frequencies, ReRoPE window and log n a model runs with.

The weights never change; only these settings do. `rope_settings` turns a scaling into the arguments
of `attention.attend` for a given sequence length.
"""

import dataclasses

from keynorm_jax.rope import SCALINGS, rope_inv_freq

INFERENCE_SCALINGS = SCALINGS + ("rerope", "leaky_rerope")


@dataclasses.dataclass(frozen=True)
class InferenceScaling:
  """One column of the evaluator: a RoPE scaling and its knobs.

  Attributes:
    rope_scaling: one of INFERENCE_SCALINGS.
    factor: s for linear / ntk / dynamic_ntk / yarn.
    rerope_window: w for rerope and leaky_rerope.
    leaky_rerope_factor: k for leaky_rerope.
    posthoc_logn: multiply the scores of query i by max(1, log(i+1)/log(L_train)).
  """
  rope_scaling: str = "none"
  factor: float = 1.0
  rerope_window: int | None = None
  leaky_rerope_factor: float | None = None
  posthoc_logn: bool = False

  def __post_init__(self):
    if self.rope_scaling not in INFERENCE_SCALINGS:
      raise ValueError(f"Unknown RoPE scaling {self.rope_scaling!r}; choose from "
                       f"{', '.join(INFERENCE_SCALINGS)}.")
    if self.rope_scaling in ("rerope", "leaky_rerope") and self.rerope_window is None:
      raise ValueError(f"{self.rope_scaling} needs rerope_window.")
    if self.rope_scaling == "leaky_rerope" and self.leaky_rerope_factor is None:
      raise ValueError("leaky_rerope needs leaky_rerope_factor (k).")

  @property
  def label(self) -> str:
    """Short column name, e.g. 'yarn' or 'rerope+logn'."""
    return self.rope_scaling + ("+logn" if self.posthoc_logn else "")


def rope_settings(scaling: InferenceScaling, *, rotary_dim, base, train_length, seq_length):
  """Keyword arguments for attention.attend (besides q, k, v, variant) under `scaling`."""
  frequency_scaling = scaling.rope_scaling if scaling.rope_scaling in SCALINGS else "none"
  factor = scaling.factor if frequency_scaling != "none" else 1.0
  inv_freq, attention_factor = rope_inv_freq(
      rotary_dim, base=base, scaling=frequency_scaling, factor=factor,
      train_length=train_length, seq_length=seq_length)
  return dict(
      inv_freq=inv_freq,
      attention_factor=attention_factor,
      rerope_window=scaling.rerope_window if scaling.rope_scaling.endswith("rerope") else None,
      leaky_rerope_factor=(scaling.leaky_rerope_factor
                           if scaling.rope_scaling == "leaky_rerope" else None),
      posthoc_logn_length=train_length if scaling.posthoc_logn else None,
  )
