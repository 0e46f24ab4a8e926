"""The seed's published numbers (kexue.fm/archives/9859), as in ../shared/reference/keynorm.md §5.

Accuracy in %, GAU ~100M trained at 512 tokens, tested at 4096.
"""

# config name -> (label, 512 train, 4096 repeated, 4096 non-repeated)
NO_SCALING = {
    "baseline_rope": ("Baseline", 49.41, 24.17, 23.16),
    "baseline_logn_rope": ("Baseline-log n", 49.40, 24.60, 24.02),
    "qna_rope": ("QNA", 49.55, 22.45, 22.18),
    "qna_logn_rope": ("QNA-log n", 49.42, 19.55, 18.74),
    "kna_rope": ("KNA", 49.60, 61.08, 47.69),
    "kna_logn_rope": ("KNA-log n", 49.58, 63.17, 46.40),
    "cosa_rope": ("CosA", 49.73, 58.90, 46.98),
    "cosa_logn_rope": ("CosA-log n", 49.67, 64.74, 48.95),
}

# config name -> {scaling: (4096 repeated, 4096 non-repeated)}
WITH_SCALING = {
    "baseline_rope": {"ntk": (60.57, 42.20), "yarn": (80.10, 47.45), "rerope": (76.11, 47.82)},
    "baseline_logn_rope": {"ntk": (75.86, 47.06), "yarn": (82.57, 46.52),
                           "rerope": (85.47, 48.87)},
    "qna_rope": {"ntk": (52.28, 39.88), "yarn": (82.53, 47.50), "rerope": (78.22, 47.72)},
    "qna_logn_rope": {"ntk": (57.44, 41.56), "yarn": (80.08, 45.16), "rerope": (84.71, 48.31)},
    "kna_rope": {"ntk": (64.44, 43.02), "yarn": (84.19, 47.44), "rerope": (77.76, 47.73)},
    "kna_logn_rope": {"ntk": (79.05, 47.43), "yarn": (83.95, 47.16), "rerope": (85.48, 48.78)},
    "cosa_rope": {"ntk": (62.50, 42.77), "yarn": (83.40, 47.80), "rerope": (77.82, 47.80)},
    "cosa_logn_rope": {"ntk": (78.97, 47.46), "yarn": (82.28, 45.72), "rerope": (85.67, 48.39)},
}

EXTRA_VARIANTS = {"qknorm_rope": "QK-norm (gain)", "kna_nope": "KNA + NoPE",
                  "baseline_nope": "Baseline + NoPE"}


TRANSFORMER_PREFIX = "transformer_"


def seed_name(config_name: str) -> str:
  """The seed table's row of a config: a Transformer config is compared with the same variant's
  GAU row (transformer_kna_rope -> kna_rope)."""
  return config_name.removeprefix(TRANSFORMER_PREFIX)


def label(config_name: str) -> str:
  name = seed_name(config_name)
  suffix = " (Transformer)" if name != config_name else ""
  if name in NO_SCALING:
    return NO_SCALING[name][0] + suffix
  return EXTRA_VARIANTS.get(name, name) + suffix
