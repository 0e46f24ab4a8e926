"""Where the text comes from: the embedded KJV, any TFDS text dataset, or a folder of .txt files.

Every source gives a list of documents (str) per split ("train", "validation", "test").

Folder of .txt files (one document per file): subfolders train/, validation/ and test/ are used as
they are when present; otherwise the sorted files are split as: last 10% (at least one) test,
the 10% before them (at least one) validation, the rest train.
"""

import concurrent.futures
import contextlib
import fcntl
import inspect
import os
import pathlib
import socket
import urllib.parse

import tensorflow_datasets as tfds

from keynorm_jax.data import kjv_dataset
from keynorm_jax.errors import KeynormError

SPLITS = ("train", "validation", "test")
# Tried, besides the hosts in a TFDS dataset's own URL list, before waiting on its download.
TFDS_MIRROR = ("storage.googleapis.com", 443)
_TFDS_DOWNLOAD_AND_PREPARE = inspect.getattr_static(tfds.core.DatasetBuilder,
                                                    "download_and_prepare")
NETWORK_TIMEOUT_SECONDS = 3.0


class DataError(KeynormError, ValueError):
  """A data source that cannot be read; the message says what to do."""


def _decode(value, where: str) -> str:
  if isinstance(value, str):
    return value
  try:
    return bytes(value).decode("utf-8")
  except UnicodeDecodeError as e:
    raise DataError(f"{where} is not valid UTF-8 ({e}). Re-encode it as UTF-8, e.g. "
                    f"`iconv -f latin1 -t utf-8`.") from None


def _tfds_documents(builder, split: str, text_feature: str, name: str):
  features = builder.info.features
  if text_feature not in features:
    raise DataError(f"TFDS dataset {name!r} has no feature {text_feature!r}; its features are "
                    f"{', '.join(features.keys())}. Set --config.data.text_feature to one of them.")
  try:
    source = builder.as_data_source(split)
  except (KeyError, ValueError) as e:
    raise DataError(f"TFDS dataset {name!r} has no split {split!r} "
                    f"({str(e).splitlines()[0]}); it has {', '.join(builder.info.splits.keys())}. "
                    f"Set config.data.{{train,validation,test}}_split.") from None
  return [_decode(source[i][text_feature], f"{name}[{split}][{i}].{text_feature}")
          for i in range(len(source))]


@contextlib.contextmanager
def preparing(builder):
  """Holds an exclusive lock on `<data dir>/.<dataset>.prepare.lock` while a dataset is prepared,
  so that processes starting together (e.g. `study --shard` workers) prepare it once: the first
  prepares, the others wait and find it prepared."""
  root = pathlib.Path(builder.data_dir_root)
  try:
    root.mkdir(parents=True, exist_ok=True)
    lock = open(root / f".{builder.name}.prepare.lock", "a", encoding="utf-8")  # pylint: disable=consider-using-with
  except OSError:  # a read-only data dir: preparing it would fail anyway, and says why itself
    yield
    return
  with lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)


def prepare_once(builder, prepare) -> None:
  """Calls prepare() unless `builder` is prepared, under `preparing`, checking again once the lock
  is held (another process may have prepared it while this one waited).

  A builder made before another process finished preparing holds the empty dataset info it read
  then (no splits); it reads the prepared dataset's info again.
  """
  if not builder.is_prepared():
    with preparing(builder):
      if not builder.is_prepared():
        prepare()
        return
  if not builder.info.splits:
    builder.info.read_from_directory(builder.data_dir)


def kjv_documents(split: str, data_dir=None):
  builder = kjv_dataset.KjvBible(data_dir=data_dir, file_format="array_record")
  prepare_once(builder, builder.download_and_prepare)
  return _tfds_documents(builder, split, "text", "kjv_bible")


def _connects(host: str, port: int) -> bool:
  try:
    with socket.create_connection((host, port), timeout=NETWORK_TIMEOUT_SECONDS):
      return True
  except OSError:
    return False


def download_hosts(builder) -> list[tuple[str, int]]:
  """(host, port) of the URLs a TFDS dataset downloads (from its checksums file) and TFDS's
  mirror."""
  hosts = []
  for url in (builder.url_infos or {}):
    parts = urllib.parse.urlsplit(url)
    if parts.hostname:
      hosts.append((parts.hostname, parts.port or (80 if parts.scheme == "http" else 443)))
  return sorted(set(hosts)) + [TFDS_MIRROR]


def network_reachable(hosts) -> bool:
  """Whether any of `hosts` ((host, port) pairs) answers within NETWORK_TIMEOUT_SECONDS (name
  lookups included, which can hang far longer on a machine without network)."""
  pool = concurrent.futures.ThreadPoolExecutor(len(hosts))
  futures = [pool.submit(_connects, host, port) for host, port in hosts]
  done, _ = concurrent.futures.wait(futures, timeout=NETWORK_TIMEOUT_SECONDS + 0.5)
  pool.shutdown(wait=False, cancel_futures=True)
  return any(f.result() for f in done)


def _how_to_prepare(name: str, builder) -> str:
  return (f"Prepare it on a machine with network (python -c \"import tensorflow_datasets as tfds; "
          f"tfds.builder('{name}', file_format='array_record').download_and_prepare()\"), copy "
          f"its folder {builder.info.full_name} under a data dir here and pass "
          f"--config.data.data_dir=THAT_DIR")


