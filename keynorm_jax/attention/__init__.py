"""Causal attention of the KeyNorm study: the variants, their position options and the kernels.

`causal_attention` and `attend` (einsum.py) are the reference path: every score is computed as
written in the formulas. Beyond 2048 tokens `attend` runs them in blocks with an online softmax
(blocked.py), skipping the blocks the masks leave empty. Faster kernels are tested against it.
"""

from keynorm_jax.attention.einsum import (VARIANTS, attend, block_sizes, causal_attention,
                                          cosa_default_scale, l2_normalize, query_block_size)

__all__ = ["VARIANTS", "attend", "block_sizes", "causal_attention", "cosa_default_scale",
           "l2_normalize", "query_block_size"]
