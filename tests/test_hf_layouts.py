"""Both config.json layouts of a Hugging Face folder read as transformers reads them: transformers
5's `rope_parameters` block and the older top-level `rope_theta` / `rope_scaling`, for each family
that loads (Llama, Mistral, Qwen2) and each RoPE kind (default, a larger theta, linear, dynamic,
yarn, llama3). The logits are transformers' own PyTorch model's from the same files
(tests/fixtures/make_hf_layouts.py made them), not our code's."""

import json
import pathlib
import shutil

import jax
import numpy as np
import pytest

from keynorm_jax.huggingface import load_llama
from keynorm_jax.models.transformer import TransformerLM

FIXTURE = pathlib.Path(__file__).resolve().parent / "fixtures" / "hf_layouts"
CASES = json.loads((FIXTURE / "cases.json").read_text())
REFERENCE = np.load(FIXTURE / "reference_logits.npz")
TOKENS = np.load(FIXTURE / "tokens.npy")


def layout_folder(root: pathlib.Path, case: str, layout: str) -> pathlib.Path:
  """A model folder of `case` with its config.json in `layout` (new: transformers 5's; old)."""
  folder = root / f"{case}_{layout}"
  folder.mkdir(parents=True)
  (folder / "config.json").write_text(json.dumps(CASES[case][layout], indent=1))
  shutil.copy(FIXTURE / CASES[case]["weights"], folder / "model.safetensors")
  shutil.copy(FIXTURE / "tokenizer.json", folder / "tokenizer.json")
  return folder


def test_the_fixtures_cover_both_layouts_of_every_rope_kind():
  """The new layout has rope_parameters holding rope_theta and no top-level RoPE keys; the old
  the reverse; every kind the importer accepts appears."""
  kinds = set()
  for case in CASES.values():
    new, old = case["new"], case["old"]
    assert "rope_theta" in new["rope_parameters"] and "rope_theta" not in new
    assert "rope_scaling" not in new and "rope_parameters" not in old and "rope_theta" in old
    kinds.add(new["rope_parameters"]["rope_type"])
  assert kinds == {"default", "linear", "dynamic", "yarn", "llama3"}
  assert {case["new"]["model_type"] for case in CASES.values()} == {"llama", "mistral", "qwen2"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_layouts_give_transformers_logits(tmp_path, case):
  """The two layouts give one ModelConfig, and its logits equal transformers' (float32)."""
  configs = {}
  for layout in ("new", "old"):
    cfg, params = load_llama(layout_folder(tmp_path, case, layout))
    logits = np.asarray(jax.jit(TransformerLM(cfg).apply)({"params": params}, TOKENS))
    np.testing.assert_allclose(logits, REFERENCE[case], atol=2e-5, rtol=1e-5)
    configs[layout] = cfg
  assert configs["new"] == configs["old"]
  rope = CASES[case]["new"]["rope_parameters"]
  assert configs["new"].rope_theta == rope["rope_theta"]
  scaling = configs["new"].trained_rope_scaling
  assert (scaling is None) == (rope["rope_type"] == "default")


def test_both_layouts_give_the_same_eval_losses(tmp_path, data_dir):
  """eval.py's records (loss, accuracy per set and method) of a llama3-scaled model are the same
  read from either layout; the methods that would scale RoPE again are skipped for both."""
  from keynorm_jax.evaluation.command import EvalRequest, evaluate_runs, make_columns  # pylint: disable=g-import-not-at-top
  from keynorm_jax.huggingface.run import folder_source  # pylint: disable=g-import-not-at-top
  found = {}
  for layout in ("new", "old"):
    source = folder_source(layout_folder(tmp_path, "llama_llama3", layout), tmp_path / "runs",
                           data_dir=data_dir)
    request = EvalRequest(lengths=[128], num_windows=2, columns=make_columns(["none", "yarn"]))
    records, failures, _ = evaluate_runs(source, request, output=tmp_path / f"eval_{layout}",
                                         echo=lambda *_: None)
    assert not failures
    found[layout] = sorted((r["set"], r["rope_scaling"], r["loss"], r["accuracy"])
                           for r in records)
  assert found["new"] == found["old"] and len(found["new"]) == 2   # yarn skipped: its own scaling
  assert {row[1] for row in found["new"]} == {"none"}
