"""Data parallelism over a mesh of every device (and every host, through jax.distributed).

Parameters and optimizer state are replicated; the batch is split over the "data" axis.
"""

import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"


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


def make_mesh(num_devices: int = 0) -> Mesh:
  """1-D data mesh over the first `num_devices` devices (0 = all)."""
  devices = jax.devices()
  if num_devices:
    if num_devices > len(devices):
      raise ValueError(f"num_devices={num_devices} but only {len(devices)} devices exist.")
    devices = devices[:num_devices]
  return Mesh(np.array(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def global_batch(mesh: Mesh, local_batch: np.ndarray) -> jax.Array:
  """This host's slice of the batch -> one global array sharded over the data axis."""
  return jax.make_array_from_process_local_data(batch_sharding(mesh), local_batch)
