"""QNA: query-normalized attention, RoPE."""

from configs import base


def get_config():
  return base.get_config("qna_rope", attention="qna")
