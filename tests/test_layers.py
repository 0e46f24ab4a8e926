"""Layers import downward only: every module's imports (parsed, not run) against one table.

A module may import from its own group and from any group of a lower layer. Groups side by side in
one layer (training and evaluation; runs and scoring) must not import each other: what both need
lives in a layer below them. Every Python file outside tests/ belongs to a group, so a new folder
has to be placed in the table.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Lowest first: {group: module prefixes} per layer; a comment says what a layer needs from below.
LAYERS = (
    {"errors": ("keynorm_jax.errors",), "seed_results": ("keynorm_jax.seed_results",),  # no imports
     "precision": ("keynorm_jax.precision",)},
    {"rope": ("keynorm_jax.rope",), "cpu": ("keynorm_jax.cpu",), "data": ("keynorm_jax.data",)},
    {"attention": ("keynorm_jax.attention",)},                  # the CPU seam, RoPE
    {"positions": ("keynorm_jax.positions",)},                  # RoPE's angles, the far rules
    {"models": ("keynorm_jax.models",)},                        # attention, the registries
    {"config": ("configs", "keynorm_jax.config_fields", "keynorm_jax.run_config")},  # the models
    {"storage": ("keynorm_jax.storage",)},
    # What training and evaluation share: restoring a run (its phases' configs, a source of runs)
    # and next-token scoring.
    {"runs": ("keynorm_jax.runs",), "scoring": ("keynorm_jax.scoring",)},
    {"training": ("keynorm_jax.training",), "evaluation": ("keynorm_jax.evaluation",)},
    {"huggingface": ("keynorm_jax.huggingface",)},              # a folder as a TrainedRun
    {"cli": ("keynorm_jax.cli",)},                              # training's Preempted
    {"study": ("keynorm_jax.study",)},                          # trains and evaluates
    {"reproduce": ("keynorm_jax.reproduce",)},                  # the study's provenance
    {"commands": ("train", "eval", "keynorm_jax.export_hf", "benchmarks", "tools")},
)


def _module(path: pathlib.Path) -> str:
  parts = path.with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_sources(root=ROOT) -> dict[str, str]:
  """{path relative to root: source} of every Python file outside tests/ and hidden folders."""
  return {str(p.relative_to(root)): p.read_text()
          for p in sorted(root.rglob("*.py"))
          if not any(part.startswith(".") or part == "tests" for part in p.relative_to(root).parts)}


def group_of(module: str):
  """(layer index, group name) of a dotted module name, or None where no prefix matches."""
  for index, groups in enumerate(LAYERS):
    for group, prefixes in groups.items():
      if any(module == p or module.startswith(p + ".") for p in prefixes):
        return index, group
  return None


def imported_modules(path: str, source: str) -> set[str]:
  """The dotted names a file imports, wherever in the file the import is (a function's too); a
  `from package import name` names package.name where the package itself is in no group (the
  `keynorm_jax` namespace)."""
  module = _module(pathlib.Path(path))
  package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
  found = set()
  for node in ast.walk(ast.parse(source, path)):
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
      for alias in node.names:
        found.add(base if group_of(base) else f"{base}.{alias.name}")
  return found


def layer_violations(sources: dict[str, str]) -> list[str]:
  """One line per file outside the table and per import of a higher layer or of a sibling."""
  problems = []
  for path, source in sorted(sources.items()):
    here = group_of(_module(pathlib.Path(path)))
    if here is None:
      problems.append(f"{path}: in no layer of tests/test_layers.py's LAYERS; add it there")
      continue
    for target in sorted(imported_modules(path, source)):
      there = group_of(target)
      if there is None or there[1] == here[1] or there[0] < here[0]:
        continue
      how = "its sibling" if there[0] == here[0] else "the higher layer"
      problems.append(f"{path} ({here[1]}) imports {target}, of {how} {there[1]}")
  return problems


def test_every_module_imports_downward_only():
  assert layer_violations(project_sources()) == []


def test_every_group_of_the_table_has_a_module():
  modules = {_module(pathlib.Path(path)) for path in project_sources()}
  empty = [(group, prefix) for groups in LAYERS for group, prefixes in groups.items()
           for prefix in prefixes
           if not any(m == prefix or m.startswith(prefix + ".") for m in modules)]
  assert empty == []


def test_an_upward_or_sideways_import_is_caught():
  """The imports of the layout before issue 60 (training -> evaluation -> training,
  evaluation -> huggingface), and a file in no layer."""
  sources = {
      "keynorm_jax/training/loop.py": "from keynorm_jax.evaluation.scoring import make_scorer\n",
      "keynorm_jax/evaluation/run_loading.py": (
          "def f():\n  from keynorm_jax.training.phases import config_at_step\n"),
      "keynorm_jax/evaluation/command.py": "from keynorm_jax.huggingface.run import hf_run\n",
      "keynorm_jax/models/gau.py": "from . import config\nfrom ..runs import load_run\n",
      "keynorm_jax/models/config.py": "from keynorm_jax import attention, study\n",
      "results/probing.py": "from keynorm_jax.runs import load_run\n",
  }
  assert layer_violations(sources) == [
      "keynorm_jax/evaluation/command.py (evaluation) imports keynorm_jax.huggingface.run, of the "
      "higher layer huggingface",
      "keynorm_jax/evaluation/run_loading.py (evaluation) imports keynorm_jax.training.phases, of "
      "its sibling training",
      "keynorm_jax/models/config.py (models) imports keynorm_jax.study, of the higher layer study",
      "keynorm_jax/models/gau.py (models) imports keynorm_jax.runs, of the higher layer runs",
      "keynorm_jax/training/loop.py (training) imports keynorm_jax.evaluation.scoring, of its "
      "sibling evaluation",
      "results/probing.py: in no layer of tests/test_layers.py's LAYERS; add it there",
  ]
