"""transformer_kna_rope computing in bfloat16 (softmax and loss stay float32): on a GPU `model.kernel=auto`
then takes cuDNN's fused attention where it can (tools/accelerator_session.py, step c)."""

from configs import named


def get_config():
  config = named.get_config("transformer_kna_rope")
  config.model.compute_dtype = "bfloat16"
  return config
