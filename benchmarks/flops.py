"""Analytical FLOPs of one training step (forward + backward = 3 x forward), matmuls only.

Counted: every dense projection (2 x in x out per token) and the attention's two products over the
full T x T square (2 T S for the scores and 2 T E for the weighted values, per query and head):
PaLM's convention for MFU (the model's FLOPs, whatever the kernel skips), which the issue's figures
use. A causal model needs only the triangle, query i against i + 1 keys, and the CPU path computes
about 5/8 of the square (its 4 causal query blocks), so `train_step_flops` also gives the count with
the attention over the triangle ("total_causal"), the stricter figure. Not counted: norms, softmax,
RoPE, elementwise gates, the embedding lookup and the optimizer (a few % at these sizes).
"""


def forward_flops_per_token(cfg, length: int) -> dict:
  """{"dense": ..., "attention": ...} FLOPs per token of one forward pass."""
  d, vocab = cfg.d_model, cfg.vocab_size
  if cfg.architecture == "gau":
    e, s = cfg.expansion, cfg.qk_size
    dense = cfg.num_layers * (2 * d * (2 * e + s) + 2 * e * d)
    attention = cfg.num_layers * (2 * length * s + 2 * length * e)
  else:
    heads, kv, hd, m = cfg.heads, cfg.kv_heads, cfg.head_size, cfg.resolved_mlp_size
    mlp_mats = 3 if cfg.mlp == "swiglu" else 2
    dense = cfg.num_layers * (2 * d * (heads + 2 * kv) * hd + 2 * heads * hd * d
                              + mlp_mats * 2 * d * m)
    attention = cfg.num_layers * 2 * (2 * length * heads * hd)
  return {"dense": dense + 2 * d * vocab, "attention": attention}


def train_step_flops(cfg, batch: int, length: int) -> dict:
  """FLOPs of one training step of batch x length tokens: dense, attention (the square), total,
  and total_causal (the attention over the causal triangle only)."""
  per_token = forward_flops_per_token(cfg, length)
  tokens = batch * length
  out = {k: 3 * v * tokens for k, v in per_token.items()}
  out["total"] = out["dense"] + out["attention"]
  # The triangle: sum over queries of (i + 1) keys = T (T + 1) / 2, against T^2 for the square.
  out["total_causal"] = out["dense"] + out["attention"] * (length + 1) / (2 * length)
  return out
