"""Retrieval tasks (passkey, MQAR): the generators, placement by depth, no shortcut to the answer,
the training mixture, the scorer against hand-worked cases, and eval.py --tasks on a tiny run."""

import csv
import json

import jax
import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.cli import numbers
from keynorm_jax.data import corpora, retrieval
from keynorm_jax.data.retrieval import mqar, passkey
from keynorm_jax.data.tokenizer import decode, encode, join_documents
from keynorm_jax.data.train_stream import train_dataset
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.command import (EvalRequest, check_eval_options, evaluate_runs,
                                            make_columns)
from keynorm_jax.evaluation.retrieval import answer_scores
from keynorm_jax.runs import load_run, workdir_source
from keynorm_jax.training import loop as training
from train_helpers import tiny_config
from faults.helpers import cli

QUIET = lambda *_: None
DIGITS = set(b"0123456789")


@pytest.fixture(scope="module")
def held_out(data_dir):
  return join_documents(corpora.kjv_documents("test", data_dir))


def test_passkey_episode_states_the_key_and_scores_only_its_digits():
  episode = passkey.passkey_episode(np.random.default_rng(3))
  key = decode(episode.tail)[-passkey.DIGITS:]
  assert key.isdigit() and len(key) == 5
  assert decode(episode.needle) == f" The pass key is {key}. Remember it. {key} is the pass key. "
  assert decode(episode.tail) == f" What is the pass key? The pass key is {key}"
  assert episode.answer_group.tolist() == [-1] * (len(episode.tail) - 5) + [0] * 5
  assert episode.num_answers == 1


def test_passkey_letters_draws_its_key_from_lowercase_letters():
  episode = retrieval.task("passkey_letters").make(np.random.default_rng(3))
  key = decode(episode.tail)[-5:]
  assert key.isalpha() and key.islower()
  assert decode(episode.needle) == f" The pass key is {key}. Remember it. {key} is the pass key. "
  assert retrieval.task("passkey_letters").chance == pytest.approx(26.0 ** -5)


def test_mqar_episode_queries_every_key_once_with_its_value():
  episode = mqar.mqar_episode(np.random.default_rng(5), pairs=4)
  needle, tail = decode(episode.needle), decode(episode.tail)
  assert needle.startswith(" Pairs: ") and needle.endswith(". ")
  pairs = needle[len(" Pairs: "):-2].split(" ")
  queries = tail[len(" Recall: "):].split(" ")
  assert len(pairs) == 4 and sorted(pairs) == sorted(queries)  # same pairs, each once
  assert len({p[0] for p in pairs}) == 4 and all(p[0].isupper() and p[1].isdigit() for p in pairs)
  scored = np.asarray(episode.tail)[episode.answer_group >= 0]
  assert decode(scored) == "".join(q[1] for q in queries)  # the value digits, in query order
  assert episode.answer_group[episode.answer_group >= 0].tolist() == [0, 1, 2, 3]
  with pytest.raises(ValueError, match="1 to 26 pairs"):
    mqar.mqar_episode(np.random.default_rng(0), pairs=27)


def test_place_by_depth_hand_worked():
  episode = retrieval.Episode(needle=np.array([1, 2]), tail=np.array([7, 8, 9]),
                              answer_group=np.array([-1, 0, 0]))
  filler = np.full(12, 5)  # L = 11; span = 12 - 3 - 3 - 2 = 4
  expected = {0.0: [1, 2, 5, 5, 5, 5, 5, 5, 5, 7, 8, 9],
              0.5: [5, 5, 1, 2, 5, 5, 5, 5, 5, 7, 8, 9],
              1.0: [5, 5, 5, 5, 1, 2, 5, 5, 5, 7, 8, 9]}
  for depth, want in expected.items():
    window, group = retrieval.place(filler, episode, depth, min_gap=3)
    assert window.tolist() == want
    assert group.tolist() == [-1] * 10 + [0, 0]
  assert retrieval.min_length(episode, 3) == 7
  retrieval.place(np.full(8, 5), episode, 1.0, min_gap=3)  # L = 7 fits exactly
  with pytest.raises(retrieval.RetrievalError, match="Length 6 is shorter .* at least 7 tokens"):
    retrieval.place(np.full(7, 5), episode, 0.0, min_gap=3)
  with pytest.raises(retrieval.RetrievalError, match="from its start .0. to its end .1.; got 1.5"):
    retrieval.place(filler, episode, 1.5, min_gap=3)


