"""Training-time position methods (the model's `position` setting), one class each.

Each class says what every attention layer needs (`layer_spec`), whether the token embedding gets
absolute positions (`absolute`), how long a sequence it can take (`max_length`), whether it comes
with its own position indices (`own_indices`), and which combinations it refuses (`refuse`).
"""

import dataclasses
import typing

from keynorm_jax.positions.indices import Indices, RandomInteger
from keynorm_jax.positions.registry import Method, Registry, knob
from keynorm_jax.positions.layer_spec import AttentionSpec, PathSpec, RotarySpec, alibi_slopes

TRAINING_METHODS = Registry("position")
register = TRAINING_METHODS.register

# The default single-head ALiBi slope: the geometric mean of the 8-head set 1/2 .. 1/256.
SINGLE_HEAD_ALIBI_SLOPE = 2.0**-4.5


@dataclasses.dataclass(frozen=True)
class TrainingMethod(Method):
  """Base: no positions at all (NoPE)."""
  rotary: typing.ClassVar[bool] = False        # RoPE-based: inference RoPE scalings apply
  absolute: typing.ClassVar[str | None] = None  # "sinusoidal" / "learned" embedding
  bias: typing.ClassVar[str | None] = None      # "alibi" / "kerple_log" / "fire"
  layers_without_rope: typing.ClassVar[bool] = True  # some layer has no rotation
  # Its paper trains it on a multi-head Transformer: the field study (study/plan.py) and the
  # end-to-end tests train it there as well as on the GAU (ALiBi: for its several heads' slopes).
  on_the_transformer: typing.ClassVar[bool] = False
  # PaTH: data-dependent Householder products along the sequence (attention/path.py) in every
  # layer; no position indices, no attention sinks.
  path: typing.ClassVar[bool] = False

  def layer_spec(self, *, layer: int, num_layers: int, num_heads: int, rope_theta: float,
                 train_length: int) -> AttentionSpec:
    del layer, num_layers, num_heads, rope_theta, train_length
    return AttentionSpec()

  def max_length(self, train_length: int) -> int | None:
    """Longest sequence the method can encode (None: any)."""
    del train_length
    return None

  def own_indices(self) -> Indices | None:
    """The position indices the method is defined with (randomized RoPE: random integers), or
    None: the model's `indices` setting."""
    return None

  def refuse(self, *, attention: str, num_heads: int, logn: bool,
             train_length: int | None = None) -> str | None:
    """Why this method cannot be combined with the rest of the model, or None."""
    del attention, num_heads, logn, train_length
    return None

  def earlier_phase(self, num_train_steps: int) -> tuple[int, str] | None:
    """(steps, position method) that trains the first `steps` steps before this method takes over
    (DroPE: RoPE until its positions are dropped; all of them: the earlier method throughout), or
    None: this method from the first step. ValueError where the last phase would get no step by
    rounding."""
    del num_train_steps
    return None


@register
@dataclasses.dataclass(frozen=True)
class NoPE(TrainingMethod):
  name = "nope"
  summary = "no positions (causal mask only)"
  paper = "Kazemnejad et al. 2023, The Impact of Positional Encoding on Length Generalization"


@register
@dataclasses.dataclass(frozen=True)
class Rope(TrainingMethod):
  name = "rope"
  summary = "rotary positions"
  paper = "Su et al. 2021, RoFormer (arXiv 2104.09864)"
  rotary = True
  layers_without_rope = False

  def rotary_spec(self, rope_theta: float) -> RotarySpec:
    return RotarySpec(base=rope_theta)

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    return AttentionSpec(rotary=self.rotary_spec(rope_theta))


