"""Extrapolation evaluation: per-token accuracy of a trained run at longer lengths, weights unchanged.

For every length x set ("repeated", "non_repeated") x inference scaling, the run's model (with its
own trained variant, e.g. KNA-log n, kept as trained) scores the same deterministic held-out windows.
A seed group's members (runs/loading.py: parameters stacked on a leading seed axis) score them in
one vmapped pass, and each member gives its own record, as its single run would (`seed` in every
record; seed_summary.py: their mean and standard deviation per cell).
"""

import time
from typing import Callable, NamedTuple

import numpy as np

from keynorm_jax import run_config
from keynorm_jax.attention import block_sizes
from keynorm_jax.data import corpora
from keynorm_jax.data.eval_sets import EVAL_SETS, eval_windows
from keynorm_jax.data.tokenizer import join_documents
from keynorm_jax.models import ModelConfig, given_specs
from keynorm_jax.positions import EvalColumn
from keynorm_jax.scoring import make_scorer, score_windows

_EVAL_MEMORY_BUDGET_BYTES = 4 * 2**30
_EVAL_MAX_TOKENS_PER_BATCH = 16384


def held_out_tokens(config):
  """The evaluation text of a run's dataset: its test split, joined as in training."""
  return join_documents(corpora.load_documents(config.data, "test"), config.data)


def auto_batch_size(model_cfg, length: int, num_windows: int, members: int = 1) -> int:
  """Windows per batch: one batch's working set near 4 GiB, and at most 16,384 tokens (a seed
  group's `members` each score the batch in the same vmapped pass: both shared among them).

  Scores exist one block at a time (all T x T at once only up to 2048 tokens, else 512 x 512
  blocks: attention.block_sizes), so past a few thousand tokens the working set is the layers'
  activations, linear in the length. The token cap: beyond it more windows per batch add memory
  and no speed (measured on 2 CPU cores: 1 window per batch is as fast as 2 or 4 at 4096 and
  16,384 tokens; see BENCHMARKS.md).
  """
  query_block, key_block = block_sizes(length)
  scores = length * length if query_block is None else query_block * key_block
  per_window = 4 * (6 * model_cfg.heads * scores                   # score blocks
                    + 4 * length * model_cfg.token_width
                    + 3 * length * model_cfg.vocab_size)
  by_memory = _EVAL_MEMORY_BUDGET_BYTES // (per_window * members)
  by_tokens = _EVAL_MAX_TOKENS_PER_BATCH // (length * members)
  return int(np.clip(min(by_memory, by_tokens), 1, num_windows))


def standard_error(values) -> float | None:
  """The standard error of the mean of a 1-d float64 array (sample deviation); None for one value,
  which has none (null in results.json: NaN is not JSON)."""
  return float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else None


def summarize(correct, nll, *, train_length: int, bucket: int) -> dict:
  """Accuracy (with its standard error over windows: None for one window), loss and accuracy by
  position; summed in float64 (a float32 mean of 0/1 scores is off in the ninth digit)."""
  correct, nll = np.asarray(correct, np.float64), np.asarray(nll, np.float64)
  per_window = correct.mean(axis=1)
  count, length = correct.shape
  beyond = correct[:, train_length:]
  starts = list(range(0, length, bucket))
  return {
      "accuracy": float(per_window.mean()),
      "accuracy_stderr": standard_error(per_window),
      "accuracy_beyond_train": float(beyond.mean()) if beyond.size else None,
      "loss": float(nll.mean()),
      "tokens": int(correct.size),
      "windows": int(count),
      "position_bucket": int(bucket),
      "accuracy_by_position": [float(correct[:, s:s + bucket].mean()) for s in starts],
  }


def applicable_columns(model_cfg, columns):
  """(kept columns, {label: reason} of the skipped): a method that does not apply to the model's
  position method (e.g. a RoPE scaling on an ALiBi model) is skipped with its reason."""
  kept, skipped = [], {}
  for column in columns:
    scaling = model_cfg.trained_rope_scaling
    reason = column.method.skip_reason(model_cfg.position_method, model_cfg.heads,
                                       scaling["type"] if scaling else "none")
    if reason:
      skipped[column.label] = reason
    else:
      kept.append(column)
  return kept, skipped


def evaluation_lengths(run, lengths, include_train_length) -> list[int]:
  """The sorted lengths a run is evaluated at: those asked, below or above its 1x (its training
  length, config.train_length), and the 1x itself where include_train_length."""
  return sorted({*lengths, *([run.config.train_length] if include_train_length else [])})


class Evaluation(NamedTuple):
  """A run's evaluation, opened once (open_evaluation) by the next-token and retrieval loops."""
  model_cfg: ModelConfig
  columns: list          # the columns that apply
  lengths: list          # sorted (evaluation_lengths)
  tokens: np.ndarray     # the held-out text
  score: Callable        # run_scorer's
  limit: int | None      # the length past which the model's positions are not defined

  def not_applicable(self, length: int) -> str | None:
    """Why `length` cannot be evaluated (past what the model's positions encode), or None."""
    if self.limit is not None and length > self.limit:
      return f"{self.model_cfg.position} positions stop at {self.limit} tokens"
    return None


