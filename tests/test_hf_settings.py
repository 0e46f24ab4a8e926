"""The settings a Hugging Face folder carries besides Llama's plain weights, each against a NumPy
forward written from the definition (tests/numpy_layers_reference.py), not against our own code:
a trained RoPE scaling (Llama 3.1's llama3, YaRN), Qwen2's q/k/v biases, bfloat16 weights; and the
retrieval prompts in a Hugging Face tokenizer."""

import json
import math
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.flax import save_file as save_flax
from safetensors.numpy import load_file, save_file

import numpy_layers_reference as layers_ref
import numpy_rotary_reference as rotary_ref
import numpy_reference as ref
from keynorm_jax import positions
from keynorm_jax.errors import ConfigError
from keynorm_jax.huggingface import load_llama
from keynorm_jax.models.config import ModelConfig
from keynorm_jax.models.transformer import TransformerLM

FIXTURE = pathlib.Path(__file__).resolve().parent / "fixtures" / "tiny_llama_tied"
HEADS, KV_HEADS, SIZE, EPS, BASE = 4, 2, 8, 1e-5, 10000.0


def _folder(tmp_path, change=None, weights=None):
  """A copy of the tied fixture with config.json changed and extra or replaced tensors."""
  folder = tmp_path / "model"
  shutil.copytree(FIXTURE, folder)
  config = json.loads((folder / "config.json").read_text())
  config.update(change or {})
  (folder / "config.json").write_text(json.dumps(config))
  if weights:
    save_file({**load_file(folder / "model.safetensors"), **weights}, folder / "model.safetensors")
  return folder


def _numpy_logits(folder, tokens, inv_freq, attention_factor=1.0):
  """The Llama forward of the folder's tensors (read by name, not by our loader) in NumPy."""
  w = {k: v.astype(np.float64) for k, v in load_file(folder / "model.safetensors").items()}
  p = {"embed": w["model.embed_tokens.weight"], "final_norm": {"scale": w["model.norm.weight"]}}
  for i in range(2):
    n = f"model.layers.{i}."
    p[f"layer_{i}"] = {
        "attention_norm": {"scale": w[n + "input_layernorm.weight"]},
        "mlp_norm": {"scale": w[n + "post_attention_layernorm.weight"]},
        **{ours: w[n + f"self_attn.{hf}_proj.weight"].T
           for ours, hf in (("query", "q"), ("key", "k"), ("value", "v"), ("out", "o"))},
        **{f"{ours}_bias": w[n + f"self_attn.{hf}_proj.bias"]
           for ours, hf in (("query", "q"), ("key", "k"), ("value", "v"))
           if n + f"self_attn.{hf}_proj.bias" in w},
        "mlp": {name: w[n + f"mlp.{name}_proj.weight"].T for name in ("gate", "up", "down")}}
  # YaRN's attention factor multiplies cos and sin: every score by its square.
  kwargs = {"variant": "baseline", "inv_freq": inv_freq,
            "kappa": np.full(len(tokens), attention_factor**2)}
  return layers_ref.transformer_lm(tokens, p, num_layers=2, tied=True, heads=HEADS,
                                   kv_heads=KV_HEADS, size=SIZE, norm_eps=EPS,
                                   per_head_kwargs=lambda h: kwargs)


def _our_logits(folder, tokens, dtype="float32"):
  cfg, params = load_llama(folder, dtype)
  return cfg, params, np.asarray(TransformerLM(cfg).apply({"params": params}, tokens[None])[0],
                                 np.float32)


TOKENS = np.random.default_rng(11).integers(0, 64, size=24).astype(np.int32)
LLAMA3 = dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=64)
YARN = dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32)


@pytest.mark.parametrize("scaling, inv_freq, attention_factor", [
    (LLAMA3, rotary_ref.llama3_inv_freq(SIZE, BASE, 4.0, 1.0, 4.0, 64), 1.0),
    (YARN, ref.inv_freq_scaled(SIZE, BASE, "yarn", 4.0, train_length=32),
     0.1 * math.log(4.0) + 1.0),
    (dict(type="linear", factor=2.0), ref.inv_freq_plain(SIZE, BASE) / 2.0, 1.0),
], ids=["llama3", "yarn", "linear"])
def test_a_trained_rope_scaling_is_carried_over(tmp_path, scaling, inv_freq, attention_factor):
  """rope_scaling becomes model.rope_scaling, in the model at every length: logits equal the
  NumPy Llama whose RoPE has that scaling's frequencies (and YaRN's temperature)."""
  folder = _folder(tmp_path, dict(rope_scaling=scaling))
  cfg, _, logits = _our_logits(folder, TOKENS)
  assert cfg.trained_rope_scaling["factor"] == scaling["factor"]
  np.testing.assert_allclose(logits, _numpy_logits(folder, TOKENS, inv_freq, attention_factor),
                             atol=2e-4, rtol=2e-4)
  # The inference-time RoPE scalings would scale a second time: skipped with the reason; ReRoPE and
  # the window still apply.
  method = cfg.position_method
  kind = cfg.trained_rope_scaling["type"]
  assert "its own" in positions.inference_method("yarn").skip_reason(method, HEADS, kind)
  assert positions.inference_method("rerope").skip_reason(method, HEADS, kind) is None


