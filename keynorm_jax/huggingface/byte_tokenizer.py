"""This project's byte tokenizer (data/tokenizer.py: ids 0..255 the UTF-8 bytes, 256 the document
separator) as a Hugging Face tokenizer.json, so that exported runs load in other tools."""

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from keynorm_jax.data.tokenizer import NUM_BYTES, SEPARATOR_ID

SEPARATOR = "<sep>"


def _byte_chars() -> list:
  """GPT-2's printable character for each byte 0..255 (what the ByteLevel pre-tokenizer emits)."""
  printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
               + list(range(ord("®"), ord("ÿ") + 1)))
  chars, extra = {}, 0
  for byte in range(NUM_BYTES):
    if byte in printable:
      chars[byte] = chr(byte)
    else:
      chars[byte] = chr(NUM_BYTES + extra)
      extra += 1
  return [chars[byte] for byte in range(NUM_BYTES)]


def byte_tokenizer() -> Tokenizer:
  """ids = UTF-8 bytes (no merges), <sep> = 256 (a special token)."""
  vocab = {char: byte for byte, char in enumerate(_byte_chars())}
  tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
  tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
  tokenizer.decoder = decoders.ByteLevel()
  tokenizer.add_special_tokens([AddedToken(SEPARATOR, special=True)])
  assert tokenizer.token_to_id(SEPARATOR) == SEPARATOR_ID
  return tokenizer
