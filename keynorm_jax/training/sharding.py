"""Data parallelism and FSDP over a mesh of every device (and every host, through jax.distributed).

The mesh has two axes, "data" and "fsdp" (fsdp = 1: plain data parallelism). The batch is split over
both. With fsdp > 1 every parameter and optimizer-state array is split along its largest dimension
that the fsdp size divides (arrays with none stay replicated); XLA gathers them where a layer needs
them (ZeRO-3 / FSDP).
"""

import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"
FSDP_AXIS = "fsdp"


def maybe_initialize_distributed() -> None:
  """Joins JAX's multi-host runtime when launched as one process of several.

  jax.distributed.initialize() reads the cluster from the environment on Cloud TPU, SLURM and
  Open MPI; elsewhere set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID.
  """
  address = os.environ.get("JAX_COORDINATOR_ADDRESS")
  if address:
    jax.distributed.initialize(coordinator_address=address,
                               num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                               process_id=int(os.environ["JAX_PROCESS_ID"]))
  else:
    jax.distributed.initialize()


def make_mesh(num_devices: int = 0, fsdp: int = 1) -> Mesh:
  """(data, fsdp) mesh over the first `num_devices` devices (0 = all); fsdp must divide them."""
  devices = jax.devices()
  if num_devices:
    if num_devices > len(devices):
      raise ValueError(f"num_devices={num_devices} but only {len(devices)} devices exist.")
    devices = devices[:num_devices]
  if fsdp < 1 or len(devices) % fsdp:
    raise ValueError(f"fsdp={fsdp} must be at least 1 and divide the {len(devices)} devices.")
  return Mesh(np.array(devices).reshape(len(devices) // fsdp, fsdp), (DATA_AXIS, FSDP_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec((DATA_AXIS, FSDP_AXIS)))


def fsdp_spec(shape, fsdp: int) -> PartitionSpec:
  """Split the largest dimension that fsdp divides over the fsdp axis; else replicate."""
  if fsdp > 1:
    for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):
      if shape[dim] % fsdp == 0 and shape[dim] >= fsdp:
        return PartitionSpec(*([None] * dim + [FSDP_AXIS]))
  return PartitionSpec()


def state_shardings(mesh: Mesh, shapes):
  """A NamedSharding for every leaf of a pytree of shapes (FSDP rule; replicated if fsdp = 1)."""
  fsdp = mesh.shape[FSDP_AXIS]
  return jax.tree.map(lambda s: NamedSharding(mesh, fsdp_spec(s.shape, fsdp)), shapes)


def global_batch(mesh: Mesh, local_batch: np.ndarray) -> jax.Array:
  """This host's slice of the batch -> one global array sharded over the data and fsdp axes."""
  return jax.make_array_from_process_local_data(batch_sharding(mesh), local_batch)
