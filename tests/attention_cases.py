"""The shared case table of attention settings: every field of attention.Spec and Learned, at the
kernels' shape (shapes.py: T = 37, which every block pair of BLOCKS splits, the last block ragged).
One table, read by each concern: the kernel conformance test (test_kernels.py: every kernel against
the reference kernel), the blocked kernel's own tests, and the variants against the explicit-loop
NumPy reference (test_attention.py: the cases numpy_reference.py can express). And
`attend_options`, which calls attention.attend with a case's flat options split into its Spec, its
Learned and attend's own arguments (an option that is none of them is a TypeError, never
dropped)."""

import dataclasses
import math

import jax
import numpy as np

from keynorm_jax import attention, positions
from keynorm_jax.attention import far
from keynorm_jax.models.attention_block import attention_spec
from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.position_bias import FireBias, KerpleLogBias
from shapes import B, E, H, INV32, S, T


def inputs(seed=0, heads=H, kv_heads=None, value_size=E):
  """q [B, T, heads, S], k [B, T, kv_heads, S], v [B, T, kv_heads, value_size] float32."""
  rng = np.random.default_rng(seed)
  kv = kv_heads or heads
  return (rng.normal(size=(B, T, heads, S)).astype(np.float32),
          rng.normal(size=(B, T, kv, S)).astype(np.float32),
          rng.normal(size=(B, T, kv, value_size)).astype(np.float32))


def learned_bias(module):
  return module.apply(module.init(jax.random.PRNGKey(3)))


def sorted_random_positions(seed):
  """[B, T] sorted distinct positions in [0, 4T), a different draw per row (randomized RoPE)."""
  rng = np.random.default_rng(seed)
  return np.stack([np.sort(rng.choice(4 * T, T, replace=False)) for _ in range(B)])


def log_forget(seed):
  """[B, T, H] log forget gates log sigmoid(z), z ~ N(1.5, 1) (FoX's gates, mostly near 1)."""
  z = np.random.default_rng(seed).normal(1.5, 1.0, size=(B, T, H))
  return (-np.log1p(np.exp(-z))).astype(np.float32)


def path_factors(seed, kv_heads=2):
  """PaTH's factors of the kernels' 2 key/value heads: unit w [B, T, kv_heads, S], beta
  [B, T, kv_heads] in (0.05, 1.95) (the layer's 2 sigmoid, away from its ends)."""
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(B, T, kv_heads, S))
  beta = rng.uniform(0.05, 1.95, size=(B, T, kv_heads))
  return attention.PathFactors((w / np.linalg.norm(w, axis=-1, keepdims=True)).astype(np.float32),
                               beta.astype(np.float32))


