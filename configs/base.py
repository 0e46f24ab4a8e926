"""The one base config; every variant file in configs/ calls get_config with its own choices.

Fields set to 0 (or 0.0) take their value from the model_size preset (see
keynorm_jax/run_config.py: MODEL_SIZES) or from the rule written beside them.
"""

import ml_collections


def get_config(name="baseline_rope", *, attention="baseline", position="rope", logn=False,
               qk_norm=False):
  c = ml_collections.ConfigDict()
  c.name = name

  # Model.
  c.model_size = "cpu"          # tiny (tests) / cpu (laptop) / seed (the seed's ~100M GAU)
  c.attention = attention       # baseline / qna / kna / cosa
  c.logn = logn                 # trained log n factor log(i+1)/log(n0) on the scores
  c.logn_base = 0.0             # n0; 0 = half the training length
  c.qk_norm = qk_norm           # RMSNorm with learnable gain on q and k before RoPE
  c.position = position         # rope / nope
  c.rope_theta = 10000.0
  c.cosa_scale = 0.0            # CosA lambda; 0 = 4 log(train_length / 2)
  c.norm_position = "post"      # post (as in the seed) / pre
  c.tie_embeddings = False
  c.dropout = 0.0
  c.num_layers = 0              # 0 = from model_size
  c.d_model = 0
  c.expansion = 0
  c.qk_size = 0
  c.compute_dtype = "float32"   # or bfloat16 (softmax stays float32)

  # Training.
  c.train_length = 512
  c.batch_size = 0              # global batch; 0 = from model_size
  c.num_train_steps = 0         # 0 = from model_size
  c.learning_rate = 0.0         # peak; 0 = from model_size
  c.warmup_steps = 0            # 0 = 5% of num_train_steps
  c.end_learning_rate_ratio = 0.1
  c.weight_decay = 0.01
  c.grad_clip_norm = 1.0
  c.seed = 0
  c.num_devices = 0             # 0 = every device; the global batch is split over them

  # Logging, evaluation at the training length, checkpoints.
  c.log_every_steps = 10
  c.eval_every_steps = 0        # 0 = at every checkpoint
  c.eval_windows = 16           # validation windows of train_length tokens
  c.checkpoint_every_steps = 100
  c.max_checkpoints_to_keep = 3

  # Data.
  c.data = ml_collections.ConfigDict()
  c.data.dataset = "kjv"        # kjv (embedded) / text_folder / any TFDS name, e.g. pg19
  c.data.text_feature = "text"
  c.data.data_dir = ""          # TFDS data dir; "" = the TFDS default
  c.data.text_folder = ""       # for dataset=text_folder
  c.data.train_split = "train"
  c.data.validation_split = "validation"
  c.data.test_split = "test"
  return c
