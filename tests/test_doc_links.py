"""Every relative link in the project's Markdown pages points at a file that exists.

The results are spread over pages that link to each other (RESULTS.md, results/field/NOTES.md, each
results folder's README); a page moved or renamed must not leave a link behind it dangling.
"""
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCED = re.compile(r"```.*?```", re.S)


def project_pages(root: pathlib.Path):
  """The Markdown pages under root, not descending into hidden folders, run folders or a virtual
  environment (whose installed packages bring pages of their own)."""
  for folder, subfolders, files in os.walk(root):
    subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "runs"
                     and not (pathlib.Path(folder, d) / "pyvenv.cfg").exists()]
    yield from (pathlib.Path(folder, f) for f in files if f.endswith(".md"))


def relative_links(page: pathlib.Path):
  """(target, path it names) for each relative Markdown link of `page`, outside code blocks."""
  for target in LINK.findall(FENCED.sub("", page.read_text())):
    if target.startswith("#") or re.match(r"[a-z][a-z0-9+.-]*:", target):
      continue  # an anchor on the same page, or a URL
    yield target, page.parent / target.split("#")[0]


def test_relative_links_in_markdown_pages_resolve():
  pages = list(project_pages(ROOT))
  assert len(pages) > 10  # the walk found the project's pages
  dangling = [f"{page.relative_to(ROOT)}: ({target})" for page in pages
              for target, path in relative_links(page) if not path.exists()]
  assert not dangling, "links to files that do not exist; mend the path:\n" + "\n".join(dangling)


def test_a_dangling_link_is_found(tmp_path):
  page = tmp_path / "page.md"
  page.write_text("[here](here.md) [gone](gone/README.md#part) [web](https://x.org) [top](#top)\n"
                  "```\n[in code](nowhere.md)\n```\n")
  (tmp_path / "here.md").write_text("")
  missing = [t for t, path in relative_links(page) if not path.exists()]
  assert missing == ["gone/README.md#part"]
  (tmp_path / "venv").mkdir()
  (tmp_path / "venv" / "pyvenv.cfg").write_text("")
  (tmp_path / "venv" / "package.md").write_text("[x](missing.md)")
  assert sorted(p.name for p in project_pages(tmp_path)) == ["here.md", "page.md"]


LAYOUT_FOLDERS = ("keynorm_jax", "configs", "benchmarks", "tools")


def unnamed_in_layout(root: pathlib.Path, layout: str) -> list[str]:
  """The code files under LAYOUT_FOLDERS (not __init__.py, __main__.py) that docs/layout.md's table
  does not name: a row naming the whole path, or the row whose first cell names the file's folder
  (keynorm_jax/<package>/, or the top folder) naming the file, by its name or its path below the
  top folder."""
  rows = [line.split("|")[1:3] for line in layout.splitlines() if line.startswith("| `")]
  missing = []
  for top in LAYOUT_FOLDERS:
    for path in sorted((root / top).rglob("*")):
      if path.suffix not in (".py", ".sh") or path.name in ("__init__.py", "__main__.py"):
        continue
      parts = path.relative_to(root).parts
      folder = "/".join(parts[:2 if top == "keynorm_jax" and len(parts) > 2 else 1]) + "/"
      file = "/".join(parts)
      names = (f"`{path.name}`", f"`{'/'.join(parts[1:])}`")
      named = [what for first, what in rows if f"`{file}`" in first + what
               or (f"`{folder}`" in first and any(n in what for n in names))]
      if not named:
        missing.append(file)
  return missing


def test_docs_layout_names_every_code_file():
  missing = unnamed_in_layout(ROOT, (ROOT / "docs" / "layout.md").read_text())
  assert not missing, ("docs/layout.md's table does not name these files; add each to its "
                       "folder's row:\n" + "\n".join(missing))


def test_a_file_layout_does_not_name_is_found(tmp_path):
  for name in ("keynorm_jax/study/plan.py", "keynorm_jax/study/new.py", "keynorm_jax/rope.py",
               "keynorm_jax/study/__init__.py", "tools/run.sh", "tools/more/x.py",
               "tools/more/y.py"):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("")
  layout = ("| `keynorm_jax/study/` | `plan.py` (the plan) |\n| `keynorm_jax/rope.py` | RoPE |\n"
            "| `tools/` | `run.sh`, `more/x.py`: things |\n")
  assert unnamed_in_layout(tmp_path, layout) == ["keynorm_jax/study/new.py", "tools/more/y.py"]
