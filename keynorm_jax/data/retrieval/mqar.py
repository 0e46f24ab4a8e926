"""Multi-query associative recall (Arora et al. 2023, Zoology's MQAR), in bytes.

A block of key-value pairs (keys: distinct capital letters; values: one decimal digit each) is
placed at some depth of filler text; at the end of the window every key is queried once, in a new
random order, each followed by its value. Each queried value is one answer (chance: 1 in 10).
A value is found only by matching its key to the pair block: the letter alone also occurs in the
filler, but never followed by a digit (the KJV holds none), and values are drawn independently.

    needle: " Pairs: Q4 B9 K1 ... . "
    tail:   " Recall: K1 Q4 B9 ..."        (each value digit scored)
"""

import string

import numpy as np

from keynorm_jax.data.retrieval.episode import Episode
from keynorm_jax.data.tokenizer import encode_with_offsets

PAIRS = 16
KEYS = string.ascii_uppercase


def _block(keys, values) -> str:
  return " ".join(f"{k}{v}" for k, v in zip(keys, values))


def mqar_episode(rng: np.random.Generator, pairs: int = PAIRS,
                 encode=encode_with_offsets) -> Episode:
  """`pairs` pairs in the tokens of `encode` (Episode.from_text): each value's digit is scored."""
  if not 1 <= pairs <= len(KEYS):
    raise ValueError(f"MQAR takes 1 to {len(KEYS)} pairs (one capital letter each), got {pairs}.")
  keys = [KEYS[i] for i in rng.choice(len(KEYS), size=pairs, replace=False)]
  values = [int(v) for v in rng.integers(0, 10, size=pairs)]
  order = rng.permutation(pairs)
  tail, answers = " Recall:", []
  for i in order:
    tail += f" {keys[i]}{values[i]}"
    answers.append((len(tail) - 1, len(tail)))  # the value's digit; the space and key unscored
  return Episode.from_text(f" Pairs: {_block(keys, values)}. ", tail, answers, encode)
