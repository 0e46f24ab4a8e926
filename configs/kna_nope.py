"""KNA without position encoding (NoPE); the seed says it does not extrapolate."""

from configs import base


def get_config():
  return base.get_config("kna_nope", attention="kna", position="nope")
