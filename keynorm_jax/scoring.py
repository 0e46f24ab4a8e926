"""Next-token scoring, shared by training (its loss and validation) and the evaluator: per-token
correctness and negative log-likelihood, and windows scored in batches, jit-compiled once per
shape."""

import jax
import jax.numpy as jnp
import numpy as np
import optax


def token_scores(logits_BxTxV, targets_BxT):
  """(correct [B, T] float32, negative log-likelihood [B, T]) of next-token predictions: the
  training loss is the mean of the second."""
  correct = (jnp.argmax(logits_BxTxV, axis=-1) == targets_BxT).astype(jnp.float32)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits_BxTxV, targets_BxT)
  return correct, nll


def make_scorer(model, *, stacked: bool = False):
  """jit(params, windows [B, L+1], specs=None) -> (correct [B, L], nll [B, L]).

  specs: every layer's attention.Spec given to the model (models.given_specs: their numbers are
    then arguments, one compiled program for the evaluation columns that differ only in numbers),
    or None: the model resolves its own.
  stacked: the parameters of a seed group, with a leading seed axis [N, ...]: every member scores
  the same windows in one vmapped pass -> (correct [N, B, L], nll [N, B, L]).
  """

  def score(params, windows_BxL1, specs=None):
    logits = model.apply({"params": params}, windows_BxL1[:, :-1], deterministic=True,
                         specs=specs)
    return token_scores(logits, windows_BxL1[:, 1:])

  return jax.jit(jax.vmap(score, in_axes=(0, None, None)) if stacked else score)


def score_windows(scorer, params, windows, batch_size: int, specs=None):
  """Scores all windows [N, L+1] in batches of batch_size (the last one padded, so one compile),
  with the scorer's `specs` (make_scorer).

  Returns numpy (correct [N, L], nll [N, L]); with a stacked scorer (make_scorer) each has the
  seed axis first: [S, N, L].
  """
  windows = np.asarray(windows, np.int32)
  count = len(windows)
  correct, nll = [], []
  for start in range(0, count, batch_size):
    batch = windows[start:start + batch_size]
    real = len(batch)
    if real < batch_size:
      batch = np.concatenate([batch, np.repeat(batch[-1:], batch_size - real, axis=0)])
    c, n = jax.device_get(scorer(params, batch, specs))
    correct.append(c[..., :real, :])  # (the window axis is second to last)
    nll.append(n[..., :real, :])
  return np.concatenate(correct, axis=-2), np.concatenate(nll, axis=-2)
