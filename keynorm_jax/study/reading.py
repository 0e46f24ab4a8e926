"""Reading the study's records: a run's accuracy, its readable name, its runs grouped by config."""

import collections

from keynorm_jax.study import plan

ATTENTION_NAMES = {
    "baseline": "Baseline", "kna": "KNA", "qna": "QNA", "cosa": "CosA", "cosa_logn": "CosA-log n",
    "baseline_logn": "Baseline-log n", "qna_logn": "QNA-log n", "kna_logn": "KNA-log n",
    "qknorm": "QK-norm (RMSNorm)", "qkln": "QK-norm (LayerNorm)", "ssmax": "SSMax",
    "stickbreaking": "stick-breaking"}
POSITION_NAMES = {
    "rope": "RoPE", "alibi": "ALiBi", "kerple_log": "KERPLE (log)", "hwfa": "HWFA",
    "rnope_swa": "RNoPE-SWA", "fire": "FIRE", "xpos": "xPos", "p_rope": "p-RoPE", "nope": "NoPE",
    "fox": "FoX", "scale_invariant": "scale-invariant p-RoPE", "sinusoidal": "sinusoidal",
    "learned": "learned positions", "randomized_rope": "randomized RoPE", "drope": "DroPE",
    "cope": "CoPE", "path": "PaTH", "path_fox": "PaTH-FoX"}


def method_name(config: str) -> str:
  """`transformer_kna_kerple_log` -> 'KNA KERPLE (log)'."""
  body = config.removeprefix("transformer_")
  for position in sorted(POSITION_NAMES, key=len, reverse=True):
    if body.endswith(f"_{position}"):
      attention = body[:-len(position) - 1]
      return f"{ATTENTION_NAMES.get(attention, attention)} {POSITION_NAMES[position]}"
  return body


def non_repeated(record, multiple, method="none", field="accuracy"):
  """`field` of the non-repeated next-token record at `multiple` x the training length, or None."""
  length = multiple * record["config"]["train_length"]
  for r in record["records"]:
    if r["length"] == length and r["set"] == "non_repeated" and r["rope_scaling"] == method:
      return r.get(field)
  return None


def accuracy(record, multiple, method="none"):
  """Non-repeated next-token accuracy at `multiple` x the training length, or None."""
  return non_repeated(record, multiple, method)


def text_runs(records) -> dict:
  """{(architecture, config without `transformer_`): its records trained on text alone, by seed}."""
  runs = collections.defaultdict(list)
  for rec in sorted(records, key=lambda r: r["seed"]):
    if rec.get("label", rec["config_name"]) == rec["config_name"]:
      runs[rec["architecture"], rec["config_name"].removeprefix("transformer_")].append(rec)
  return dict(runs)


def find_retrieval(record, task, multiple, method="none"):
  length = multiple * record["config"]["train_length"]
  for r in record.get("retrieval", []):
    if r["task"] == task and r["length"] == length and r["rope_scaling"] == method:
      return r
  return None


KEY_BAR = 0.6  # a key is learned when a passkey is at least this exact at 1x, no method


def learned(record, tasks=("passkey", "passkey_letters")) -> bool:
  """A passkey of `tasks` at least KEY_BAR exact at 1x with no inference-time method (a run whose
  training failed learned none)."""
  found = [find_retrieval(record, t, 1) for t in tasks]
  return any(r is not None and (r.get("accuracy") or 0) >= KEY_BAR for r in found)


def preregistered(record) -> bool:
  """A record of the pre-registered test (plan.preregistered_runs): its own table, not the field's."""
  return record["key"] in {e.key for e in plan.preregistered_runs()}


def retrieval_runs(records) -> dict:
  """{(architecture, config without `transformer_`): its retrieval-plan records, by seed}; the GAU's
  those of the plan's layout (plan.RETRIEVAL_GAU_MODEL); the pre-registered runs not among them."""
  layout = plan.StudyRun("x", model=plan.RETRIEVAL_GAU_MODEL).label[1:]
  runs = collections.defaultdict(list)
  for rec in sorted(records, key=lambda r: r["seed"]):
    if not rec.get("retrieval") or preregistered(rec):
      continue
    if rec["architecture"] == "gau" and layout not in rec["label"]:
      continue
    runs[rec["architecture"], rec["config_name"].removeprefix("transformer_")].append(rec)
  return dict(runs)
