"""Tokenizer, corpora (KJV through TFDS, named TFDS datasets, text folders), stream and eval sets."""

import hashlib
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow_datasets as tfds

from keynorm_jax import run_config
from keynorm_jax.data import corpora, kjv_dataset, tokenizer
from keynorm_jax.data.eval_sets import eval_windows
from keynorm_jax.data.train_stream import random_symbols, train_dataset

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def kjv_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("tfds"))


def _data_config(**kwargs):
  """The base config's data section with `kwargs` changed."""
  c = run_config.load_config("kna_rope").data
  c.update(kwargs)
  return c


def test_tokenizer_round_trip_and_ids():
  text = "In the beginning — naïve café, 日本語 ✓"
  ids = tokenizer.encode(text)
  assert ids.max() < 256 and len(ids) == len(text.encode("utf-8"))
  assert tokenizer.decode(ids) == text
  joined = tokenizer.join_documents(["ab", "c"])
  assert joined.tolist() == [97, 98, tokenizer.SEPARATOR_ID, 99, tokenizer.SEPARATOR_ID]
  assert tokenizer.VOCAB_SIZE == 257


def test_kjv_prepares_offline_with_book_splits(kjv_dir):
  splits = {s: corpora.kjv_documents(s, kjv_dir) for s in corpora.SPLITS}
  assert [len(splits[s]) for s in ("train", "validation", "test")] == [61, 2, 3]
  assert sum(len(d.encode()) for d in splits["test"]) >= 400_000
  prepared = pathlib.Path(kjv_dir) / "kjv_bible" / "1.0.0"
  assert any(prepared.glob("*.array_record*"))
  stamp = prepared.stat().st_mtime
  corpora.kjv_documents("test", kjv_dir)  # reused, not prepared again
  assert prepared.stat().st_mtime == stamp
  books = dict(kjv_dataset.kjv_books())
  assert sorted(splits["test"]) == sorted(books[t] for t in kjv_dataset.TEST_BOOKS)


