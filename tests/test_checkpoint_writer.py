"""Saving on CPU devices: each replicated array is saved whole from its first replica
(checkpoint_writer._whole_arrays_on_the_cpu), not cut into one slice per replica as Orbax does by
default, and restores to the values Orbax's sliced save restores."""

import logging

import jax
from jax.sharding import NamedSharding, PartitionSpec
import numpy as np
import orbax.checkpoint as ocp

from keynorm_jax.storage.checkpoint_writer import CheckpointWriter


def _state():
  """Replicated arrays over the 8 devices, and one split over them; shapes no other test uses, so
  a slice program compiled for them is compiled here."""
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
  rng = np.random.default_rng(0)
  def put(shape, spec):
    return jax.device_put(rng.normal(size=shape).astype(np.float32), NamedSharding(mesh, spec))
  return {"w": put((56, 13), PartitionSpec()), "b": put((24,), PartitionSpec()),
          "split": put((8, 5), PartitionSpec("data"))}


def _compiled_slices(caplog):
  return [r for r in caplog.records if "Compiling jit(slice)" in r.getMessage()]


def test_saved_whole_restores_what_the_replica_slices_restore(tmp_path, caplog):
  assert len(jax.devices()) == 8
  state = _state()
  caplog.set_level(logging.WARNING)
  with jax.log_compiles(True):
    writer = CheckpointWriter(tmp_path / "whole", max_to_keep=1)
    writer.save(1, state, {}, {}, {})
    writer.wait()
    assert not _compiled_slices(caplog)
    # Orbax's default (outside GPUs): one slice per replica, each a program compiled for its shape.
    registry = ocp.type_handlers.create_type_handler_registry(
        (jax.Array, ocp.type_handlers.ArrayHandler(use_replica_parallel=True)))
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler(type_handler_registry=registry)) as sliced:
      sliced.save(tmp_path / "sliced", args=ocp.args.PyTreeSave(state))
    assert _compiled_slices(caplog)
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                          state)
  whole = ocp.StandardCheckpointer().restore(tmp_path / "whole" / "1" / "state", abstract)
  reference = ocp.StandardCheckpointer().restore(tmp_path / "sliced", abstract)
  for name, array in state.items():
    assert whole[name].sharding == array.sharding
    np.testing.assert_array_equal(np.asarray(whole[name]), np.asarray(array))
    np.testing.assert_array_equal(np.asarray(whole[name]), np.asarray(reference[name]))
