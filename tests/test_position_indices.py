"""The position indices (positions/indices.py): each setting's draws against its definition, the
encodings at the indices drawn (RoPE, ALiBi, the sinusoidal embedding) against the NumPy
references at those indices, the model's use of them, and the refusals."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import positions
from keynorm_jax.errors import ConfigError
from keynorm_jax.models import GAULM, ModelConfig, lm_parts
from keynorm_jax.models.layers import sinusoidal_embedding
from attention_cases import attend_options
import numpy_attention_reference as attention_ref
import numpy_rotary_reference as rotary_ref
from positions_helpers import B, INV, T, check, inputs

TRAIN = 16
CFG = ModelConfig(vocab_size=257, num_layers=2, d_model=16, expansion=24, qk_size=8,
                  train_length=TRAIN)


def drawn(name, batch=B, length=T, train_length=TRAIN, seed=0, **knobs):
  """[batch, length] training indices of setting `name`, as float64."""
  indices = positions.position_indices(name, knobs)
  return np.asarray(indices.training(jax.random.PRNGKey(seed), batch, length, train_length),
                    np.float64)


def test_random_integer_draws_sorted_distinct_integers_in_range():
  rows = drawn("random_integer", batch=16, length=64, train_length=64)
  assert rows.shape == (16, 64)
  assert all(rotary_ref.randomized_positions_ok(row, 64, 8 * 64) for row in rows)
  assert len({tuple(row) for row in rows}) == 16       # fresh per sequence
  assert rows.max() > 4 * 64                            # they do reach far positions


@pytest.mark.parametrize("name, span", [("random_float", TRAIN),
                                        ("random_float_stretched", 8 * TRAIN)])
def test_random_float_draws_sorted_uniform_floats_whose_order_statistics_match_theirs(name, span):
  """Shimizu et al. 2026: T uniform draws from [0, R), sorted. The t-th smallest of T uniforms on
  [0, R) has mean R (t + 1) / (T + 1); over 4000 rows each mean is within 1% of R of it. R is one
  training length for the described rule, 8 for the stretched one."""
  rows = drawn(name, batch=4000, length=8, train_length=TRAIN)
  assert np.all(np.diff(rows, axis=1) >= 0) and rows.min() >= 0 and rows.max() < span
  assert np.mean(rows != np.round(rows)) > 0.99                      # floats, not integers
  np.testing.assert_allclose(rows.mean(axis=0), span * np.arange(1, 9) / 9, atol=0.01 * span)
  assert len({tuple(row) for row in rows[:16]}) == 16                 # fresh per sequence


@pytest.mark.parametrize("max_position", [None, 100])
def test_random_float_infers_at_the_described_fixed_positions(max_position):
  """The description of the paper's Algorithm 1: positions (2i - 1) / (2 max(n_train, n_infer)),
  i = 1..n, of the unit range, here scaled to max_position (default the training length)."""
  indices = positions.position_indices("random_float", {"max_position": max_position})
  span = max_position or TRAIN
  for length in (TRAIN // 2, TRAIN, 8 * TRAIN):
    expected = [span * (2 * i - 1) / (2 * max(TRAIN, length)) for i in range(1, length + 1)]
    got = np.asarray(indices.inference(2, length, TRAIN))
    np.testing.assert_allclose(got, np.tile(expected, (2, 1)), rtol=1e-6)
  # Up to the training length a token sits half a step past its integer index: not stretched.
  np.testing.assert_allclose(np.asarray(positions.position_indices("random_float").inference(
      1, 4, TRAIN))[0], [0.5, 1.5, 2.5, 3.5])


@pytest.mark.parametrize("max_position", [None, 100])
def test_random_float_stretched_infers_on_the_even_grid_of_its_range(max_position):
  indices = positions.position_indices("random_float_stretched", {"max_position": max_position})
  span = max_position or 8 * TRAIN
  for length in (TRAIN, 8 * TRAIN):
    got = np.asarray(indices.inference(2, length, TRAIN))
    np.testing.assert_allclose(got, np.tile(span * np.arange(length) / length, (2, 1)),
                               rtol=1e-6)


@pytest.mark.parametrize("name", positions.INDICES.names())
def test_inference_indices_are_the_same_for_every_row_and_do_not_decrease(name):
  got = np.asarray(positions.position_indices(name).inference(3, 40, TRAIN), np.float64)
  assert got.shape == (3, 40) and (got == got[0]).all()
  assert np.all(np.diff(got[0]) >= 0) and got[0, 0] >= 0


@pytest.mark.parametrize("name", positions.INDICES.names())
@pytest.mark.parametrize("encoding", ["rope", "alibi"])
def test_attention_at_the_drawn_indices_matches_numpy(name, encoding):
  """RoPE rotates by the indices and ALiBi takes their differences: the attention given a
  setting's training indices against the NumPy loops at those indices."""
  q, k, v = inputs(3, heads=1)
  at = drawn(name)
  options = (dict(inv_freq=INV.astype(np.float32)) if encoding == "rope"
             else dict(alibi_slopes=(0.3,)))
  got, _ = attend_options(q, k, v, variant="kna", positions=jnp.asarray(at, jnp.float32),
                          **options)
  expected = np.zeros(got.shape)
  for b in range(B):
    p = at[b]
    if encoding == "rope":
      kwargs = dict(inv_freq=INV, relative=lambda i, j, p=p: p[i] - p[j])
    else:
      kwargs = dict(bias=-0.3 * (p[:, None] - p[None, :]))
    expected[b, :, 0] = attention_ref.attention(q[b, :, 0], k[b, :, 0], v[b, :, 0], variant="kna", **kwargs)
  check(got, expected, atol=5e-5)


