"""What a kernel is: a function of a Prepared (attention/prepare.py) and the settings it can run.

A kernel returns (out [B, T, H, E], entropy [B, T, H] in nats, or None where it gives none) and says
with `refusal(mods, shape)` why it cannot run a setting (None: it can). A product that depends on
the pair (i, j), not on q_i and k_j alone (PaTH's q_i^T H_i ... H_{j+1} k_j: Prepared.path), is run
by the kernel's `pair_run`, one of kernels/path_runs.py's two computations; a kernel without one
refuses it (PAIR_REFUSAL). Calling the kernel picks between the two. Registered in
kernels/__init__.py; every kernel passes the shared conformance test against `reference`
(tests/test_kernels.py).
"""

import dataclasses
from typing import Callable, NamedTuple

import numpy as np

FULL_SQUARE_MAX_LENGTH = 2048   # longer sequences go to the blocked kernel (bounded memory)
PAIR_REFUSAL = ("PaTH's transform depends on the pair (i, j): not q . k of per-position vectors (the "
                "blocked kernel takes it)")


class Shape(NamedTuple):
  """The static shape of one attention call."""
  batch: int
  length: int
  heads: int
  kv_heads: int
  size: int          # of q and k
  value_size: int
  dtype: np.dtype    # the values' (and the output's)

  @classmethod
  def of(cls, q, k, v) -> "Shape":
    """The Shape of q [B, T, H, S], k [B, T, Hkv, S], v [B, T, Hkv, E]."""
    batch, length, heads, size = q.shape
    return cls(batch, length, heads, k.shape[2], size, v.shape[-1], v.dtype)


def accept(mods, shape) -> str | None:   # pylint: disable=unused-argument
  """A kernel's refusal that refuses nothing."""
  return None


def longer_than_full_square(shape: Shape) -> str | None:
  """The refusal of kernels that score all T x T pairs at once, past FULL_SQUARE_MAX_LENGTH."""
  if shape.length > FULL_SQUARE_MAX_LENGTH:
    return (f"it scores all {shape.length} x {shape.length} pairs at once (past "
            f"{FULL_SQUARE_MAX_LENGTH} tokens the blocked kernel bounds the memory)")
  return None


@dataclasses.dataclass(frozen=True)
class Kernel:
  """name; run(prepared, blocks) -> (out, entropy or None), blocks = (queries, keys) per block or
  None (only the blocked kernel reads it); refusal(mods, shape) -> reason or None; gives_entropy;
  cpu_layout: prepare lays its work out for XLA's CPU backend (RoPE's table as an op of its own,
  the norms without size-1 axes); pair_run: as run, for a product that depends on the pair (None:
  refused)."""
  name: str
  summary: str
  run: Callable
  refusal: Callable = accept
  gives_entropy: bool = True
  cpu_layout: bool = False
  pair_run: Callable | None = None

  def __call__(self, prepared, blocks=None):
    """(out, entropy or None): pair_run where the product depends on the pair, else run."""
    return (self.run if prepared.path is None else self.pair_run)(prepared, blocks)
