"""Far rotations: where the keys past a distance are scored from, one frozen record per rule.

A layer's far rule (`Spec.far`, at most one) scores the keys at distance t = p_i - p_j >= its
`start` (dual chunk attention: by chunk instead) with q and k rotated at other positions than their
own: prepare.py rotates the far side once at the rule's `positions`, scores.py chooses between the
near and the far product per pair (`join`), and the biases read the rule's `distance`.

  ReRoPE(window, leak)      t >= w scored at w; leaky (leak k): at w + (t - w) / k
                            (Su 2023, bojone/rerope)
  SelfExtend(window, group) t >= w scored at grouped positions: the query at
                            floor(p_i / G) + w - floor(w / G), the key at floor(p_j / G)
                            (Jin et al. 2024, datamllab/LongLM)
  String(shift, window)     t >= S scored at t - S + W: the query at p_i - S + W (An et al. 2024,
                            HKUNLP/STRING)
  DualChunk(chunk, length)  the same chunk (size s) at the true positions, the next with the query
                            at min(s + p_i mod s, c - 1) and the key at p_j mod s, any earlier with
                            the query at c - 1 (An et al. 2024, eq. 2-8 with w = c - s)
  StreamingCache(sinks, window)  t >= w scored (and biased) at the key's distance in the
                            StreamingLLM cache, (k + w - 1) - p_j: the query at the cache's last
                            slot (Xiao et al. 2023)
  DistanceLimit(limit)      every distance capped at L: t >= L scored (and biased) at L, the query
                            at L against the key at 0 (LM-Infinite's distance limit, Han et al.
                            2024)

Each rule is a JAX pytree: ReRoPE's leak (a number that only enters arithmetic) is its leaf, the
windows and sizes its static structure (kernels choose blocks and calls from them).
"""

import abc
import dataclasses
import math
import typing
from typing import NamedTuple

import jax
import jax.numpy as jnp

from keynorm_jax.attention.pytree import register_record


class FarPositions(NamedTuple):
  """[B, T] positions of a rule's far rotations: the queries', the keys' (None: their own, the far
  keys are the near ones) and dual chunk attention's third rotation of the queries (or None)."""
  query: jax.Array
  key: jax.Array | None = None
  farthest: jax.Array | None = None


def _at_least(rule: str, name: str, value, low):
  if not value >= low:
    raise ValueError(f"{rule}'s {name} must be >= {low}, got {value}.")


class _Rule(abc.ABC):
  """What every rule answers; `positions` is each rule's own, and `start` its field named by
  `starts_at`."""
  rotates: typing.ClassVar[bool] = True   # it only re-places a rotation (needs RoPE to matter)
  starts_at: typing.ClassVar[str | None] = "window"   # the field of `start` (None: by chunk)

  @property
  def start(self) -> int | None:
    """The distance from which a key is far (None: the rule chooses by chunk)."""
    return None if self.starts_at is None else getattr(self, self.starts_at)

  @abc.abstractmethod
  def positions(self, positions_BxT) -> FarPositions:
    """The far rotations' positions of a sequence at positions [B, T]."""

  def join(self, product, queries, keys, near_BxHxQxK):
    """Scores [B, H, Q, K] of a block: the near product where a pair is near, else the far one.
    queries, keys: prepare.Side blocks (positions [B, N], far rotations); product(q, k) ->
    [B, H, Q, K]."""
    near_BxQxK = (queries.positions[:, :, None]
                  - keys.positions[:, None, :]).astype(jnp.float32) < self.start
    return jnp.where(near_BxQxK[:, None], near_BxHxQxK, product(queries.far, keys.far))

  def distance(self, relative_BxQxK, key_positions_BxK):
    """The distance the biases read (ALiBi, learned, scale-invariant's): p_i - p_j."""
    del key_positions_BxK
    return relative_BxQxK


@dataclasses.dataclass(frozen=True)
class ReRoPE(_Rule):
  """t >= window scored at window (leak None) or at window + (t - window) / leak."""
  window: int
  leak: float | None = None

  def __post_init__(self):
    _at_least("ReRoPE", "window w", self.window, 1)
    if self.leak is not None:
      _at_least("Leaky ReRoPE", "leak k", self.leak, 1)

  def positions(self, positions_BxT):
    w = float(self.window)   # the leak may be traced
    leak = math.inf if self.leak is None else self.leak
    # q at p_i / leak + w (1 - 1/leak) against k at p_j / leak: relative w + (t - w) / leak.
    return FarPositions(positions_BxT / leak + w * (1 - 1 / leak), positions_BxT / leak)


