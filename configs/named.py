"""Every named config, by rule: `[transformer_]<attention>[_logn]_<position>`.

  attention  baseline, qna, kna, cosa; qknorm (baseline with RMSNorm-gain QK-norm), qkln (with
             LayerNorm QK-norm), ssmax (baseline with SSMax), stickbreaking (no softmax)
  _logn      the trained log n factor (baseline, qna, kna, cosa only)
  position   a training-time position method (keynorm_jax.positions.TRAINING_METHODS): rope,
             nope, alibi, sinusoidal, learned, xpos, kerple_log, fire, randomized_rope, p_rope,
             hwfa, rnope_swa, scale_invariant, drope, cope, fox, path, path_fox
e.g. kna_rope, baseline_alibi, cosa_logn_rope, qkln_rope, transformer_kna_rope. `python train.py
--config=NAME` takes these names; `get_config("kna_rope")` returns one.
"""

from configs import base
from keynorm_jax.positions import TRAINING_METHODS

ATTENTIONS = {
    "baseline": dict(attention="baseline"),
    "qna": dict(attention="qna"),
    "kna": dict(attention="kna"),
    "cosa": dict(attention="cosa"),
    "qknorm": dict(attention="baseline", qk_norm="rmsnorm"),
    "qkln": dict(attention="baseline", qk_norm="layernorm"),
    "ssmax": dict(attention="baseline", ssmax=True),
    "stickbreaking": dict(attention="stickbreaking"),
}
WITH_LOGN = ("baseline", "qna", "kna", "cosa")
ARCHITECTURES = {"": "gau", "transformer_": "transformer"}


def named_configs() -> dict:
  """name -> base.get_config keyword arguments, for every name the rule allows."""
  out = {}
  for prefix, architecture in ARCHITECTURES.items():
    for attention, choices in ATTENTIONS.items():
      for logn in ((False, True) if attention in WITH_LOGN else (False,)):
        for position in TRAINING_METHODS.names():
          name = f"{prefix}{attention}{'_logn' if logn else ''}_{position}"
          out[name] = dict(choices, logn=logn, position=position, architecture=architecture)
  return out


def get_config(name="kna_rope"):
  known = named_configs()
  if name not in known:
    raise ValueError(f"No named config {name!r}; names follow "
                     f"[transformer_]<attention>[_logn]_<position> (see configs/named.py).")
  return base.get_config(name, **known[name])
