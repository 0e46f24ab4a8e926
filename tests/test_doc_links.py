"""Every relative link in the project's Markdown pages points at a file that exists.

The results are spread over pages that link to each other (RESULTS.md, results/field/NOTES.md, each
results folder's README); a page moved or renamed must not leave a link behind it dangling.
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCED = re.compile(r"```.*?```", re.S)
SKIPPED = {".git", "runs", ".pytest_cache"}


def relative_links(page: pathlib.Path):
  """(target, path it names) for each relative Markdown link of `page`, outside code blocks."""
  for target in LINK.findall(FENCED.sub("", page.read_text())):
    if target.startswith("#") or re.match(r"[a-z][a-z0-9+.-]*:", target):
      continue  # an anchor on the same page, or a URL
    yield target, page.parent / target.split("#")[0]


def test_relative_links_in_markdown_pages_resolve():
  pages = [p for p in ROOT.rglob("*.md") if not SKIPPED & set(p.relative_to(ROOT).parts)]
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
