"""What the field study trains and evaluates (issue: KeyNorm against every extrapolation method).

Runs, in the order they are worth having: the GAU field table (every training-time position method
with Baseline and with KNA, plus QK-norm with RMSNorm and LayerNorm and SSMax), the Transformer rows,
then three seeds of the runs whose differences matter. Each run is evaluated at 1x, 8x and 16x the
training length on the non-repeated set and on the repeated set with period train_length / 4 (a
copy distance inside the trained range), with "none" and the method's own inference-time options
(at 1x and 8x; at 16x "none" only, which halves the evaluation time).
"""

import dataclasses

from keynorm_jax import positions

# Training and evaluation per scale (the cpu scale matches the seed-table reproduction's training).
SCALES = {
    "tiny": dict(train=dict(model_size="tiny", train_length=32, num_train_steps=30,
                            checkpoint_every_steps=30, eval_windows=4),
                 windows={1: 4, 8: 2, 16: 2},
                 # A retrieval episode needs 112 tokens to train and 176 to evaluate.
                 retrieval_train=dict(train_length=192)),
    "cpu": dict(train=dict(model_size="cpu", train_length=512, num_train_steps=1000,
                           checkpoint_every_steps=250),
                windows={1: 16, 8: 16, 16: 8},
                # 3000 steps: the recipe's 2000 left the RoPE models at 0% on the digit passkey,
                # 3000 took both to 100% at 1x (results/retrieval_recipe/README.md).
                retrieval_train=dict(num_train_steps=3000)),
    # The model_size=medium models (~25 M parameters, 16 x 512 a step) for one accelerator (issue:
    # retrieval, "a larger size"). Its steps are not measured yet: the cpu recipe's 3000 steps of
    # 8 x 512, with twice the tokens a step; 5 retrieval prompts per depth instead of 2.
    "medium": dict(train=dict(model_size="medium", train_length=512, num_train_steps=2000,
                              checkpoint_every_steps=250),
                   windows={1: 16, 8: 16, 16: 8},
                   retrieval_train=dict(num_train_steps=3000)),
}
LENGTH_MULTIPLES = (1, 8, 16)
OPTION_MULTIPLES = (1, 8)   # the inference-time options are evaluated here; 16x: "none" only
REPEAT_PERIOD_FRACTION = 4  # repeated period = train_length / 4

ROTARY_OPTIONS = ("yarn", "rerope", "llama3", "window", "streaming")
ALIBI_OPTIONS = ("alibi_interpolate", "ntk_alibi", "window", "streaming")
OTHER_OPTIONS = ("window", "streaming")
# PaTH's (TrainingMethod.path): no RoPE, no ALiBi, and no attention sinks (streaming's sinks are
# skipped for it: positions/inference/windows.py), so the window alone.
PATH_OPTIONS = ("window",)
# Inference-time methods that belong to a position method's own recipe, evaluated (next-token and
# retrieval plans) before its class's options: DroPE scales the logits at inference (beta = 1 + c ln
# s), and its paper's claim is retrieval with that scale. They join the plan key of that method's
# records alone, so no other record is redone.
OWN_OPTIONS = {"drope": ("drope_temperature",)}


@dataclasses.dataclass(frozen=True)
class StudyRun:
  """A named config trained with one seed; copy_fraction > 0 mixes that share of synthetic copy
  windows into its training data (data/train_stream.py), shown as `<config>+copy<percent>`;
  retrieval_fraction > 0 that share of retrieval episodes (RETRIEVAL_TASKS), shown as
  `<config>+retrieval<percent>`, and such a run is also evaluated on retrieval; `model`: settings
  of the config's model section changed for the run ((name, value) pairs), shown as
  `<config>+<name>=<value>`; preregistered: a run of the pre-registered test (docs/study.md),
  evaluated besides on its secondary endpoint (SECONDARY_TASKS) and recorded, not stopped, when
  its training goes non-finite (its key is the same as without)."""
  config: str
  seed: int = 0
  copy_fraction: float = 0.0
  retrieval_fraction: float = 0.0
  model: tuple[tuple[str, object], ...] = ()
  preregistered: bool = False

  @property
  def label(self) -> str:
    return (self.config + "".join(f"+{name}={value}" for name, value in self.model)
            + (f"+copy{round(100 * self.copy_fraction)}" if self.copy_fraction else "")
            + (f"+retrieval{round(100 * self.retrieval_fraction)}"
               if self.retrieval_fraction else ""))

  @property
  def key(self) -> str:
    """The label with `+` written `__` and `=` written `-`, and the seed: the record's file name."""
    return f"{self.label.replace('+', '__').replace('=', '-')}__seed{self.seed}"


