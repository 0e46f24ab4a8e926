"""Causal attention of the KeyNorm study: the variants, their position options and the kernels.

`causal_attention` and `attend` (einsum.py) are the reference path: every score is computed as
written in the formulas. Faster kernels are tested against it.
"""

from keynorm_jax.attention.einsum import (VARIANTS, attend, causal_attention, cosa_default_scale,
                                          l2_normalize, query_block_size)

__all__ = ["VARIANTS", "attend", "causal_attention", "cosa_default_scale", "l2_normalize",
           "query_block_size"]
