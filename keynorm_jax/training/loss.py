"""The training loss, next-token cross-entropy, and the accuracy beside it (the evaluator scores
windows with the same function)."""

import jax.numpy as jnp
import optax


def token_scores(logits_BxTxV, targets_BxT):
  """(correct [B, T] float32, negative log-likelihood [B, T]) of next-token predictions."""
  correct = (jnp.argmax(logits_BxTxV, axis=-1) == targets_BxT).astype(jnp.float32)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits_BxTxV, targets_BxT)
  return correct, nll
