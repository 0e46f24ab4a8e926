"""Byte-level UTF-8 tokenizer: ids 0..255 are bytes, 256 separates documents. Vocabulary 257.

A data config with `tokenizer` set (a Hugging Face tokenizer.json, read offline with the
`tokenizers` library) encodes with that instead, each document followed by `separator_id`.
"""

import functools

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


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str):
  from tokenizers import Tokenizer  # pylint: disable=g-import-not-at-top
  return Tokenizer.from_file(path)


def text_encoder(data_config=None):
  """(encode(text) -> int32 ids, separator id) of a data config: bytes, or its tokenizer.json."""
  path = data_config.get("tokenizer", "") if data_config is not None else ""
  if not path:
    return encode, SEPARATOR_ID
  if int(data_config.separator_id) < 0:
    from keynorm_jax.errors import ConfigError  # pylint: disable=g-import-not-at-top
    raise ConfigError("--config.data.tokenizer needs --config.data.separator_id: the id that ends "
                      "each document (a Hugging Face model's eos_token_id).")
  tokenizer = _tokenizer(str(path))
  ids = lambda text: np.asarray(tokenizer.encode(text, add_special_tokens=False).ids, np.int32)
  return ids, int(data_config.separator_id)


def encode_with_offsets(text: str):
  """(`encode`'s ids, int64 [n, 2] character offsets of each): a character's UTF-8 bytes all
  carry that character's span."""
  ids = [encode(char) for char in text]
  spans = [[i, i + 1] for i, char_ids in enumerate(ids) for _ in char_ids]
  return (np.concatenate(ids) if ids else np.zeros([0], np.int32),
          np.array(spans, np.int64).reshape(-1, 2))


def offsets_encoder(data_config=None):
  """encode(text) -> (int32 ids, int64 [n, 2] character offsets of each token) of a data config:
  bytes, or its tokenizer.json (the spans say which tokens hold which characters)."""
  path = data_config.get("tokenizer", "") if data_config is not None else ""
  if not path:
    return encode_with_offsets
  tokenizer = _tokenizer(str(path))

  def encoded(text):
    found = tokenizer.encode(text, add_special_tokens=False)
    return (np.asarray(found.ids, np.int32),
            np.array(found.offsets, np.int64).reshape(-1, 2))
  return encoded


def join_documents(documents, data_config=None) -> np.ndarray:
  """Encodes documents (as `text_encoder(data_config)` says) and joins them into one stream, each
  followed by the separator."""
  encoder, separator = text_encoder(data_config)
  parts = []
  for doc in documents:
    parts.extend([encoder(doc), np.array([separator], np.int32)])
  return np.concatenate(parts) if parts else np.zeros([0], np.int32)