def without_model_changes(label: str) -> str:
  """A run's label without its `+<name>=<value>` model settings (StudyRun.label)."""
  return "+".join(part for part in label.split("+") if "=" not in part)


# First the runs that answer the most: the Transformer's KeyNorm question (GAU vs Transformer for
# Baseline, KNA, CosA-log n and QK-norm), then the GAU field table, the Transformer's other rows and
# the seeds.
# The copy test's models: the cpu models trained on text alone do not copy at period 128 (repeated
# accuracy at 1x is no higher than non-repeated), so these see 10% synthetic copy windows.
COPY_FRACTION = 0.1
# 10% did not make them copy either (later copies no better than the first at 1x), so the same runs
# again with half their training windows synthetic copies; planned last.
STRONG_COPY_FRACTION = 0.5
# The best three of the GAU field table at 8x (seed 0, recorded 2026-11-23: 67.0, 66.2 and 66.2%,
# within 1.4 points of the next three), also run on the Transformer.
GAU_BEST = ("qkln_rope", "kna_xpos", "kna_hwfa")
# Seeds 1 and 2 of the runs whose differences matter: Baseline, KNA and CosA-log n RoPE, and the
# best method that normalizes no key (QK-norm does), on both architectures: ALiBi, the Transformer's
# best at 8x when it was seeded (68.5%; stick-breaking and FoX, run later, are above it), seeded on
# both; then the GAU's own best of them, Baseline KERPLE (65.8% at seed 0, against ALiBi's 62.2%),
# added after ALiBi's seeds were in; then, to tell a collapse from
# a seed's accident, KNA scale-invariant p-RoPE (seed 0 fell from 68.14% at 1x to 24.19% at 8x,
# 35.5%, where its Baseline twin kept 74.7% and the Transformer's KNA twin 97.1%; recorded
# 2026-11-27).
SEEDED = ("baseline_rope", "kna_rope", "cosa_logn_rope", "baseline_alibi")
SEEDED_GAU_ONLY = ("baseline_kerple_log", "kna_scale_invariant")
COPY_RUNS = ("baseline_rope", "kna_rope", "transformer_baseline_rope", "transformer_kna_rope")
# Random Float Sampling (Shimizu et al. 2026) on the seed article's pair, GAU, seed 0: does KeyNorm
# still help RoPE when the indices a longer sequence needs were all seen in training? First our
# reading of the abstract (random_float_stretched, recorded 2026-11-29), then the rule a secondary
# description of the paper gives (random_float); planned last, so that no other run moves.
RANDOM_FLOAT_RUNS = ("baseline_rope", "kna_rope")
RANDOM_FLOAT_RULES = ("random_float_stretched", "random_float")
# PaTH and PaTH-FoX (Yang et al. 2025; issue 67), registered after every run above was planned:
# kept out of the registry-wide lists (the GAU table, transformer_methods, the retrieval plan) and
# planned after Random Float Sampling, so that no other run moves: Baseline and KNA on both
# architectures, text only, seed 0; then Baseline on the Transformer's retrieval layout.
LATE_METHODS = ("path", "path_fox")
LATE_RUNS = tuple(f"{prefix}{a}_{p}" for prefix in ("", "transformer_") for p in LATE_METHODS
                  for a in ("baseline", "kna"))
LATE_RETRIEVAL_RUNS = ("transformer_baseline_path", "transformer_baseline_path_fox")
FIRST = ("transformer_baseline_rope", "transformer_kna_rope", "baseline_rope", "kna_rope",
         "transformer_cosa_logn_rope", "transformer_qknorm_rope", "cosa_logn_rope", "qknorm_rope")


