"""Passkey retrieval (Mohtashami & Jaggi 2023, "Landmark Attention"; used by PI, YaRN, LongRoPE).

A random key of decimal digits is stated once, in a needle placed at some depth of filler text; at
the end of the window the question asks for it, and the key's digits are the answer (one answer:
exact match of all digits, and per-digit accuracy). The filler (held-out corpus text) holds no
digits in the KJV, and the key is drawn uniformly, so nothing but the needle tells the answer.

    needle: " The pass key is 48213. Remember it. 48213 is the pass key. "
    tail:   " What is the pass key? The pass key is 48213"   (the last 5 tokens scored)
"""

import string

import numpy as np

from keynorm_jax.data.retrieval.episode import Episode
from keynorm_jax.data.tokenizer import encode_with_offsets

DIGITS = 5
NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = " What is the pass key? The pass key is "


def passkey_episode(rng: np.random.Generator, digits: int = DIGITS, alphabet: str = string.digits,
                    encode=encode_with_offsets) -> Episode:
  """A key of `digits` symbols drawn uniformly from `alphabet` (decimal digits by default), in the
  tokens of `encode` (Episode.from_text)."""
  key = "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=digits))
  tail = QUESTION + key
  return Episode.from_text(NEEDLE.format(key=key), tail, [(len(QUESTION), len(tail))], encode)
