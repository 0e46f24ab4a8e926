"""PaTH attention (Yang et al., NeurIPS 2025, arXiv 2505.16381) and PaTH-FoX: the math, pure JAX.

For query head h (its key/value head g = h // (H / G)), query i and key j <= i:

  s_ij = scale x multiplier_i x q_i^T H_i H_{i-1} ... H_{j+1} k_j  +  c_i - c_j,
  H_t  = I - beta_t w_t w_t^T   (w_t [S] and beta_t of key/value head g),

the product empty (the identity) at j = i; kept where j <= i and i - j < window; o_i = sum_j
softmax_j(s_ij) v_j in float32. c_t = sum_{l<=t} log f_l is FoX's cumulative log forget gate
(attention/prepare.py computes it: `decay`), so c_i - c_j = sum_{l=j+1..i} log f_l. The gate term
(PaTH-FoX) is added unscaled, as FoX and this project's FoX add it (fla's PaTH code multiplies it
by `scale` too: docs/path.md). The layer's w_t are unit vectors and beta_t in (0, 2) (2 sigmoid);
nothing here relies on it: H_t is used as given.

Never a T x T product of matrices. A chunk of C positions has one compact (UT) form of its product
(`compact_form`), and a chunk's queries and keys are moved to its ends once:

  q~_i = (H_a ... H_0)^T q_i    (a = i's place in its chunk; the chunk's first factor H_0)
  k~_j = H_{C-1} ... H_{b+1} k_j (b = j's place in its chunk)

so that across chunks m < n, s_ij = q~_i^T P_{n-1} ... P_{m+1} k~_j, P_c a whole chunk's product;
within a chunk (b <= a), q_i^T H_a ... H_{b+1} k_j = q_i^T k_j - sum over b < d <= c <= a of
(q_i . w_c) T_cd (w_d . k_j), the compact form masked. `path_attention` scores each query chunk
against its own chunk, then sweeps back over the earlier chunks, scoring against k~ and moving the
queries through the chunk (q <- P_m^T q: two products of rank C), with an online softmax: memory
linear in T besides one chunk of scores; work O(T^2 S), O(T window S) with a window. Its backward
is JAX's autodiff with each query chunk's sweep rematerialized (jax.checkpoint): what it keeps is
linear in T too (docs/path.md: measured). `path_scores` gives every score at once (T x T: the
full-square kernels, the tests).

Axes: B batch, T sequence, H query heads, G key/value heads, R query heads per key/value head,
S q/k/w size, E value size; N chunks, C a chunk's Householder factors, Q and K a chunk's queries
and keys (C = Q = K = chunk).
"""

import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

MASKED = -1e30
DEFAULT_CHUNK = 64   # positions per chunk (fla: 32 or 64 for the compact form)


def compact_form(w_XxCxS, beta_XxC):
  """T [..., C, C] float32 of the compact (UT) form of a chunk's product of Householder factors:

    H_{C-1} ... H_1 H_0 = I - W^T T W,   T = (I + D strict_lower(W W^T))^-1 D,

  W = w [C, S] (its rows w_0 .. w_{C-1}), D = diag(beta). T is lower triangular, and so any run
  H_b ... H_a (a <= b) is I - W[a:b+1]^T T[a:b+1, a:b+1] W[a:b+1]: restricted to consecutive rows
  and columns, the inverse of a lower triangular matrix is the inverse of the restriction.
  (Writing H_m ... H_0 = I - W^T Y, row m of Y is beta_m w_m^T (H_{m-1} ... H_0): Y = D W - D L Y.)
  """
  w = w_XxCxS.astype(jnp.float32)
  beta = beta_XxC.astype(jnp.float32)
  chunk = w.shape[-2]
  eye = jnp.eye(chunk, dtype=jnp.float32)
  lower_XxCxC = jnp.tril(jnp.einsum("...cs,...ds->...cd", w, w), -1) * beta[..., :, None]
  return unit_lower_inverse(eye + lower_XxCxC) * beta[..., None, :]   # (I + DL)^-1 D


