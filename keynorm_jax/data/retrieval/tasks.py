"""The retrieval tasks by name: what `--tasks` and `data.retrieval_tasks` take."""

import dataclasses
import functools
import string
from typing import Callable

import numpy as np

from keynorm_jax.data.retrieval import placement
from keynorm_jax.data.retrieval.episode import Episode, RetrievalError
from keynorm_jax.data.retrieval.mqar import mqar_episode
from keynorm_jax.data.retrieval.passkey import passkey_episode
from keynorm_jax.data.tokenizer import encode_with_offsets


@dataclasses.dataclass(frozen=True)
class Task:
  name: str
  make: Callable[..., Episode]   # make(rng, encode=...): an episode in encode's tokens
  chance: float   # the exact-match accuracy of a uniform guess per answer
  summary: str

  def min_length(self, min_gap: int, encode=encode_with_offsets) -> int:
    """The shortest window (inputs) an episode fits with `min_gap` filler tokens before its tail,
    in encode's tokens (in bytes every episode of a task has the same length; in other tokens, the
    longest of a few)."""
    return max(placement.min_length(self.make(np.random.default_rng(seed), encode=encode), min_gap)
               for seed in range(1 if encode is encode_with_offsets else 16))


TASKS = {
    "passkey": Task("passkey", passkey_episode, 1e-5,
                    "a 5-digit key stated once at a depth, asked for at the end"),
    # The same with a key of lowercase letters, the alphabet the text (and copy windows) train.
    "passkey_letters": Task("passkey_letters",
                            functools.partial(passkey_episode, alphabet=string.ascii_lowercase),
                            26.0 ** -5, "passkey with a key of 5 lowercase letters"),
    "mqar": Task("mqar", mqar_episode, 0.1,
                 "16 letter-digit pairs at a depth, every letter queried at the end"),
}


def task(name: str) -> Task:
  if name not in TASKS:
    raise RetrievalError(f"Unknown retrieval task {name!r}; choose from {', '.join(TASKS)}.")
  return TASKS[name]


def check_tasks(names, what: str, also=()) -> list[str]:
  """The task names (or names in `also`), each known and named once; RetrievalError naming
  `what` (a flag or config key)."""
  names = [n.strip() for n in names if n.strip()]
  known = (*also, *TASKS)
  if not names:
    raise RetrievalError(f"{what} names no task; choose from {', '.join(known)}.")
  unknown = [n for n in names if n not in known]
  if unknown:
    raise RetrievalError(f"{what}: unknown task {', '.join(map(repr, unknown))}; choose from "
                         f"{', '.join(known)} (comma-separated).")
  return list(dict.fromkeys(names))
