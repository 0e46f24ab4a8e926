"""What a retrieval task makes: a needle and a tail (question + answer), answers marked by group."""

import dataclasses

import numpy as np

from keynorm_jax.errors import KeynormError


class RetrievalError(KeynormError, ValueError):
  """A retrieval request that cannot be met; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class Episode:
  """needle: int32 tokens placed at the depth; tail: int32 tokens that end the window (questions
  and their answers); answer_group: int32 [len(tail)], the answer each scored tail token belongs to
  (0, 1, ...), -1 for tokens that are not scored. An answer counts as retrieved when every one of
  its tokens is predicted (exact match under greedy decoding)."""
  needle: np.ndarray
  tail: np.ndarray
  answer_group: np.ndarray

  def __post_init__(self):
    if self.tail.shape != self.answer_group.shape:
      raise ValueError("tail and answer_group must have the same shape.")

  @property
  def num_answers(self) -> int:
    return int(self.answer_group.max()) + 1
