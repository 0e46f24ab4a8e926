"""One column of the evaluator: an inference method, optionally with post-hoc log n."""

import dataclasses

from keynorm_jax.positions.inference.base import AsTrained, InferenceMethod
from keynorm_jax.positions.layer_spec import AttentionSpec


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

  def apply(self, spec: AttentionSpec, train_length: int) -> AttentionSpec:
    spec = self.method.apply(spec, train_length)
    return spec.replace(posthoc_logn=True) if self.posthoc_logn else spec

  def record(self) -> dict:
    return {"method": self.method.name, **self.method.knob_values(),
            "posthoc_logn": self.posthoc_logn}
