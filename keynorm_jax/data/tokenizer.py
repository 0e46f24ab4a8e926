"""Byte-level UTF-8 tokenizer: ids 0..255 are bytes, 256 separates documents. Vocabulary 257."""

import numpy as np

NUM_BYTES = 256
SEPARATOR_ID = 256  # joins documents in the training stream and the evaluation text
VOCAB_SIZE = 257


def encode(text: str) -> np.ndarray:
  """UTF-8 bytes of `text` as int32 ids in [0, 256)."""
  return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)


def decode(ids) -> str:
  """Inverse of `encode`; the separator is shown as a newline, invalid byte runs as U+FFFD."""
  ids = np.asarray(ids)
  pieces, start = [], 0
  for stop in [*np.flatnonzero(ids == SEPARATOR_ID), len(ids)]:
    pieces.append(bytes(ids[start:stop].astype(np.uint8)).decode("utf-8", errors="replace"))
    start = stop + 1
  return "\n".join(pieces)


def join_documents(documents) -> np.ndarray:
  """Encodes documents and joins them into one stream, each followed by the separator."""
  parts = []
  for doc in documents:
    parts.extend([encode(doc), np.array([SEPARATOR_ID], np.int32)])
  return np.concatenate(parts) if parts else np.zeros([0], np.int32)
