"""`ModelConfig`: the static description of a model, unpacked from the config's `model` section.

`ModelConfig(**config.model, vocab_size=..., train_length=...)` validates every field once; the
rules for fields left at 0 ("default") live in the properties below and nowhere else.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

from keynorm_jax import positions

from keynorm_jax.attention import KERNEL_NAMES, VARIANTS, cosa_default_scale
from keynorm_jax.attention.spec import Variant
from keynorm_jax.errors import ConfigError

ARCHITECTURES = ("gau", "transformer")
QK_NORMS = ("none", "rmsnorm", "layernorm")
NORM_POSITIONS = ("post", "pre")
GAU_QK = ("shared", "separate")
NORMS = ("rmsnorm", "layernorm")
MLPS = ("swiglu", "gelu")
DTYPES = ("float32", "bfloat16")


def _choice(name, value, choices):
  if value not in choices:
    raise ConfigError(f"model.{name}={value!r} is not one of {', '.join(choices)}.")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """See configs/base.py for the meaning of each field (0 = the default named there)."""
  architecture: str = "gau"
  vocab_size: int = 257
  num_layers: int = 2
  d_model: int = 32
  # GAU.
  expansion: int = 64
  qk_size: int = 16
  gau_qk: str = "shared"   # q, k from one z (the seed's) or each from its own projection
  gau_heads: int = 1       # z and v split into this many heads (the seed's GAU: 1)
  gau_mlp: bool = False    # a feed-forward block (mlp, mlp_size) after each GAU layer (seed: none)
  norm_position: str | None = None  # None: the architecture's own (GAU post, Transformer pre)
  # Transformer.
  num_heads: int = 0
  head_dim: int = 0
  num_kv_heads: int = 0
  mlp: str = "swiglu"
  mlp_size: int = 0
  norm: str = "rmsnorm"
  norm_eps: float = 1e-6
  qkv_bias: bool = False
  output_gate: bool = False
  # Both.
  dropout: float = 0.0
  tie_embeddings: bool = False
  attention: Variant = "baseline"
  logn: bool = False
  logn_base: float = 0.0
  qk_norm: str = "none"
  ssmax: bool = False
  cosa_scale: float = 0.0
  position: str = "rope"
  position_options: tuple = ()
  indices: str = "integer"
  indices_options: tuple = ()
  rope_theta: float = 10000.0
  rope_scaling: tuple = ()          # model.rope_scaling's fields (positions.rope_scaling_defaults)
  compute_dtype: str = "float32"
  param_dtype: str = "float32"
  kernel: str = "auto"
  remat: bool = False
  scan_layers: bool = False
  train_length: int = 512

  def __post_init__(self):
    for name in ("position_options", "indices_options", "rope_scaling"):  # hashable: sorted (key, value) pairs
      if not isinstance(getattr(self, name), tuple):
        object.__setattr__(self, name, tuple(sorted(dict(getattr(self, name)).items())))
    _choice("architecture", self.architecture, ARCHITECTURES)
    if self.norm_position is None:
      object.__setattr__(self, "norm_position", "post" if self.architecture == "gau" else "pre")
    _choice("attention", self.attention, VARIANTS)
    _choice("qk_norm", self.qk_norm, QK_NORMS)
    _choice("norm_position", self.norm_position, NORM_POSITIONS)
    _choice("gau_qk", self.gau_qk, GAU_QK)
    _choice("norm", self.norm, NORMS)
    _choice("mlp", self.mlp, MLPS)
    _choice("compute_dtype", self.compute_dtype, DTYPES)
    _choice("param_dtype", self.param_dtype, DTYPES)
    _choice("kernel", self.kernel, KERNEL_NAMES)
    for name in ("num_layers", "d_model", "train_length", "vocab_size"):
      if getattr(self, name) < 1:
        raise ConfigError(f"model.{name} must be at least 1, got {getattr(self, name)}.")
    if self.architecture == "gau":
      if self.qkv_bias:
        raise ConfigError("model.qkv_bias is a Transformer setting (the GAU's q and k come from "
                          "its own offsets); set model.qkv_bias=False.")
      if self.output_gate:
        raise ConfigError("model.output_gate is a Transformer setting: the GAU already gates its "
                          "attention output by u; set model.output_gate=False.")
      for name in ("expansion", "qk_size", "gau_heads"):
        if getattr(self, name) < 1:
          raise ConfigError(f"model.{name} must be at least 1, got {getattr(self, name)}.")
      for name in ("expansion", "qk_size"):
        if getattr(self, name) % self.gau_heads:
          raise ConfigError(f"model.{name}={getattr(self, name)} does not split into "
                            f"model.gau_heads={self.gau_heads} equal heads; set gau_heads to a "
                            f"divisor of both expansion and qk_size.")
    if self.architecture == "transformer":
      if self.gau_qk != "shared":
        raise ConfigError("model.gau_qk is a GAU setting (the Transformer projects q and k "
                          "separately already); set model.gau_qk=shared.")
      if self.gau_heads != 1:
        raise ConfigError("model.gau_heads is a GAU setting (the Transformer's heads are "
                          "model.num_heads); set model.gau_heads=1.")
      if self.gau_mlp:
        raise ConfigError("model.gau_mlp is a GAU setting (every Transformer block has its MLP "
                          "already); set model.gau_mlp=False.")
      self._check_transformer()
    if self.head_size % 2:
      raise ConfigError(f"The attention head size must be even (RoPE rotates pairs), got "
                        f"{self.head_size}.")
    if self.heads % self.kv_heads:
      raise ConfigError(f"model.num_heads={self.heads} is not a multiple of "
                        f"model.num_kv_heads={self.kv_heads}.")
    if self.logn and self.logn_base and self.logn_base <= 1:
      raise ConfigError(f"model.logn_base must be > 1 (or 0 for half the training length), got "
                        f"{self.logn_base}.")
    try:
      method = self.position_method
    except ValueError as e:
      raise ConfigError(f"model.position: {e}") from None
    reason = method.refuse(attention=self.attention, num_heads=self.heads, logn=self.logn,
                           train_length=self.train_length)
    if reason:
      raise ConfigError(f"model.position={self.position!r} cannot run here: {reason}.")
    self._check_indices(method)
    self._check_rope_scaling(method)
    if self.scan_layers:
      self._check_identical_layers()
    # The CPU layout, chosen once here (not per call): whether the dense layers take the CPU seam's
    # products (keynorm_jax/cpu/): with the `cpu` kernel, and on a CPU backend with any kernel but
    # `reference` (everything plain, for A/B). Derived, so not a field: a replaced kernel re-derives
    # it.
    object.__setattr__(self, "cpu_ops", self.kernel == "cpu" or (
        self.kernel != "reference" and jax.default_backend() == "cpu"))

  def _check_indices(self, method):
    try:
      chosen = self.chosen_indices
    except ValueError as e:
      raise ConfigError(f"model.indices: {e}") from None
    if method.own_indices() is not None and chosen.explicit:
      raise ConfigError(f"model.position={self.position!r} comes with its own indices; leave "
                        f"model.indices at integer (or train position=rope with "
                        f"model.indices={self.indices!r}).")
    indices = self.position_indices
    if method.path and chosen.explicit:
      raise ConfigError(f"model.indices={self.indices!r}: position={self.position!r} transforms "
                        f"along the sequence's order, not at position indices; leave "
                        f"model.indices at integer.")
    if method.absolute == "learned" and indices.explicit:
      raise ConfigError(f"model.indices={indices.name!r}: the learned position table has one row "
                        f"per index 0..train_length-1, and these indices are not those; leave "
                        f"model.indices at integer.")
    if chosen.explicit and not self._reads_indices(method):
      raise ConfigError(f"model.indices={self.indices!r} changes which position each token has, "
                        f"and position={self.position!r} without log n or SSMax reads no position "
                        f"(no rotation, positional bias or embedding): the setting would be "
                        f"ignored. Leave model.indices at integer, or train a position method that "
                        f"reads positions (e.g. rope).")

  def _reads_indices(self, method) -> bool:
    """Whether anything of the model reads its position indices: a rotation, a positional bias
    or embedding (also in an earlier training phase: DroPE's RoPE), or the query factor of log n
    or SSMax (log of the position). NoPE, FoX and CoPE alone read none (FoX and CoPE count by the
    sequence index)."""
    return bool(method.rotary or method.bias or method.absolute or self.logn or self.ssmax
                or method.earlier_phase(1) is not None)

  def _check_rope_scaling(self, method):
    scaling = self.trained_rope_scaling
    if scaling is None:
      return
    if not method.rotary:
      raise ConfigError(f"model.rope_scaling.type={scaling['type']!r} scales RoPE, and "
                        f"position={self.position!r} has none; leave model.rope_scaling.type at "
                        f"none.")
    knobs = {k: v for k, v in scaling.items() if k != "type"}
    try:
      positions.rotary_inv_freq(positions.RotarySpec(scaling=scaling["type"], **knobs),
                                rotary_dim=self.head_size, train_length=self.train_length,
                                seq_length=self.train_length)
    except ValueError as e:
      raise ConfigError(f"model.rope_scaling: {e}") from None

  def _check_identical_layers(self):
    specs = [self.position_method.layer_spec(layer=i, num_layers=self.num_layers,
                                             num_heads=self.heads, rope_theta=self.rope_theta,
                                             train_length=self.train_length)
             for i in range(self.num_layers)]
    different = next((i for i, spec in enumerate(specs) if spec != specs[0]), None)
    if different is not None:
      raise ConfigError(f"model.scan_layers runs one layer num_layers times, but "
                        f"position={self.position!r} gives layer {different} other attention "
                        f"settings than layer 0; set model.scan_layers=False.")

  def _check_transformer(self):
    if self.norm_position != "pre":
      raise ConfigError(f"model.norm_position={self.norm_position!r}: the Transformer is pre-norm "
                        f"by definition (post-norm is a GAU option); set model.norm_position=pre.")
    for name in ("num_heads", "head_dim", "num_kv_heads", "mlp_size"):
      if getattr(self, name) < 0:
        raise ConfigError(f"model.{name} must be >= 0 (0 = its default), got "
                          f"{getattr(self, name)}.")
    if not self.head_dim and self.d_model % self.heads:
      raise ConfigError(f"model.d_model={self.d_model} is not a multiple of "
                        f"model.num_heads={self.heads}; set model.head_dim.")

  # Built once, at the first read (__post_init__'s checks), from the fields: a config is frozen, and
  # a replaced one is a new config that builds its own.
  @functools.cached_property
  def position_method(self) -> positions.TrainingMethod:
    return positions.training_method(self.position, dict(self.position_options))

  @functools.cached_property
  def chosen_indices(self) -> positions.Indices:
    """The model.indices setting, as chosen (position_indices: what the model reads)."""
    return positions.position_indices(self.indices, dict(self.indices_options))

  @functools.cached_property
  def position_indices(self) -> positions.Indices:
    """The indices every encoding reads: the position method's own (randomized RoPE), else the
    model.indices setting."""
    own = self.position_method.own_indices()
    return own if own is not None else self.chosen_indices

  @property
  def trained_rope_scaling(self) -> dict | None:
    """The model's own RoPE scaling on every rotary layer at every length ({"type": ..., knobs}),
    or None when model.rope_scaling.type is none."""
    scaling = {**positions.rope_scaling_defaults(), **dict(self.rope_scaling)}
    return None if scaling["type"] == "none" else scaling

  @property
  def product_dtype(self):
    """model.compute_dtype as a dtype: what every large product takes its inputs in
    (keynorm_jax/precision.py)."""
    return jnp.dtype(self.compute_dtype)

  @property
  def activation_dtype(self):
    """The dtype of the arrays between the products (a dense layer's result, the residual stream,
    the gates, q, k and v before attention's products): the compute dtype, but float32 on the CPU
    seam (cpu_ops). XLA's CPU backend has no bfloat16 arithmetic: each elementwise op on bfloat16
    arrays runs in float32 and is rounded back, in fusions it keeps out of YNNPACK (the GAU's
    bfloat16 step took 0.344 s with them, 0.28-0.30 s without: benchmarks/PROFILE_NOTES.md, round
    6). Every product still takes its inputs in the compute dtype: it rounds them where it reads
    them (keynorm_jax/precision.py). One exception: attention's output comes back from the kernels
    in the compute dtype (v's), rounded once, and is read in float32 from there."""
    return jnp.dtype(jnp.float32) if self.cpu_ops else self.product_dtype

  @property
  def heads(self) -> int:
    """Query heads (GAU: gau_heads, the seed's 1)."""
    return self.gau_heads if self.architecture == "gau" else (self.num_heads or 1)

  @property
  def kv_heads(self) -> int:
    return self.heads if self.architecture == "gau" else (self.num_kv_heads or self.heads)

  @property
  def head_size(self) -> int:
    """Size of q and k per head (GAU: qk_size / gau_heads; Transformer: head_dim, default
    d / heads)."""
    if self.architecture == "gau":
      return self.qk_size // self.gau_heads
    return self.head_dim or self.d_model // self.heads

  @property
  def gau_parts(self) -> tuple[int, ...]:
    """The GAU's W_i columns by part: u, v, z (e, e, s), or u, v, z_q, z_k with gau_qk=separate."""
    return (self.expansion, self.expansion, self.qk_size) + (
        (self.qk_size,) if self.gau_qk == "separate" else ())

  @property
  def resolved_mlp_size(self) -> int:
    """Transformer feed-forward width; default 8/3 d (SwiGLU) or 4 d (GELU), rounded to 8."""
    if self.mlp_size:
      return self.mlp_size
    width = 8 * self.d_model / 3 if self.mlp == "swiglu" else 4 * self.d_model
    return int(8 * math.ceil(width / 8))

  @property
  def token_width(self) -> int:
    """Floats per token of a layer's widest projections (what its working set grows with): the
    GAU's W_i parts and d_model; the Transformer's q, k and v and its MLP's hidden pair."""
    if self.architecture == "gau":
      return sum(self.gau_parts) + self.d_model
    return 3 * self.heads * self.head_size + 2 * self.resolved_mlp_size

  @property
  def default_logn_base(self) -> float:
    """n0 of a log n factor: model.logn_base, or (0) half the training length."""
    return self.logn_base or self.train_length / 2

  @property
  def resolved_logn_base(self):
    """n0 of the trained log n, or None when it is off."""
    return self.default_logn_base if self.logn else None

  @property
  def resolved_cosa_scale(self):
    """CosA's lambda (default 4 log(train_length / 2)), or None for other variants."""
    if self.attention != "cosa":
      return None
    return self.cosa_scale or cosa_default_scale(self.train_length)
