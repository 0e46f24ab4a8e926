"""The README's method table, generated from the registries (a test checks the README has it)."""

import dataclasses
import re

from keynorm_jax.positions.indices import INDICES
from keynorm_jax.positions.inference import INFERENCE_METHODS
from keynorm_jax.positions.registry import knob_help
from keynorm_jax.positions.training_methods import TRAINING_METHODS


def _knobs(cls, prefix) -> str:
  parts = []
  for field in dataclasses.fields(cls):
    found = re.search(r"default (.*)$", knob_help(field))
    default = repr(field.default) if field.default is not None else (
        found.group(1) if found else "set by the method")
    parts.append(f"`{prefix}{field.name}` ({default})")
  return ", ".join(parts) or "-"


def method_table() -> str:
  """Markdown: every method with its kind, what it does, its knobs and its paper."""
  lines = ["| method | kind | what it does | knobs (default) | paper |", "|---|---|---|---|---|"]
  for cls in TRAINING_METHODS.classes():
    lines.append(f"| `{cls.name}` | training (`model.position`) | {cls.summary} | "
                 f"{_knobs(cls, 'model.position_options.')} | {cls.paper} |")
  for cls in INDICES.classes():
    lines.append(f"| `{cls.name}` | indices (`model.indices`) | {cls.summary} | "
                 f"{_knobs(cls, 'model.indices_options.')} | {cls.paper} |")
  for cls in INFERENCE_METHODS.classes():
    lines.append(f"| `{cls.name}` | inference (`eval.py --methods`) | {cls.summary} | "
                 f"{_knobs(cls, '--')} | {cls.paper} |")
  return "\n".join(lines)
