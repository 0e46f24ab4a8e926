"""The same GAU and Transformer LMs and training step, written in PyTorch, as the peer a researcher
would otherwise use (benchmarks/torch_peer.py times them beside ours). Shapes come from our
ModelConfig; KNA/Baseline attention with RoPE, float32 (or bfloat16 autocast), AdamW with clipping
at norm 1."""

import math

import torch
from torch import nn
import torch.nn.functional as F


def rms_norm(x, eps=1e-6):
  return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope_tables(length, dim, base=10000.0):
  inv = base ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
  angles = torch.arange(length, dtype=torch.float32)[:, None] * inv
  return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):  # rotate-half pairs (x[i], x[i + S/2]); x [..., T, S]
  half = x.shape[-1] // 2
  x1, x2 = x[..., :half], x[..., half:]
  return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def causal_attention(q, k, v, variant):  # [B, H, T, S]
  if variant == "kna":
    k = F.normalize(k, dim=-1)
    scale = 1.0
  else:
    scale = 1.0 / math.sqrt(q.shape[-1])
  scores = (q @ k.transpose(-1, -2)) * scale
  length = q.shape[-2]
  mask = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
  scores = scores.masked_fill(~mask, float("-inf"))
  return torch.softmax(scores.float(), dim=-1) @ v


class GAULayer(nn.Module):

  def __init__(self, cfg):
    super().__init__()
    self.e, self.s = cfg.expansion, cfg.qk_size
    self.wi = nn.Linear(cfg.d_model, 2 * cfg.expansion + cfg.qk_size, bias=False)
    self.wo = nn.Linear(cfg.expansion, cfg.d_model, bias=False)
    self.q_gamma, self.k_gamma = (nn.Parameter(torch.ones(cfg.qk_size)) for _ in range(2))
    self.q_beta, self.k_beta = (nn.Parameter(torch.zeros(cfg.qk_size)) for _ in range(2))
    self.variant = cfg.attention

  def forward(self, x, cos, sin):
    u, v, z = torch.split(F.silu(self.wi(x)), [self.e, self.e, self.s], dim=-1)
    q = apply_rope(z * self.q_gamma + self.q_beta, cos, sin)
    k = apply_rope(z * self.k_gamma + self.k_beta, cos, sin)
    out = causal_attention(q[:, None], k[:, None], v[:, None], self.variant)[:, 0]
    return self.wo(u * out)


class TransformerBlock(nn.Module):

  def __init__(self, cfg):
    super().__init__()
    self.heads, self.kv, self.hd = cfg.heads, cfg.kv_heads, cfg.head_size
    d, m = cfg.d_model, cfg.resolved_mlp_size
    self.norm1, self.norm2 = nn.RMSNorm(d, eps=1e-6), nn.RMSNorm(d, eps=1e-6)
    self.q = nn.Linear(d, self.heads * self.hd, bias=False)
    self.kv_proj = nn.Linear(d, 2 * self.kv * self.hd, bias=False)
    self.o = nn.Linear(self.heads * self.hd, d, bias=False)
    self.gate, self.up = nn.Linear(d, m, bias=False), nn.Linear(d, m, bias=False)
    self.down = nn.Linear(m, d, bias=False)
    self.variant = cfg.attention

  def forward(self, x, cos, sin):
    b, t, _ = x.shape
    h = self.norm1(x)
    q = self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2)
    k, v = self.kv_proj(h).view(b, t, 2, self.kv, self.hd).permute(2, 0, 3, 1, 4)
    k, v = (y.repeat_interleave(self.heads // self.kv, dim=1) for y in (k, v))
    out = causal_attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, self.variant)
    x = x + self.o(out.transpose(1, 2).reshape(b, t, -1))
    h = self.norm2(x)
    return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LM(nn.Module):

  def __init__(self, cfg, length):
    super().__init__()
    self.gau = cfg.architecture == "gau"
    self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
    nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
    block = GAULayer if self.gau else TransformerBlock
    self.layers = nn.ModuleList(block(cfg) for _ in range(cfg.num_layers))
    self.final_norm = None if self.gau else nn.RMSNorm(cfg.d_model, eps=1e-6)
    self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
    cos, sin = rope_tables(length, cfg.head_size)
    self.register_buffer("cos", cos)
    self.register_buffer("sin", sin)

  def forward(self, tokens):
    x = self.embed(tokens)
    if self.gau:  # post-norm, parameter-free RMSNorm
      x = rms_norm(x)
      for layer in self.layers:
        x = rms_norm(x + layer(x, self.cos, self.sin))
    else:
      for layer in self.layers:
        x = layer(x, self.cos, self.sin)
      x = self.final_norm(x)
    return self.head(x)


def make_train_step(model, learning_rate=2e-3, autocast_dtype=None):
  """A training step of `model`; autocast_dtype (e.g. torch.bfloat16): its forward pass under
  torch.autocast on the CPU (products in that dtype, parameters and the loss in float32)."""
  opt = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)

  def step(batch):
    inputs, targets = batch[:, :-1], batch[:, 1:]
    with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16,
                        enabled=autocast_dtype is not None):
      logits = model(inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss

  return step
