"""Synthetic retrieval tasks: does a model *use* context beyond its training length?

Each task makes an `Episode` (a needle placed at a depth in filler text, and a tail of question and
answer at the end of the window); `placement.place` puts one into a window; `prompts` builds the
deterministic evaluation sets; the training mixture (data/train_stream.py) puts episodes into a
share of the training windows.
"""

from keynorm_jax.data.retrieval.episode import Episode, RetrievalError
from keynorm_jax.data.retrieval.placement import min_length, place
from keynorm_jax.data.retrieval.prompts import (DEFAULT_DEPTHS, EVAL_MIN_GAP, prompt_length,
                                                retrieval_prompts, too_short)
from keynorm_jax.data.retrieval.tasks import TASKS, check_tasks, task

__all__ = ["DEFAULT_DEPTHS", "EVAL_MIN_GAP", "Episode", "RetrievalError", "TASKS",
           "check_tasks", "min_length", "place", "prompt_length", "retrieval_prompts", "task",
           "too_short"]
