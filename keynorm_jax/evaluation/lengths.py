"""Evaluation lengths, checked before any work: each a positive number of tokens (before anything
is read), and each within what the held-out text supplies (before any of a run's scoring: a
length the text cannot supply used to fail only after the shorter lengths were scored)."""

from keynorm_jax.data.eval_sets import window_starts
from keynorm_jax.data.retrieval.prompts import check_text_holds
from keynorm_jax.errors import ConfigError


def check_lengths(lengths) -> None:
  """ConfigError for a length below one token (--length / --lengths)."""
  bad = [n for n in lengths if not n >= 1]
  if bad:
    raise ConfigError(f"--length/--lengths takes positive numbers of tokens, got "
                      f"{', '.join(map(str, bad))}; give lengths of at least 1, e.g. "
                      f"--lengths=512,4096.")


def check_text_supplies(num_tokens: int, lengths, *, num_windows: int | None,
                        prompts: bool) -> None:
  """DataError (eval_sets.window_starts' and prompts.check_text_holds' words) for the longest of
  `lengths` that the held-out text of num_tokens tokens cannot supply: num_windows windows of it
  for the next-token sets (None: not asked), or one prompt of it for retrieval (prompts)."""
  for length in sorted(lengths, reverse=True):
    if num_windows is not None:
      window_starts(num_tokens, length, num_windows)
    if prompts:
      check_text_holds(num_tokens, length)
