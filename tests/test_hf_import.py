"""Llama-family Hugging Face folders read into the Transformer: logits against the Hugging Face
implementation's own (tests/fixtures/make_tiny_llama.py made them with transformers'
FlaxLlamaForCausalLM from the same files), and every refusal."""

import dataclasses
import json
import pathlib
import shutil

import jax
import numpy as np
import pytest

from keynorm_jax.errors import ConfigError
from keynorm_jax.huggingface import load_llama
from keynorm_jax.models.transformer import TransformerLM

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("name", ["tiny_llama_tied", "tiny_llama_untied"])
def test_logits_equal_the_hugging_face_implementations(name):
  """Tied and untied heads, grouped-query attention (4 heads, 2 key/value heads), rms_norm_eps
  1e-5, one file and two shards."""
  folder = FIXTURES / name
  cfg, params = load_llama(folder)
  assert (cfg.num_heads, cfg.kv_heads, cfg.head_size, cfg.norm_eps) == (4, 2, 8, 1e-5)
  assert cfg.tie_embeddings == (name == "tiny_llama_tied")
  tokens = np.load(folder / "tokens.npy")
  for kernel in ("reference", "auto"):
    model = TransformerLM(dataclasses.replace(cfg, kernel=kernel))
    logits = np.asarray(jax.jit(model.apply)({"params": params}, tokens))
    np.testing.assert_allclose(logits, np.load(folder / "reference_logits.npy"), atol=1e-4,
                               rtol=1e-4)


def _edited(tmp_path, change=None, remove=()):
  """A copy of the tied fixture with config.json changed and files removed."""
  folder = tmp_path / "model"
  shutil.copytree(FIXTURES / "tiny_llama_tied", folder)
  config = json.loads((folder / "config.json").read_text())
  config.update(change or {})
  (folder / "config.json").write_text(json.dumps(config))
  for name in remove:
    (folder / name).unlink()
  return folder


@pytest.mark.parametrize("change, remove, message", [
    (dict(model_type="gpt2"), (), "model_type 'gpt2' is not one of the families"),
    (dict(model_type="mistral", sliding_window=4096), (), "sliding window of 4096 tokens"),
    (dict(num_local_experts=8), (), "mixture of experts"),
    (dict(attention_bias=True), (), "attention_bias is set"),
    (dict(hidden_act="gelu"), (), "activation is 'gelu'"),
    (None, ("model.safetensors",), "neither model.safetensors nor"),
    (None, ("config.json",), "no config.json"),
])
def test_what_it_cannot_represent_is_refused_with_the_reason(tmp_path, change, remove, message):
  folder = _edited(tmp_path, change, () if "config.json" in remove else remove)
  if "config.json" in remove:
    (folder / "config.json").unlink()
  with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
    load_llama(folder)


def test_a_mistral_without_a_sliding_window_loads_and_settings_carry_over(tmp_path):
  cfg, _ = load_llama(_edited(tmp_path, dict(model_type="mistral", sliding_window=None,
                                             rope_theta=500000.0, max_position_embeddings=8192)))
  assert cfg.position == "rope" and cfg.attention == "baseline"
  assert (cfg.rope_theta, cfg.train_length) == (500000.0, 8192)


def test_a_missing_shard_and_an_unplaced_tensor_are_refused(tmp_path):
  folder = tmp_path / "model"
  shutil.copytree(FIXTURES / "tiny_llama_untied", folder)
  (folder / "model-00002-of-00002.safetensors").unlink()
  with pytest.raises(ConfigError, match="model-00002-of-00002.safetensors listed in"):
    load_llama(folder)
  tied = _edited(tmp_path / "b", dict(tie_word_embeddings=False))    # untied, but no lm_head
  with pytest.raises(ConfigError, match="no lm_head.weight"):
    load_llama(tied)


