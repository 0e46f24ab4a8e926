"""Retrieval evaluation: does a trained run find a needle placed anywhere in a long context?

For every task x length x inference-time method, the run's model scores the task's deterministic
prompts (data/retrieval/prompts.py: the same for every model) at each depth. Greedy decoding of the
answer gives the key exactly when every answer token is the model's top prediction given the tokens
before it, so one teacher-forced forward pass measures exact match (and per-token accuracy) without
a decoding loop. A seed group's members score the prompts in one vmapped pass, a record each (as
evaluate.py).
"""

import time

import numpy as np

from keynorm_jax.data.retrieval import (DEFAULT_DEPTHS, RetrievalError, prompt_length,
                                        retrieval_prompts, task, too_short)
from keynorm_jax.data.tokenizer import offsets_encoder
from keynorm_jax.evaluation.evaluate import (auto_batch_size, open_evaluation, record_fields,
                                             standard_error)

NEXT_TOKEN = "next_token"  # the --tasks name of the next-token evaluation (evaluate.py)


def answer_scores(correct, answer_group):
  """Per prompt (exact-match share of its answers, share of its answer tokens correct).

  correct: [N, L] next-token correctness (target t is window token t + 1); answer_group:
  [N, L + 1] the answer each window token belongs to, -1 if not scored.
  """
  correct = np.asarray(correct, bool)
  groups = np.asarray(answer_group)[:, 1:]
  exact, tokens = [], []
  for row, group in zip(correct, groups):
    answers = np.unique(group[group >= 0])
    exact.append(np.mean([row[group == a].all() for a in answers]))
    tokens.append(row[group >= 0].mean())
  return np.array(exact), np.array(tokens)


def check_depths(depths) -> tuple[float, ...]:
  depths = tuple(float(d) for d in depths)
  if not depths:
    raise RetrievalError("--depths names no depth; give fractions from 0 (start) to 1 (end).")
  bad = [d for d in depths if not 0.0 <= d <= 1.0]
  if bad:
    raise RetrievalError(f"--depths takes fractions of the context from 0 (start) to 1 (end); got "
                         f"{', '.join(f'{d:g}' for d in bad)}.")
  return depths


def _record(run, seed, task_name, length, column, depths, **fields):
  return {**record_fields(run, length, column, seed), "task": task_name, "depths": list(depths),
          "chance": task(task_name).chance, **fields}


def summarize_retrieval(exact, tokens) -> dict:
  """exact, tokens: [D, N] per depth and prompt; float64 means, standard error over prompts."""
  exact, tokens = np.asarray(exact, np.float64), np.asarray(tokens, np.float64)
  flat = exact.reshape(-1)
  return {
      "accuracy": float(flat.mean()),
      "accuracy_stderr": standard_error(flat),
      "token_accuracy": float(tokens.mean()),
      "accuracy_by_depth": [float(x) for x in exact.mean(axis=1)],
      "token_accuracy_by_depth": [float(x) for x in tokens.mean(axis=1)],
      "prompts": int(exact.shape[1]),
  }


def evaluate_retrieval(run, *, tasks, lengths, columns, num_prompts: int, depths=DEFAULT_DEPTHS,
                       batch_size: int = 0, tokens=None, progress=None,
                       include_train_length=True):
  """Retrieval records for one trained run (one per task x length x column), each with exact-match
  and per-token accuracy overall and by depth. A length past what the model's positions encode,
  or too short for a task's prompt (skipped for that task and length, told to `progress` in one
  line), gives a `not_applicable` record. A seed group (run.seeds) gives a record per member,
  from one vmapped pass (evaluate.evaluate_run)."""
  depths = check_depths(depths)
  train_length = run.config.train_length
  plan = open_evaluation(run, lengths, columns, include_train_length, progress, tokens)
  encode = offsets_encoder(run.config.data)  # the run's tokens: bytes or its tokenizer.json
  needed = {t: prompt_length(t, encode) for t in tasks}
  records = []
  for length in plan.lengths:
    reasons = {t: too_short(t, length, needed[t]) for t in tasks}
    if plan.not_applicable(length):
      reasons = {t: plan.not_applicable(length) for t in tasks}
    for t, reason in reasons.items():
      if reason:
        records += [_record(run, seed, t, length, c.at(length, train_length), depths,
                            accuracy=None, not_applicable=reason)
                    for c in plan.columns for seed in run.member_seeds]
        if progress:
          progress(f"{run.name} L={length} {t}: skipped ({reason})")
    prompts = {t: retrieval_prompts(plan.tokens, t, length=length, depths=depths,
                                    count=num_prompts, encode=encode)
               for t in tasks if not reasons[t]}
    size = batch_size or auto_batch_size(plan.model_cfg, length, len(depths) * num_prompts,
                                         len(run.member_seeds))
    for column in plan.columns:
      resolved = column.at(length, train_length)
      for task_name, (windows, groups) in prompts.items():
        if progress:
          progress(f"{run.name} L={length} {task_name} {resolved.label}")
        started = time.perf_counter()
        flat = windows.reshape(-1, length + 1)
        correct, _ = plan.score(flat, size, column)
        seconds = round(time.perf_counter() - started, 2)
        shape = windows.shape[:2]
        for seed, member_correct in zip(run.member_seeds, correct):
          exact, per_token = answer_scores(member_correct, groups.reshape(-1, length + 1))
          records.append(_record(run, seed, task_name, length, resolved, depths,
                                 **summarize_retrieval(exact.reshape(shape),
                                                       per_token.reshape(shape)),
                                 seconds=seconds))
  return records