def unit_lower_inverse(a_XxCxC):
  """The inverse of unit lower triangular matrices [..., C, C] by blocks, in matrix products only:

    [[A, 0], [B, D]]^-1 = [[A^-1, 0], [-D^-1 B A^-1, D^-1]],

  the diagonal blocks' inverses doubling in size from 1 x 1 (the ones of the diagonal) to C
  (padded with zeros to a power of two: with its diagonal counted as ones, the padding inverts to
  the identity). XLA's CPU triangular solve took about 0.5 s for 64 x 64 x 64 (BENCHMARKS.md,
  "PaTH's cost"); these are log2 C rounds of batched products. The diagonal and the entries above
  it are not read."""
  size = a_XxCxC.shape[-1]
  padded = 1 << max(0, size - 1).bit_length()
  lead = a_XxCxC.shape[:-2]
  a = jnp.zeros(lead + (padded, padded), a_XxCxC.dtype).at[..., :size, :size].set(a_XxCxC)
  inverse_XxNx1x1 = jnp.ones(lead + (padded, 1, 1), a.dtype)   # the diagonal blocks of size 1
  block = 1
  while block < padded:
    count = padded // (2 * block)
    # The diagonal blocks of size 2 x block: [..., count, 2 block, 2 block]; B their lower left.
    blocks = jnp.einsum("...iaib->...iab", a.reshape(lead + (count, 2 * block, count, 2 * block)))
    below_XxNxBxB = blocks[..., block:, :block]
    first, second = inverse_XxNx1x1[..., 0::2, :, :], inverse_XxNx1x1[..., 1::2, :, :]
    corner = -second @ below_XxNxBxB @ first
    top = jnp.concatenate([first, jnp.zeros_like(first)], axis=-1)
    inverse_XxNx1x1 = jnp.concatenate([top, jnp.concatenate([corner, second], axis=-1)], axis=-2)
    block *= 2
  return inverse_XxNx1x1[..., 0, :size, :size]


def chunk_product(w_XxCxS, beta_XxC):
  """The product H_{C-1} ... H_0 [..., S, S] from the compact form (tests; S x S per chunk)."""
  w = w_XxCxS.astype(jnp.float32)
  t_XxCxC = compact_form(w, beta_XxC)
  eye = jnp.eye(w.shape[-1], dtype=jnp.float32)
  return eye - jnp.einsum("...cs,...cd,...dz->...sz", w, t_XxCxC, w)


class _Chunks(NamedTuple):
  """One call's arrays cut into chunks, chunk axis first (padded to N x C positions)."""
  q_tilde: jax.Array    # [N, B, G, R, Q, S] q~: (H_a ... H_0)^T q_i, moved to its chunk's start
  k_tilde: jax.Array    # [N, B, G, K, S] k~: H_{C-1} ... H_{b+1} k_j, moved to its chunk's end
  w: jax.Array          # [N, B, G, C, S]
  tw: jax.Array         # [N, B, G, C, S] T W: the chunk's product is I - W^T (T W)
  diagonal: jax.Array   # [N, B, G, R, Q, K] q_i^T H_a ... H_{b+1} k_j within the chunk (b <= a)
  values: jax.Array     # [N, B, G, K, E] float32
  factor: jax.Array     # [N, B, G, R, Q] scale x multiplier_i
  gate: jax.Array       # [N, B, G, R, Q] FoX's c_t = sum_{l<=t} log f_l (zeros without gates)


