"""Broken Hugging Face folders: each refused in one line naming the file and what is wrong with it,
before any work (nothing written), with exit 1 from eval.py and no traceback."""

import json
import pathlib
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from faults.helpers import cli
from keynorm_jax.errors import ConfigError

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "tiny_llama_tied"


def _config(folder, change=None, remove=()):
  config = json.loads((folder / "config.json").read_text())
  config.update(change or {})
  for key in remove:
    del config[key]
  (folder / "config.json").write_text(json.dumps(config))


def _cut(path, keep):
  path.write_bytes(path.read_bytes()[:keep(path.stat().st_size)])


def _byte_tokenizer(folder):
  from keynorm_jax.huggingface.byte_tokenizer import byte_tokenizer  # pylint: disable=g-import-not-at-top
  byte_tokenizer().save(str(folder / "tokenizer.json"))


def _int8_weight(folder):
  tensors = load_file(folder / "model.safetensors")
  name = "model.layers.0.mlp.up_proj.weight"
  tensors[name] = np.zeros(tensors[name].shape, np.int8)
  save_file(tensors, folder / "model.safetensors")


# (what breaks the folder, the message's words)
BROKEN = {
    "truncated weights": (lambda f: _cut(f / "model.safetensors", lambda n: n - 100),
                          r"weight file model.safetensors cannot be read \(.*not fully covered"),
    "empty weights": (lambda f: _cut(f / "model.safetensors", lambda n: 0),
                      "weight file model.safetensors cannot be read"),
    "garbage weights": (lambda f: (f / "model.safetensors").write_bytes(b"not a tensor " * 50),
                        "weight file model.safetensors cannot be read"),
    "config a list": (lambda f: (f / "config.json").write_text("[1, 2]"),
                      "config.json holds a JSON list, not an object"),
    "config not JSON": (lambda f: (f / "config.json").write_text("{'vocab_size': 64"),
                        "config.json cannot be read"),
    "no num_attention_heads": (lambda f: _config(f, remove=["num_attention_heads"]),
                               "num_attention_heads must be a positive integer, found no value"),
    "hidden_size a string": (lambda f: _config(f, {"hidden_size": "32"}),
                             r"hidden_size must be a positive integer, found '32' \(str\)"),
    "zero heads": (lambda f: _config(f, {"num_attention_heads": 0}),
                   r"num_attention_heads must be a positive integer, found 0 \(int\)"),
    "sizes unlike the weights": (lambda f: _config(f, {"intermediate_size": 64}),
                                 r"model.safetensors's model.layers.0.mlp.gate_proj.weight has "
                                 r"shape \[48, 32\], and config.json implies \[64, 32\]"),
    "heads not dividing hidden_size": (
        lambda f: _config(f, {"num_attention_heads": 5}, remove=["head_dim"]),
        r"hidden_size 32 is not a multiple of num_attention_heads 5 \(without head_dim each head "
        r"has hidden_size / num_attention_heads dimensions\); set head_dim, or a "
        r"num_attention_heads that divides hidden_size\.$"),
    "heads not sharing the kv heads": (
        lambda f: _config(f, {"num_key_value_heads": 3}),
        r"num_attention_heads 4 is not a multiple of num_key_value_heads 3 .*; set "
        r"num_key_value_heads to a divisor of num_attention_heads\.$"),
    "more layers than weights": (lambda f: _config(f, {"num_hidden_layers": 3}),
                                 r"its weights have no model.layers.2.input_layernorm.weight \(and "
                                 r"8 more tensors\)"),
    "quantized weight": (_int8_weight, r"up_proj.weight is stored as I8, not a float type"),
    "unknown key": (lambda f: _config(f, {"quantization_config": {"bits": 4}}),
                    "config.json sets quantization_config, which this importer does not read"),
    "garbage tokenizer": (lambda f: (f / "tokenizer.json").write_text("{\"model\": 3}"),
                          "tokenizer.json cannot be read"),
    "tokenizer past the vocabulary": (_byte_tokenizer, "tokenizer.json has token id 256, past "
                                                       "config.json's vocab_size 64"),
    "eos past the vocabulary": (lambda f: _config(f, {"eos_token_id": 99}),
                                "eos_token_id 99 is outside the model's vocabulary"),
}


def _broken(tmp_path, name):
  folder = tmp_path / "model"
  shutil.copytree(FIXTURE, folder)
  BROKEN[name][0](folder)
  return folder


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_folder_is_refused_naming_what_is_wrong(tmp_path, name):
  from keynorm_jax.huggingface.run import folder_source  # pylint: disable=g-import-not-at-top
  folder = _broken(tmp_path, name)
  before = sorted(p.name for p in folder.iterdir())
  with pytest.raises(ConfigError, match=BROKEN[name][1]) as refused:
    folder_source(folder, tmp_path / "runs")
  assert "\n" not in str(refused.value) and str(folder) in str(refused.value)
  assert not (tmp_path / "runs").exists()                              # nothing written
  assert sorted(p.name for p in folder.iterdir()) == before            # nor in the folder


def test_transformers_refusal_keeps_its_reason(tmp_path):
  """transformers nests the reason under a first line naming only its validator; that first line
  alone was kept ("Class validation error for validator 'validate_architecture':")."""
  from keynorm_jax.huggingface import hf_config  # pylint: disable=g-import-not-at-top
  folder = _broken(tmp_path, "heads not dividing hidden_size")
  with pytest.raises(ConfigError, match=r"transformers cannot read its config.json \(.*"
                                        r"validate_architecture.*The hidden size \(32\) is not a "
                                        r"multiple of the number of attention heads \(5\)") as e:
    hf_config._parsed(folder)  # pylint: disable=protected-access  # past our own check of heads
  assert "\n" not in str(e.value) and not str(e.value).endswith("..")


def test_an_empty_hf_checkpoint_flag_is_refused():
  from keynorm_jax.huggingface.run import folder_source  # pylint: disable=g-import-not-at-top
  with pytest.raises(ConfigError, match="--hf_checkpoint is empty"):
    folder_source("", "runs")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["garbage weights", "config a list"])
def test_eval_py_prints_one_line_and_exits_1(tmp_path, name):
  folder = _broken(tmp_path, name)
  code, out = cli("eval.py", f"--hf_checkpoint={folder}", "--lengths=128", "--num_windows=2",
                  f"--workdir={tmp_path / 'runs'}")
  lines = [line for line in out.splitlines() if line.strip()]
  assert code == 1 and "Traceback" not in out, out
  assert len(lines) == 1 and lines[0].startswith("error: ") and str(folder) in lines[0], out
  assert not (tmp_path / "runs").exists()