@pytest.mark.parametrize("layout", ["rope_scaling", "rope_parameters"])
@pytest.mark.parametrize("scaling, message", [
    (dict(rope_type="longrope", factor=4.0), "RoPE kind 'longrope' is not one of"),
    (dict(rope_type="llama3", factor=8.0), "Missing required keys .* 'rope_type'='llama3'"),
    (dict(rope_type="yarn", factor=4.0, mscale=0.7), "yarn RoPE sets mscale"),
    (dict(rope_type="linear", factor=2.0, partial_rotary_factor=0.5), "partial_rotary_factor"),
    (dict(rope_type="yarn", factor=4.0, truncate=False), "sets truncate false"),
])
def test_a_rope_scaling_it_does_not_compute_is_refused(tmp_path, layout, scaling, message):
  """In the older layout (rope_scaling beside rope_theta) and transformers 5's (rope_parameters
  holding rope_theta)."""
  change = ({"rope_scaling": scaling} if layout == "rope_scaling" else
            {"rope_parameters": {**scaling, "rope_theta": BASE}})
  with pytest.raises(ConfigError, match=message):
    load_llama(_folder(tmp_path, change))


def test_the_new_model_settings_are_checked_where_they_are_set():
  plain = dict(architecture="transformer", num_heads=2, d_model=16, train_length=32)
  with pytest.raises(ConfigError, match="position='alibi' has none"):
    ModelConfig(**plain, position="alibi", rope_scaling={"type": "linear", "factor": 2.0})
  with pytest.raises(ConfigError, match="model.rope_scaling: llama3 needs high_freq_factor"):
    ModelConfig(**plain, rope_scaling={"type": "llama3", "factor": 2.0, "high_freq_factor": 0.5})
  with pytest.raises(ConfigError, match="qkv_bias is a Transformer setting"):
    ModelConfig(qkv_bias=True)
  with pytest.raises(ConfigError, match="already gates its attention output by u"):
    ModelConfig(output_gate=True)
  with pytest.raises(ConfigError, match="gau_qk is a GAU setting"):
    ModelConfig(**plain, gau_qk="separate")
  with pytest.raises(ConfigError, match="model.gau_qk='split' is not one of shared, separate"):
    ModelConfig(gau_qk="split")
  with pytest.raises(ConfigError, match="gau_heads is a GAU setting"):
    ModelConfig(**plain, gau_heads=2)
  with pytest.raises(ConfigError, match="model.qk_size=16 does not split into model.gau_heads=3"):
    ModelConfig(expansion=24, qk_size=16, gau_heads=3)
  with pytest.raises(ConfigError, match="model.gau_heads must be at least 1, got 0"):
    ModelConfig(gau_heads=0)
  with pytest.raises(ConfigError, match="gau_mlp is a GAU setting"):
    ModelConfig(**plain, gau_mlp=True)


def test_qwen2_biases_on_q_k_v_are_carried_over(tmp_path):
  rng = np.random.default_rng(4)
  biases = {f"model.layers.{i}.self_attn.{name}_proj.bias":
            (rng.normal(size=width) * 0.5).astype(np.float32)
            for i in range(2) for name, width in (("q", HEADS * SIZE), ("k", KV_HEADS * SIZE),
                                                  ("v", KV_HEADS * SIZE))}
  folder = _folder(tmp_path, dict(model_type="qwen2", sliding_window=4096,
                                  use_sliding_window=False), biases)
  cfg, _, logits = _our_logits(folder, TOKENS)
  assert cfg.qkv_bias
  np.testing.assert_allclose(logits, _numpy_logits(folder, TOKENS, ref.inv_freq_plain(SIZE, BASE)),
                             atol=2e-4, rtol=2e-4)
  # A Qwen2 folder without its biases is refused, naming the first missing tensor.
  (tmp_path / "b").mkdir()
  bare = _folder(tmp_path / "b", dict(model_type="qwen2"))
  with pytest.raises(ConfigError, match="no model.layers.0.self_attn.q_proj.bias"):
    load_llama(bare)


