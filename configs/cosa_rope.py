"""CosA: scaled cosine attention, lambda = 4 log(train_length/2), RoPE."""

from configs import base


def get_config():
  return base.get_config("cosa_rope", attention="cosa")
