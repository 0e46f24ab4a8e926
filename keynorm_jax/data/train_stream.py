"""The training stream: shuffled windows of train_length + 1 tokens, endless, batched per host.

Documents are joined with the separator id into one token stream and cut into consecutive windows
that overlap by one token (so every token is a target exactly once per epoch). We join rather than
pack with segment ids: KJV books (and most long-document corpora) are far longer than a training
window, so few windows straddle a boundary, the separator marks it, and every attention variant
stays a plain causal attention.

Synthetic copies (`copy_fraction` > 0): that share of the windows, drawn once per window from the
seed, is replaced by a prefix of itself of P tokens (P uniform in [MIN_COPY_PERIOD, train_length / 2])
tiled over the whole window, so training contains copying at distances inside the trained range
(the copy test evaluates period train_length / 4). Reported as such wherever used. With
`copy_symbols` > 0, that share of the copies (drawn from its own generator) tiles P random printable
characters (SYMBOLS: digits, letters, punctuation, space) instead of the text's prefix, so copying
is trained on characters the text never shows (the KJV holds no digit; the retrieval keys do).

Retrieval episodes (`retrieval_fraction` > 0): that share of the other windows, drawn once per window
from the seed, carries one episode of a retrieval task (`retrieval_tasks`, one drawn per window):
its needle at a uniform depth of the window's own text and its question and answer at the end
(data/retrieval/), so retrieval over every distance inside the training length is learned.

The pipeline is a Grain dataset; its iterator's `get_state()` is a small dict saved with every
checkpoint, so a resumed run sees exactly the batches it would have seen.
"""

import string

import grain
import numpy as np

from keynorm_jax.data import retrieval
from keynorm_jax.data.corpora import DataError
from keynorm_jax.data.tokenizer import encode_with_offsets


MIN_COPY_PERIOD = 16
RETRIEVAL_STREAM = 1  # the retrieval draws' own generator, apart from the copy draws'
SYMBOL_STREAM = 2     # the random-symbol copies' own generator
SYMBOLS = string.digits + string.ascii_letters + string.punctuation + " "


def copied(window, period: int):
  """The first `period` tokens of `window` repeated over its length."""
  return np.resize(window[:period], window.shape)


def random_symbols(draw: np.random.Generator, count: int, encode=encode_with_offsets):
  """`count` tokens of random SYMBOLS characters, drawn by `draw`, in encode's tokens: `count`
  characters at a time (bytes: one draw, one token each) until that many tokens, then cut."""
  ids = np.zeros([0], np.int32)
  while len(ids) < count:
    text = "".join(draw.choice(list(SYMBOLS), size=count))
    ids = np.concatenate([ids, np.asarray(encode(text)[0], np.int32)])
  return ids[:count]


def num_windows(num_tokens: int, train_length: int) -> int:
  return max(0, (num_tokens - 1) // train_length)


def train_dataset(tokens, *, train_length: int, global_batch_size: int, seed: int,
                  process_index: int = 0, process_count: int = 1,
                  copy_fraction: float = 0.0, copy_symbols: float = 0.0,
                  retrieval_fraction: float = 0.0, retrieval_tasks=(),
                  encode=encode_with_offsets) -> grain.IterDataset:
  """Endless dataset of int32 batches [global_batch_size / process_count, train_length + 1].

  Each epoch is a fresh shuffle (seeded) of all windows; every host sees the same global batch
  order and keeps its own contiguous slice of each batch.
  """
  tokens = np.asarray(tokens, np.int32)
  count = num_windows(len(tokens), train_length)
  if count < global_batch_size:
    raise DataError(f"The training text has {len(tokens)} tokens: {count} windows of "
                    f"{train_length + 1}, fewer than one batch of {global_batch_size}. Use a "
                    f"smaller batch_size or train_length, or more text.")
  if global_batch_size % process_count:
    raise DataError(f"batch_size {global_batch_size} is not divisible by the {process_count} "
                    f"hosts; choose a multiple of {process_count}.")
  local = global_batch_size // process_count
  lo = process_index * local

  max_period = max(MIN_COPY_PERIOD, train_length // 2)
  if retrieval_fraction:
    retrieval_tasks = retrieval.check_tasks(retrieval_tasks, "data.retrieval_tasks")

  def window(i):
    out = tokens[i * train_length:i * train_length + train_length + 1]
    if copy_fraction:
      draw = np.random.default_rng((seed, int(i)))
      if draw.random() < copy_fraction:
        period = int(draw.integers(MIN_COPY_PERIOD, max_period + 1))
        if copy_symbols:
          symbols = np.random.default_rng((seed, int(i), SYMBOL_STREAM))
          if symbols.random() < copy_symbols:
            return np.resize(random_symbols(symbols, period, encode), out.shape)
        return copied(out, period)
    if retrieval_fraction:
      draw = np.random.default_rng((seed, int(i), RETRIEVAL_STREAM))
      if draw.random() < retrieval_fraction:
        name = retrieval_tasks[int(draw.integers(len(retrieval_tasks)))]
        episode = retrieval.task(name).make(draw, encode=encode)
        out, _ = retrieval.place(out, episode, depth=float(draw.random()), min_gap=0)
    return out

  dataset = (grain.MapDataset.range(count).shuffle(seed=seed).repeat(None).map(window)
             .batch(global_batch_size, drop_remainder=True).map(lambda b: b[lo:lo + local]))
  return dataset.to_iter_dataset()
