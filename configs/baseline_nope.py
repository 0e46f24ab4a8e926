"""Baseline without position encoding (NoPE)."""

from configs import base


def get_config():
  return base.get_config("baseline_nope", attention="baseline", position="nope")