@pytest.mark.parametrize("name", positions.INDICES.names())
def test_sinusoidal_embedding_at_the_drawn_indices_matches_numpy(name):
  at = drawn(name, batch=1)
  got = np.asarray(sinusoidal_embedding(jnp.asarray(at, jnp.float32), 8))[0]
  np.testing.assert_allclose(got, rotary_ref.sinusoidal_embedding(at[0], 8), atol=2e-5)


def _logits(cfg, tokens, seed=None):
  model = GAULM(cfg)
  params = model.init(jax.random.PRNGKey(0), tokens)["params"]
  if seed is None:
    return np.asarray(model.apply({"params": params}, tokens))
  return np.asarray(model.apply({"params": params}, tokens, deterministic=False,
                                rngs={"positions": jax.random.PRNGKey(seed)}))


TOKENS = np.random.default_rng(0).integers(0, 256, size=(2, TRAIN)).astype(np.int32)


def test_randomized_rope_is_rope_at_random_integer_indices():
  randomized = dataclasses.replace(CFG, position="randomized_rope")
  rope = dataclasses.replace(CFG, indices="random_integer")
  for seed in (None, 1):
    np.testing.assert_array_equal(_logits(randomized, TOKENS, seed), _logits(rope, TOKENS, seed))


# Each randomized setting's inference indices for TRAIN tokens, from its definition
# (positions/indices.py): random_integer 0..T-1; random_float max_position (2i - 1) / (2 T),
# i = 1..T, max_position TRAIN by default: i - 1/2; random_float_stretched max_position x t / T,
# max_position 8 x TRAIN by default.
INFERENCE_AT = {"random_integer": np.arange(TRAIN), "random_float": np.arange(TRAIN) + 0.5,
                "random_float_stretched": 8.0 * np.arange(TRAIN)}


def test_every_randomized_setting_has_its_inference_indices_written_down():
  assert set(INFERENCE_AT) == set(positions.INDICES.names()) - {"integer"}


@pytest.mark.parametrize("name", sorted(INFERENCE_AT))
@pytest.mark.parametrize("position", ["rope", "alibi", "sinusoidal"])
def test_a_model_trains_at_drawn_indices_and_infers_at_its_inference_indices(name, position,
                                                                             monkeypatch):
  """Training batches draw afresh from the rng (two rngs, two results; one rng, one result) and
  inference uses the inference indices: the same logits as the model given INFERENCE_AT (and not
  those of other indices)."""
  cfg = dataclasses.replace(CFG, position=position, indices=name)
  one, again, other = (_logits(cfg, TOKENS, seed) for seed in (1, 1, 2))
  np.testing.assert_array_equal(one, again)
  assert np.abs(one - other).max() > 0
  inferred = _logits(cfg, TOKENS)

  def logits_at(at):
    with monkeypatch.context() as patch:
      patch.setattr(lm_parts, "sequence_positions", lambda module, cfg, batch, length, _: (
          jnp.broadcast_to(jnp.asarray(at, jnp.float32), (batch, length))))
      return _logits(cfg, TOKENS)

  np.testing.assert_allclose(inferred, logits_at(INFERENCE_AT[name]), atol=1e-6, rtol=1e-6)
  assert np.abs(inferred - logits_at(2 * INFERENCE_AT[name] + 1)).max() > 1e-4


@pytest.mark.parametrize("changes, words", [
    (dict(indices="sorted"), "Unknown indices 'sorted'"),
    (dict(indices="integer", indices_options=(("max_position", 64),)), "has no knob max_position"),
    (dict(position="randomized_rope", indices="random_integer"), "comes with its own indices"),
    (dict(position="learned", indices="random_integer"), "one row per index"),
    (dict(indices="random_integer", indices_options=(("max_position", -2),)), "at least 1"),
])
def test_bad_indices_settings_are_refused_in_one_line(changes, words):
  with pytest.raises(ConfigError, match=words) as raised:
    dataclasses.replace(CFG, **changes)
  assert "\n" not in str(raised.value)


def test_a_range_too_short_for_the_sequence_is_refused():
  with pytest.raises(ValueError, match="max_position 8 is below the sequence length 12"):
    drawn("random_integer", length=12, max_position=8)


@pytest.mark.parametrize("position", ["nope", "fox", "cope"])
def test_indices_that_nothing_reads_are_refused_and_would_change_nothing(position, monkeypatch):
  """NoPE, FoX and CoPE (without log n or SSMax) read no position: `model.indices=random_float`
  was accepted and silently ignored. Refused in one line; built past the refusal, the training
  logits at drawn indices are those at integer indices (what the refusal says); with log n, whose
  factor is log(position + 1), they differ, and the setting is accepted."""
  with pytest.raises(ConfigError, match=rf"position='{position}' without log n or SSMax reads no "
                                        r"position .* Leave model.indices at integer") as raised:
    dataclasses.replace(CFG, position=position, indices="random_float")
  assert "\n" not in str(raised.value)
  with_logn = dataclasses.replace(CFG, position=position, indices="random_float", logn=True)
  assert np.abs(_logits(with_logn, TOKENS, 1)
                - _logits(dataclasses.replace(with_logn, indices="integer"), TOKENS, 1)).max() > 0
  monkeypatch.setattr(ModelConfig, "_reads_indices", lambda *_: True)
  ignored = dataclasses.replace(CFG, position=position, indices="random_float")
  np.testing.assert_array_equal(_logits(ignored, TOKENS, 1),
                                _logits(dataclasses.replace(ignored, indices="integer"), TOKENS, 1))