@dataclasses.dataclass(frozen=True)
class SelfExtend(_Rule):
  """t >= window scored at positions grouped by `group`."""
  window: int
  group: int

  def __post_init__(self):
    _at_least("Self-Extend", "neighbor window W", self.window, 1)
    _at_least("Self-Extend", "group size G", self.group, 1)

  def positions(self, positions_BxT):
    w, g = self.window, self.group
    grouped = jnp.floor_divide(positions_BxT, g)
    return FarPositions(grouped + (w - w // g), grouped)


@dataclasses.dataclass(frozen=True)
class String(_Rule):
  """t >= shift scored at t - shift + window."""
  starts_at = "shift"
  shift: int
  window: int

  def __post_init__(self):
    _at_least("STRING", "shift S", self.shift, 1)
    if not 0 <= self.window <= self.shift:
      raise ValueError(f"STRING's local window W must be in [0, S = {self.shift}] (shifted "
                       f"distances stay below the unshifted ones), got {self.window}.")

  def positions(self, positions_BxT):
    return FarPositions(positions_BxT - (self.shift - self.window))


@dataclasses.dataclass(frozen=True)
class DualChunk(_Rule):
  """Chunks of `chunk` tokens in a model trained at `length`: intra-, successive- and inter-chunk
  positions."""
  starts_at = None
  chunk: int
  length: int

  def __post_init__(self):
    if not 1 <= self.chunk < self.length:
      raise ValueError(f"Dual chunk attention's chunk size s must be in [1, c) for its "
                       f"pretraining length c; got s = {self.chunk}, c = {self.length}.")

  def positions(self, positions_BxT):
    in_chunk = jnp.remainder(positions_BxT, self.chunk)
    return FarPositions(jnp.minimum(self.chunk + in_chunk, self.length - 1), in_chunk,
                        jnp.full_like(positions_BxT, self.length - 1))

  def join(self, product, queries, keys, near_BxHxQxK):
    far_BxHxQxK = product(queries.far, keys.far)
    gap_BxQxK = (queries.positions[:, :, None] // self.chunk
                 - keys.positions[:, None, :] // self.chunk)
    far_BxHxQxK = jnp.where((gap_BxQxK == 1)[:, None], far_BxHxQxK,
                            product(queries.farthest, keys.far))
    return jnp.where((gap_BxQxK == 0)[:, None], near_BxHxQxK, far_BxHxQxK)


@dataclasses.dataclass(frozen=True)
class StreamingCache(_Rule):
  """t >= window scored and biased at the key's distance in a cache of `sinks` sink tokens and the
  last `window` tokens, (sinks + window - 1) - p_j."""
  rotates: typing.ClassVar[bool] = False   # its distance moves the biases too
  sinks: int
  window: int

  def __post_init__(self):
    _at_least("StreamingLLM's cache", "sink tokens", self.sinks, 0)
    _at_least("StreamingLLM's cache", "window", self.window, 1)

  def positions(self, positions_BxT):
    return FarPositions(jnp.full_like(positions_BxT, self.sinks + self.window - 1))

  def distance(self, relative_BxQxK, key_positions_BxK):
    cache_distance = ((self.sinks + self.window - 1)
                      - key_positions_BxK[:, None, :].astype(jnp.float32))
    return jnp.where(relative_BxQxK < self.window, relative_BxQxK, cache_distance)


@dataclasses.dataclass(frozen=True)
class DistanceLimit(_Rule):
  """Every distance capped at `limit`: t >= limit scored and biased at limit."""
  rotates: typing.ClassVar[bool] = False   # its distance moves the biases too
  starts_at = "limit"
  limit: int

  def __post_init__(self):
    _at_least("The distance limit", "L", self.limit, 1)

  def positions(self, positions_BxT):
    return FarPositions(jnp.full_like(positions_BxT, self.limit), jnp.zeros_like(positions_BxT))

  def distance(self, relative_BxQxK, key_positions_BxK):
    del key_positions_BxK
    return jnp.minimum(relative_BxQxK, float(self.limit))


Far = ReRoPE | SelfExtend | String | DualChunk | StreamingCache | DistanceLimit

register_record(ReRoPE, ("leak",))
for _rule in (SelfExtend, String, DualChunk, StreamingCache, DistanceLimit):
  register_record(_rule, ())
