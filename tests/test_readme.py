"""The README stays true to the code: its method table is the registries' table."""

import pathlib

from keynorm_jax.positions.table import method_table

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_holds_the_method_table_of_the_registries():
  table = method_table()
  assert table in README.read_text(), (
      "README.md's method table differs from the registries: paste "
      "keynorm_jax.positions.table.method_table() into it.")
  assert table.count("\n| `") >= 23  # every method has a row
