"""What a retrieval task makes: a needle and a tail (question + answer), answers marked by group.

Tasks write their episodes as text and `from_text` encodes them with the model's tokenizer (bytes,
or a Hugging Face tokenizer.json: data/tokenizer.py's offsets_encoder): a tail token is scored for
the answer whose characters it holds, so an answer is whatever tokens the tokenizer spells it with.
"""

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

  @classmethod
  def from_text(cls, needle: str, tail: str, answers, encode) -> "Episode":
    """answers: the (start, end) character spans of the tail's answers, answer g the g-th; encode:
    text -> (ids, [n, 2] character offsets), as tokenizer.offsets_encoder gives."""
    tail_ids, offsets = encode(tail)
    group = np.full(len(tail_ids), -1, np.int32)
    for g, (start, end) in enumerate(answers):
      held = (offsets[:, 0] < end) & (offsets[:, 1] > start)
      if not held.any():
        raise RetrievalError(f"No token of the tail holds answer {g} ({tail[start:end]!r}).")
      group[held] = g
    return cls(needle=np.asarray(encode(needle)[0], np.int32),
               tail=np.asarray(tail_ids, np.int32), answer_group=group)