def _downloads(builder) -> bool:
  """Whether preparing `builder` is TFDS's own download (tfds.testing.mock_data, for one,
  replaces it with one that needs no network)."""
  return (inspect.getattr_static(type(builder), "download_and_prepare")
          is _TFDS_DOWNLOAD_AND_PREPARE)


def _prepare(name: str, builder) -> None:
  """Downloads and prepares a TFDS dataset once; DataError in one line if that cannot work.

  When none of the hosts it downloads from answers within NETWORK_TIMEOUT_SECONDS, it fails at
  once instead of retrying for minutes.
  """
  prepare_once(builder, lambda: _download_and_prepare(name, builder))


def _download_and_prepare(name: str, builder) -> None:
  if _downloads(builder) and not network_reachable(hosts := download_hosts(builder)):
    raise DataError(f"TFDS dataset {name!r} is not prepared in {builder.data_dir} and the hosts "
                    f"it downloads from cannot be reached "
                    f"({', '.join(f'{h}:{p}' for h, p in hosts)}). "
                    f"{_how_to_prepare(name, builder)}.")
  try:
    builder.download_and_prepare()
  except Exception as e:  # pylint: disable=broad-except  # requests/urllib3/TFDS errors
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    raise DataError(f"Downloading TFDS dataset {name!r} failed ({type(e).__name__}: "
                    f"{first[:300]}). {_how_to_prepare(name, builder)}.") from None


def tfds_documents(name: str, split: str, text_feature: str = "text", data_dir=None):
  """Documents of a named TFDS dataset (downloaded and prepared on first use: needs network)."""
  try:
    builder = tfds.builder(name, data_dir=data_dir, file_format="array_record")
  except tfds.core.registered.DatasetNotFoundError as e:
    raise DataError(f"Unknown TFDS dataset {name!r}. Use 'kjv' (the embedded default), a "
                    f"'text_folder', or a TFDS text dataset such as 'pg19', 'lm1b' or "
                    f"'wiki40b/en'. ({str(e).splitlines()[0]})") from None
  _prepare(name, builder)
  return _tfds_documents(builder, split, text_feature, name)


def _folder_splits(files):
  n = len(files)
  if n < 3:
    raise DataError(f"The text folder has {n} .txt file(s); it needs at least 3 (train, "
                    f"validation and test are split by whole files), or subfolders train/, "
                    f"validation/ and test/.")
  held = max(1, n // 10)
  return {"train": files[:n - 2 * held], "validation": files[n - 2 * held:n - held],
          "test": files[n - held:]}


def _read_document(path: pathlib.Path) -> str:
  """One .txt file's text; DataError naming the file (a dangling link, permissions, a folder)."""
  try:
    raw = path.read_bytes()
  except OSError as e:
    if path.is_symlink() and not path.exists():
      raise DataError(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist; "
                      f"fix the link or remove it from the text folder.") from None
    raise DataError(f"Cannot read {path} ({e.strerror or type(e).__name__}); make it a readable "
                    f"text file or remove it from the text folder.") from None
  return _decode(raw, str(path))


def folder_documents(folder, split: str):
  folder = pathlib.Path(folder)
  if not folder.is_dir():
    problem = "is not a folder" if folder.exists() else "does not exist"
    raise DataError(f"Text folder {str(folder)!r} {problem}; set --config.data.text_folder "
                    f"to a folder of .txt files (one document per file).")
  if all((folder / s).is_dir() for s in SPLITS):
    files = sorted((folder / split).glob("*.txt"))
    if not files:
      raise DataError(f"{folder / split} holds no .txt files.")
  else:
    files = sorted(folder.glob("*.txt"))
    if not files:
      raise DataError(f"Text folder {str(folder)!r} holds no .txt files; put one document per "
                      f".txt file there.")
    files = _folder_splits(files)[split]
  return [_read_document(f) for f in files]


def check_data_dir(data_dir, flag: str = "--config.data.data_dir") -> None:
  """DataError (naming `flag`) if `data_dir` is set and is, or lies under, something that is not
  a folder: TFDS keeps its prepared datasets in it."""
  if not data_dir:
    return
  path = pathlib.Path(data_dir)
  existing = next((p for p in (path, *path.parents) if p.exists()), None)
  if existing is not None and not existing.is_dir():
    where = "is a file" if existing == path else f"lies under the file {existing}"
    raise DataError(f"{flag}={data_dir} {where}, not a folder; pass a folder (TFDS prepares its "
                    f"datasets there), or leave it unset for TFDS's default.")


def load_documents(data_config, split: str):
  """Documents of `split` from the source named by data_config.dataset."""
  if split not in SPLITS:
    raise DataError(f"Unknown split {split!r}; choose one of {', '.join(SPLITS)}.")
  name = data_config.dataset
  data_dir = data_config.get("data_dir") or None
  if name != "text_folder":
    check_data_dir(data_dir)
  if name == "kjv":
    documents = kjv_documents(split, data_dir)
  elif name == "text_folder":
    documents = folder_documents(data_config.text_folder, split)
  else:
    documents = tfds_documents(name, data_config.get(f"{split}_split", split),
                               data_config.text_feature, data_dir)
  if not any(documents):
    raise DataError(f"Split {split!r} of {name!r} holds no text.")
  return documents
