"""KNA with the trained log n factor, RoPE."""

from configs import base


def get_config():
  return base.get_config("kna_logn_rope", attention="kna", logn=True)