# The retrieval study (issue: retrieval beyond the training length): runs trained with retrieval
# episodes, evaluated on the tasks at RETRIEVAL_MULTIPLES of the training length ("none" at each;
# the inference-time options at RETRIEVAL_OPTION_MULTIPLES), beside the next-token plan.
# The recipe, measured on the cpu Transformer KNA RoPE (results/retrieval_recipe/): with retrieval
# episodes alone (50% of the windows, digit keys) nothing was retrieved after 700 steps, nor with
# half the windows synthetic copies besides after 2500: the model learned to copy text (between
# steps 400 and 700) but never copied digits, which the text never shows it. Keys of letters, the
# text's own alphabet, were retrieved once the copying formed (passkey_letters 40% at step 750,
# 85% at 2000).
# So the recipe trains with half the windows copies and half the rest episodes of all three tasks;
# 2000 steps gave the letters but not the digits or MQAR, which a 3000-step schedule gave both RoPE
# models (100% digit passkey and 99% MQAR at 1x), so the cpu scale trains 3000 (SCALES).
RETRIEVAL_TASKS = ("passkey_letters", "passkey", "mqar")
RETRIEVAL_FRACTION = 0.5
RETRIEVAL_COPY_FRACTION = 0.5
RETRIEVAL_MULTIPLES = (1, 2, 4, 8, 16)
RETRIEVAL_OPTION_MULTIPLES = (2, 8)
RETRIEVAL_ROTARY_OPTIONS = ("yarn", "rerope", "window", "streaming")
RETRIEVAL_OTHER_OPTIONS = ("window", "streaming")
RETRIEVAL_PROMPTS = {"tiny": 1, "cpu": 2, "medium": 5}  # per task, length and depth (10 depths)
# The Transformer first: the cpu GAU of the seed's layout did not learn to copy in 1000 steps even
# with half its windows copies (the field study's copy test), nor retrieve with this recipe (its
# runs now train RETRIEVAL_GAU_MODEL). KNA RoPE, then
# what the 2025 question sets beside it (issue: the methods of 2025): scale-invariant p-RoPE,
# QK-norm, log n + p-RoPE and FoX; then Baseline RoPE.
RETRIEVAL_FIRST = ("transformer_kna_rope", "transformer_baseline_scale_invariant",
                   "transformer_qknorm_rope", "transformer_baseline_logn_p_rope",
                   "transformer_kna_fox", "transformer_baseline_rope", "kna_rope", "baseline_rope")
# The GAU's retrieval runs change its layout: the seed's GAU (one head; q and k scaled from one
# shared z) learned no retrieval with the recipe, nor with separate q and k in one head (3000 steps
# each, 0% on both keys); with separate q and k in 4 heads (model.gau_qk, model.gau_heads) it
# learned the letter key (65% at 1x at step 2500; seed 0, recorded 2026-11-26), not the digits,
# nor in 5000 steps; KNA RoPE's seed 2 learned the digits in 3000 (100% at 1x, recorded
# 2026-11-27), so its runs keep the 3000 (results/retrieval_recipe/README.md, the
# GAU's probes).
RETRIEVAL_GAU_MODEL = (("gau_qk", "separate"), ("gau_heads", 4))
RETRIEVAL_SEEDED = ("baseline_rope", "kna_rope", "cosa_logn_rope", "baseline_alibi")
# The best retriever that normalizes no key, measured (seed 0, recorded 2026-11-26): Transformer
# Baseline KERPLE, 100% digit passkey at every length from 1x to 16x (Baseline HWFA and RNoPE-SWA
# 90-100%); seeded on the Transformer only, as no GAU had retrieved with this recipe then.
RETRIEVAL_SEEDED_TRANSFORMER_ONLY = ("transformer_baseline_kerple_log",)
# A second seed of a GAU pair that disagreed at seed 0 (recorded 2026-11-28: KNA RNoPE-SWA read the
# letter key from nearly every depth up to 16x, Baseline RNoPE-SWA learned no key), the cheapest of
# the layout's disagreeing pairs to train: does the layout's lean towards KeyNorm hold over seeds?
RETRIEVAL_SEEDED_GAU_PAIR = ("baseline_rnope_swa", "kna_rnope_swa")


def _planned_methods() -> tuple[str, ...]:
  """The registry's training methods that the registry-wide lists plan (all but LATE_METHODS)."""
  return tuple(p for p in positions.TRAINING_METHODS.names() if p not in LATE_METHODS)


def retrieval_runs() -> list[StudyRun]:
  """Baseline and KNA with every training-time position method on both architectures, CosA-log n,
  QK-norm (RMSNorm and LayerNorm), log n + p-RoPE, stick-breaking; RETRIEVAL_FIRST first; then
  seeds 1 and 2 of RETRIEVAL_SEEDED on both and of RETRIEVAL_SEEDED_TRANSFORMER_ONLY; seed 1 of
  RETRIEVAL_SEEDED_GAU_PAIR."""
  names = [f"{prefix}{a}_{p}" for prefix in ("", "transformer_")
           for p in _planned_methods() for a in ("baseline", "kna")]
  names += [f"{prefix}{c}" for prefix in ("", "transformer_")
            for c in ("cosa_logn_rope", "qknorm_rope", "qkln_rope", "baseline_logn_p_rope",
                      "stickbreaking_nope")]
  names = list(RETRIEVAL_FIRST) + [n for n in names if n not in RETRIEVAL_FIRST]
  seeds = [f"{prefix}{c}" for c in RETRIEVAL_SEEDED for prefix in ("", "transformer_")]
  seeds += RETRIEVAL_SEEDED_TRANSFORMER_ONLY
  return ([retrieval_entry(n) for n in names]
          + [retrieval_entry(n, seed) for seed in (1, 2) for n in seeds]
          + [retrieval_entry(n, 1) for n in RETRIEVAL_SEEDED_GAU_PAIR])


