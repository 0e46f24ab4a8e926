"""What a stopped run may be continued with, and the record of the changes made to it.

- FREE_CHANGES change nothing that is computed (how often to log, evaluate or checkpoint, how
  many devices share the batch): any resume may change them.
- OPTIMIZER_CHANGES change the learning-rate schedule or the update from the next step on. They
  are accepted only when the user names them (train.py --allow_config_change=learning_rate,...;
  train_and_evaluate(..., allow_config_change=[...])), and each accepted change is recorded with
  its step in the checkpoints' history and in <workdir>/config_history.jsonl.
- Anything else (model, data, batch size, seed) makes it another run: refused.

Configs are compared as the user set them, before resolve() fills in derived defaults, so
extending num_train_steps is reported as num_train_steps and not as the warmup_steps derived
from it. (Checkpoints of older versions hold only the resolved config; those are compared.)
Settings added since a checkpoint was written count as their defaults there (what the code did
before they existed), as when the checkpoint is evaluated (run_config.config_from_json_dict).
"""

import datetime
import difflib
import json
import pathlib

from keynorm_jax import run_config
from keynorm_jax.errors import ConfigError

FREE_CHANGES = ("checkpoint_every_steps", "max_checkpoints_to_keep", "log_every_steps",
                "eval_every_steps", "num_devices", "fsdp",
                "model.kernel")   # the attention kernel: the same function, computed another way
OPTIMIZER_CHANGES = ("learning_rate", "warmup_steps", "num_train_steps",
                     "end_learning_rate_ratio", "weight_decay", "grad_clip_norm")
HISTORY_FILE = "config_history.jsonl"


def flatten(d: dict, prefix: str = "") -> dict:
  out = {}
  for key, value in d.items():
    if isinstance(value, dict):
      out.update(flatten(value, f"{prefix}{key}."))
    else:
      out[prefix + key] = value
  return out


def check_allowed_names(names) -> None:
  """ConfigError for a name that cannot be allowed to change (with the nearest allowed name), or
  an empty entry (a doubled, leading or trailing comma in --allow_config_change)."""
  empty = [i for i, name in enumerate(names, 1) if not str(name).strip()]
  if empty:
    raise ConfigError(
        f"--allow_config_change={','.join(names)}: entry {empty[0]} of {len(names)} is empty (a "
        f"doubled, leading or trailing comma); name each setting once, comma-separated, e.g. "
        f"learning_rate,warmup_steps.")
  for name in names:
    if name not in OPTIMIZER_CHANGES:
      close = difflib.get_close_matches(name, OPTIMIZER_CHANGES, n=1)
      hint = f" (did you mean {close[0]}?)" if close else ""
      raise ConfigError(
          f"--allow_config_change={name}: only optimizer settings can change in a stopped run "
          f"({', '.join(OPTIMIZER_CHANGES)}){hint}; a change of the model, data, batch or seed "
          f"is another run: pass another --workdir.")


def _differing(a: dict, b: dict) -> set:
  return {k for k in set(a) | set(b) if k not in FREE_CHANGES and a.get(k) != b.get(k)}


def _describe(keys, before: dict, after: dict) -> str:
  return ", ".join(f"{k} ({before.get(k)!r} there, {after.get(k)!r} here)" for k in sorted(keys))


def resume_changes(saved_config: dict, saved_history, user_config: dict, resolved_config: dict,
                   allowed, workdir) -> dict:
  """{field: [saved, now]} of the (allowed) resolved differences between a checkpoint and the
  config a run is resumed with; ConfigError if the difference is not allowed.

  saved_config / resolved_config: resolved configs (saved, now); saved_history: the checkpoint's
  history (None for older versions); user_config: the config as the user set it now.
  """
  before = flatten(run_config.config_from_json_dict(saved_config).to_dict())
  after = flatten(resolved_config)
  effective = _differing(before, after)
  if not effective:
    return {}
  required = effective
  if saved_history is not None:  # name the fields the user changed, not those derived from them
    named = _differing(flatten(saved_history["user_config"]), flatten(user_config)) & effective
    required = named or effective
  refused = required - set(OPTIMIZER_CHANGES)
  if refused:
    raise ConfigError(
        f"{workdir} holds a run with a different config: {_describe(refused, before, after)}. "
        f"Resume it with its own config, or pass another --workdir.")
  missing = required - set(allowed)
  if missing:
    raise ConfigError(
        f"{workdir} holds this run with other optimizer settings: "
        f"{_describe(missing, before, after)}. To continue it with the new ones, add "
        f"--allow_config_change={','.join(sorted(required))} (the change is recorded); to keep "
        f"the old ones, resume with the same values.")
  return {k: [before.get(k), after.get(k)] for k in sorted(effective)}


def history_after(saved_history, user_config: dict, step: int, changed: dict) -> dict:
  """The history to save with later checkpoints: the config as the user set it now, and every
  change accepted so far (this one, if any, at `step`)."""
  changes = list(saved_history["changes"]) if saved_history else []
  if changed:
    changes.append({"step": step, "changed": changed, "time": _now()})
  return {"user_config": user_config, "changes": changes}


def append_history_line(workdir, *, event: str, step: int, changed: dict,
                        user_config: dict) -> None:
  """One line in <workdir>/config_history.jsonl (event: "start" or "change")."""
  line = json.dumps({"event": event, "step": step, "time": _now(), "changed": changed,
                     "user_config": user_config})
  with (pathlib.Path(workdir) / HISTORY_FILE).open("a") as f:
    f.write(line + "\n")


def _now() -> str:
  return datetime.datetime.now().isoformat(timespec="seconds")
