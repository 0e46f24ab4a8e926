"""The attention kernels, by name, and the choice among them (`select`).

  reference  the definition (full square, einsum products): what the others are tested against
  cpu        the reference laid out for XLA's CPU backend (causal query blocks, row-major products)
  blocked    query and key blocks with an online softmax: bounded memory at any length
  cudnn      cuDNN flash attention (GPU, bfloat16 / float16), on pre-scaled q and k
  xla        jax.nn.dot_product_attention's XLA implementation, on pre-scaled q and k

`model.kernel` names one, or `auto`: cuDNN on a GPU where it can express the setting; past
FULL_SQUARE_MAX_LENGTH tokens `blocked`; else `cpu` on a CPU backend and `reference` elsewhere.
PaTH (Mods.path) goes to `blocked` at every length on every backend: its chunks (path.py) keep the
memory linear in T, where the reference would hold every pair's score (kernels/base.py: pair_run).
A named kernel that refuses a setting (kernel.refusal says why) gives way to `auto`'s choice, with a
warning logged once per reason. Adding a kernel: its file, a line in KERNELS, and its row in
tests/test_kernels.py's conformance table.
"""

from absl import logging
import jax

from keynorm_jax.attention.kernels import blocked, cpu, dot_product, reference
from keynorm_jax.attention.kernels.base import FULL_SQUARE_MAX_LENGTH, PAIR_REFUSAL, Kernel, Shape

KERNELS = {kernel.name: kernel for kernel in (reference.KERNEL, cpu.KERNEL, blocked.KERNEL,
                                              dot_product.CUDNN, dot_product.XLA)}
NAMES = ("auto",) + tuple(KERNELS)
_warned: set = set()


def refusal(kernel: Kernel, mods, shape: Shape, need_entropy: bool = False):
  """Why `kernel` cannot run this call (None: it can)."""
  if need_entropy and not kernel.gives_entropy:
    return "it gives no attention entropy (the diagnostics need it)"
  if mods.path and kernel.pair_run is None:
    return PAIR_REFUSAL
  return kernel.refusal(mods, shape)


def auto_order(shape: Shape, mods) -> tuple:
  """The kernels `auto` tries, in order (the last, `reference`, takes anything)."""
  backend = jax.default_backend()
  order = ("cudnn",) if backend == "gpu" else ()
  if shape.length > FULL_SQUARE_MAX_LENGTH or mods.path:   # the reference: what blocked refuses
    return order + ("blocked", "reference")
  return order + (("cpu",) if backend == "cpu" else ()) + ("reference",)


def select(name: str, mods, shape: Shape, *, need_entropy: bool = False) -> Kernel:
  """The kernel that runs a call: `name`'s, unless it refuses (then auto's, with a warning)."""
  if name not in NAMES:
    raise ValueError(f"Unknown attention kernel {name!r}; choose one of {', '.join(NAMES)}.")
  if name != "auto":
    reason = refusal(KERNELS[name], mods, shape, need_entropy)
    if reason is None:
      return KERNELS[name]
  chosen = next((KERNELS[candidate] for candidate in auto_order(shape, mods)
                 if refusal(KERNELS[candidate], mods, shape, need_entropy) is None),
                KERNELS["reference"])
  if name != "auto" and (name, reason, chosen.name) not in _warned:
    _warned.add((name, reason, chosen.name))
    logging.warning("Attention kernel %r cannot run this call: %s; using %r (auto's choice).",
                    name, reason, chosen.name)
  return chosen
