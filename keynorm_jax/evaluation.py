"""Extrapolation evaluation: per-token accuracy of a trained run at longer lengths, weights unchanged.

For every length x set ("repeated", "non_repeated") x inference scaling, the run's model (with its
own trained variant, e.g. KNA-log n, kept as trained) scores the same deterministic held-out windows.
"""

import dataclasses
import time

import numpy as np

from keynorm_jax import corpora, run_config
from keynorm_jax.attention import query_block_size
from keynorm_jax.eval_sets import EVAL_SETS, eval_windows
from keynorm_jax.inference_scaling import InferenceScaling
from keynorm_jax.model import GAULM
from keynorm_jax.scoring import make_scorer, score_windows
from keynorm_jax.tokenizer import join_documents

_EVAL_MEMORY_BUDGET_BYTES = 4 * 2**30


@dataclasses.dataclass(frozen=True)
class ScalingRequest:
  """A scaling as asked for on the command line; knobs left None follow the defaults below."""
  rope_scaling: str = "none"
  factor: float | None = None                # default length / train_length (dynamic_ntk: 1)
  rerope_window: int | None = None           # default train_length / 2
  leaky_rerope_window: int | None = None     # default train_length / 4
  leaky_rerope_factor: float = 16.0
  posthoc_logn: bool = False

  def __post_init__(self):
    if self.factor is not None and not self.factor >= 1:
      raise ValueError(f"factor must be at least 1 (or None for the default), got {self.factor}.")

  def at(self, length: int, train_length: int) -> InferenceScaling:
    """The concrete scaling for a run trained at train_length, evaluated at length."""
    default_factor = 1.0 if self.rope_scaling == "dynamic_ntk" else max(1.0, length / train_length)
    window = None
    if self.rope_scaling == "rerope":
      window = self.rerope_window or train_length // 2
    elif self.rope_scaling == "leaky_rerope":
      window = self.leaky_rerope_window or train_length // 4
    return InferenceScaling(
        rope_scaling=self.rope_scaling, factor=self.factor or default_factor,
        rerope_window=window,
        leaky_rerope_factor=self.leaky_rerope_factor if self.rope_scaling == "leaky_rerope" else None,
        posthoc_logn=self.posthoc_logn)


def held_out_tokens(config):
  """The evaluation text of a run's dataset: its test split, joined as in training."""
  return join_documents(corpora.load_documents(config.data, "test"))


def auto_batch_size(gau, length: int, num_windows: int) -> int:
  """Windows per batch so that one batch's working set stays near 4 GiB."""
  query_block = query_block_size(length)
  per_window = 4 * (6 * query_block * length                     # score blocks
                    + 4 * length * (2 * gau.expansion + gau.qk_size + gau.d_model)
                    + 3 * length * gau.vocab_size)
  return int(np.clip(_EVAL_MEMORY_BUDGET_BYTES // per_window, 1, num_windows))


def summarize(correct, nll, *, train_length: int, bucket: int) -> dict:
  """Accuracy (with its standard error over windows), loss and accuracy by position."""
  per_window = correct.mean(axis=1)
  count, length = correct.shape
  stderr = float(per_window.std(ddof=1) / np.sqrt(count)) if count > 1 else float("nan")
  beyond = correct[:, train_length:]
  starts = list(range(0, length, bucket))
  return {
      "accuracy": float(per_window.mean()),
      "accuracy_stderr": stderr,
      "accuracy_beyond_train": float(beyond.mean()) if beyond.size else None,
      "loss": float(nll.mean()),
      "tokens": int(correct.size),
      "windows": int(count),
      "position_bucket": int(bucket),
      "accuracy_by_position": [float(correct[:, s:s + bucket].mean()) for s in starts],
  }


def applicable_scalings(config, requests):
  """(kept, skipped labels): RoPE scalings do nothing to a NoPE model, so they are skipped there."""
  if config.position == "rope":
    return list(requests), []
  kept = [r for r in requests if r.rope_scaling == "none"]
  return kept, [r.rope_scaling for r in requests if r.rope_scaling != "none"]


def evaluate_run(run, *, lengths, requests, num_windows: int, batch_size: int = 0,
                 tokens=None, progress=None, include_train_length=True):
  """Result records (see eval.py) for one trained run.

  lengths: evaluation lengths; the training length is added first unless include_train_length
    is False.
  progress: optional callable(str) told what is being evaluated.
  """
  config = run.config
  train_length = config.train_length
  for length in lengths:
    if length < train_length:
      raise ValueError(f"Length {length} is shorter than {run.name}'s training length "
                       f"{train_length}; evaluate at lengths >= {train_length}.")
  tokens = held_out_tokens(config) if tokens is None else tokens
  gau = run_config.gau_config(config)
  requests, skipped = applicable_scalings(config, requests)
  if skipped and progress:
    progress(f"{run.name} has no RoPE: {', '.join(skipped)} do not apply to it (skipped)")
  records = []
  for length in sorted({*lengths, *([train_length] if include_train_length else [])}):
    windows = {s: eval_windows(tokens, kind=s, length=length, count=num_windows,
                               train_length=train_length) for s in EVAL_SETS}
    size = batch_size or auto_batch_size(gau, length, num_windows)
    for request in requests:
      scaling = request.at(length, train_length)
      scorer = make_scorer(GAULM(gau, scaling))  # one compile per length and scaling
      for eval_set in EVAL_SETS:
        if progress:
          progress(f"{run.name} L={length} {eval_set} {scaling.label}")
        started = time.perf_counter()
        correct, nll = score_windows(scorer, run.params, windows[eval_set], size)
        records.append({
            "run": run.name, "config": config.name, "step": run.step,
            "train_length": train_length, "length": length, "set": eval_set,
            "rope_scaling": scaling.label, "scaling": dataclasses.asdict(scaling),
            **summarize(correct, nll, train_length=train_length,
                        bucket=max(1, train_length // 8)),
            "seconds": round(time.perf_counter() - started, 2),
        })
  return records
