"""The "repeated" and "non_repeated" evaluation sets at any length L, from held-out text only.

Windows are chosen deterministically, with no randomness at all: the held-out documents are joined
(as in training) into one token stream, and N windows of L + 1 tokens (L inputs, L targets) start at
evenly spaced, non-overlapping offsets 0, s, 2s, ... with s = (M - L - 1) // (N - 1). Every model,
every run and every process get the same windows.

- non_repeated: the window as it is (natural text).
- repeated: the first P tokens of the same window (the period P: train_length by default, as in
  the seed's table), tiled until they fill L + 1 tokens; later copies can be predicted by copying,
  so this tests whether long-range attention still works. With P = train_length the copy distance
  is exactly train_length, which no training sequence contains; a shorter P (e.g. train_length / 4)
  puts the copy distance inside the trained range while the positions go far past it.
"""

import numpy as np

from keynorm_jax.data.corpora import DataError

EVAL_SETS = ("repeated", "non_repeated")


def window_starts(num_tokens: int, length: int, count: int) -> np.ndarray:
  """Evenly spaced, non-overlapping starts of `count` windows of length + 1 tokens."""
  if count < 1 or length < 1:
    raise ValueError(f"Need count >= 1 and length >= 1, got {count} and {length}.")
  if count * (length + 1) > num_tokens:
    raise DataError(
        f"The held-out text has {num_tokens} tokens: it cannot supply {count} windows of "
        f"{length} tokens. At length {length} at most {num_tokens // (length + 1)} windows fit; "
        f"with {count} windows the largest length is {num_tokens // count - 1}. Lower "
        f"--num_windows or --length, or use a larger held-out split.")
  if count == 1:
    return np.zeros([1], np.int64)
  stride = (num_tokens - length - 1) // (count - 1)
  return np.arange(count, dtype=np.int64) * stride


def eval_windows(tokens, *, kind: str, length: int, count: int, train_length: int,
                 period: int | None = None) -> np.ndarray:
  """int32 [count, length + 1] windows of the set `kind` ("repeated" or "non_repeated");
  `period` is the repeated set's tile (default train_length)."""
  if kind not in EVAL_SETS:
    raise ValueError(f"Unknown evaluation set {kind!r}; choose one of {', '.join(EVAL_SETS)}.")
  tokens = np.asarray(tokens, np.int32)
  starts = window_starts(len(tokens), length, count)
  if kind == "non_repeated":
    return np.stack([tokens[s:s + length + 1] for s in starts])
  period = period or train_length
  if not 1 <= period <= length:
    raise ValueError(f"The repeated set tiles a window of {period} tokens (the period); length "
                     f"{length} must be at least that, and the period at least 1.")
  return np.stack([np.resize(tokens[s:s + period], length + 1) for s in starts])
