"""The scores of a block of queries against a block of keys: the one home of the biases and masks.

score_ij = multiplier_i x (q_i . k_j), with the far rotation's product where the layer's far rule
says a pair is far (attention/far.py: from a distance, or DCA by chunk), scale-invariant's a_t x
that + m_t at distance t, minus ALiBi's m_h x distance, plus a learned bias of the distance, plus
FoX's c_i - c_j (the sides' decay); masked (MASKED) where j > i (by index), outside the window,
unless a sink. The distance is p_i - p_j, or the far rule's (StreamingLLM's cache: a key outside
the window at (k + w - 1) - p_j). Every einsum kernel computes its scores here (the full square and
every block alike), so they cannot disagree on a formula.
"""

import jax
import jax.numpy as jnp

from keynorm_jax import precision
from keynorm_jax.attention.prepare import Prepared, Side
from keynorm_jax.attention.spec import Mods

MASKED = -1e30


def grouped_scores(q_BxQxHxS, k_BxKxGxS, dtype=jnp.float32):
  """q [B, Q, H, S] . k [B, K, G, S] -> [B, H, Q, K] float32: query head h against key head
  h // (H / G) (grouped-query attention by a grouped einsum: k is never repeated). q and k enter
  the product in `dtype` (the compute dtype), summed in float32 (precision.einsum)."""
  batch, queries, heads, size = q_BxQxHxS.shape
  groups = k_BxKxGxS.shape[2]
  q_BxQxGxRxS = q_BxQxHxS.reshape(batch, queries, groups, heads // groups, size)
  scores = precision.einsum("bqgrs,bkgs->bgrqk", q_BxQxGxRxS, k_BxKxGxS, dtype)
  return scores.reshape(batch, heads, queries, k_BxKxGxS.shape[1])


def grouped_probs_times_values(probs_BxHxQxK, values_BxKxGxE, dtype=jnp.float32):
  """probs [B, H, Q, K] x values [B, K, G, E] -> [B, Q, H, E] float32 (grouped as grouped_scores;
  the product in `dtype`, summed in float32)."""
  batch, heads, queries, keys = probs_BxHxQxK.shape
  groups = values_BxKxGxE.shape[2]
  probs = probs_BxHxQxK.reshape(batch, groups, heads // groups, queries, keys)
  out = precision.einsum("bgrqk,bkge->bqgre", probs, values_BxKxGxE, dtype)
  return out.reshape(batch, queries, heads, values_BxKxGxE.shape[-1])


def grouped_values_grad(probs_BxHxQxK, d_out_BxQxHxE, groups: int, dtype=jnp.float32):
  """d values [B, K, G, E] float32 of grouped_probs_times_values: sum over queries and the group's
  heads (the product in `dtype`, summed in float32)."""
  batch, heads, queries, keys = probs_BxHxQxK.shape
  probs = probs_BxHxQxK.reshape(batch, groups, heads // groups, queries, keys)
  d_out = d_out_BxQxHxE.reshape(batch, queries, groups, heads // groups, -1)
  return precision.einsum("bgrqk,bqgre->bkge", probs, d_out, dtype)


def head_by_head(prepared: Prepared) -> Prepared:
  """The values in float32, and keys and values repeated to one per query head (grouped-query
  attention), for the kernels that score head by head. (A repeat by 1 is skipped: it would still
  copy.)"""
  prepared = prepared._replace(values=prepared.values.astype(jnp.float32))
  heads, kv_heads = prepared.queries.near.shape[2], prepared.keys.near.shape[2]
  if heads == kv_heads:
    return prepared
  repeat = lambda x: None if x is None else jnp.repeat(x, heads // kv_heads, axis=2)
  keys = prepared.keys._replace(near=repeat(prepared.keys.near), far=repeat(prepared.keys.far))
  return prepared._replace(keys=keys, values=repeat(prepared.values))


def _distances(mods: Mods, queries: Side, keys: Side):
  """(relative p_i - p_j, distance: relative, or as the far rule places it) [B, Q, K]."""
  relative_BxQxK = (queries.positions[:, :, None]
                    - keys.positions[:, None, :]).astype(jnp.float32)
  if mods.far is None:
    return relative_BxQxK, relative_BxQxK
  return relative_BxQxK, mods.far.distance(relative_BxQxK, keys.positions)


def scale_invariant(scores_BxHxQxK, distance_BxQxK, tau: float):
  """Scale-invariant attention (Anson, Wang & Aitchison 2025, eq. 14 and 16 with a_0 = 1, m_0 = 0):
  a_t S + m_t with a_t = sqrt(1 + 2 log(1 + t / tau)), m_t = -2 log(1 + t / tau), t the distance."""
  log_term = jnp.log1p(jnp.maximum(distance_BxQxK, 0.0) / tau)[:, None]
  return scores_BxHxQxK * jnp.sqrt(1.0 + 2.0 * log_term) - 2.0 * log_term


def cope(scores_BxHxQxK, keep_Bx1xQxK, q_BxQxHxS, embeddings_SxP):
  """CoPE's term q_i . e[p_ij] [B, H, Q, K] (Golovneva et al. 2024, the paper's form: not divided
  by sqrt(S)): gates sigmoid(s_it) of the scores, positions p_ij = sum over the kept t >= j of the
  gates (t <= i by the mask), capped at npos - 1, and q . e interpolated between floor(p) and the
  next integer (gradients through the weight, not the index). Whole rows of keys, as
  stick-breaking's."""
  npos = embeddings_SxP.shape[-1]
  gates = jnp.where(keep_Bx1xQxK, jax.nn.sigmoid(scores_BxHxQxK), 0.0)
  positions = jnp.minimum(jnp.flip(jnp.cumsum(jnp.flip(gates, -1), axis=-1), -1), npos - 1)
  logits_BxHxQxP = jnp.einsum("bqhs,sp->bhqp", q_BxQxHxS, embeddings_SxP.astype(jnp.float32))
  below = jnp.floor(positions)
  weight = positions - below
  below = below.astype(jnp.int32)
  above = jnp.minimum(below + 1, npos - 1)
  at = lambda index: jnp.take_along_axis(logits_BxHxQxP, index, axis=-1)
  return weight * at(above) + (1.0 - weight) * at(below)


def bias_and_keep(mods: Mods, queries: Side, keys: Side, heads: int, distances=None):
  """(additive bias [B, H, Q, K] float32 or None, keep [B, 1, Q, K] bool) of a block: what is added
  to multiplier x q . k, and which pairs are kept. `distances`: the block's _distances if the
  caller has them already."""
  relative_BxQxK, distance_BxQxK = distances or _distances(mods, queries, keys)
  bias = None
  if mods.alibi_slopes is not None:
    slopes_H = jnp.broadcast_to(mods.alibi_slopes, (heads,))
    bias = -slopes_H[None, :, None, None] * distance_BxQxK[:, None]
  if mods.score_bias is not None:
    learned = mods.score_bias(distance_BxQxK, queries.positions)
    bias = learned if bias is None else bias + learned
  if mods.forget_gate:   # FoX: sum_{l=j+1..i} log f_l = c_i - c_j
    forget_BxHxQxK = (jnp.moveaxis(queries.decay, 2, 1)[..., :, None]
                      - jnp.moveaxis(keys.decay, 2, 1)[..., None, :])
    bias = forget_BxHxQxK if bias is None else bias + forget_BxHxQxK
  if mods.stick_breaking:   # the current token is not attended
    keep_QxK = queries.index[:, None] > keys.index[None, :]
  else:
    keep_QxK = queries.index[:, None] >= keys.index[None, :]
  keep_BxQxK = jnp.broadcast_to(keep_QxK, relative_BxQxK.shape)
  if mods.window is not None:
    near = relative_BxQxK < mods.window
    if mods.sink_tokens is not None:
      near = near | (keys.positions[:, None, :] < mods.sink_tokens)
    keep_BxQxK = keep_BxQxK & near
  return bias, keep_BxQxK[:, None]


def block_scores(mods: Mods, queries: Side, keys: Side, product=None):
  """(scores [B, H, Q, K] float32 with MASKED where masked, keep [B, 1, Q, K] bool).

  product(q [B, Q, H, S], k [B, K, G, S]) -> [B, H, Q, K]: the kernel's q . k (default
  grouped_scores; a kernel whose product takes one key head per query head repeats k first).
  """
  product = product or grouped_scores
  scores_BxHxQxK = product(queries.near, keys.near)
  if queries.far is not None:   # rotated at the far rule's positions (prepare.py)
    scores_BxHxQxK = mods.far.join(product, queries, keys, scores_BxHxQxK)
  scores_BxHxQxK = scores_BxHxQxK * jnp.moveaxis(queries.multiplier, 2, 1)[..., None]
  distances = _distances(mods, queries, keys)
  if mods.scale_invariant_tau is not None:
    scores_BxHxQxK = scale_invariant(scores_BxHxQxK, distances[1], mods.scale_invariant_tau)
  bias, keep_Bx1xQxK = bias_and_keep(mods, queries, keys, queries.near.shape[2], distances)
  if mods.cope_embeddings is not None:
    scores_BxHxQxK = scores_BxHxQxK + cope(scores_BxHxQxK, keep_Bx1xQxK, queries.near,
                                           mods.cope_embeddings)
  if bias is not None:
    scores_BxHxQxK = scores_BxHxQxK + bias
  return jnp.where(keep_Bx1xQxK, scores_BxHxQxK, MASKED), keep_Bx1xQxK


def stick_breaking_with_entropy(scores_BxHxQxK, keep_Bx1xQxK):
  """(weights [B, H, Q, K], entropy [B, Q, H]) of stick-breaking attention (Tan et al. 2025):
  A_ij = sigmoid(s_ij) prod over the kept k with j < k of (1 - sigmoid(s_ik)), in log space
  (log sigmoid, a reverse cumulative sum over the keys), so every A is finite and each row sums to
  at most 1. The entropy is -sum A log A over the kept keys (the rows are not normalized).
  Every key of a query's row must be in the block (the kernels that use it score whole rows)."""
  kept_log_stay = jnp.where(keep_Bx1xQxK, jax.nn.log_sigmoid(-scores_BxHxQxK), 0.0)
  # sum over k > j of log(1 - sigmoid(s_ik)): the suffix sum, without the key itself.
  later = jnp.flip(jnp.cumsum(jnp.flip(kept_log_stay, -1), axis=-1), -1) - kept_log_stay
  log_weights = jax.nn.log_sigmoid(scores_BxHxQxK) + later
  weights = jnp.where(keep_Bx1xQxK, jnp.exp(log_weights), 0.0)
  entropy_BxQxH = jnp.moveaxis(-jnp.sum(jnp.where(keep_Bx1xQxK, weights * log_weights, 0.0),
                                        axis=-1), 1, 2)
  return weights, entropy_BxQxH


def needs_whole_rows(mods: Mods):
  """Why a kernel must score a query against all of its keys at once (None: blocks will do)."""
  if mods.stick_breaking:
    return "stick-breaking weights need a query's whole row of keys (no online softmax)"
  if mods.cope_embeddings is not None:
    return "CoPE's positions count over a query's whole row of keys"
  return None


def normalized_with_entropy(mods: Mods, scores_BxHxQxK, keep_Bx1xQxK, rows=None):
  """The attention weights of whole rows of scores and their entropy: the softmax (through `rows`,
  see softmax_with_entropy), or stick-breaking for that variant."""
  if mods.stick_breaking:
    return stick_breaking_with_entropy(scores_BxHxQxK, keep_Bx1xQxK)
  return softmax_with_entropy(scores_BxHxQxK, keep_Bx1xQxK, rows)


def softmax_with_entropy(scores_BxHxQxK, keep_Bx1xQxK, rows=None):
  """(probabilities [B, H, Q, K], entropy [B, Q, H] in nats) of masked scores, in float32.
  rows(fn, x) -> fn(x): how the softmax of each row is computed (None: as it is; the `cpu`
  kernel's: cpu/rows.by_rows, without the scores' size-1 axes)."""
  rows = rows or (lambda fn, x: fn(x))
  probs_BxHxQxK = rows(lambda s: jax.nn.softmax(s, axis=-1), scores_BxHxQxK)
  log_probs = jnp.where(keep_Bx1xQxK, rows(lambda s: jax.nn.log_softmax(s, axis=-1),
                                              scores_BxHxQxK), 0.0)
  entropy_BxQxH = jnp.moveaxis(-jnp.sum(probs_BxHxQxK * log_probs, axis=-1), 1, 2)
  return probs_BxHxQxK, entropy_BxQxH