@pytest.mark.parametrize("task_name", sorted(retrieval.TASKS))
def test_prompts_deterministic_needle_moves_and_never_within_the_last_64_tokens(held_out,
                                                                               task_name):
  depths = retrieval.DEFAULT_DEPTHS
  windows, groups = retrieval.retrieval_prompts(held_out, task_name, length=512, depths=depths,
                                                count=3)
  again, _ = retrieval.retrieval_prompts(held_out, task_name, length=512, depths=depths, count=3)
  assert windows.shape == (10, 3, 513) and np.array_equal(windows, again)
  other_length, _ = retrieval.retrieval_prompts(held_out, task_name, length=600, count=3)
  assert not np.array_equal(other_length[..., -20:], windows[0, :, -20:])  # other keys per length
  made = retrieval.task(task_name).make
  for n in range(3):
    starts, kept = [], []
    for d in range(len(depths)):
      window, group = windows[d, n], groups[d, n]
      needle = made(retrieval.prompts.key_rng(task_name, 512, n, d)).needle
      found = np.flatnonzero(
          (np.lib.stride_tricks.sliding_window_view(window, len(needle)) == needle).all(axis=1))
      assert len(found) == 1  # the needle, once
      start, first_scored = found[0], np.flatnonzero(group >= 0)[0]
      # The needle ends more than EVAL_MIN_GAP tokens before the first answer token.
      assert first_scored - (start + len(needle)) >= retrieval.EVAL_MIN_GAP
      filler = np.ones(513, bool)  # neither needle nor tail
      filler[start:start + len(needle)] = False
      filler[513 - len(made(retrieval.prompts.key_rng(task_name, 512, n, d)).tail):] = False
      starts.append(start)
      kept.append(filler)
    # Only the needle moves: the filler is prompt n's at every depth.
    for d in range(1, len(depths)):
      both = kept[0] & kept[d]
      assert np.array_equal(windows[0, n][both], windows[d, n][both])
    assert starts[0] == 0 and starts == sorted(starts) and len(set(starts)) == len(depths)
  # Every prompt holds its own key.
  keys = {bytes(windows[d, n][groups[d, n] >= 0].astype(np.uint8)) for d in range(10)
          for n in range(3)}
  assert len(keys) >= 28