def test_eval_evaluates_a_hugging_face_folder_like_our_runs(tmp_path, data_dir):
  """--hf_checkpoint: the held-out text in the folder's own tokens (tokenizer.json, eos after each
  document), next-token accuracy at --lengths only, equal to the model's direct computation, and
  the passkey prompts in those tokens; a missing folder is refused in one line."""
  from keynorm_jax.data.eval_sets import eval_windows  # pylint: disable=g-import-not-at-top
  from keynorm_jax.evaluation.command import EvalRequest, evaluate_runs, make_columns  # pylint: disable=g-import-not-at-top
  from keynorm_jax.evaluation.evaluate import held_out_tokens  # pylint: disable=g-import-not-at-top
  from keynorm_jax.huggingface.run import folder_source, hf_run  # pylint: disable=g-import-not-at-top
  from keynorm_jax.run_config import build_model  # pylint: disable=g-import-not-at-top
  from tokenizers import Tokenizer  # pylint: disable=g-import-not-at-top
  folder = FIXTURES / "tiny_llama_untied"
  # Bytes-trained runs and this folder read the same text: the corpus must exist (prepared once).
  from keynorm_jax.data import corpora  # pylint: disable=g-import-not-at-top
  run = hf_run(folder, data_dir=data_dir)
  tokens = held_out_tokens(run.config)
  documents = corpora.load_documents(run.config.data, "test")
  first = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(
      documents[0], add_special_tokens=False).ids
  np.testing.assert_array_equal(tokens[:len(first) + 1], first + [2])     # eos_token_id 2
  request = EvalRequest(lengths=[256], num_windows=2,
                        columns=make_columns(["none", "ntk"]),
                        tasks=["next_token", "passkey"], num_prompts=1, depths=[0.0, 1.0])
  records, failures, paths = evaluate_runs(folder_source(folder, "unused", data_dir=data_dir),
                                           request, output=tmp_path, echo=lambda *_: None)
  assert not failures and {r["length"] for r in records} == {256} and "results.csv" in paths
  passkey = [r for r in records if r.get("task") == "passkey"]
  assert len(passkey) == 2 and all(0.0 <= r["accuracy"] <= 1.0 for r in passkey)
  records = [r for r in records if "set" in r]
  model = build_model(run.config)
  for record in (r for r in records if r["rope_scaling"] == "none"):
    windows = eval_windows(tokens, kind=record["set"], length=256, count=2,
                           train_length=run.config.train_length)
    logits = np.asarray(model.apply({"params": run.params}, windows[:, :-1]))
    assert record["accuracy"] == pytest.approx((logits.argmax(-1) == windows[:, 1:]).mean())
  with pytest.raises(ConfigError, match="is not a folder"):
    folder_source(tmp_path / "nothing", "unused")


@pytest.mark.slow
def test_export_then_import_gives_the_same_logits_and_tokens(tmp_path, data_dir):
  """A tiny Baseline RoPE Transformer run (grouped-query) written as a Llama folder by the CLI
  (export_hf) and read back: the same logits; its tokenizer.json encodes text as our byte
  tokenizer does. A KNA model and a non-empty --out are refused with the reason."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  from keynorm_jax.data.tokenizer import encode  # pylint: disable=g-import-not-at-top
  from keynorm_jax.runs import load_run  # pylint: disable=g-import-not-at-top
  from keynorm_jax.huggingface.export import export  # pylint: disable=g-import-not-at-top
  from keynorm_jax.run_config import build_model, model_config  # pylint: disable=g-import-not-at-top
  from keynorm_jax.training import loop as training  # pylint: disable=g-import-not-at-top
  from tokenizers import Tokenizer  # pylint: disable=g-import-not-at-top
  from train_helpers import tiny_config  # pylint: disable=g-import-not-at-top
  repo = pathlib.Path(__file__).resolve().parent.parent
  config = tiny_config("transformer_baseline_rope", data_dir=data_dir, num_train_steps=2,
                       checkpoint_every_steps=2)
  config.model.num_kv_heads = 1
  config.model.num_layers = 2   # layers written and read back in their order
  training.train_and_evaluate(config, tmp_path / "run")
  done = subprocess.run([sys.executable, "-m", "keynorm_jax.export_hf",
                         f"--workdir={tmp_path / 'run'}", f"--out={tmp_path / 'hf'}"],
                        cwd=repo, capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  printed = (done.stdout + done.stderr).splitlines()
  assert not [line for line in printed if "INFO" in line or line.startswith("I1")], printed
  assert printed[-1].startswith(f"Wrote {tmp_path / 'hf'} (step 2 of run)"), printed
  run = load_run(tmp_path / "run")
  cfg, params = load_llama(tmp_path / "hf")
  tokens = np.random.default_rng(0).integers(0, 257, size=(2, 48)).astype(np.int32)
  ours = np.asarray(build_model(run.config).apply({"params": run.params}, tokens))
  back = np.asarray(TransformerLM(cfg).apply({"params": params}, tokens))
  np.testing.assert_allclose(back, ours, atol=1e-5, rtol=1e-5)
  assert (cfg.kv_heads, cfg.vocab_size) == (1, 257)
  text = "In the beginning, h\u00e9llo \u6f22\u5b57\n\tend"
  tokenizer = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
  assert tokenizer.encode(text, add_special_tokens=False).ids == list(encode(text))
  # transformers loads the folder's tokenizer and generation settings without arguments.
  from transformers import AutoTokenizer, GenerationConfig  # pylint: disable=g-import-not-at-top
  auto = AutoTokenizer.from_pretrained(tmp_path / "hf")
  assert (auto.eos_token, auto.eos_token_id, auto.bos_token_id) == ("<sep>", 256, 256)
  assert auto(text)["input_ids"] == list(encode(text))
  assert auto.model_max_length == run.config.train_length
  generation = GenerationConfig.from_pretrained(tmp_path / "hf")
  assert (generation.eos_token_id, generation.bos_token_id) == (256, 256)
  kna = dataclasses.replace(model_config(run.config), attention="kna")
  with pytest.raises(ConfigError, match="cannot be written as a Llama model: its attention is KNA"):
    export(kna, run.params, tmp_path / "kna")
  with pytest.raises(ConfigError, match="is not empty"):
    export(model_config(run.config), run.params, tmp_path / "hf")
