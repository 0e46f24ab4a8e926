"""AdamW with linear warmup, cosine decay and global-norm gradient clipping."""

import optax


def learning_rate_schedule(config) -> optax.Schedule:
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=config.learning_rate, warmup_steps=config.warmup_steps,
      decay_steps=max(config.num_train_steps, config.warmup_steps + 1),
      end_value=config.learning_rate * config.end_learning_rate_ratio)


def make_optimizer(config) -> optax.GradientTransformation:
  return optax.chain(
      optax.clip_by_global_norm(config.grad_clip_norm),
      optax.adamw(learning_rate_schedule(config), b1=0.9, b2=0.98,
                  weight_decay=config.weight_decay),
  )
