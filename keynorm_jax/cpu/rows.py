"""A function of each row of an array (a softmax, a norm), computed on the array without its
size-1 axes.

XLA's CPU backend gives reductions to YNNPACK, and YNNPACK reduces a 4-d array with a size-1 axis
several times slower than the same numbers without it: at [8, 1, 128, 512] (the single-head GAU's
scores) a softmax's forward and backward took 2.2 ms against 0.6 ms on [8, 128, 512], and an L2
norm's 1.7 ms against 0.15 ms (benchmarks/PROFILE_NOTES.md, round 8). Dropping the axes is a
reshape, a bitcast on the CPU; the `cpu` kernel takes it (its softmax, and prepare's norms of q and
k with `cpu_layout`). The values are the same; the gradients within float32 rounding (XLA fuses
the two forms differently). Not measured on an accelerator, where the other kernels run.
"""


def by_rows(fn, x):
  """fn(x) for an fn that acts on each row along x's last axis on its own (so any reshape of the
  other axes commutes with it), with x's size-1 axes other than the last dropped before and
  restored after."""
  kept = tuple(n for n in x.shape[:-1] if n != 1) + x.shape[-1:]
  if kept == x.shape:
    return fn(x)
  return fn(x.reshape(kept)).reshape(x.shape)
