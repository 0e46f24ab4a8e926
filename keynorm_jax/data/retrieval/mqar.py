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
from keynorm_jax.data.tokenizer import encode

PAIRS = 16
KEYS = string.ascii_uppercase


def _block(keys, values) -> str:
  return " ".join(f"{k}{v}" for k, v in zip(keys, values))


def mqar_episode(rng: np.random.Generator, pairs: int = PAIRS) -> Episode:
  if not 1 <= pairs <= len(KEYS):
    raise ValueError(f"MQAR takes 1 to {len(KEYS)} pairs (one capital letter each), got {pairs}.")
  keys = [KEYS[i] for i in rng.choice(len(KEYS), size=pairs, replace=False)]
  values = [int(v) for v in rng.integers(0, 10, size=pairs)]
  order = rng.permutation(pairs)
  head = encode(" Recall:")
  parts, groups = [head], [np.full(len(head), -1, np.int32)]
  for answer, i in enumerate(order):
    parts.append(encode(f" {keys[i]}{values[i]}"))
    groups.append(np.array([-1, -1, answer], np.int32))  # space and key unscored, the value scored
  return Episode(needle=encode(f" Pairs: {_block(keys, values)}. "), tail=np.concatenate(parts),
                 answer_group=np.concatenate(groups))