def test_no_held_out_text_in_training_stream(kjv_dir):
  train_docs = corpora.load_documents(_data_config(data_dir=kjv_dir), "train")
  stream = tokenizer.join_documents(train_docs)
  stream_bytes = bytes(np.where(stream == tokenizer.SEPARATOR_ID, 0, stream).astype(np.uint8))
  for split in ("validation", "test"):
    for doc in corpora.load_documents(_data_config(data_dir=kjv_dir), split):
      assert doc not in train_docs
      assert doc.encode()[:300] not in stream_bytes
  # Every window the stream yields is a window of the training text.
  length = 128
  windows = {stream[i * length:i * length + length + 1].tobytes()
             for i in range((len(stream) - 1) // length)}
  batches = iter(train_dataset(stream, train_length=length, global_batch_size=4, seed=0))
  for _ in range(5):
    for row in next(batches):
      assert row.tobytes() in windows


def test_stream_is_endless_reshuffled_and_restorable():
  tokens = np.arange(41, dtype=np.int32)  # 10 windows of 4 + 1 tokens
  it = iter(train_dataset(tokens, train_length=4, global_batch_size=5, seed=3))
  epoch1 = np.concatenate([next(it), next(it)])
  state = it.get_state()
  epoch2 = np.concatenate([next(it), next(it)])
  starts1, starts2 = sorted(epoch1[:, 0]), sorted(epoch2[:, 0])
  assert starts1 == starts2 == list(range(0, 40, 4))          # every window once per epoch
  assert epoch1[:, 0].tolist() != epoch2[:, 0].tolist()        # in a new order
  it.set_state(state)
  np.testing.assert_array_equal(np.concatenate([next(it), next(it)]), epoch2)
  fresh = iter(train_dataset(tokens, train_length=4, global_batch_size=5, seed=3))
  fresh.set_state(state)
  np.testing.assert_array_equal(next(fresh), epoch2[:5])


def test_synthetic_copies_replace_the_chosen_share_of_windows():
  length, count = 64, 400
  tokens = np.random.default_rng(0).integers(0, 256, size=length * count + 1)
  text = {tuple(tokens[i * length:i * length + length + 1]): i for i in range(count)}
  make = lambda: iter(train_dataset(tokens, train_length=length, global_batch_size=count, seed=5,
                                    copy_fraction=0.25))
  epoch = next(make())
  np.testing.assert_array_equal(epoch, next(make()))                  # drawn from the seed
  periods = []
  for row in epoch:
    if tuple(row) in text:
      continue
    period = next(p for p in range(1, length + 1) if (row[p:] == row[:-p]).all())
    source = next(i for w, i in text.items() if w[:period] == tuple(row[:period]))
    assert source is not None and 16 <= period <= length // 2
    periods.append(period)
  assert 0.18 < len(periods) / count < 0.32                           # ~ copy_fraction
  assert len(set(periods)) > 10                                       # periods vary
  plain = next(iter(train_dataset(tokens, train_length=length, global_batch_size=count, seed=5)))
  assert all(tuple(row) in text for row in plain)


def test_symbol_copies_tile_random_printable_characters_in_their_share_of_the_copies():
  length, count = 64, 400
  tokens = np.random.default_rng(0).integers(0, 256, size=length * count + 1)
  make = lambda **kw: next(iter(train_dataset(tokens, train_length=length, global_batch_size=count,
                                              seed=5, copy_fraction=0.5, **kw)))
  plain, mixed = make(), make(copy_symbols=0.5)
  printable = set(range(32, 127))                  # ASCII space to tilde
  copies = symbol_copies = 0
  seen = set()
  for before, row in zip(plain, mixed):
    period = next(p for p in range(1, length + 2) if (before[p:] == before[:-p]).all())
    if period > length:                            # a text window: the copy draw is unchanged
      np.testing.assert_array_equal(row, before)
      continue
    copies += 1
    if (row == before).all():                      # a copy of the text, as without symbols
      continue
    symbol_copies += 1                             # same period, random printable characters
    np.testing.assert_array_equal(row[period:], row[:-period])
    assert set(row[:period].tolist()) <= printable, row[:period]
    seen |= set(row[:period].tolist())
  assert 0.35 < symbol_copies / copies < 0.65                         # ~ copy_symbols
  assert set(b"0123456789") <= seen and set(b"aZ!") <= seen


def test_symbol_strings_are_cut_from_enough_characters_under_a_tokenizer():
  # A stand-in tokenizer with one token per two characters: 50 tokens take two draws of 50.
  halving = lambda text: (np.frombuffer(text.encode(), np.uint8)[::2].astype(np.int32), None)
  ids = random_symbols(np.random.default_rng(0), 50, halving)
  assert len(ids) == 50 and not (ids[25:] == ids[:25]).all()   # not the first 25 repeated
  assert set(ids.tolist()) <= set(range(32, 127))


def test_hosts_split_the_global_batch():
  tokens = np.arange(200, dtype=np.int32)
  full = next(iter(train_dataset(tokens, train_length=4, global_batch_size=6, seed=1)))
  parts = [next(iter(train_dataset(tokens, train_length=4, global_batch_size=6, seed=1,
                                   process_index=i, process_count=2))) for i in range(2)]
  np.testing.assert_array_equal(np.concatenate(parts), full)


def test_eval_windows_repeated_really_repeats(kjv_dir):
  tokens = tokenizer.join_documents(corpora.load_documents(_data_config(data_dir=kjv_dir), "test"))
  natural = eval_windows(tokens, kind="non_repeated", length=4096, count=8, train_length=512)
  repeated = eval_windows(tokens, kind="repeated", length=4096, count=8, train_length=512)
  assert natural.shape == repeated.shape == (8, 4097)
  np.testing.assert_array_equal(repeated[:, 512:], repeated[:, :-512])
  np.testing.assert_array_equal(repeated[:, :512], natural[:, :512])
  # A shorter period: the copy distance is 128, inside the trained range.
  short = eval_windows(tokens, kind="repeated", length=4096, count=8, train_length=512,
                       period=128)
  np.testing.assert_array_equal(short[:, 128:], short[:, :-128])
  np.testing.assert_array_equal(short[:, :128], natural[:, :128])
  assert (short[:, 128:256] != natural[:, 128:256]).any()
  assert not np.array_equal(natural[:, 512:1024], natural[:, :512])
  starts = [_first_occurrence(tokens, w) for w in natural[:2]]
  assert starts[0] == 0 and starts[1] - starts[0] >= 4097     # disjoint, evenly spaced


def _first_occurrence(tokens, window):
  """The first index at which `window` occurs in `tokens` (None if nowhere)."""
  for start in np.flatnonzero(tokens[:len(tokens) - len(window) + 1] == window[0]):
    if np.array_equal(tokens[start:start + len(window)], window):
      return int(start)
  return None


def test_eval_windows_identical_across_processes(kjv_dir):
  code = ("import hashlib, sys; sys.path.insert(0, '.');"
          "from keynorm_jax.data import corpora, tokenizer;"
          "from keynorm_jax.data.eval_sets import eval_windows;"
          f"t = tokenizer.join_documents(corpora.kjv_documents('test', {kjv_dir!r}));"
          "w = eval_windows(t, kind='non_repeated', length=4096, count=16, train_length=512);"
          "print(hashlib.sha256(w.tobytes()).hexdigest())")
  digests = {subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.strip() for _ in range(2)}
  tokens = tokenizer.join_documents(corpora.kjv_documents("test", kjv_dir))
  here = eval_windows(tokens, kind="non_repeated", length=4096, count=16, train_length=512)
  assert digests == {hashlib.sha256(here.tobytes()).hexdigest()}


def test_eval_length_the_data_cannot_fill():
  tokens = np.zeros(10_000, np.int32)
  with pytest.raises(corpora.DataError, match=r"at most 2 windows.*largest length is 2499"):
    eval_windows(tokens, kind="non_repeated", length=4096, count=4, train_length=512)


def test_text_folder_splits_and_errors(tmp_path):
  for i in range(10):
    (tmp_path / f"doc{i}.txt").write_text(f"document {i} ü")
  config = _data_config(dataset="text_folder", text_folder=str(tmp_path))
  got = {s: corpora.load_documents(config, s) for s in corpora.SPLITS}
  assert got["test"] == ["document 9 ü"] and got["validation"] == ["document 8 ü"]
  assert len(got["train"]) == 8
  (tmp_path / "bad.txt").write_bytes(b"caf\xe9")  # Latin-1, sorts first -> train
  with pytest.raises(corpora.DataError, match="not valid UTF-8.*iconv"):
    corpora.load_documents(config, "train")
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(corpora.DataError, match="holds no .txt files"):
    corpora.load_documents(_data_config(dataset="text_folder", text_folder=str(empty)), "train")
  with pytest.raises(corpora.DataError, match="does not exist"):
    corpora.load_documents(_data_config(dataset="text_folder", text_folder=str(tmp_path / "x")),
                           "train")


def test_text_folder_with_split_subfolders(tmp_path):
  for split in corpora.SPLITS:
    (tmp_path / split).mkdir()
    (tmp_path / split / "a.txt").write_text(f"{split} text")
  config = _data_config(dataset="text_folder", text_folder=str(tmp_path))
  assert corpora.load_documents(config, "validation") == ["validation text"]


def test_named_tfds_dataset_through_mock_data():
  with tfds.testing.mock_data(num_examples=4):
    docs = corpora.load_documents(_data_config(dataset="lm1b"), "train")
    assert len(docs) == 4 and all(isinstance(d, str) for d in docs)
    with pytest.raises(corpora.DataError, match="no feature 'body'.*text"):
      corpora.load_documents(_data_config(dataset="lm1b", text_feature="body"), "train")


def test_unknown_dataset_name():
  with pytest.raises(corpora.DataError, match="Unknown TFDS dataset 'no_such_corpus'.*kjv"):
    corpora.load_documents(_data_config(dataset="no_such_corpus"), "train")


def test_a_process_waits_for_another_preparing_the_same_data_dir(tmp_path):
  """While one process holds the preparation lock, another one's first use of the KJV waits; once
  the lock is released it prepares (or reuses) the data and reads it."""
  builder = kjv_dataset.KjvBible(data_dir=str(tmp_path), file_format="array_record")
  code = ("from keynorm_jax.data import corpora; "
          f"print(len(corpora.kjv_documents('test', {str(tmp_path)!r})))")
  with corpora.preparing(builder):
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             cwd=pathlib.Path(__file__).resolve().parent.parent)
    _wait_until_blocked_on_a_lock(other)
    assert other.poll() is None, "the second process did not wait for the lock"
    assert not builder.is_prepared()
  out, _ = other.communicate(timeout=120)
  assert other.returncode == 0 and out.strip().splitlines()[-1] == "3"  # Jeremiah, Ezekiel, Luke
  assert builder.is_prepared()


def _wait_until_blocked_on_a_lock(process, timeout_s=120):
  """Returns once `process` waits for a file lock (a blocked request, "->", with its pid in
  /proc/locks); fails if it ends first or does not wait within the time."""
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    for line in pathlib.Path("/proc/locks").read_text().splitlines():
      fields = line.split()
      if fields[1:2] == ["->"] and fields[5:6] == [str(process.pid)]:
        return
    assert process.poll() is None, "the second process ended without waiting for the lock"
    time.sleep(0.1)
  raise AssertionError(f"the second process did not wait for the lock in {timeout_s} s")


def test_a_builder_made_before_another_process_prepared_the_data_reads_it(tmp_path):
  """A study worker whose builder was made while another worker was preparing the KJV (seen with
  12 workers on one GPU: 5 failed with "no split 'train'") finds it prepared and reads it."""
  made_early = kjv_dataset.KjvBible(data_dir=str(tmp_path), file_format="array_record")
  kjv_dataset.KjvBible(data_dir=str(tmp_path), file_format="array_record").download_and_prepare()
  corpora.prepare_once(made_early, lambda: pytest.fail("prepared a second time"))
  assert len(corpora._tfds_documents(made_early, "test", "text", "kjv_bible")) == 3