def _kv_chunks(x, chunk: int):
  """[B, T', G, ...] -> [N, B, G, C, ...] (T' = N x C)."""
  batch, padded = x.shape[:2]
  x = x.reshape((batch, padded // chunk, chunk) + x.shape[2:])
  return jnp.transpose(x, (1, 0, 3, 2) + tuple(range(4, x.ndim)))


def _query_chunks(x, chunk: int, groups: int):
  """[B, T', H, ...] -> [N, B, G, R, Q, ...] (T' = N x Q, H = G x R)."""
  batch, padded, heads = x.shape[:3]
  x = x.reshape((batch, padded // chunk, chunk, groups, heads // groups) + x.shape[3:])
  return jnp.transpose(x, (1, 0, 3, 4, 2) + tuple(range(5, x.ndim)))


def _pad(x, size: int):
  """Axis 1 of x padded with zeros to `size`."""
  pad = [(0, 0)] * x.ndim
  pad[1] = (0, size - x.shape[1])
  return jnp.pad(x, pad)


def _chunks(q, k, v, w, beta, decay, scale, multiplier, chunk: int) -> _Chunks:
  """The compact forms, q~, k~ and the within-chunk scores of every chunk (all linear in T)."""
  batch, length, heads, size = q.shape
  groups = k.shape[2]
  padded = -(-length // chunk) * chunk
  f32 = lambda x: _pad(x.astype(jnp.float32), padded)
  # Padded positions: w = 0 (H = I), zero keys and values, after every real query (masked).
  q_NxBxGxRxQxS = _query_chunks(f32(q), chunk, groups)
  k_NxBxGxKxS = _kv_chunks(f32(k), chunk)
  w_NxBxGxCxS = _kv_chunks(f32(w), chunk)
  beta_NxBxGxC = _kv_chunks(f32(beta), chunk)
  t_NxBxGxCxC = compact_form(w_NxBxGxCxS, beta_NxBxGxC)
  tw_NxBxGxCxS = jnp.einsum("nbgcd,nbgds->nbgcs", t_NxBxGxCxC, w_NxBxGxCxS)
  # (W k)_cb kept for factors c > b (after the key); (q W)_ac kept for c <= a (up to the query).
  after_key = jnp.tril(jnp.ones((chunk, chunk), bool), -1)        # [c, b]
  up_to_query = jnp.tril(jnp.ones((chunk, chunk), bool))           # [a, c]
  wk_NxBxGxCxK = jnp.where(after_key, jnp.einsum("nbgcs,nbgks->nbgck", w_NxBxGxCxS, k_NxBxGxKxS),
                           0.0)
  twk_NxBxGxCxK = jnp.einsum("nbgcd,nbgdk->nbgck", t_NxBxGxCxC, wk_NxBxGxCxK)
  k_tilde = k_NxBxGxKxS - jnp.einsum("nbgcs,nbgck->nbgks", w_NxBxGxCxS, twk_NxBxGxCxK)
  qw_NxBxGxRxQxC = jnp.where(up_to_query,
                             jnp.einsum("nbgrqs,nbgcs->nbgrqc", q_NxBxGxRxQxS, w_NxBxGxCxS), 0.0)
  q_tilde = q_NxBxGxRxQxS - jnp.einsum("nbgrqc,nbgcs->nbgrqs", qw_NxBxGxRxQxC, tw_NxBxGxCxS)
  diagonal = (jnp.einsum("nbgrqs,nbgks->nbgrqk", q_NxBxGxRxQxS, k_NxBxGxKxS)
              - jnp.einsum("nbgrqc,nbgck->nbgrqk", qw_NxBxGxRxQxC, twk_NxBxGxCxK))
  factor_BxTxH = jnp.broadcast_to(
      jnp.asarray(1.0 / math.sqrt(size) if scale is None else scale, jnp.float32)
      * (1.0 if multiplier is None else multiplier.astype(jnp.float32)), (batch, length, heads))
  gate_BxTxH = jnp.zeros((batch, length, heads), jnp.float32)
  if decay is not None:
    gate_BxTxH = decay.astype(jnp.float32)
    if decay.shape[2] != heads:   # one gate per key/value head, shared by its query heads
      gate_BxTxH = jnp.repeat(gate_BxTxH, heads // decay.shape[2], axis=2)
  per_query = lambda x: _query_chunks(_pad(x, padded), chunk, groups)
  return _Chunks(q_tilde, k_tilde, w_NxBxGxCxS, tw_NxBxGxCxS, diagonal,
                 _kv_chunks(f32(v), chunk), per_query(factor_BxTxH), per_query(gate_BxTxH))


def _through_chunk(q_XxGxRxQxS, w_XxGxCxS, tw_XxGxCxS):
  """q^T P = q^T - (q^T W^T) (T W): queries moved through a whole chunk's product P (any leading
  axes X: [B] or [N, B])."""
  qw_XxGxRxQxC = jnp.einsum("...grqs,...gcs->...grqc", q_XxGxRxQxS, w_XxGxCxS)
  return q_XxGxRxQxS - jnp.einsum("...grqc,...gcs->...grqs", qw_XxGxRxQxC, tw_XxGxCxS)


def _keep(query_start, key_start, chunk: int, window):
  """[Q, K] bool: key j <= query i and, with a window, i - j < window (sequence indices)."""
  distance_QxK = ((query_start + jnp.arange(chunk))[:, None]
                  - (key_start + jnp.arange(chunk))[None, :])
  keep = distance_QxK >= 0
  return keep if window is None else keep & (distance_QxK < window)


def _scores(dots_XxQxK, factor_XxQ, gate_XxQ, key_gate_XxK, keep_QxK):
  """factor_i x the path's q . k + (c_i - c_j), MASKED where not kept (X: the head axes)."""
  scores = factor_XxQ[..., None] * dots_XxQxK + gate_XxQ[..., :, None] - key_gate_XxK[..., None, :]
  return jnp.where(keep_QxK, scores, MASKED)


def _checked_chunks(q, k, v, w, beta, decay, scale, multiplier, window, chunk: int):
  """The arguments checked, then (_chunks of them, the chunk size clamped to 1..T)."""
  _check(q, k, v, w, beta, decay, multiplier, window)
  chunk = max(1, min(chunk, q.shape[1]))
  return _chunks(q, k, v, w, beta, decay, scale, multiplier, chunk), chunk


def _check(q, k, v, w, beta, decay, multiplier, window):
  batch, length, heads, _ = q.shape
  groups = k.shape[2]
  if heads % groups:
    raise ValueError(f"{heads} query heads cannot share {groups} key/value heads evenly.")
  expected = {"k": (k, q.shape[:2] + (groups, q.shape[3])), "w": (w, k.shape),
              "v": (v, k.shape[:3] + v.shape[3:]), "beta": (beta, k.shape[:3])}
  if decay is not None:
    expected["decay"] = (decay, (batch, length, heads if decay.shape[2] == heads else groups))
  if multiplier is not None:
    expected["multiplier"] = (multiplier, (batch, length, heads))
  for name, (x, shape) in expected.items():
    if tuple(x.shape) != tuple(shape):
      raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}.")
  if window is not None and window < 1:
    raise ValueError(f"window must be >= 1, got {window}.")


def _from_chunks(x, length: int):
  """[N, B, G, R, Q, ...] -> [B, T, H, ...] (the padding dropped)."""
  chunks, batch, groups, per_group, chunk = x.shape[:5]
  tail = x.shape[5:]
  x = jnp.moveaxis(x, 4, 1)                                 # [N, Q, B, G, R, ...]
  x = jnp.moveaxis(x.reshape((chunks * chunk,) + x.shape[2:]), 0, 1)
  return x.reshape((batch, chunks * chunk, groups * per_group) + tail)[:, :length]


def path_attention(q_BxTxHxS, k_BxTxGxS, v_BxTxGxE, w_BxTxGxS, beta_BxTxG, *, decay=None,
                   scale: Optional[float] = None, multiplier=None, window: Optional[int] = None,
                   chunk: int = DEFAULT_CHUNK):
  """PaTH attention by chunks with an online softmax (module docstring for the score).

  q [B, T, H, S], k [B, T, G, S], v [B, T, G, E] (grouped-query attention: H a multiple of G),
  w [B, T, G, S] (unit vectors), beta [B, T, G] (in (0, 2)): the key/value heads' factors.
  decay: [B, T, H] or [B, T, G] c_t = sum_{l<=t} log f_l, FoX's cumulative log forget gates
    (PaTH-FoX; None: PaTH).
  scale: a number on every q . k (None: 1 / sqrt(S)); multiplier: [B, T, H] a factor per query
    (log n, SSMax), both on the path's q . k only, not on the gates.
  window: keep i - j < window (sequence indices); chunk: positions per chunk (any T).

  Returns (out [B, T, H, E] float32, entropy [B, T, H] in nats).
  """
  c, chunk = _checked_chunks(q_BxTxHxS, k_BxTxGxS, v_BxTxGxE, w_BxTxGxS, beta_BxTxG, decay, scale,
                             multiplier, window, chunk)
  chunks = c.w.shape[0]
  # Earlier chunks a query chunk can reach: all of them, or those the window reaches.
  reach = chunks - 1 if window is None else min(chunks - 1, -(-(window - 1) // chunk))
  # The key side, chunks in reverse order and `reach` empty chunks after: for query chunk n,
  # entries [N - n, N - n + reach) are its earlier chunks n - 1, n - 2, ... then padding.
  key_side = (c.k_tilde, c.w, c.tw, c.values, c.gate)
  reversed_keys = jax.tree.map(
      lambda x: jnp.concatenate([x[::-1], jnp.zeros((reach,) + x.shape[1:], x.dtype)]), key_side)

  def one_query_chunk(n, q_tilde, diagonal, factor, gate):
    keep = _keep(n * chunk, n * chunk, chunk, window)
    scores = _scores(diagonal, factor, gate, gate, keep)
    # The running maximum is a constant to autodiff (the results do not depend on it): its
    # gradient would pick the entries equal to it, and a score recomputed in another fusion can
    # round differently from the one the maximum saw (0 / 0: measured at XLA's -O0 on the CPU).
    m_BxGxRxQ = jax.lax.stop_gradient(scores.max(axis=-1))
    shifted = scores - m_BxGxRxQ[..., None]
    p = jnp.where(keep, jnp.exp(shifted), 0.0)
    stats = (m_BxGxRxQ, p.sum(-1), jnp.sum(p * shifted, -1),
             jnp.einsum("bgrqk,bgke->bgrqe", p, c.values[n]))

    def earlier_chunk(carry, step_and_keys):
      step, (k_tilde, w, tw, values, key_gate) = step_and_keys
      chunk_index = n - 1 - step

      def absorb(carry):
        q_hat, (m, l, entropy_sum, acc) = carry
        keep = _keep(n * chunk, chunk_index * chunk, chunk, window)
        scores = _scores(jnp.einsum("bgrqs,bgks->bgrqk", q_hat, k_tilde), factor, gate, key_gate,
                         keep)
        m_new = jax.lax.stop_gradient(jnp.maximum(m, scores.max(axis=-1)))
        shifted = scores - m_new[..., None]
        p = jnp.where(keep, jnp.exp(shifted), 0.0)
        rescale = jnp.exp(m - m_new)
        # sum p (s - m) with the running maximum moved from m to m_new (blocked.py's entropy).
        entropy_sum = rescale * (entropy_sum - (m_new - m) * l) + jnp.sum(p * shifted, -1)
        acc = acc * rescale[..., None] + jnp.einsum("bgrqk,bgke->bgrqe", p, values)
        return _through_chunk(q_hat, w, tw), (m_new, rescale * l + p.sum(-1), entropy_sum, acc)

      reachable = chunk_index >= 0
      if window is not None:   # the chunk's last key within the window of its first query
        reachable &= (chunk_index + 1) * chunk - 1 > n * chunk - window
      return jax.lax.cond(reachable, absorb, lambda carry: carry, carry), None

    if reach:
      keys = jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, chunks - n, reach),
                          reversed_keys)
      (_, stats), _ = jax.lax.scan(earlier_chunk, (q_tilde, stats),
                                   (jnp.arange(reach), keys))
    m, l, entropy_sum, acc = stats
    return acc / l[..., None], jnp.log(l) - entropy_sum / l

  # Rematerialized in the backward pass: autodiff keeps each query chunk's inputs, not its sweep.
  step = jax.checkpoint(lambda _, xs: (None, one_query_chunk(*xs)))
  _, (out, entropy) = jax.lax.scan(
      step, None, (jnp.arange(chunks), c.q_tilde, c.diagonal, c.factor, c.gate))
  length = q_BxTxHxS.shape[1]
  return _from_chunks(out, length), _from_chunks(entropy, length)


def path_scores(q_BxTxHxS, k_BxTxGxS, w_BxTxGxS, beta_BxTxG, *, decay=None,
                scale: Optional[float] = None, multiplier=None, window: Optional[int] = None,
                chunk: int = DEFAULT_CHUNK):
  """Every score at once: [B, H, T, T] float32, MASKED where not kept (arguments as
  path_attention's). By the same chunks: query chunk n against key chunk n - d for every n at
  each d = 1, 2, ... (the queries of every chunk moved through one more chunk per step). T x T
  memory: for the full-square kernels and the tests."""
  c, chunk = _checked_chunks(q_BxTxHxS, k_BxTxGxS, k_BxTxGxS, w_BxTxGxS, beta_BxTxG, decay, scale,
                             multiplier, window, chunk)
  chunks = c.w.shape[0]

  def offset(q_hat, d):
    # Query chunk n against key chunk n - d (rolled; the wrapped rows n < d are dropped below).
    at = lambda x: jnp.roll(x, d, axis=0)
    dots = jnp.einsum("nbgrqs,nbgks->nbgrqk", q_hat, at(c.k_tilde))
    return _through_chunk(q_hat, at(c.w), at(c.tw)), dots

  _, off_diagonal = jax.lax.scan(offset, c.q_tilde, jnp.arange(1, chunks))
  dots_DxN = jnp.concatenate([c.diagonal[None], off_diagonal])   # [d, n, B, G, R, Q, K]
  query_chunk = jnp.arange(chunks)[:, None]
  gap_NxN = query_chunk - jnp.arange(chunks)[None, :]               # d of (n, m)
  dots_NxN = jnp.where((gap_NxN >= 0)[(...,) + (None,) * 5],
                       dots_DxN[jnp.clip(gap_NxN, 0, None), query_chunk], 0.0)
  # [n, m, B, G, R, Q, K] -> [B, G, R, n, Q, m, K] -> [B, H, T', T']
  dots = jnp.transpose(dots_NxN, (2, 3, 4, 0, 5, 1, 6))
  batch, groups, per_group = dots.shape[:3]
  padded = chunks * chunk
  dots = dots.reshape(batch, groups * per_group, padded, padded)
  factor_BxHxT, gate_BxHxT = (jnp.moveaxis(_from_chunks(x, padded), 2, 1)
                              for x in (c.factor, c.gate))
  scores = _scores(dots, factor_BxHxT, gate_BxHxT, gate_BxHxT, _keep(0, 0, padded, window))
  length = q_BxTxHxS.shape[1]
  return scores[:, :, :length, :length]