def retrieval_entry(name: str, seed: int = 0) -> StudyRun:
  """`name` trained with the retrieval recipe (the GAU in RETRIEVAL_GAU_MODEL's layout)."""
  model = () if name.startswith("transformer_") else RETRIEVAL_GAU_MODEL
  return StudyRun(name, seed, RETRIEVAL_COPY_FRACTION, RETRIEVAL_FRACTION, model)


# The pre-registered test (docs/study.md, "Pre-registered: Baseline RoPE against KNA RoPE on the GAU
# retrieval layout, seeds 3-10"): not in field_runs(); `--plan=preregistered` runs them.
PREREGISTERED = ("baseline_rope", "kna_rope")
PREREGISTERED_SEEDS = tuple(range(3, 11))
# Its secondary endpoint (the amendment of 2026-12-06): exact match at 1x with "none" on both keys,
# over SECONDARY_PROMPTS prompts per depth (10 depths), more than the primary's RETRIEVAL_PROMPTS.
SECONDARY_TASKS = ("passkey_letters", "passkey")
SECONDARY_PROMPTS = 10


def preregistered_runs() -> list[StudyRun]:
  """PREREGISTERED with the retrieval recipe, seeds PREREGISTERED_SEEDS, config by config (so that
  --group_seeds trains each config's seeds as one group)."""
  return [dataclasses.replace(retrieval_entry(name, seed), preregistered=True)
          for name in PREREGISTERED for seed in PREREGISTERED_SEEDS]


def retrieval_options(position: str) -> tuple[str, ...]:
  """The inference-time methods evaluated on retrieval for this position method (besides none):
  its OWN_OPTIONS, then those of its class."""
  method = positions.training_method(position)
  if method.rotary:
    common = RETRIEVAL_ROTARY_OPTIONS
  else:
    common = PATH_OPTIONS if method.path else RETRIEVAL_OTHER_OPTIONS
  return OWN_OPTIONS.get(position, ()) + common


def transformer_methods() -> tuple[str, ...]:
  """The position methods the field study trains on the Transformer as well as on the GAU, in the
  registry's order: NoPE, and those whose papers train a multi-head Transformer
  (TrainingMethod.on_the_transformer); LATE_METHODS are planned apart."""
  return tuple(p for p in _planned_methods()
               if p == "nope" or positions.TRAINING_METHODS.get(p).on_the_transformer)


def field_runs() -> list[StudyRun]:
  """The next-token plan: FIRST, the copy runs, the GAU field table (every training-time position
  method, Baseline and KNA, and QK-norm with LayerNorm, SSMax and stick-breaking) and the
  Transformer's rows (transformer_methods, GAU_BEST and stick-breaking), the seeds, the retrieval
  plan, then RANDOM_FLOAT_RUNS at each of RANDOM_FLOAT_RULES' indices, then LATE_RUNS and
  LATE_RETRIEVAL_RUNS."""
  gau = [f"{a}_{p}" for p in _planned_methods() for a in ("baseline", "kna")]
  gau += ["qkln_rope", "ssmax_rope", "stickbreaking_nope"]
  transformer = [f"transformer_{a}_{p}" for p in transformer_methods() for a in ("baseline", "kna")]
  transformer += [f"transformer_{c}" for c in GAU_BEST + ("stickbreaking_nope",)]
  seeds = [StudyRun(f"{prefix}{name}", seed) for seed in (1, 2)
           for prefix in ("", "transformer_") for name in SEEDED]
  gau_seeds = [StudyRun(name, seed) for name in SEEDED_GAU_ONLY for seed in (1, 2)]
  names = list(FIRST) + [c for c in gau + transformer if c not in FIRST]
  copies = [StudyRun(c, copy_fraction=COPY_FRACTION) for c in COPY_RUNS]
  first = [StudyRun(c) for c in names[:len(FIRST)]]
  strong_copies = [StudyRun(c, copy_fraction=STRONG_COPY_FRACTION) for c in COPY_RUNS]
  rest = [StudyRun(c) for c in names[len(FIRST):]]
  random_float = [StudyRun(c, model=(("indices", rule),)) for rule in RANDOM_FLOAT_RULES
                  for c in RANDOM_FLOAT_RUNS]
  late = [StudyRun(c) for c in LATE_RUNS] + [retrieval_entry(c) for c in LATE_RETRIEVAL_RUNS]
  return (first + copies + rest + seeds + strong_copies + gau_seeds + retrieval_runs()
          + random_float + late)


