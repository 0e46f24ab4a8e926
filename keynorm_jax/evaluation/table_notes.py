"""What the result tables say beside their cells: each model's 1x (the length its multiples count
from, and where it comes from) and why a cell is n/a."""


def one_x_caption(records) -> str:
  """One sentence naming each run's 1x (record `train_length`) and its source (`one_x`), e.g.
  "1x: kna_rope 512 tokens (the training length)."; runs with the same 1x share it."""
  found = {}
  for r in records:
    found.setdefault((r["train_length"], r.get("one_x") or "the training length"), []).append(
        r["run"])
  parts = [f"{', '.join(dict.fromkeys(runs))} {length} tokens ({source})"
           for (length, source), runs in found.items()]
  return f"1x: {'; '.join(parts)}." if parts else ""


def not_applicable_notes(records) -> list[str]:
  """One line per reason a cell is n/a (a record's `not_applicable`), sorted."""
  reasons = sorted({r["not_applicable"] for r in records if r.get("not_applicable")})
  return [f"n/a: not applicable ({reason})." for reason in reasons]
