"""Baseline with the trained log n factor, RoPE."""

from configs import base


def get_config():
  return base.get_config("baseline_logn_rope", attention="baseline", logn=True)