# The plans the study can run (its --plan flag).
PLANS = {"field": field_runs, "preregistered": preregistered_runs}
# The study's model.compute_dtype unless --dtype says otherwise: every record made so far, and the
# pre-registered runs' (docs/study.md).
DTYPE = "float32"


def in_dtype(entries: list, dtype: str) -> list:
  """The entries trained with model.compute_dtype `dtype`: as they are in DTYPE; in another, with
  it as a model setting of each run (`+compute_dtype=<dtype>` in its label and key), so that the
  records of different dtypes never overwrite or stand in for each other. ValueError for the
  pre-registered runs in another dtype (their protocol fixes float32)."""
  if dtype == DTYPE:
    return list(entries)
  if any(e.preregistered for e in entries):
    raise ValueError(f"--dtype={dtype}: the pre-registered runs train in {DTYPE} (docs/study.md, "
                     f"(f)); leave --dtype at {DTYPE} with --plan=preregistered.")
  return [dataclasses.replace(e, model=e.model + (("compute_dtype", dtype),)) for e in entries]


def shard_of(entries: list, shard: str) -> list:
  """The entries of shard 'i/n' (every n-th from the i-th, 0 <= i < n); all of them for ''."""
  if not shard:
    return entries
  try:
    index, count = (int(part) for part in shard.split("/"))
  except ValueError:
    index, count = -1, 0
  if not 0 <= index < count:
    raise ValueError(f"--shard={shard!r}: expected i/n with 0 <= i < n, e.g. --shard=0/8.")
  return entries[index::count]


def inference_options(position: str) -> tuple[str, ...]:
  """The inference-time methods evaluated for a run with this position method (besides none): its
  OWN_OPTIONS, then those of its class."""
  method = positions.training_method(position)
  if method.rotary:
    common = ROTARY_OPTIONS
  elif method.bias == "alibi":
    common = ALIBI_OPTIONS
  elif method.path:
    common = PATH_OPTIONS
  else:
    common = OTHER_OPTIONS
  return OWN_OPTIONS.get(position, ()) + common


def plan_key(scale: str, retrieval: bool = False, position: str = "",
             preregistered: bool = False) -> str:
  """Identifies the evaluation plan of a run with this position method; a record made under
  another plan is redone."""
  if preregistered:
    return (f"{plan_key(scale, retrieval, position)}:secondary={','.join(SECONDARY_TASKS)}@1x:"
            f"prompts={SECONDARY_PROMPTS}")
  if position in OWN_OPTIONS:
    return f"{plan_key(scale, retrieval)}:{position}={','.join(OWN_OPTIONS[position])}"
  if position and positions.training_method(position).path:
    return f"{plan_key(scale, retrieval)}:path={','.join(PATH_OPTIONS)}"
  if retrieval:
    steps = SCALES[scale].get("retrieval_train", {}).get("num_train_steps",
                                                         SCALES[scale]["train"]["num_train_steps"])
    return (f"{plan_key(scale)}:retrieval={','.join(RETRIEVAL_TASKS)}@"
            f"{'x'.join(map(str, RETRIEVAL_MULTIPLES))}:"
            f"options_at={'x'.join(map(str, RETRIEVAL_OPTION_MULTIPLES))}:"
            f"prompts={RETRIEVAL_PROMPTS[scale]}:rotary={','.join(RETRIEVAL_ROTARY_OPTIONS)}:"
            f"steps={steps}")
  return (f"{scale}:lengths={'x'.join(map(str, LENGTH_MULTIPLES))}:"
          f"options_at={'x'.join(map(str, OPTION_MULTIPLES))}:"
          f"period=1/{REPEAT_PERIOD_FRACTION}:windows={SCALES[scale]['windows']}:"
          f"rotary={','.join(ROTARY_OPTIONS)}:alibi={','.join(ALIBI_OPTIONS)}")
