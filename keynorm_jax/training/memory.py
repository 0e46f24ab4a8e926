"""What a seed group's training holds in memory, estimated before any work against what its devices
have, so that a --config.num_seeds that cannot fit is refused in one line instead of failing (or
swapping) steps into the run.

Per member: its train state (parameters and AdamW's moments, from the model's shapes), the
gradients (one more copy of the parameters) and the activations a step keeps for its backward pass,
per layer and token about 6 d_model + 3 token_width + 3 heads x train_length floats (the scores
held whole up to 2048 tokens), plus the logits. Measured against XLA's own memory analysis of the
compiled step of one member (its arguments and temporaries; the reference kernel, batch 8 x 512):
the `cpu` GAU 473 MiB, estimated 492; the `cpu` Transformer 679, estimated 696
(tests/test_seed_groups.py checks the estimate against XLA's within a factor of 2 on the tiny
models, where it is 17-20% above). An estimate: other kernels, rematerialization and XLA's
fusions move it either way.
"""

import os

import jax
import jax.numpy as jnp

from keynorm_jax.errors import ConfigError


def _bytes(tree) -> int:
  return sum(int(x.size) * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def member_bytes(model_cfg, state_shapes, *, batch_size: int, train_length: int) -> int:
  """Estimated bytes of one member's training step (module docstring); state_shapes: its train
  state's shapes (jax.eval_shape of the initial state)."""
  layer_floats = (6 * model_cfg.d_model + 3 * model_cfg.token_width
                  + 3 * model_cfg.heads * train_length)
  tokens = batch_size * train_length
  activations = (model_cfg.num_layers * tokens * layer_floats
                 * jnp.dtype(model_cfg.activation_dtype).itemsize
                 + 2 * tokens * model_cfg.vocab_size * 4)          # float32 logits, and their grad
  return _bytes(state_shapes) + _bytes(state_shapes["params"]) + activations


def device_memory(devices) -> tuple[int, str]:
  """(bytes, what they are) the devices hold together: each accelerator's bytes_limit; on a CPU
  the host's physical memory (its devices share it)."""
  limits = [(d.memory_stats() or {}).get("bytes_limit") for d in devices]
  if all(limits) and devices[0].platform != "cpu":
    return sum(limits), f"the {len(devices)} {devices[0].device_kind} device(s)' memory"
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's memory"


def check_group(num_seeds: int, per_member: int, capacity: tuple[int, str]) -> None:
  """ConfigError where num_seeds members' estimated bytes exceed the devices' memory."""
  total, what = capacity
  if num_seeds * per_member <= total:
    return
  fits = total // per_member
  gib = lambda n: f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
  raise ConfigError(
      f"--config.num_seeds={num_seeds}: a group of {num_seeds} needs about "
      f"{gib(num_seeds * per_member)} to train ({gib(per_member)} a member: its parameters, "
      f"optimizer state and gradients, and a step's activations; an estimate), more than "
      f"{what}, {gib(total)}. Train at most {fits} seed(s) per group "
      f"(--config.num_seeds={max(fits, 1)}, then --config.seed to start the next group), or a "
      f"smaller --config.batch_size or model."
      if fits else
      f"--config.num_seeds={num_seeds}: one member alone needs about {gib(per_member)} to train "
      f"(its parameters, optimizer state and gradients, and a step's activations; an estimate), "
      f"more than {what}, {gib(total)}; use a smaller --config.batch_size or model.")