SSMAX = np.array([0.3, 0.7, 1.1, 1.9], np.float32)   # SSMax's s, one per head
CASES = {
    "baseline": dict(variant="baseline"),
    "baseline_rope": dict(variant="baseline", inv_freq=INV32),
    "qna_rope": dict(variant="qna", inv_freq=INV32),
    "kna_rope": dict(variant="kna", inv_freq=INV32),
    "cosa_rope": dict(variant="cosa", inv_freq=INV32, cosa_scale=4 * math.log(6)),
    "baseline_rope_logn": dict(variant="baseline", inv_freq=INV32, logn_base=6),
    "qna_logn": dict(variant="qna", logn_base=3),
    "kna_rope_logn": dict(variant="kna", inv_freq=INV32, logn_base=6),
    "cosa_rope_logn": dict(variant="cosa", inv_freq=INV32, cosa_scale=4 * math.log(6), logn_base=6),
    # Each variant with RoPE, log n and SSMax's learnable s together, as a model trains them.
    "baseline_rope_logn_ssmax": dict(variant="baseline", inv_freq=INV32, logn_base=4,
                                     ssmax_scale=SSMAX),
    "qna_rope_logn_ssmax": dict(variant="qna", inv_freq=INV32, logn_base=4, ssmax_scale=SSMAX),
    "kna_rope_logn_ssmax": dict(variant="kna", inv_freq=INV32, logn_base=4, ssmax_scale=SSMAX),
    "cosa_rope_logn_ssmax": dict(variant="cosa", inv_freq=INV32, cosa_scale=3.0, logn_base=4,
                                 ssmax_scale=SSMAX),
    "yarn_factor_posthoc_logn": dict(variant="kna", inv_freq=INV32, attention_factor=1.2,
                                     posthoc_logn_length=8),
    "xpos": dict(variant="baseline", inv_freq=INV32, xpos_gamma=0.4, xpos_scale_base=8.0),
    "rerope": dict(variant="baseline", inv_freq=INV32, far=far.ReRoPE(6)),
    "rerope_wider_than_blocks": dict(variant="kna", inv_freq=INV32, far=far.ReRoPE(19),
                                     logn_base=6),
    "rerope_alibi": dict(variant="kna", inv_freq=INV32, far=far.ReRoPE(6),
                         alibi_slopes=np.array(positions.alibi_slopes(H), np.float32)),
    "leaky_rerope": dict(variant="cosa", inv_freq=INV32, far=far.ReRoPE(4, 3.0), cosa_scale=3.0),
    "window_smaller_than_block": dict(variant="baseline", window=3),
    "window_rope": dict(variant="kna", inv_freq=INV32, window=11),
    "window_alibi": dict(variant="baseline", window=9, alibi_slopes=0.3),
    "sinks": dict(variant="baseline", inv_freq=INV32, window=7, sink_tokens=2,
                  far=far.StreamingCache(2, 7)),
    "sinks_over_a_block": dict(variant="baseline", inv_freq=INV32, window=4, sink_tokens=17,
                               far=far.StreamingCache(17, 4)),  # more sinks than a key block
    "sinks_alibi": dict(variant="kna", window=6, sink_tokens=3, alibi_slopes=0.2,
                        far=far.StreamingCache(3, 6)),
    "alibi_per_head": dict(variant="baseline",
                           alibi_slopes=np.array(positions.alibi_slopes(H), np.float32)),
    "ssmax": dict(variant="qna", ssmax_scale=np.array([0.4, 0.9, 1.7, 1.1], np.float32)),
    "kerple": dict(variant="kna", score_bias=learned_bias(KerpleLogBias(H))),
    "fire": dict(variant="baseline", score_bias=learned_bias(FireBias(H, 16))),
    "fire_sinks": dict(variant="baseline", inv_freq=INV32, window=8, sink_tokens=2,
                       far=far.StreamingCache(2, 8), score_bias=learned_bias(FireBias(H, 16))),
    "self_extend": dict(variant="kna", inv_freq=INV32, far=far.SelfExtend(6, 3)),
    "scale_invariant_sinks": dict(variant="kna", window=7, sink_tokens=2, scale_invariant_tau=10.0,
                                  far=far.StreamingCache(2, 7),
                                  inv_freq=INV32 * np.array([1, 1, 0, 0], np.float32)),  # p-RoPE
    "stickbreaking_window_rope": dict(variant="stickbreaking", inv_freq=INV32, window=9),
    "string": dict(variant="baseline", inv_freq=INV32, far=far.String(9, 3)),
    "cope_kna_window": dict(variant="kna", window=9, cope_embeddings=np.random.default_rng(7).normal(
        size=(S, 5)).astype(np.float32)),   # positions reach the cap npos - 1 = 4
    "dca": dict(variant="kna", inv_freq=INV32, far=far.DualChunk(6, 8)),
    # LM-Infinite: a window, sinks and every distance capped (here below the window's reach, so
    # that sinks inside the cap and past it are both scored).
    "lm_infinite": dict(variant="kna", inv_freq=INV32, window=8, sink_tokens=3,
                        far=far.DistanceLimit(12)),
    "lm_infinite_alibi": dict(variant="baseline", window=6, sink_tokens=2, far=far.DistanceLimit(9),
                              alibi_slopes=np.array(positions.alibi_slopes(H), np.float32)),
    "fox_window_kna": dict(variant="kna", window=9, log_forget=log_forget(5)),
    "shifted_positions": dict(variant="kna", inv_freq=INV32, window=10,
                              positions=np.arange(T) + 1000),
    "random_positions_per_row": dict(variant="baseline", inv_freq=INV32, window=20,
                                     positions=sorted_random_positions(1)),
    "random_positions_rerope": dict(variant="kna", inv_freq=INV32, far=far.ReRoPE(30),
                                    positions=sorted_random_positions(2)),
    # PaTH (attention/path.py): grouped-query heads (the kernels' inputs have 2 key/value heads);
    # KNA with the trained log n and a window, and PaTH-FoX's gates with CosA and SSMax's scale.
    "path_kna_logn_window": dict(variant="kna", logn_base=6, window=13, path=path_factors(8)),
    "path_fox_cosa_ssmax": dict(variant="cosa", cosa_scale=3.0, ssmax_scale=SSMAX,
                                log_forget=log_forget(9), path=path_factors(10)),
}


SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(attention.Spec))
ATTEND_ARGUMENTS = ("positions", "kernel", "need_entropy", "query_block", "key_block")


def split_options(options: dict):
  """(attention.Spec, attention.Learned, attend's other keyword arguments) of flat options."""
  unknown = set(options) - set(SPEC_FIELDS) - set(attention.Learned._fields) - set(ATTEND_ARGUMENTS)
  if unknown:
    raise TypeError(f"Not an attention option: {', '.join(sorted(unknown))}.")
  spec = attention.Spec(**{k: v for k, v in options.items() if k in SPEC_FIELDS})
  learned = attention.Learned(**{k: v for k, v in options.items()
                                 if k in attention.Learned._fields})
  return spec, learned, {k: v for k, v in options.items() if k in ATTEND_ARGUMENTS}


def attend_options(q, k, v, **options):
  """attention.attend with flat options (split_options)."""
  spec, learned, rest = split_options(options)
  return attention.attend(q, k, v, spec, learned, **rest)


def causal_options(q, k, v, **options):
  """attention.causal_attention with flat options (split_options)."""
  return attend_options(q, k, v, need_entropy=False, **options)[0]


def mods_of(**options):
  """The kernels' Mods of flat options."""
  spec, learned, rest = split_options(options)
  return spec.mods(learned, explicit_positions=rest.get("positions") is not None)


def layer_options(spec: positions.AttentionSpec, *, rotary_dim, train_length, seq_length,
                  logn_base=None) -> dict:
  """The flat options a model resolves for a layer with position spec `spec` (through the models'
  own attention_spec), head size `rotary_dim`, a model trained at `train_length` with trained
  log n at n0 = `logn_base` (None: none); the variant is the caller's."""
  cfg = ModelConfig(architecture="gau", qk_size=rotary_dim, expansion=rotary_dim, position="nope",
                    train_length=train_length, logn=logn_base is not None,
                    logn_base=logn_base or 0.0)
  resolved = attention_spec(cfg, spec, seq_length)
  return {f: getattr(resolved, f) for f in SPEC_FIELDS
          if getattr(resolved, f) is not None and f != "variant"}   # the caller's variant
