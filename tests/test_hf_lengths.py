"""A Hugging Face folder evaluated at any length, against its 1x: lengths below and above its
max_position_embeddings (they were refused below it, after loading), the 1x its original
pretraining length where its rope parameters give one, else max_position_embeddings, or
--hf_train_length; named in every record and table; any refusal before a weight is read."""

import json
import pathlib
import shutil

import jax
import numpy as np
import pytest

from keynorm_jax.data.corpora import DataError
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.command import EvalRequest, check_text, evaluate_runs, make_columns
from keynorm_jax.evaluation.evaluate import held_out_tokens
from keynorm_jax.huggingface import load_llama
from keynorm_jax.huggingface import run as hf
from keynorm_jax.models import build_model as model_of
from keynorm_jax.run_config import build_model
from faults.helpers import cli

FOLDER = pathlib.Path(__file__).resolve().parent / "fixtures" / "tiny_llama_4096"
FROM_MAX = ("max_position_embeddings of config.json; its rope parameters give no "
            "original_max_position_embeddings")
FROM_ORIGINAL = "original_max_position_embeddings of config.json's rope_scaling"
LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 512}   # Llama 3.1's block, at 1/16 the lengths


def _folder(tmp_path, name="model", **changes):
  """tiny_llama_4096 with config.json changed, in tmp_path / name."""
  folder = tmp_path / name
  shutil.copytree(FOLDER, folder)
  config = json.loads((folder / "config.json").read_text())
  config.update(changes)
  (folder / "config.json").write_text(json.dumps(config))
  return folder


def _evaluate(folder, tmp_path, lengths, **kwargs):
  source = hf.folder_source(folder, tmp_path / "runs", **kwargs)
  request = EvalRequest(lengths=lengths, columns=make_columns(["none"]), num_windows=1)
  records, failures, paths = evaluate_runs(source, request, output=tmp_path / "eval",
                                           echo=lambda *_: None)
  assert not failures
  return {(r["length"], r["set"]): r for r in records}, paths


def test_a_folder_is_scored_below_and_above_its_max_position_embeddings(tmp_path, data_dir):
  """max_position_embeddings 256 (tiny_llama_4096's config changed: 1/16 the lengths, as fast)
  and no original: the 1x is 256; 64 tokens (below: the repeated set, whose period is the 1x, is
  n/a) and 320 (above) are both scored, the 1x named."""
  folder = _folder(tmp_path, max_position_embeddings=256)
  found, paths = _evaluate(folder, tmp_path, [64, 320], data_dir=data_dir)
  assert sorted(found) == [(64, "non_repeated"), (64, "repeated"), (320, "non_repeated"),
                           (320, "repeated")]
  assert all(r["train_length"] == 256 and r["one_x"] == FROM_MAX for r in found.values())
  assert found[64, "repeated"]["not_applicable"].startswith("the repeated set tiles a period of "
                                                            "256 tokens, longer than 64")
  for key in ((64, "non_repeated"), (320, "repeated"), (320, "non_repeated")):
    assert 0 <= found[key]["accuracy"] <= 1
  assert found[320, "non_repeated"]["accuracy_beyond_train"] is not None
  assert f"1x: model 256 tokens ({FROM_MAX})." in paths["results.md"].read_text()
  assert "one_x" in paths["results.csv"].read_text().splitlines()[0]


