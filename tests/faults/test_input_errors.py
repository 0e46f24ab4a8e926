"""Bad input (offline datasets, missing folders, broken config files, bad flags): one clear line."""

import socket
import time

import pytest
from tensorflow_datasets.core.download import downloader as tfds_downloader

from keynorm_jax import run_config
from keynorm_jax.data import corpora
from keynorm_jax.evaluation.command import EvalRequest, make_columns
from keynorm_jax.training import loop as training
from train_helpers import tiny_config
from faults.helpers import cli


def test_offline_dataset_fails_fast_in_one_line(tmp_path, monkeypatch):
  """No network here is simulated by the probe answering "unreachable" (TFDS itself would retry
  for minutes before failing, in 160 lines)."""
  probed = []
  monkeypatch.setattr(corpora, "network_reachable", lambda hosts: probed.append(hosts) or False)

  def no_network(*args, **kwargs):
    raise ConnectionError("the test reached TFDS's real download")

  monkeypatch.setattr(tfds_downloader._Downloader, "_sync_download", no_network)
  data = run_config.load_config("kna_rope").data
  data.update(dataset="imdb_reviews", data_dir=str(tmp_path))
  started = time.perf_counter()
  with pytest.raises(corpora.DataError) as e:
    corpora.load_documents(data, "train")
  assert time.perf_counter() - started < 5
  assert probed == [[("ai.stanford.edu", 80), ("storage.googleapis.com", 443)]]  # its own URLs
  message = str(e.value)
  assert "\n" not in message
  assert message.startswith(f"TFDS dataset 'imdb_reviews' is not prepared in {tmp_path}")
  assert "cannot be reached (ai.stanford.edu:80, storage.googleapis.com:443)" in message
  assert "--config.data.data_dir=" in message


def test_network_probe_says_unreachable_quickly(monkeypatch):
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    closed_port = s.getsockname()[1]  # nothing listens once it is closed
  started = time.perf_counter()
  assert not corpora.network_reachable([("127.0.0.1", closed_port), ("no-such-host.invalid", 443)])
  assert time.perf_counter() - started < 5


def test_data_error_leaves_no_checkpoints_folder(tmp_path, data_dir):
  config = tiny_config(data_dir=data_dir)
  config.data.update(dataset="text_folder", text_folder=str(tmp_path / "missing"))
  with pytest.raises(corpora.DataError, match="does not exist"):
    training.train_and_evaluate(config, tmp_path / "run")
  assert not (tmp_path / "run" / "checkpoints").exists()


def test_config_file_errors_name_the_file_and_line(tmp_path):
  (tmp_path / "noget.py").write_text("x = 1\n")
  with pytest.raises(run_config.ConfigError, match=r"noget.py defines no get_config\(\)"):
    run_config.load_config(str(tmp_path / "noget.py"))
  (tmp_path / "bad.py").write_text("from configs import base\ndef get_config(:\n  return 1\n")
  code, output = cli("train.py", f"--config={tmp_path / 'bad.py'}")
  assert code != 0 and "Traceback" not in output
  assert output.strip().splitlines()[-1] == (f"error: {tmp_path / 'bad.py'}:2: syntax error in "
                                             f"config file: invalid syntax.")


def test_eval_refuses_factor_zero_and_negative_batch_size():
  """In-process (the command line's `--factor=0`: test_cli_input's table)."""
  with pytest.raises(ValueError, match="factor must be >= 1"):
    make_columns(["linear"], factor=0.0)
  with pytest.raises(ValueError, match=r"--batch_size must be at least 1 \(or 0 to size"):
    EvalRequest(lengths=[32], columns=make_columns(["none"]), batch_size=-1)
