"""tools/alphabet_copy.py: its prompts, and its scores for a perfect copier and a uniform guess."""

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import alphabet_copy  # pylint: disable=g-import-not-at-top,wrong-import-position

TEXT = np.frombuffer(b"In the beginning God created the heaven and the earth. " * 40, np.uint8)


def test_prompts_tile_a_random_string_of_the_alphabet_after_text():
  windows, scored = alphabet_copy.prompts(TEXT, "0123456789", count=3, length=64, lead=20,
                                          period=8)
  assert windows.shape == (3, 65) and scored.shape == (3, 64)
  for row in windows:
    assert bytes(row[:20].astype(np.uint8)) in TEXT.tobytes()
    np.testing.assert_array_equal(row[28:], row[20:-8])
    assert set(row[20:].tolist()) <= set(b"0123456789")
  assert scored[:, 27:].all() and not scored[:, :27].any()   # targets 28.. copy 8 back


def test_a_copier_scores_100_and_a_uniform_guess_the_alphabets_share():
  windows, scored = alphabet_copy.prompts(TEXT, "0123456789", count=4, length=64, lead=20,
                                          period=8)
  def copier(tokens):   # the token 8 back from each target, i.e. 7 back from the input
    logits = np.zeros(tokens.shape + (257,))
    for t in range(7, tokens.shape[1]):
      logits[np.arange(len(tokens)), t, tokens[:, t - 7]] = 50.0
    return logits
  copied = alphabet_copy.copy_scores(copier, windows, scored, "0123456789")
  assert copied == {"copy_accuracy": 100.0, "alphabet_probability": 100.0, "chance": 10.0}
  uniform = alphabet_copy.copy_scores(lambda t: np.zeros(t.shape + (257,)), windows, scored,
                                      "0123456789")
  # argmax of a tie is byte 0, never a digit; 10 of 257 equal probabilities are digits' = 3.89%.
  assert uniform == {"copy_accuracy": 0.0, "alphabet_probability": 3.89, "chance": 10.0}