@register
@dataclasses.dataclass(frozen=True)
class ALiBi(TrainingMethod):
  name = "alibi"
  summary = "linear score bias -m (i - j)"
  paper = "Press et al. 2022, Train Short, Test Long (arXiv 2108.12409)"
  bias = "alibi"
  on_the_transformer = True
  slope: float | None = knob(None, "ALiBi slope of a single-head model; default 2^-4.5, the "
                             "geometric mean of the 8-head slopes (several heads: 2^(-8h/H))")

  def __post_init__(self):
    if self.slope is not None and not self.slope > 0:
      raise ValueError(f"alibi slope must be > 0 (a slope of 0 adds no bias: that is "
                       f"position=nope), got {self.slope}.")

  def slopes(self, num_heads: int) -> tuple[float, ...]:
    if num_heads == 1:
      return (SINGLE_HEAD_ALIBI_SLOPE if self.slope is None else self.slope,)
    return alibi_slopes(num_heads)

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    return AttentionSpec(alibi_slopes=self.slopes(num_heads))

  def refuse(self, *, attention, num_heads, logn, train_length=None):
    if self.slope is not None and num_heads > 1:
      return ("its slope sets the slope of a single-head model; a multi-head model uses the "
              "paper's slopes 2^(-8h/H): leave model.position_options.slope unset")
    return None


@register
@dataclasses.dataclass(frozen=True)
class Sinusoidal(TrainingMethod):
  name = "sinusoidal"
  summary = "fixed sin/cos embedding added to the tokens"
  paper = "Vaswani et al. 2017, Attention Is All You Need (arXiv 1706.03762)"
  absolute = "sinusoidal"


@register
@dataclasses.dataclass(frozen=True)
class Learned(TrainingMethod):
  name = "learned"
  summary = "learned embedding of train_length rows added to the tokens"
  paper = "Gehring et al. 2017 / Radford et al. 2018 (GPT): learned absolute positions"
  absolute = "learned"

  def max_length(self, train_length):
    return train_length


@register
@dataclasses.dataclass(frozen=True)
class XPos(Rope):
  name = "xpos"
  summary = "RoPE with per-pair exponential decay"
  paper = "Sun et al. 2022, A Length-Extrapolatable Transformer (arXiv 2212.10554)"
  gamma: float = knob(0.4, "xPos gamma: zeta_m = (2m/S + gamma) / (1 + gamma)")
  scale_base: float = knob(512.0, "xPos scale base: q scaled by zeta^(n/scale_base), k by "
                           "zeta^(-m/scale_base)")

  def __post_init__(self):
    if not self.gamma > 0:
      raise ValueError(f"xpos gamma must be > 0 (zeta_0 = gamma / (1 + gamma) is raised to "
                       f"negative powers: 0 would scale keys by infinity), got {self.gamma}.")
    if not self.scale_base > 0:
      raise ValueError(f"xpos scale_base must be > 0 (the decay's exponent divides by it), got "
                       f"{self.scale_base}.")

  def rotary_spec(self, rope_theta):
    return RotarySpec(base=rope_theta, xpos_gamma=self.gamma, xpos_scale_base=self.scale_base)


@register
@dataclasses.dataclass(frozen=True)
class KerpleLog(TrainingMethod):
  name = "kerple_log"
  summary = "learnable bias -r1 log(1 + r2 (i - j))"
  paper = "Chi et al. 2022, KERPLE: Kernelized Relative Positional Embedding (arXiv 2205.09921)"
  bias = "kerple_log"

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    return AttentionSpec(learned_bias="kerple_log")


@register
@dataclasses.dataclass(frozen=True)
class Fire(TrainingMethod):
  name = "fire"
  summary = "learnable bias f(psi(i - j) / psi(max(L, i)))"
  paper = "Li et al. 2023, Functional Interpolation for Relative Positions (arXiv 2310.04418)"
  bias = "fire"

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    return AttentionSpec(learned_bias="fire")


@register
@dataclasses.dataclass(frozen=True)
class RandomizedRope(Rope):
  """RoPE at the `random_integer` indices (positions/indices.py): the same model as
  position=rope with model.indices=random_integer, kept under its own name."""
  name = "randomized_rope"
  summary = "RoPE at sorted random positions in training"
  paper = "Ruoss et al. 2023, Randomized Positional Encodings (arXiv 2305.16843)"
  max_position: int | None = knob(None, "positions are drawn from [0, max_position); default "
                                  "8 x train_length")

  def __post_init__(self):
    self.own_indices()   # its checks (max_position at least 1)

  def own_indices(self):
    return RandomInteger(self.max_position)


