"""KNA: key-normalized attention (KeyNorm), RoPE."""

from configs import base


def get_config():
  return base.get_config("kna_rope", attention="kna")
