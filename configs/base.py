"""The one base config; every variant file in configs/ calls get_config with its own choices.

Fields set to 0 (or 0.0) take their value from the model_size preset (see
keynorm_jax/run_config.py: MODEL_SIZES) or from the rule written beside them. The `model` section is
unpacked as is into keynorm_jax.models.ModelConfig.
"""

import dataclasses

import ml_collections
from ml_collections import config_dict

from keynorm_jax.positions import (INDICES, TRAINING_METHODS, RotarySpec, indices_knob_defaults,
                                   knob_defaults, knob_type, rope_scaling_defaults)


def _knobs(defaults: dict, fields: dict) -> ml_collections.ConfigDict:
  """A section of knobs with their defaults; a knob left unset (None) is a placeholder of its type,
  so that --config.<section>.<knob>=value can set it."""
  return ml_collections.ConfigDict({
      name: config_dict.placeholder(knob_type(fields[name])) if value is None else value
      for name, value in defaults.items()})


def get_config(name="baseline_rope", *, attention="baseline", position="rope", logn=False,
               qk_norm="none", ssmax=False, architecture="gau", position_options=None):
  c = ml_collections.ConfigDict()
  c.name = name
  c.model_size = "cpu"            # tiny (tests) / cpu (laptop) / medium (~25M, one accelerator)
                                  # / seed (the seed's ~100M) / 1b

  # Model.
  m = c.model = ml_collections.ConfigDict()
  m.architecture = architecture   # gau (the seed's single head) / transformer (pre-norm, heads)
  m.attention = attention         # baseline / qna / kna / cosa
  m.logn = logn                   # trained log n factor log(i+1)/log(n0) on the scores
  m.logn_base = 0.0               # n0; 0 = half the training length
  m.qk_norm = qk_norm             # none / rmsnorm / layernorm (learnable gain) on q, k before RoPE
  m.ssmax = ssmax                 # SSMax: scores of query i times s log(i + 1), s learnable per head
  m.cosa_scale = 0.0              # CosA lambda; 0 = 4 log(train_length / 2)
  m.position = position           # a training-time position method: see README's method table
  m.position_options = _knobs({**knob_defaults(position), **(position_options or {})},
                              TRAINING_METHODS.knobs())  # its knobs; unset (None) = its default
  m.indices = "integer"           # the position indices every encoding reads: integer (token t at
                                  # t) / random_integer / ...: see README's method table
  m.indices_options = _knobs(indices_knob_defaults(), INDICES.knobs())  # every indices knob;
                                  # unset (None) = its default
  m.rope_theta = 10000.0
  m.rope_scaling = _knobs(rope_scaling_defaults(),
                          {f.name: f for f in dataclasses.fields(RotarySpec)})  # its own RoPE
                                  # scaling, in training and at every length (a Hugging Face
                                  # config's rope_scaling): type none / linear / ntk / dynamic_ntk /
                                  # yarn / llama3, its factor and knobs; original_length unset =
                                  # the training length
  m.num_layers = 0                # 0 = from model_size (all shape fields)
  m.d_model = 0
  m.expansion = 0                 # GAU: e
  m.qk_size = 0                   # GAU: s
  m.gau_qk = "shared"             # GAU: q, k scale-offsets of one z (the seed's) / separate: each
                                  # of its own z = swish(x W), a diagnostic (results/retrieval_recipe/)
  m.gau_heads = 1                 # GAU: z and v split into this many attention heads (the seed's
                                  # 1), a diagnostic (results/retrieval_recipe/)
  m.gau_mlp = False               # GAU: a feed-forward block (model.mlp, mlp_size) after each GAU
                                  # layer, its own residual and norm (the seed's: none), a diagnostic
  m.norm_position = "post" if architecture == "gau" else "pre"  # GAU: post (the seed's) / pre;
                                  # the Transformer is pre-norm only (post is refused)
  m.num_heads = 0                 # Transformer: query heads
  m.head_dim = 0                  # Transformer: 0 = d_model / num_heads
  m.num_kv_heads = 0              # Transformer: 0 = num_heads (fewer: grouped-query attention)
  m.mlp = "swiglu"                # Transformer: swiglu / gelu
  m.mlp_size = 0                  # Transformer: 0 = 8/3 d (swiglu) or 4 d (gelu), rounded to 8
  m.norm = "rmsnorm"              # Transformer: rmsnorm / layernorm (pre-norm, learnable gain)
  m.norm_eps = 1e-6               # Transformer: epsilon of those norms (Llama files: rms_norm_eps)
  m.qkv_bias = False              # Transformer: biases on q, k and v (Qwen2's)
  m.output_gate = False           # Transformer: attention output times sigmoid(Norm(x) W_gate),
                                  # per head and channel (Qiu et al. 2025's G1)
  m.tie_embeddings = False
  m.dropout = 0.0
  m.compute_dtype = "float32"     # or bfloat16: the products' inputs (their sums, softmax, norms
                                  # and loss stay float32; keynorm_jax/precision.py)
  m.param_dtype = "float32"       # parameters and optimizer state (bfloat16: half their memory)
  m.vocab_size = 0                # 0 = the byte vocabulary (257); a Hugging Face model's own
  m.kernel = "auto"               # attention kernel: auto, reference, cpu, blocked, cudnn or xla
  m.remat = False                 # recompute each layer in the backward pass (less memory)
  m.scan_layers = False           # one scanned layer over stacked parameters (compiles once)

  # Training.
  c.train_length = 512
  c.batch_size = 0                # global batch; 0 = from model_size
  c.num_train_steps = 0           # 0 = from model_size
  c.learning_rate = 0.0           # peak; 0 = from model_size
  c.warmup_steps = 0              # 0 = 5% of num_train_steps
  c.end_learning_rate_ratio = 0.1
  c.weight_decay = 0.01
  c.grad_clip_norm = 1.0
  c.seed = 0
  c.num_seeds = 1                 # >1: a seed group, seeds seed .. seed + num_seeds - 1 trained as
                                  # one program (vmapped, spread over devices): docs/training.md
  c.num_devices = 0               # 0 = every device; the global batch is split over them
  c.fsdp = 1                      # devices that share each parameter and optimizer array (FSDP)

  # Logging, evaluation at the training length, checkpoints.
  c.log_every_steps = 10
  c.eval_every_steps = 0          # 0 = at every checkpoint
  c.eval_windows = 16             # validation windows of train_length tokens
  c.checkpoint_every_steps = 100
  c.max_checkpoints_to_keep = 3

  # Data.
  c.data = ml_collections.ConfigDict()
  c.data.dataset = "kjv"          # kjv (embedded) / text_folder / any TFDS name, e.g. pg19
  c.data.text_feature = "text"
  c.data.data_dir = ""            # TFDS data dir; "" = the TFDS default
  c.data.text_folder = ""         # for dataset=text_folder
  c.data.train_split = "train"
  c.data.validation_split = "validation"
  c.data.test_split = "test"
  c.data.tokenizer = ""           # "" = bytes; else a tokenizer.json (a Hugging Face model's)
  c.data.separator_id = -1        # the id after each document; -1 = the byte separator (256)
  c.data.copy_fraction = 0.0      # share of training windows made synthetic copies (a prefix of
                                  # 16 to train_length / 2 tokens tiled); 0 = the text as is
  c.data.copy_symbols = 0.0       # share of those copies that tile random printable characters
                                  # (digits, letters, punctuation, space) instead; 0 = none
  c.data.retrieval_fraction = 0.0  # share of the training windows that are not copies given a
                                   # retrieval episode (needle at a uniform depth, question and
                                   # answer at the end); 0 = none
  c.data.retrieval_tasks = "passkey_letters,passkey,mqar"  # the tasks drawn from
                                   # (keynorm_jax/data/retrieval/; RESULTS.md, Table 2)
  return c
