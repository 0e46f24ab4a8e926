"""What the host processor can do, read once from Linux's /proc/cpuinfo (None or False elsewhere).

The CPU multiplies bfloat16 at twice its float32 rate only with bf16 units (`avx512_bf16` or
`amx_bf16` in its flags) and products that accumulate in float32 (keynorm_jax/precision.py);
without them a bfloat16 product is emulated and slower than float32 (BENCHMARKS.md, "bfloat16 on
the CPU"). float32 stays the default everywhere; `slow_bfloat16` is the line a bfloat16 model says
on a processor without the units (models.build_model, once per process).
"""

import functools
import pathlib

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.cache
def _cpuinfo() -> tuple[str | None, tuple[str, ...]]:
  """(the first processor's model name, its flags); (None, ()) where /proc/cpuinfo is unreadable."""
  try:
    text = pathlib.Path("/proc/cpuinfo").read_text()
  except OSError:
    return None, ()
  name, flags = None, ()
  for line in text.splitlines():
    key, _, value = line.partition(":")
    if key.strip() == "model name" and name is None:
      name = value.strip()
    elif key.strip() == "flags" and not flags:
      flags = tuple(value.split())
  return name, flags


def bf16_units() -> tuple[str, ...]:
  """The processor's bfloat16 flags among BF16_FLAGS (empty: none, or not known)."""
  return tuple(f for f in BF16_FLAGS if f in _cpuinfo()[1])


def cpu_model() -> str | None:
  """The processor's model name with its bfloat16 units, e.g. 'AMD EPYC (avx512_bf16)' or
  'AMD EPYC (no bf16 units)'; None where it cannot be read."""
  name = _cpuinfo()[0]
  if name is None:
    return None
  return f"{name} ({', '.join(bf16_units()) or 'no bf16 units'})"


def slow_bfloat16() -> str | None:
  """One line saying that bfloat16 products run slower than float32 on this processor, where its
  flags were read and have no bfloat16 unit; None where it has one or its flags are unknown."""
  if not _cpuinfo()[1] or bf16_units():
    return None
  return (f"model.compute_dtype=bfloat16 runs as asked, but slower than float32 on this processor "
          f"({cpu_model()}: its bfloat16 products are emulated); float32 is the default.")
