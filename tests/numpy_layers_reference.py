"""Independent NumPy versions of one GAU layer, one Transformer block and a Transformer LM, written
from their definitions. Nothing here imports keynorm_jax; attention itself is the loop-by-loop
reference of numpy_attention_reference (variants, RoPE, biases, SSMax, log n per query).

  GAU layer:    h = swish(x W_i); u, v, z = split(h, [e, e, s]); q = z gamma_q + beta_q;
                k = z gamma_k + beta_k; o = (u * Attention(q, k, v)) W_o        (one head)
  Transformer:  x + Attn(Norm(x)), then + MLP(Norm(.)); SwiGLU = (silu(x W_gate) * (x W_up)) W_down,
                GELU MLP = gelu(x W_up) W_down with the exact gelu(x) = x Phi(x); Norm = RMSNorm or
                LayerNorm with a gain and no bias; heads of size S; key/value head g serves the
                query heads g H/Hkv .. (g + 1) H/Hkv - 1.
Shapes: one sequence, x [T, d]; weights as (in, out) matrices.
"""

import math

import numpy as np

import numpy_attention_reference as attention_ref
import numpy_bias_reference as bias_ref


def sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def swish(x):
  """swish = silu: x * sigmoid(x)."""
  return x * sigmoid(x)


def gelu(x):
  """Exact GELU: x Phi(x) = x (1 + erf(x / sqrt 2)) / 2."""
  erf = np.vectorize(math.erf)
  return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def rms_norm(x, gain, eps=1e-6):
  """x / sqrt(mean(x^2) + eps) * gain, per row."""
  return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain


def layer_norm(x, gain, bias=0.0, eps=1e-6):
  """(x - mean) / sqrt(var + eps) * gain + bias, per row (biased variance)."""
  mean = x.mean(axis=-1, keepdims=True)
  var = ((x - mean)**2).mean(axis=-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * gain + bias


def norm(kind, x, p, eps=1e-6):
  """The model's norms: p = {"scale": gain[, "bias": bias]}."""
  if kind == "rmsnorm":
    return rms_norm(x, p["scale"], eps)
  return layer_norm(x, p["scale"], p.get("bias", 0.0), eps)


def gau_layer(x, p, *, e, s, attention_kwargs, separate=False, heads=1):
  """One GAU layer. p: wi [d, 2e+s] (separate: [d, 2e+2s], q's z then k's), wo [e, d], gamma_q,
  beta_q, gamma_k, beta_k [s]. heads > 1: head i attends with columns i s/H .. (i+1) s/H - 1 of q
  and k and columns i e/H .. (i+1) e/H - 1 of v; the heads' outputs side by side make the e
  columns that u gates."""
  h = swish(x @ p["wi"])
  u, v, z = h[:, :e], h[:, e:2 * e], h[:, 2 * e:2 * e + s]
  z_k = h[:, 2 * e + s:2 * e + 2 * s] if separate else z
  q = z * p["gamma_q"] + p["beta_q"]
  k = z_k * p["gamma_k"] + p["beta_k"]
  by_head = lambda a: a.reshape(a.shape[0], heads, -1)
  out = multi_head_attention(by_head(q), by_head(k), by_head(v), lambda h: attention_kwargs)
  return (u * out) @ p["wo"]


def multi_head_attention(q, k, v, per_head_kwargs):
  """q [T, H, S], k, v [T, Hkv, S] -> [T, H * S]; per_head_kwargs(h) -> attention_ref.attention's kwargs."""
  heads, kv_heads = q.shape[1], k.shape[1]
  group = heads // kv_heads
  out = [attention_ref.attention(q[:, h], k[:, h // group], v[:, h // group], **per_head_kwargs(h))
         for h in range(heads)]
  return np.concatenate(out, axis=-1)


def mlp(kind, x, p):
  if kind == "swiglu":
    return (swish(x @ p["gate"]) * (x @ p["up"])) @ p["down"]
  return gelu(x @ p["up"]) @ p["down"]


def transformer_block(x, p, *, heads, kv_heads, size, norm_kind="rmsnorm", mlp_kind="swiglu",
                      qk_norm=None, per_head_kwargs=lambda h: {"variant": "baseline"},
                      norm_eps=1e-6):
  """One pre-norm block. p: attention_norm, mlp_norm ({"scale"}), query [d, H S], key, value
  [d, Hkv S], out [H S, d], mlp {gate?, up, down}; q_norm, k_norm when qk_norm is set;
  query_bias, key_bias, value_bias where q, k, v have biases (Qwen2)."""
  T = x.shape[0]
  h = norm(norm_kind, x, p["attention_norm"], norm_eps)
  q = (h @ p["query"] + p.get("query_bias", 0.0)).reshape(T, heads, size)
  k = (h @ p["key"] + p.get("key_bias", 0.0)).reshape(T, kv_heads, size)
  v = (h @ p["value"] + p.get("value_bias", 0.0)).reshape(T, kv_heads, size)
  if qk_norm:
    q, k = norm(qk_norm, q, p["q_norm"]), norm(qk_norm, k, p["k_norm"])
  gate = p.get("attention", {}).get("forget_gate")
  if gate is not None:   # FoX: log f_t = log sigmoid(w . h_t + b) per head, on the normed input
    bias = bias_ref.fox_bias(bias_ref.log_sigmoid(h @ gate["w"] + gate["b"]))
    plain_kwargs = per_head_kwargs
    per_head_kwargs = lambda head: {**plain_kwargs(head), "bias": bias[head]}
  attended = multi_head_attention(q, k, v, per_head_kwargs)
  if "output_gate" in p:   # Qiu et al. 2025 (G1): times sigmoid(h W_gate), elementwise
    attended = attended * bias_ref.sigmoid(h @ p["output_gate"])
  x = x + attended @ p["out"]
  return x + mlp(mlp_kind, norm(norm_kind, x, p["mlp_norm"], norm_eps), p["mlp"])


def transformer_lm(tokens, p, *, num_layers, tied, norm_kind="rmsnorm", norm_eps=1e-6,
                   **block_kwargs):
  """tokens [T] -> logits [T, V]: embedding, blocks, final norm, head (or the embedding's
  transpose when tied). p: embed [V, d], layer_i, final_norm, head [d, V]."""
  x = p["embed"][tokens]
  for i in range(num_layers):
    x = transformer_block(x, p[f"layer_{i}"], norm_kind=norm_kind, norm_eps=norm_eps,
                          **block_kwargs)
  x = norm(norm_kind, x, p["final_norm"], norm_eps)
  return x @ (p["embed"].T if tied else p["head"])
