"""The NumPy references' own checks against the papers' printed values (ALiBi's slopes, torchscale's
xPos scale, Llama 3's frequencies, StreamingLLM's cache slots...): each file's __main__ block, run
here so that a reference edited away from its paper fails the suite, not only a later run by hand."""

import pathlib
import runpy

import pytest

TESTS = pathlib.Path(__file__).resolve().parent


@pytest.mark.parametrize("name", ["numpy_rotary_reference", "numpy_bias_reference",
                                  "numpy_attention_reference"])
def test_reference_matches_the_papers_values(name, capsys):
  runpy.run_path(str(TESTS / f"{name}.py"), run_name="__main__")
  assert capsys.readouterr().out.strip() == f"{name} self-check: OK"
