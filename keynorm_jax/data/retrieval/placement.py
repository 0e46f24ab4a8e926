"""Putting an episode into a window of filler: the needle at a depth, the tail at the end.

A window has L + 1 tokens (L inputs, L next-token targets). The tail ends the window, so the last
answer token is the window's last target; at least `min_gap` filler tokens separate the needle's end
from the tail, and the needle starts at round(depth * span), span being the room left for it:
depth 0 puts it at the very start, depth 1 as close to the question as `min_gap` allows.
"""

import numpy as np

from keynorm_jax.data.retrieval.episode import Episode, RetrievalError


def min_length(episode: Episode, min_gap: int) -> int:
  """The shortest L (inputs) a window of this episode fits."""
  return len(episode.needle) + min_gap + len(episode.tail) - 1


def place(filler, episode: Episode, depth: float, min_gap: int):
  """(window int32 [L + 1], answer_group int32 [L + 1]: -1 where not scored) with L + 1 =
  len(filler); the needle and the tail overwrite filler tokens."""
  if not 0.0 <= depth <= 1.0:
    raise RetrievalError(f"A depth is a fraction of the context from its start (0) to its end (1); "
                         f"got {depth}.")
  window = np.array(filler, np.int32)
  total = len(window)
  span = total - len(episode.tail) - min_gap - len(episode.needle)
  if span < 0:
    raise RetrievalError(f"Length {total - 1} is shorter than this retrieval prompt needs: at least "
                         f"{min_length(episode, min_gap)} tokens (needle {len(episode.needle)}, "
                         f"gap {min_gap}, question and answer {len(episode.tail)}). Evaluate at a "
                         f"longer length.")
  start = int(round(depth * span))
  window[start:start + len(episode.needle)] = episode.needle
  window[total - len(episode.tail):] = episode.tail
  group = np.full(total, -1, np.int32)
  group[total - len(episode.tail):] = episode.answer_group
  return window, group
