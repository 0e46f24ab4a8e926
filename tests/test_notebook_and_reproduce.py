"""The Colab notebook runs end to end (tiny setting), and the one-command reproduction works."""

import pathlib

import nbformat
from nbclient import NotebookClient
import pytest

from keynorm_jax.reproduce.run import reproduce

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_notebook_runs_end_to_end(tmp_path):
  nb = nbformat.read(REPO / "notebooks" / "keynorm_colab.ipynb", as_version=4)
  index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
  nb.cells.insert(index + 1, nbformat.v4.new_code_cell(
      f"PROJECT_DIR = {str(REPO)!r}\nINSTALL = False\nSIZE = 'tiny'\nTRAIN_LENGTH = 32\n"
      f"EVAL_LENGTH = 128\nNUM_TRAIN_STEPS = 2\nNUM_WINDOWS = 2\nSCALINGS = ['none', 'yarn']\n"
      f"WORKDIR = {str(tmp_path / 'runs')!r}"))
  NotebookClient(nb, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": str(tmp_path)}}).execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"]
  shown = [o for o in outputs if o.get("output_type") == "display_data"]
  assert any("128 non_repeated" in o["data"].get("text/markdown", "") for o in shown)
  assert any("image/png" in o["data"] for o in shown)
  assert (tmp_path / "runs" / "kna_rope" / "eval" / "results.json").exists()


def test_reproduce_trains_evaluates_skips_and_writes_the_page(tmp_path, capsys,
                                                           reference_kernel, data_dir):
  kwargs = dict(runs_dir=tmp_path / "runs", output=tmp_path / "page",
                variants=["baseline_rope", "kna_nope"], steps=4, data_dir=data_dir)
  page = reproduce("tiny", **kwargs).read_text()
  assert "| Baseline | " in page and "| KNA + NoPE | " in page
  assert "49.41" in page                                    # the seed's number beside ours
  assert "8x / train (%)" in page
  for png in ("accuracy_by_position.png", "diagnostics.png"):
    assert (tmp_path / "page" / png).stat().st_size > 0
  capsys.readouterr()
  again = reproduce("tiny", **kwargs).read_text()
  out = capsys.readouterr().out
  assert out.count("trained, skipping") == 2 and "evaluating baseline" not in out
  assert again.split("## Run")[0] == page.split("## Run")[0]


def test_reproduce_the_transformer(tmp_path, reference_kernel, data_dir):
  page = reproduce("tiny", runs_dir=tmp_path / "runs", output=tmp_path / "page",
                   variants=["baseline_logn_rope"], steps=2, data_dir=data_dir,
                   architecture="transformer").read_text()
  assert (tmp_path / "runs" / "transformer_baseline_logn_rope" / "checkpoints" / "2").is_dir()
  assert "(transformer)" in page and "| Baseline-log n (Transformer) | " in page
  assert "49.40" in page and "75.86 / 47.06" in page       # beside the seed's GAU row
  assert "entropy_within_train_by_head" in (tmp_path / "page" / "results.json").read_text()
