"""Position indices (the model's `indices` setting): which position each token is given.

Every encoding reads positions through them: RoPE rotates by them, ALiBi and the learned biases
take their differences, the sinusoidal embedding embeds them. The plain setting gives token t the
index t; the randomized ones draw each training sequence's indices from a range longer than the
sequence, so that the indices a longer sequence needs at inference were seen in training. One class
each: what it gives a training sequence (`training`, from an rng) and a sequence at inference
(`inference`), and this file is the one home of their formulas.
"""

import dataclasses
import typing

import jax
import jax.numpy as jnp

from keynorm_jax.positions.registry import Method, Registry, knob

INDICES = Registry("indices")
register = INDICES.register

# The range random indices are drawn from when max_position is left unset: 8 training lengths.
DEFAULT_RANGE_FACTOR = 8


@dataclasses.dataclass(frozen=True)
class Indices(Method):
  """Base: token t at index t, in training and at inference."""
  name = "integer"
  summary = "token t at index t (0, 1, 2, ...)"
  paper = "-"
  random: typing.ClassVar[bool] = False    # `training` draws from an rng

  @property
  def explicit(self) -> bool:
    """Whether the attention must be given the indices (False: they are 0..T-1, by index)."""
    return type(self) is not Indices

  def training(self, rng, batch: int, length: int, train_length: int):
    """[B, T] indices of a training batch."""
    del rng
    return self.inference(batch, length, train_length)

  def inference(self, batch: int, length: int, train_length: int):
    """[B, T] indices of a sequence at inference."""
    del train_length
    return jnp.broadcast_to(jnp.arange(length), (batch, length))


register(Indices)


@dataclasses.dataclass(frozen=True)
class RandomRange(Indices):
  """Base of the randomized indices: a training sequence's indices are drawn from [0, max_position)
  and sorted; at inference, 0..T-1 (the subclass may say otherwise)."""
  random = True
  max_position: int | None = knob(None, "indices are drawn from [0, max_position); default 8 x "
                                  "train_length (random_float: train_length)")

  def __post_init__(self):
    if self.max_position is not None and self.max_position < 1:
      raise ValueError(f"indices max_position must be at least 1, got {self.max_position}.")

  def span(self, train_length: int) -> int:
    """max_position: the end of the range indices are drawn from."""
    if self.max_position is None:
      return DEFAULT_RANGE_FACTOR * train_length
    return self.max_position

  def limit(self, length: int, train_length: int) -> int:
    """max_position, checked to hold `length` distinct integer indices."""
    limit = self.span(train_length)
    if limit < length:
      raise ValueError(f"{self.name} indices: max_position {limit} is below the sequence length "
                       f"{length}; raise it (model.indices_options.max_position, or "
                       f"model.position_options.max_position for randomized_rope).")
    return limit


@register
@dataclasses.dataclass(frozen=True)
class RandomInteger(RandomRange):
  name = "random_integer"
  summary = "sorted distinct random integers from [0, max_position) in training; 0..T-1 at inference"
  paper = "Ruoss et al. 2023, Randomized Positional Encodings (arXiv 2305.16843)"

  def training(self, rng, batch, length, train_length):
    limit = self.limit(length, train_length)
    # A sorted sample without replacement: the indices of the `length` smallest of `limit`
    # uniform keys, in increasing order.
    keys = jax.random.uniform(rng, (batch, limit))
    chosen = jax.lax.top_k(-keys, length)[1]
    return jnp.sort(chosen, axis=-1)


@register
@dataclasses.dataclass(frozen=True)
class RandomFloat(RandomRange):
  """Random Float Sampling as a secondary description of the paper's Algorithm 1 gives it (the
  paper's own text was not read here): a training sequence's T indices are T independent uniform
  draws from [0, 1), sorted; at inference, the fixed positions (2i - 1) / (2 max(n_train, n)),
  i = 1..n, so that training and inference lengths share one bounded range. Both are scaled by
  max_position (default: one training length, so that RoPE sees the angles of positions in
  [0, train_length) in training and at any length: a sequence up to the training length sits at
  i - 1/2, a longer one is compressed into the range, as position interpolation does)."""
  name = "random_float"
  summary = ("sorted uniform random floats from [0, max_position) in training; "
             "max_position (2i - 1) / (2 max(train_length, T)) at inference")
  paper = ("Shimizu, Taniguchi & Matsuo 2026, Position Encoding with Random Float Sampling "
           "Enhances Length Generalization of Transformers (arXiv 2602.14050), as described by a "
           "secondary source")
  max_position: int | None = knob(None, "indices are drawn from [0, max_position); default "
                                  "train_length")

  def span(self, train_length: int) -> int:
    return self.max_position or train_length

  def training(self, rng, batch, length, train_length):
    draws = jax.random.uniform(rng, (batch, length), maxval=float(self.span(train_length)))
    return jnp.sort(draws, axis=-1)

  def inference(self, batch, length, train_length):
    odd = 2 * jnp.arange(1, length + 1, dtype=jnp.float32) - 1
    grid = odd * (self.span(train_length) / (2 * max(train_length, length)))
    return jnp.broadcast_to(grid, (batch, length))


@register
@dataclasses.dataclass(frozen=True)
class RandomFloatStretched(RandomFloat):
  """The project's first reading of Random Float Sampling, from the paper's abstract alone (kept
  for its records): draws from [0, max_position) with max_position 8 training lengths by default,
  and at inference the even grid max_position x t / T, t = 0..T-1, which stretches a sequence of
  any length, shorter ones included, over the whole range."""
  name = "random_float_stretched"
  summary = ("sorted uniform random floats from [0, max_position) in training; "
             "max_position x t / T at inference")
  paper = ("Shimizu, Taniguchi & Matsuo 2026 (arXiv 2602.14050), read from its abstract alone: "
           "the range and the grid are this project's guesses")
  max_position: int | None = knob(None, "indices are drawn from [0, max_position); default 8 x "
                                  "train_length")

  def span(self, train_length: int) -> int:
    return self.max_position or DEFAULT_RANGE_FACTOR * train_length

  def inference(self, batch, length, train_length):
    grid = jnp.arange(length, dtype=jnp.float32) * (self.span(train_length) / length)
    return jnp.broadcast_to(grid, (batch, length))


def position_indices(name: str, options=None) -> Indices:
  """The indices `name` with their knobs from `options` (a mapping; None = unset, the default, and
  an unset knob may belong to another setting: model.indices_options holds them all)."""
  return INDICES.create(name, **{k: v for k, v in dict(options or {}).items() if v is not None})


def indices_knob_defaults() -> dict:
  """Every knob of every indices setting with its default (None: unset): the config's
  model.indices_options."""
  return {name: field.default for name, field in INDICES.knobs().items()}
