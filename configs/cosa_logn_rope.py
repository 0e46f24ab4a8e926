"""CosA with the trained log n factor (lambda_i = 4 log(i+1)), RoPE."""

from configs import base


def get_config():
  return base.get_config("cosa_logn_rope", attention="cosa", logn=True)
