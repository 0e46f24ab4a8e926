"""A frozen record as a JAX pytree: the fields it names as numbers are its leaves (they may be
traced: a compiled program takes them as arguments), every other field its static structure."""

import dataclasses

import jax


def register_record(cls, numbers: tuple[str, ...]):
  """Registers the frozen dataclass `cls` as a pytree with the fields `numbers` as its children.
  Rebuilding one skips __post_init__: the values were checked when it was made, and inside a
  trace the numbers are tracers (or JAX's placeholders), which no check can read."""
  static = tuple(f.name for f in dataclasses.fields(cls) if f.name not in numbers)

  def flatten(record):
    return (tuple(getattr(record, name) for name in numbers),
            tuple(getattr(record, name) for name in static))

  def unflatten(static_values, number_values):
    record = object.__new__(cls)
    for name, value in zip(static + numbers, tuple(static_values) + tuple(number_values)):
      object.__setattr__(record, name, value)
    return record

  jax.tree_util.register_pytree_node(cls, flatten, unflatten)
  return cls