@register
@dataclasses.dataclass(frozen=True)
class PRope(Rope):
  name = "p_rope"
  summary = "RoPE on the highest-frequency fraction p of the pairs"
  paper = "Barbero et al. 2024, Round and Round We Go! (arXiv 2410.06205)"
  fraction: float = knob(0.75, "share p of the pairs that rotate (the highest frequencies)")

  def __post_init__(self):
    if not 0.0 <= self.fraction <= 1.0:
      raise ValueError(f"p-RoPE fraction must be in [0, 1], got {self.fraction}.")

  def rotary_spec(self, rope_theta):
    return RotarySpec(base=rope_theta, fraction=self.fraction)


@register
@dataclasses.dataclass(frozen=True)
class HWFA(Rope):
  name = "hwfa"
  summary = "RoPE window layers, then one full NoPE layer with log n"
  paper = "Su 2023, kexue.fm/archives/9603 and 9731 (Hybrid Window-Full Attention)"
  layers_without_rope = True    # the full NoPE layer(s)
  window: int | None = knob(None, "window w of the RoPE layers; default the largest w with "
                            "(w - 1)(L - 1) + 1 <= 3/4 train_length for L layers (Su's rule: 17 "
                            "for 24 layers at 512; he used 16)")

  def __post_init__(self):
    if self.window is not None and self.window < 1:
      raise ValueError(f"hwfa window must be at least 1 (or unset for Su's rule), got "
                       f"{self.window}.")

  def default_window(self, num_layers: int, train_length: int) -> int:
    """The largest w with (w - 1)(L - 1) + 1 <= 3/4 train_length (kexue.fm 9603)."""
    return max(1, int((0.75 * train_length - 1) // max(1, num_layers - 1)) + 1)

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    if layer == num_layers - 1:
      return AttentionSpec(logn=True)
    window = (self.default_window(num_layers, train_length) if self.window is None
              else self.window)
    return AttentionSpec(rotary=RotarySpec(base=rope_theta), window=window)


@register
@dataclasses.dataclass(frozen=True)
class RNoPESWA(Rope):
  """RNoPE-SWA: after every `ratio` RoPE layers with a sliding window, one full-attention NoPE layer
  (layer i is full iff (i + 1) % (ratio + 1) == 0; the last layer is always full, so that a model
  shallower than ratio + 1 layers has one). The paper's 1:3 and Cohere2's layer rule; its window was
  4096 tokens (Cohere2's default), whose share of the training length the paper does not say here:
  the default window is half the training length."""
  name = "rnope_swa"
  summary = "RoPE sliding-window layers interleaved with full-attention NoPE layers (3:1)"
  paper = "Yang et al. 2025, Rope to Nope and Back Again: A New Hybrid Attention Strategy (arXiv 2501.18795)"
  layers_without_rope = True    # the full NoPE layer(s)
  on_the_transformer = True
  ratio: int = knob(3, "RoPE window layers per full NoPE layer (rnope_swa)")
  window: int | None = knob(None, "window w of the RoPE layers (rnope_swa; hwfa has its own rule); "
                            "default train_length / 2")

  def __post_init__(self):
    if self.ratio < 1:
      raise ValueError(f"rnope_swa ratio (RoPE window layers per full NoPE layer) must be at "
                       f"least 1, got {self.ratio}.")
    if self.window is not None and self.window < 1:
      raise ValueError(f"rnope_swa window must be at least 1, got {self.window}.")

  def refuse(self, *, attention, num_heads, logn, train_length=None):
    if self.window is not None and train_length and self.window > train_length:
      return (f"its window of {self.window} tokens is longer than the training length "
              f"{train_length}: every RoPE layer would see the whole window; choose a window up "
              f"to {train_length}")
    return None

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    if (layer + 1) % (self.ratio + 1) == 0 or layer == num_layers - 1:
      return AttentionSpec()
    return AttentionSpec(rotary=RotarySpec(base=rope_theta),
                         window=max(1, train_length // 2) if self.window is None else self.window)


@register
@dataclasses.dataclass(frozen=True)
class ScaleInvariant(PRope):
  """Scale-invariant p-RoPE: p-RoPE, and each score S at distance t = i - j turned into a_t S + m_t
  with a_t = sqrt(1 + 2 log(1 + t / tau)), m_t = -2 log(1 + t / tau) (the paper's eq. 14 and 16
  with a_0 = 1, m_0 = 0). The paper's p-RoPE had "an effective base of 1024"; here p-RoPE keeps
  the model's rope_theta and rotates the fraction p of the pairs."""
  name = "scale_invariant"
  summary = "p-RoPE with each score at distance t turned into a_t score + m_t"
  paper = "Anson, Wang & Aitchison 2025, Scale-invariant Attention (arXiv 2505.17083)"
  on_the_transformer = True
  fraction: float = knob(0.5, "share p of the pairs that rotate (the highest frequencies)")
  tau: float = knob(10.0, "scale_invariant tau in log(1 + t / tau) (the paper's best, 10)")

  def __post_init__(self):
    super().__post_init__()
    if not self.tau > 0:
      raise ValueError(f"scale_invariant tau must be > 0, got {self.tau}.")

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    return AttentionSpec(rotary=self.rotary_spec(rope_theta), scale_invariant_tau=self.tau)


@register
@dataclasses.dataclass(frozen=True)
class DroPE(TrainingMethod):
  """DroPE: RoPE for the first steps, then the positions dropped (NoPE) for the last `drop_share`
  of the steps, from the same parameters and optimizer state (training/phases.py); the model as
  trained, evaluated, is NoPE (a checkpoint from before the drop is evaluated as the RoPE model
  that trained it). The paper's from-scratch recipe dropped RoPE for the last 2K of 16K
  steps (1/8); its logit scale at inference is the `drope_temperature` method."""
  name = "drope"
  summary = "RoPE, then positions dropped (NoPE) for the last share of the training steps"
  paper = "Gelberg et al. 2025, Extending the Context of Pretrained LLMs by Dropping Their Positional Embeddings (arXiv 2512.12167)"
  on_the_transformer = True
  drop_share: float = knob(0.125, "share of the training steps without RoPE at the end (the "
                           "paper's from-scratch 2K of 16K)")

  def __post_init__(self):
    if not 0.0 <= self.drop_share < 1.0:
      raise ValueError(f"drope drop_share must be in [0, 1) (the share of the steps without "
                       f"RoPE at the end), got {self.drop_share}.")

  def earlier_phase(self, num_train_steps):
    steps = round((1.0 - self.drop_share) * num_train_steps)
    if self.drop_share > 0 and steps >= num_train_steps:
      raise ValueError(f"drope trains rope until step {steps} of {num_train_steps}, which leaves "
                       f"no step for its last phase; train longer or raise its share "
                       f"(model.position_options.drop_share; 0: RoPE throughout)")
    return steps, "rope"


@register
@dataclasses.dataclass(frozen=True)
class CoPE(TrainingMethod):
  """CoPE: positions counted by the context, p_ij = sum over t = j..i of sigmoid(s_it) (the gates of
  the attention's own scores), and q_i . e[p_ij] added to the scores, e a learned [head size, npos]
  table per layer shared by its heads (zeros at first) interpolated between integer positions; no
  rotation. As the paper's code: npos = train_length + 1 by default (block size + 1), positions
  capped at npos - 1."""
  name = "cope"
  summary = "contextual positions p_ij = sum of sigmoid gates over j..i, q . e[p_ij] added"
  paper = "Golovneva et al. 2024, Contextual Position Encoding (arXiv 2405.18719)"
  on_the_transformer = True
  cope_npos: int | None = knob(None, "CoPE's npos: the embedding table's positions, contextual "
                               "positions capped at npos - 1; default train_length + 1")

  def __post_init__(self):
    if self.cope_npos is not None and self.cope_npos < 2:
      raise ValueError(f"cope_npos must be at least 2, got {self.cope_npos}.")

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    return AttentionSpec(cope_positions=(train_length + 1 if self.cope_npos is None
                                         else self.cope_npos))


@register
@dataclasses.dataclass(frozen=True)
class Fox(TrainingMethod):
  name = "fox"
  summary = "learned forget gates: sum of log f_l over l = j+1..i added to the scores, no rotation"
  paper = "Lin et al. 2025, Forgetting Transformer (ICLR 2025, arXiv 2503.02130)"
  on_the_transformer = True

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    return AttentionSpec(forget_gate=True)


@register
@dataclasses.dataclass(frozen=True)
class PaTH(TrainingMethod):
  """PaTH: between key j and query i the product of the Householder-like factors H_t = I - beta_t
  w_t w_t^T of the tokens j+1..i, q_i^T H_i ... H_{j+1} k_j (attention/path.py), with w_t and
  beta_t learned from the layer's input as the authors' layer (fla's PaTHAttention) computes them:
  w_t = L2norm(SiLU(causal depthwise conv(x_t W_down W_up))) per key/value head, beta_t =
  2 sigmoid(x_t W_beta + b) (models/position_bias.py). No rotation and no position indices: the
  sequence's order alone. Computed by chunks (memory linear in T, the `blocked` kernel)."""
  name = "path"
  summary = "data-dependent Householder products H_i ... H_{j+1} between q_i and k_j, no rotation"
  paper = ("Yang et al. 2025, PaTH Attention: Position Encoding via Accumulating Householder "
           "Transformations (NeurIPS 2025, arXiv 2505.16381)")
  on_the_transformer = True
  path = True
  path_w_rank: int = knob(32, "rank of PaTH's low-rank projection x -> w (fla's 32); 0: one full "
                          "projection (fla's with grouped-query heads)")
  path_conv_size: int = knob(3, "size of PaTH's causal depthwise convolution of w, with SiLU "
                             "(fla's 3); 0: none")

  def __post_init__(self):
    self.path_spec()   # its checks (no negative size)

  def path_spec(self) -> PathSpec:
    return PathSpec(self.path_w_rank, self.path_conv_size)

  def refuse(self, *, attention, num_heads, logn, train_length=None):
    if attention == "stickbreaking":
      return ("stick-breaking weights need a query's whole row of keys, and PaTH runs by chunks "
              "with an online softmax; choose model.attention baseline, qna, kna or cosa")
    return None

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    return AttentionSpec(path=self.path_spec())


@register
@dataclasses.dataclass(frozen=True)
class PaTHFox(PaTH):
  """PaTH-FoX: PaTH and FoX's forget gates (the `fox` method's, unscaled as there): s_ij + sum of
  log f_l over l = j+1..i."""
  name = "path_fox"
  summary = "PaTH with FoX's forget gates added to the scores"
  paper = ("Yang et al. 2025, PaTH Attention (NeurIPS 2025, arXiv 2505.16381): PaTH-FoX; the gates "
           "of Lin et al. 2025 (arXiv 2503.02130)")

  def layer_spec(self, *, layer, num_layers, num_heads, rope_theta, train_length):
    return AttentionSpec(path=self.path_spec(), forget_gate=True)


def training_method(name: str, options=None) -> TrainingMethod:
  """The method `name` with its knobs from `options` (a mapping; None = unset, the default)."""
  return TRAINING_METHODS.create(name, **dict(options or {}))


def knob_defaults(name: str) -> dict:
  """A method's knobs with their defaults (None: unset)."""
  return {f.name: f.default for f in dataclasses.fields(TRAINING_METHODS.get(name))}