def open_evaluation(run, lengths, columns, include_train_length, progress,
                    tokens=None) -> Evaluation:
  """The model config, the columns that apply, the sorted lengths to evaluate (below or above the
  1x), the held-out tokens (unless given) and the run's scorer; each skipped column is told to
  `progress`."""
  model_cfg = run_config.model_config(run.config)
  columns, skipped = applicable_columns(model_cfg, columns)
  for label, reason in skipped.items():
    if progress:
      progress(f"{run.name}: {label} skipped ({reason})")
  return Evaluation(model_cfg, columns, evaluation_lengths(run, lengths, include_train_length),
                    held_out_tokens(run.config) if tokens is None else tokens, run_scorer(run),
                    model_cfg.position_method.max_length(run.config.train_length))


def record_fields(run, length, column, seed) -> dict:
  """What every evaluation record (next-token or retrieval) says of the model, its seed (a group's
  member, or a single run's config.seed) and the column."""
  config = run.config
  return {"run": run.name, "seed": seed, "config": config.name, "step": run.step,
          "position": config.model.position,   # as evaluated (runs/: DroPE before its drop)
          "train_length": config.train_length, "one_x": run.one_x, "length": length,
          "rope_scaling": column.label, "method": column.record()}


def _record(run, seed, length, eval_set, column, period, **fields):
  run_period = (period or run.config.train_length) if eval_set == "repeated" else None
  return {**record_fields(run, length, column, seed), "set": eval_set, "repeat_period": run_period,
          **fields}


def run_scorer(run):
  """score(windows [N, L+1], batch_size, column) -> (correct [S, N, L], nll [S, N, L]) of every
  member of `run` (S = 1 for a single run; a seed group's members in one vmapped pass) under an
  evaluation column. One scorer serves all of the run's columns and lengths: its model as
  trained, given each column's attention specs (models.given_specs), so that the columns that
  differ only in numbers (attention.spec.NUMBERS) share one compiled program per length."""
  model_cfg = run_config.model_config(run.config)
  scorer = make_scorer(run_config.build_model(run.config), stacked=run.seeds is not None)

  def score(windows, batch_size, column):
    specs = given_specs(model_cfg, column, windows.shape[-1] - 1)
    correct, nll = score_windows(scorer, run.params, windows, batch_size, specs)
    return (correct[None], nll[None]) if run.seeds is None else (correct, nll)

  return score


def evaluate_run(run, *, lengths, columns=(EvalColumn(),), num_windows: int, batch_size: int = 0,
                 tokens=None, progress=None, include_train_length=True, repeat_period=None):
  """Result records (see eval.py) for one trained run.

  lengths: evaluation lengths; the training length is added first unless include_train_length
    is False.
  columns: positions.EvalColumn each (inference-time method, post-hoc log n or not).
  progress: optional callable(str) told what is being evaluated.
  repeat_period: the repeated set's period (default train_length); recorded with each result.
  A length past what the model's positions encode (a learned table), or a repeated set at a
  length shorter than its period, gives records with accuracy None and a `not_applicable` reason
  (told to `progress`), never a clamped result.
  A seed group (run.seeds) gives one record per member and cell, in the order of run.seeds, from
  one vmapped pass per batch; `seconds` is that pass's, shared by the members.
  """
  train_length = run.config.train_length
  plan = open_evaluation(run, lengths, columns, include_train_length, progress, tokens)
  records = []
  for length in plan.lengths:
    reason = plan.not_applicable(length)
    if reason:
      records += [_record(run, seed, length, s, c.at(length, train_length), repeat_period,
                          accuracy=None, not_applicable=reason)
                  for c in plan.columns for s in EVAL_SETS for seed in run.member_seeds]
      if progress:
        progress(f"{run.name} L={length}: not applicable ({reason})")
      continue
    period = repeat_period or train_length
    sets = [s for s in EVAL_SETS if s != "repeated" or period <= length]
    if len(sets) < len(EVAL_SETS):
      reason = (f"the repeated set tiles a period of {period} tokens, longer than {length}; pass "
                f"--repeat_period <= {length} to score it there")
      records += [_record(run, seed, length, "repeated", c.at(length, train_length),
                          repeat_period, accuracy=None, not_applicable=reason)
                  for c in plan.columns for seed in run.member_seeds]
      if progress:
        progress(f"{run.name} L={length} repeated: not applicable ({reason})")
    windows = {s: eval_windows(plan.tokens, kind=s, length=length, count=num_windows,
                               train_length=train_length, period=repeat_period)
               for s in sets}
    size = batch_size or auto_batch_size(plan.model_cfg, length, num_windows,
                                         len(run.member_seeds))
    for column in plan.columns:
      resolved = column.at(length, train_length)
      for eval_set in sets:
        if progress:
          progress(f"{run.name} L={length} {eval_set} {resolved.label}")
        started = time.perf_counter()
        correct, nll = plan.score(windows[eval_set], size, column)
        seconds = round(time.perf_counter() - started, 2)
        records += [_record(run, seed, length, eval_set, resolved, repeat_period,
                            **summarize(c, n, train_length=train_length,
                                        bucket=max(1, train_length // 8)), seconds=seconds)
                    for seed, c, n in zip(run.member_seeds, correct, nll)]
  return records
