"""QNA with the trained log n factor, RoPE."""

from configs import base


def get_config():
  return base.get_config("qna_logn_rope", attention="qna", logn=True)