@pytest.mark.parametrize("task_name", sorted(retrieval.TASKS))
def test_no_shortcut_last_64_tokens_do_not_depend_on_the_key(held_out, task_name):
  assert not DIGITS & set(held_out.tolist())  # digit keys and values: the filler holds no digit
  """What a model that sees only the last 64 tokens before an answer gets is the same for two
  different keys (besides earlier answer tokens, which are drawn independently): it can only guess."""
  made = retrieval.task(task_name).make
  filler = held_out[1000:1000 + 513]
  for depth in (0.0, 0.5, 1.0):
    a, group = retrieval.place(filler, made(np.random.default_rng(1)), depth,
                               retrieval.EVAL_MIN_GAP)
    b, _ = retrieval.place(filler, made(np.random.default_rng(2)), depth, retrieval.EVAL_MIN_GAP)
    scored = np.flatnonzero(group >= 0)
    assert not np.array_equal(a[scored], b[scored])
    for t in scored:
      context = np.arange(t - retrieval.EVAL_MIN_GAP, t)
      context = context[~np.isin(context, scored)]  # the answers' own earlier tokens aside
      if task_name == "mqar":  # the query block shows the queried letters, not their values
        same = a[context] == b[context]
        letters = np.isin(a[context], list(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
        assert same[~letters].all()
      else:
        assert np.array_equal(a[context], b[context])


def test_the_shortest_length_a_prompt_fits_is_said():
  assert retrieval.prompt_length("passkey") == 167 and retrieval.prompt_length("mqar") == 176
  assert retrieval.too_short("mqar", 176, 176) is None
  assert retrieval.too_short("mqar", 170, 176) == (
      "a mqar prompt needs at least 176 tokens (its needle, 64 tokens of filler, the question and "
      "the answer)")


def test_keys_uniform():
  digits = np.concatenate([np.frombuffer(passkey.passkey_episode(
      np.random.default_rng(i)).tail[-5:].astype(np.uint8).tobytes(), np.uint8)
      for i in range(2000)]) - ord("0")
  counts = np.bincount(digits, minlength=10)
  assert counts.min() > 0.085 * len(digits) and counts.max() < 0.115 * len(digits)


def test_answer_scores_hand_worked():
  # Two prompts, L = 6; targets are window tokens 1..6, so correct[:, t - 1] scores token t.
  groups = np.array([[-1, -1, -1, -1, 0, 0, 0],     # one 3-token answer (a passkey)
                     [-1, -1, 0, -1, 1, -1, 2]])    # three 1-token answers (MQAR values)
  correct = np.array([[0, 0, 0, 1, 1, 1],           # tokens 4, 5, 6 all right: exact
                      [0, 1, 0, 0, 0, 1]])          # tokens 2 and 6 right, 4 wrong
  exact, tokens = answer_scores(correct, groups)
  assert exact.tolist() == [1.0, pytest.approx(2 / 3)]
  assert tokens.tolist() == [1.0, pytest.approx(2 / 3)]
  exact, tokens = answer_scores(np.array([[0, 0, 0, 1, 0, 1], [0] * 6]), groups)
  assert exact.tolist() == [0.0, 0.0] and tokens.tolist() == [pytest.approx(2 / 3), 0.0]


def test_training_mixture_share_determinism_and_text_unchanged_without_it(data_dir):
  tokens = join_documents(corpora.kjv_documents("train", data_dir))[:200_000]
  batch = lambda **kw: next(iter(train_dataset(tokens, train_length=256, global_batch_size=64,
                                               seed=4, **kw)))
  plain = batch()
  assert np.array_equal(plain, batch(retrieval_fraction=0.0, retrieval_tasks=["passkey"]))
  mixed = batch(retrieval_fraction=0.5, retrieval_tasks=["passkey", "mqar"])
  assert np.array_equal(mixed, batch(retrieval_fraction=0.5, retrieval_tasks=["passkey", "mqar"]))
  texts = [decode(w) for w in mixed]
  kinds = ["passkey" if " What is the pass key? The pass key is " in t[-60:] else
           "mqar" if " Recall: " in t else "text" for t in texts]
  assert 16 <= kinds.count("text") <= 48 and kinds.count("passkey") and kinds.count("mqar")
  for kind, window, original in zip(kinds, mixed, plain):
    if kind == "text":
      assert np.array_equal(window, original)  # the other windows are the text as it was
    else:
      assert (window == original).mean() > 0.5  # the episode overwrote part of its own text
  # The episodes' needles sit at spread-out depths, and the question always ends the window.
  starts = [t.find(" The pass key is ") for t, k in zip(texts, kinds) if k == "passkey"]
  assert max(starts) - min(starts) > 64
  every = batch(retrieval_fraction=1.0, retrieval_tasks=["passkey"])
  assert all(decode(w[-50:-5]).endswith("The pass key is ") for w in every)


def test_config_refuses_bad_retrieval_settings():
  for changes, message in [(dict(retrieval_fraction=1.5), "retrieval_fraction=1.5 is not allowed"),
                           (dict(retrieval_fraction=0.5, retrieval_tasks="passkey,nope"),
                            "data.retrieval_tasks: unknown task 'nope'"),
                           (dict(retrieval_fraction=0.5, retrieval_tasks=""), "names no task")]:
    config = tiny_config()
    config.data.update(changes)
    with pytest.raises(ValueError, match=message):
      run_config.validate(run_config.resolve(config), 1)
  config = tiny_config()  # train_length 32: no passkey episode fits
  config.data.retrieval_fraction = 0.1
  with pytest.raises(ConfigError, match="needs train_length >= 112"):
    run_config.validate(run_config.resolve(config), 1)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, data_dir):
  workdir = tmp_path_factory.mktemp("retrieval_run") / "kna_rope"
  config = tiny_config(data_dir=data_dir, train_length=192, num_train_steps=4,
                       checkpoint_every_steps=4)
  config.data.update(retrieval_fraction=0.5, retrieval_tasks="passkey,mqar")
  training.train_and_evaluate(config, workdir)
  return workdir


def test_eval_tasks_equal_direct_computation_and_write_heat_maps(tiny_run, held_out, tmp_path):
  depths = (0.0, 0.5, 1.0)
  request = EvalRequest(lengths=[256], columns=make_columns(["none", "window"], window=64),
                        tasks=["passkey", "mqar"], depths=depths, num_prompts=2)
  records, failures, paths = evaluate_runs(workdir_source(tiny_run, warn=QUIET), request,
                                           output=tmp_path, echo=QUIET)
  assert not failures
  run = load_run(tiny_run)
  apply = jax.jit(run_config.build_model(run.config).apply)
  assert {(r["task"], r["length"], r["rope_scaling"]) for r in records} == {
      (t, n, m) for t in ("passkey", "mqar") for n in (192, 256) for m in ("none", "window")}
  for r in (r for r in records if r["rope_scaling"] == "none"):
    windows, groups = retrieval.retrieval_prompts(held_out, r["task"], length=r["length"],
                                                  depths=depths, count=2)
    by_depth = []
    for d in range(len(depths)):
      logits = np.asarray(apply({"params": run.params}, windows[d, :, :-1]))
      right = logits.argmax(-1) == windows[d, :, 1:]
      exact = [np.mean([right[n][groups[d, n, 1:] == a].all()
                        for a in np.unique(groups[d, n][groups[d, n] >= 0])]) for n in range(2)]
      by_depth.append(np.mean(exact))
    assert r["accuracy_by_depth"] == pytest.approx(by_depth, abs=1e-12)
    assert r["accuracy"] == pytest.approx(np.mean(by_depth), abs=1e-12)
    assert r["depths"] == list(depths) and r["prompts"] == 2
  saved = json.loads(paths["results.json"].read_text())
  assert saved["results"] == [] and len(saved["retrieval"]) == 8
  rows = list(csv.DictReader(paths["retrieval.csv"].open()))
  assert len(rows) == 8 * (1 + len(depths))
  assert sorted(p.name for p in tmp_path.glob("needle_*.png")) == [
      "needle_kna_rope__none.png", "needle_kna_rope__window.png"]
  assert "Retrieval: exact match" in paths["results.md"].read_text()


def test_eval_cli_bad_retrieval_input_gets_one_line(tiny_run, tmp_path):
  # The command line's one-line refusal, once (a process costs seconds); the others in-process.
  code, output = cli("eval.py", f"--workdir={tiny_run}", f"--output={tmp_path}",
                     "--tasks=passkey,nope")
  assert code != 0 and "--tasks: unknown task 'nope'" in output and "Traceback" not in output, \
      output
  with pytest.raises(retrieval.RetrievalError, match="--depths takes fractions"):
    EvalRequest(lengths=[64], columns=make_columns(["none"], posthoc_logn=False),
                tasks=["passkey"], depths=[0.5, 1.5])
  with pytest.raises(ConfigError, match="--lengths takes comma-separated numbers, got '256,abc'"):
    numbers("lengths", ["256", "abc"], int, [4096])
  with pytest.raises(ConfigError, match="--lengths is empty"):
    numbers("lengths", [], int, [4096])
  assert numbers("lengths", None, int, [4096]) == [4096]
  assert numbers("depths", ["0", "0.5"], float, None) == [0.0, 0.5]
  with pytest.raises(ConfigError, match="--num_prompts must be at least 1"):
    check_eval_options(num_prompts=0)
  assert not (tmp_path / "out").exists()   # refused before any work
