"""The evaluation prompts of a retrieval task at one length: deterministic, the same for every model.

Prompt n (of `count`) takes its filler from the held-out text at the n-th of `count` evenly spaced
offsets (windows may overlap when the text is short), the same at every depth, and its key from a
generator seeded by the task, the length, n and the depth's index: every prompt of a length has its
own key, so the D x count prompts are that many independent draws of the key (with one key per n
shared by the depths, a key the model happens to get wrong fails at every depth at once). The needle ends at least EVAL_MIN_GAP tokens before the question, so a
model that sees only the last EVAL_MIN_GAP tokens cannot retrieve (tests/test_retrieval.py).
"""

import zlib

import numpy as np

from keynorm_jax.data.corpora import DataError
from keynorm_jax.data.retrieval.placement import place
from keynorm_jax.data.retrieval.tasks import task
from keynorm_jax.data.tokenizer import encode_with_offsets

DEFAULT_DEPTHS = tuple(float(d) for d in np.linspace(0.0, 1.0, 10))
EVAL_MIN_GAP = 64


def key_rng(task_name: str, length: int, index: int, depth_index: int) -> np.random.Generator:
  """The generator of the key of prompt `index` at the depth `depth_index`."""
  return np.random.default_rng([zlib.crc32(task_name.encode()), length, index, depth_index])


def prompt_length(task_name: str, encode=encode_with_offsets) -> int:
  """The shortest length (in encode's tokens) an evaluation prompt of the task fits: its needle,
  EVAL_MIN_GAP tokens of filler, the question and the answer."""
  return task(task_name).min_length(EVAL_MIN_GAP, encode)


def too_short(task_name: str, length: int, needed: int) -> str | None:
  """Why the task is not evaluated at `length` (needed: prompt_length), or None where it fits."""
  if length >= needed:
    return None
  return (f"a {task_name} prompt needs at least {needed} tokens (its needle, {EVAL_MIN_GAP} tokens "
          f"of filler, the question and the answer)")


def check_text_holds(num_tokens: int, length: int) -> None:
  """DataError where the held-out text (num_tokens) is shorter than one prompt of `length`."""
  if num_tokens < length + 1:
    raise DataError(f"The held-out text has {num_tokens} tokens, fewer than one prompt of "
                    f"{length}; evaluate at most at length {num_tokens - 1}.")


def retrieval_prompts(tokens, task_name: str, *, length: int, depths=DEFAULT_DEPTHS, count: int,
                      encode=encode_with_offsets):
  """(windows int32 [D, count, length + 1], answer_group int32 [D, count, length + 1]); tokens:
  the held-out text, and the episodes, in encode's tokens (tokenizer.offsets_encoder)."""
  tokens = np.asarray(tokens, np.int32)
  if count < 1:
    raise ValueError(f"Need at least one prompt per depth, got {count}.")
  check_text_holds(len(tokens), length)
  starts = np.linspace(0, len(tokens) - length - 1, count).round().astype(np.int64)
  made = task(task_name).make
  windows = np.zeros([len(depths), count, length + 1], np.int32)
  groups = np.zeros_like(windows)
  for d, depth in enumerate(depths):
    for n, start in enumerate(starts):
      episode = made(key_rng(task_name, length, n, d), encode=encode)
      windows[d, n], groups[d, n] = place(tokens[start:start + length + 1], episode, depth,
                                          EVAL_MIN_GAP)
  return windows, groups
