"""The field study's run log (results/field/NOTES.md): one line per record, from its provenance.

Key, date, commit, device, training steps and final loss, and what the run measured in a few
generated words; what the runs answer is RESULTS.md's, their full tables FIELD.md's.
"""

import pathlib

from keynorm_jax.study.reading import accuracy, find_retrieval

# The per-run notes this log replaced (their narrative, now in RESULTS.md's answers or nowhere).
OLD_NOTES = "0feeca3:results/field/NOTES.md"


def _device(prov) -> str:
  device = prov.get("device") or prov.get("backend") or "?"
  return "H200" if "H200" in device else "H100" if "H100" in device else device


def _pct(x, digits=1):
  return "n/a" if x is None else f"{100 * x:.{digits}f}"


def measured(record) -> str:
  """A few words of what the run measured: next-token accuracy at 1x and 8x, and its passkeys at
  1x when it was trained with retrieval episodes."""
  one, eight = accuracy(record, 1), accuracy(record, 8)
  words = f"1x {_pct(one)}, 8x {_pct(eight)}"
  if one and eight is not None:
    words += f" ({_pct(eight / one)} of 1x)"
  if record.get("retrieval"):
    keys = [(name, find_retrieval(record, task, 1)) for name, task in
            (("letters", "passkey_letters"), ("digits", "passkey"))]
    words += "; key at 1x: " + ", ".join(f"{name} {_pct((r or {}).get('accuracy'), 0)}"
                                          for name, r in keys)
  return words


def line(record) -> str:
  prov = record["provenance"]
  train = record.get("train", {})
  loss = train.get("final_loss")
  return (f"| `{record['key']}` | {(prov.get('date') or '?')[:16].replace('T', ' ')} | "
          f"{(prov.get('commit') or '?')[:7]} | {_device(prov)} | {train.get('steps', '?')} | "
          f"{'?' if loss is None else f'{loss:.3f}'} | {measured(record)} |")


def run_log(records) -> str:
  ordered = sorted(records, key=lambda r: (r["provenance"].get("date") or "", r["key"]))
  return "\n".join([
      "# The field study's run log (generated from results/field/*.json by `python -m "
      "keynorm_jax.study --report_only`)", "",
      f"{len(records)} runs, one line each, in the order they finished: the record's key, date, "
      "commit and device, its training steps and final training loss, and next-token accuracy "
      "(%, non-repeated) at 1x and 8x; for the runs trained with retrieval episodes the exact "
      "match (%) of the letter and digit keys at 1x. Their full tables: [FIELD.md](FIELD.md); what "
      f"they answer: [RESULTS.md](../../RESULTS.md). The per-run notes this log replaced: `git show "
      f"{OLD_NOTES}`.", "",
      "| run | date | commit | device | steps | final loss | measured |", "|---|---|---|---|---|---|---|",
      *[line(r) for r in ordered]]) + "\n"


def write(records, path) -> pathlib.Path:
  path = pathlib.Path(path)
  path.write_text(run_log(records))
  return path
