"""Baseline: q.k/sqrt(s), RoPE."""

from configs import base


def get_config():
  return base.get_config("baseline_rope", attention="baseline")
