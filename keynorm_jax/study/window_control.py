"""The short-context control: how much a model gains at 8x from context beyond its training length,
measured against the same model reading only its last train_length tokens at 8x.

Two controls are evaluated at 8x: "window" (the last 512 tokens at their own positions) and
"streaming" (StreamingLLM: sinks plus a window, positions re-indexed to fit the training length).
For a method that reads absolute query positions (FIRE, NoPE, sinusoidal) the window puts every
query past its trained positions, so the fair control is the better of the two.
"""

import statistics

from keynorm_jax.study.reading import accuracy

CONTROLS = ("window", "streaming")


def gains(runs, controls=("window",)) -> dict:
  """{(architecture, name): [8x accuracy minus the best of `controls` at 8x, per seed]} of the runs
  (reading.text_runs or retrieval_runs) that have them all."""
  found = {}
  for key, recs in runs.items():
    values = []
    for r in recs:
      control = [accuracy(r, 8, c) for c in controls]
      if accuracy(r, 8) is not None and None not in control:
        values.append(accuracy(r, 8) - max(control))
    if values:
      found[key] = values
  return found


def largest_gain(runs) -> tuple[float, tuple]:
  """(the largest single run's gain over its window, its (architecture, name))."""
  return max((max(values), key) for key, values in gains(runs).items())


def repeatable_gains(runs) -> list[tuple[tuple, list[float]]]:
  """The configurations of two or more seeds whose every seed gains over its window, largest mean
  gain first: [((architecture, name), gains per seed)]."""
  found = [(key, values) for key, values in gains(runs).items()
           if len(values) >= 2 and min(values) > 0]
  return sorted(found, key=lambda item: -statistics.fmean(item[1]))


def streaming_beats_window(runs, margin=0.005) -> list[tuple[tuple, float, float]]:
  """[((architecture, name), window, streaming)] mean 8x accuracies where StreamingLLM is above the
  window by more than `margin`, largest difference first."""
  found = []
  for key, recs in runs.items():
    window = [accuracy(r, 8, "window") for r in recs]
    streaming = [accuracy(r, 8, "streaming") for r in recs]
    if None in window or None in streaming:
      continue
    w, s = statistics.fmean(window), statistics.fmean(streaming)
    if s - w > margin:
      found.append((key, w, s))
  return sorted(found, key=lambda item: item[1] - item[2])