def test_the_original_pretraining_length_is_the_1x_and_the_model_is_unchanged(tmp_path, data_dir):
  """A Llama 3.1-style block (llama3, original_max_position_embeddings 512 of 4096): the 1x is
  512, so 1024 is 2x and the repeated set's period is 512. The model still scales RoPE from its
  own original length: its logits are load_llama's, whatever the 1x (also --hf_train_length)."""
  folder = _folder(tmp_path, rope_scaling=LLAMA31, rope_theta=500000.0)
  found, _ = _evaluate(folder, tmp_path, [1024], data_dir=data_dir)
  assert {(r["train_length"], r["one_x"]) for r in found.values()} == {(512, FROM_ORIGINAL)}
  assert found[1024, "repeated"]["repeat_period"] == 512
  cfg, params = load_llama(folder)
  tokens = np.random.default_rng(0).integers(0, 64, size=(1, 700)).astype(np.int32)
  want = np.asarray(jax.jit(model_of(cfg).apply)({"params": params}, tokens))
  for train_length, source in ((None, FROM_ORIGINAL), (96, "--hf_train_length")):
    run = hf.hf_run(folder, data_dir=data_dir, train_length=train_length)
    assert (run.config.train_length, run.one_x) == (train_length or 512, source)
    got = jax.jit(build_model(run.config).apply)({"params": run.params}, tokens)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_refusals_come_before_any_weight_is_read(tmp_path, data_dir, monkeypatch):
  """A bad --hf_train_length, a bad original_max_position_embeddings and lengths the held-out
  text cannot supply are refused with nothing read past the headers and nothing written."""
  read = []
  monkeypatch.setattr(hf, "read_params", lambda *a: read.append(1))
  with pytest.raises(ConfigError, match=r"--hf_train_length must be a positive number of tokens "
                                        r"\(the model's 1x\), got 0"):
    hf.folder_source(FOLDER, tmp_path / "runs", train_length=0, data_dir=data_dir)
  bad = _folder(tmp_path, rope_scaling={**LLAMA31, "original_max_position_embeddings": 0})
  with pytest.raises(ConfigError, match=r"rope_scaling.original_max_position_embeddings must be a "
                                        r"positive integer, found 0\.$"):
    hf.folder_source(bad, tmp_path / "runs", data_dir=data_dir)
  request = EvalRequest(lengths=[64, 2_000_000], columns=make_columns(["none"]), num_windows=1)
  with pytest.raises(DataError, match="cannot supply 1 windows of 2000000 tokens"):
    hf.folder_source(FOLDER, tmp_path / "runs", data_dir=data_dir, check=lambda config: check_text(
        held_out_tokens(config), request.lengths, request))
  assert not read and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_eval_py_writes_both_columns_with_the_1x_named(tmp_path, data_dir):
  """The issue's command (with one window per set) at 1/16 its lengths: --lengths=64,512 on a
  folder with max_position_embeddings 256 (the issue's 512,8192 on 4096: one length below, one
  above), exit 0, both lengths in the table with the 1x named, and --workdir (which it ignored
  without a word) said to place the results only; the same command with --hf_train_length=0
  refused in one line before loading."""
  folder = _folder(tmp_path, "tiny_llama_256", max_position_embeddings=256)
  out = tmp_path / "runs" / "hf_tiny_llama_256" / "eval"
  code, output = cli("eval.py", f"--hf_checkpoint={folder}", "--lengths=64,512",
                     "--num_windows=1", f"--workdir={tmp_path / 'runs'}", f"--data_dir={data_dir}")
  assert code == 0, output[-3000:]
  assert (f"Note: --workdir={tmp_path / 'runs'} with --hf_checkpoint holds no run to evaluate; it "
          f"places the results only: {out} (--output to choose).") in output.splitlines()
  assert "| run | scaling | 64 repeated | 64 non_repeated | 512 repeated | 512 non_repeated |" \
      in output
  assert f"1x: tiny_llama_256 256 tokens ({FROM_MAX})." in (out / "results.md").read_text()
  code, output = cli("eval.py", f"--hf_checkpoint={FOLDER}", "--lengths=512",
                     "--hf_train_length=0", f"--output={tmp_path / 'refused'}")
  assert code == 1 and output.strip().splitlines() == [
      "error: --hf_train_length must be a positive number of tokens (the model's 1x), got 0; or "
      "leave it unset for the folder's own."]
  assert not (tmp_path / "refused").exists()
