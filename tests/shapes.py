"""The attention tests' shapes and block sizes, defined once: B batch rows, T tokens, H heads, S the
head size of q and k (S / 2 RoPE pairs), E the value size.

Two lengths, each for a reason:
- T = 37 for the shared case table (attention_cases.py) and the kernel tests: every block pair of
  BLOCKS really splits the queries and the keys, and the last block is ragged.
- LOOP_T = 12 for the position methods' checks against the NumPy references
  (numpy_*_reference.py), which loop over i and j in Python (some in T^3): a short length
  that query blocks of 5 still split; with LOOP_H = 3 heads, not a power of 2 (ALiBi's second
  slope rule).
"""

import numpy as np

B, S = 2, 8
T, H, E = 37, 4, 6
BLOCKS = [(8, 8), (8, 5), (16, 8), (5, 16)]      # (query block, key block)
LOOP_T, LOOP_H, LOOP_E = 12, 3, 5
LOOP_BLOCKS = (None, 5)                          # query blocks; None: the whole sequence at once
INV = np.array([100.0**(-2 * m / S) for m in range(S // 2)])   # RoPE's frequencies, base 100
INV32 = INV.astype(np.float32)                   # the same, as the library takes them
