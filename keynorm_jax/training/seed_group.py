"""Seed groups (`--config.num_seeds=N`, N > 1): seeds seed, seed + 1, ..., seed + N - 1 of one
config trained as one jitted program.

The train state carries a leading seed axis [N, ...]: it is initialized by jax.vmap over the
members' seeds and trained by jax.vmap over the train step. Each member has its own
initialization (PRNGKey(seed)), dropout and position key (PRNGKey(seed + 1)) and data order (the
training stream of its seed), so member s computes what a single run with --config.seed=s
computes, to float tolerance (the batched programs round a few values differently). Every other
setting is the group's, shared by its members.

The seed axis is a mesh axis, "seeds": over D devices it is split gcd(N, D) ways and each member's
batch [B, T+1] is split over the other D / gcd(N, D) devices ("data"); on one device the members
are vmapped there. Not combined yet: FSDP (fsdp > 1) and several hosts (refused by `check`).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from keynorm_jax.errors import ConfigError
from keynorm_jax.training.sharding import DATA_AXIS

SEEDS_AXIS = "seeds"


def is_group(config) -> bool:
  """Whether a config trains a seed group (a bad num_seeds is left to the field check)."""
  n = config.get("num_seeds", 1)
  return isinstance(n, int) and not isinstance(n, bool) and n > 1


def member_seeds(config) -> list[int]:
  """The seeds of a group's members, in the order of the seed axis (one for a single run)."""
  return [config.seed + i for i in range(config.num_seeds)]


def check(config, process_count: int) -> None:
  """ConfigError, in one line, for a group setting that is not supported yet."""
  n = config.num_seeds
  if config.fsdp > 1:
    raise ConfigError(f"--config.num_seeds={n} with --config.fsdp={config.fsdp}: a seed group "
                      f"spreads its members over the devices and does not split their parameters "
                      f"(FSDP) yet; use --config.fsdp=1, or train the seeds as single runs.")
  if process_count > 1:
    raise ConfigError(f"--config.num_seeds={n} over {process_count} hosts: seed groups train on "
                      f"one host only for now; train the seeds as single runs.")


def make_mesh(config) -> Mesh:
  """(seeds, data) mesh over the first config.num_devices devices (0 = all): the seed axis split
  gcd(num_seeds, devices) ways, each member's batch over the rest."""
  devices = jax.devices()
  if config.num_devices:
    if config.num_devices > len(devices):
      raise ValueError(f"num_devices={config.num_devices} but only {len(devices)} devices exist.")
    devices = devices[:config.num_devices]
  seeds = math.gcd(config.num_seeds, len(devices))
  return Mesh(np.array(devices).reshape(seeds, len(devices) // seeds), (SEEDS_AXIS, DATA_AXIS))


def batch_devices(mesh: Mesh) -> int:
  """How many devices share each member's batch."""
  return mesh.shape[DATA_AXIS]


def state_shardings(mesh: Mesh, shapes):
  """Every leaf of the stacked state split over the seed axis (its leading axis)."""
  return jax.tree.map(lambda _: NamedSharding(mesh, PartitionSpec(SEEDS_AXIS)), shapes)


def stacked_init(init_one, seeds):
  """init_one(seed) -> state, vmapped over `seeds`: a function () -> the stacked state."""
  seeds_N = jnp.asarray(seeds, jnp.int32)
  return lambda: jax.vmap(init_one)(seeds_N)


def abstract_state(init_one, seeds, state_sharding=None):
  """Shapes and dtypes (and shardings) of the stacked state, for restoring without initializing."""
  shapes = jax.eval_shape(stacked_init(init_one, seeds))
  if state_sharding is None:
    return shapes
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                      shapes, state_sharding)


def initial_state(init_one, seeds, state_sharding):
  """The stacked fresh state, built under jit straight into its shards."""
  return jax.jit(stacked_init(init_one, seeds), out_shardings=state_sharding)()


def train_step(make_step, seeds):
  """The members' train steps as one: make_step(dropout_key) -> step(state, batch_BxT1), vmapped
  over the stacked state, the batches [N, B, T+1] and the keys PRNGKey(seed + 1) a single run
  uses; metrics come back with a leading seed axis."""
  keys_N = jnp.stack([jax.random.PRNGKey(s + 1) for s in seeds])

  def step(state, batch_NxBxT1):
    return jax.vmap(lambda st, b, key: make_step(key)(st, b))(state, batch_NxBxT1, keys_N)

  return step


def global_batch(mesh: Mesh, batch_NxBxT1: np.ndarray) -> jax.Array:
  """The members' batches as one array, split over the seed and data axes."""
  return jax.make_array_from_process_local_data(
      NamedSharding(mesh, PartitionSpec(SEEDS_AXIS, DATA_AXIS)), batch_NxBxT1)


def member(tree, index: int):
  """Member `index` of a stacked pytree."""
  return jax.tree.map(lambda x: x[index], tree)


class MemberBatches:
  """The members' training streams read in step: next() -> [N, B, T+1] (member i's batch from
  the stream of its seed). Its state, saved with each checkpoint, is every member's."""

  def __init__(self, datasets):
    self._iterators = [iter(d) for d in datasets]

  def __iter__(self):
    return self

  def __next__(self) -> np.ndarray:
    return np.stack([next(it) for it in self._iterators])

  def get_state(self) -> dict:
    return {"members": [it.get_state() for it in self._iterators]}

  def set_state(self, state: dict) -> None:
    members = state.get("members") if isinstance(state, dict) else None
    if not isinstance(members, list) or len(members) != len(self._iterators):
      raise ConfigError(f"The checkpoint's data state is not a group of {len(self._iterators)} "
                        f"members' streams; resume it with the num_seeds that trained it.")
    for it, s in zip(self._iterators, members):
      it.set_state(s)


def member_rows(metrics: dict, members: int) -> list[dict]:
  """A step's fetched metrics as one dict of floats per member (members = 0: a single run's)."""
  if not members:
    return [{k: float(v) for k, v in metrics.items()}]
  return [{k: float(v[i]) for k, v in metrics.items()} for i in range(members)]


def mean(rows: list[dict], key: str) -> float:
  """The members' mean of one metric (the progress bar's)."""
  return sum(r[key] for r in rows) / len(rows)