def test_bfloat16_weights_load_as_float32_or_bfloat16(tmp_path):
  """A bfloat16 folder: float32 parameters equal to its weights, or bfloat16 ones (the model then
  computes in bfloat16, within bfloat16's rounding of the float32 logits)."""
  from keynorm_jax.huggingface.run import resolve_dtype  # pylint: disable=g-import-not-at-top
  folder = _folder(tmp_path, dict(torch_dtype="bfloat16"))
  halves = {k: jnp.asarray(v, jnp.bfloat16) for k, v in load_file(folder / "model.safetensors").items()}
  save_flax(halves, folder / "model.safetensors")
  _, params, full = _our_logits(folder, TOKENS)
  np.testing.assert_array_equal(params["embedder"]["embed"]["embedding"],
                                np.asarray(halves["model.embed_tokens.weight"], np.float32))
  cfg, half_params, half = _our_logits(folder, TOKENS, "bfloat16")
  assert cfg.param_dtype == cfg.compute_dtype == "bfloat16"
  assert {x.dtype for x in jax.tree.leaves(half_params)} == {jnp.dtype(jnp.bfloat16)}
  assert np.abs(half - full).max() < 0.05 * np.abs(full).max()
  assert resolve_dtype(folder, "auto") == ("float32" if jax.default_backend() == "cpu"
                                           else "bfloat16")
  with pytest.raises(ConfigError, match="--hf_dtype='float16' is not one of"):
    resolve_dtype(folder, "float16")


def test_retrieval_prompts_in_a_hugging_face_tokenizer(tmp_path):
  """Through a tokenizer.json that spells bytes (the export's), the episodes are token for token
  the byte episodes, answers included; through the fixture's BPE tokenizer every answer is held
  by tokens of the tail, and the question's own tokens are not scored."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from keynorm_jax.data import retrieval  # pylint: disable=g-import-not-at-top
  from keynorm_jax.data.tokenizer import offsets_encoder  # pylint: disable=g-import-not-at-top
  from keynorm_jax.huggingface.byte_tokenizer import byte_tokenizer  # pylint: disable=g-import-not-at-top
  byte_tokenizer().save(str(tmp_path / "bytes.json"))
  data = lambda path: ml_collections.ConfigDict({"tokenizer": str(path), "separator_id": 256})
  through_bytes = offsets_encoder(data(tmp_path / "bytes.json"))
  bpe = offsets_encoder(data(FIXTURE / "tokenizer.json"))
  for name in ("passkey", "mqar"):
    plain = retrieval.task(name).make(np.random.default_rng(1))
    same = retrieval.task(name).make(np.random.default_rng(1), encode=through_bytes)
    for field in ("needle", "tail", "answer_group"):
      np.testing.assert_array_equal(getattr(same, field), getattr(plain, field))
    episode = retrieval.task(name).make(np.random.default_rng(1), encode=bpe)
    assert episode.num_answers == plain.num_answers
    assert len(episode.tail) < len(plain.tail) and episode.answer_group[0] == -1


def test_a_trained_scaling_round_trips_through_the_export(tmp_path):
  """A Transformer with its own llama3 scaling, written as a Llama folder and read back: the same
  scaling and logits; an ntk scaling (no Hugging Face rope_type) and q/k/v biases are refused."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from keynorm_jax.huggingface.export import export  # pylint: disable=g-import-not-at-top
  scaling = {"type": "llama3", "factor": 4.0, "original_length": 32}
  cfg = ModelConfig(architecture="transformer", d_model=16, num_heads=2, num_layers=1,
                    vocab_size=257, rope_scaling=scaling, train_length=128)
  tokens = np.random.default_rng(0).integers(0, 257, size=(1, 48)).astype(np.int32)
  params = TransformerLM(cfg).init(jax.random.PRNGKey(0), tokens)["params"]
  export(cfg, params, tmp_path / "hf")
  back, back_params = load_llama(tmp_path / "hf")
  assert back.trained_rope_scaling == cfg.trained_rope_scaling
  np.testing.assert_allclose(TransformerLM(back).apply({"params": back_params}, tokens),
                             TransformerLM(cfg).apply({"params": params}, tokens), atol=1e-5)
  yarn_elsewhere = {"type": "yarn", "factor": 2.0, "original_length": 32}
  for change, message in ((dict(rope_scaling={"type": "ntk", "factor": 2.0}), "ntk"),
                          (dict(rope_scaling=yarn_elsewhere), "yarn from another length"),
                          (dict(qkv_bias=True), "q, k and v have biases")):
    with pytest.raises(ConfigError, match=message):
      export(dataclasses.replace(cfg, **change), params, tmp_path / "other")
