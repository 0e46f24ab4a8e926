"""QK-norm: RMSNorm with learnable gain on q and k, then q.k/sqrt(s), RoPE."""

from configs import base


def get_config():
  return base.get_config("qknorm_rope", attention="baseline", qk_norm=True)
