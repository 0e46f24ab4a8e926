"""A registry of position methods: one small typed class per method, looked up by name.

A method class is a frozen dataclass whose fields are its knobs (None = unset: the default at the
length it is used at; 0 is a value like any other, legal or refused by the method). Registering it
makes it known to the config, the model, the evaluator, the CLI help and the README table.
"""

import dataclasses
import typing


class UnknownMethodError(ValueError):
  """A method name that is not registered; the message lists the known ones."""


class Registry:
  """Name -> method class, in registration order."""

  def __init__(self, kind: str):
    self.kind = kind
    self._classes: dict[str, type] = {}

  def register(self, cls):
    if cls.name in self._classes:
      raise ValueError(f"{self.kind} {cls.name!r} is registered twice.")
    self._classes[cls.name] = cls
    return cls

  def names(self) -> tuple[str, ...]:
    return tuple(self._classes)

  def get(self, name: str) -> type:
    if name not in self._classes:
      raise UnknownMethodError(
          f"Unknown {self.kind} {name!r}; choose one of {', '.join(self._classes)}.")
    return self._classes[name]

  def create(self, name: str, **knobs):
    """An instance of method `name` with the given knobs (unknown knobs, and values not of a knob's
    type, are an error: a ValueError naming the knob)."""
    cls = self.get(name)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(knobs) - set(fields))
    if unknown:
      raise ValueError(f"{self.kind} {name!r} has no knob {', '.join(unknown)}; its knobs: "
                       f"{', '.join(sorted(fields)) or 'none'}.")
    for knob_name, value in knobs.items():
      kind = knob_type(fields[knob_name])
      if value is not None and not _is_a(value, kind):
        raise ValueError(f"{self.kind} {name!r}: {knob_name} must be {_NOUNS[kind]} (or unset), "
                         f"got {value!r}.")
    return cls(**{k: v for k, v in knobs.items() if v is not None})   # None: unset

  def classes(self):
    return tuple(self._classes.values())

  def knobs(self) -> dict[str, dataclasses.Field]:
    """Every knob of every method, by name (a knob shared by several methods appears once)."""
    out = {}
    for cls in self._classes.values():
      for field in dataclasses.fields(cls):
        out.setdefault(field.name, field)
    return out

  def help(self) -> str:
    return ", ".join(f"{cls.name} ({cls.summary})" for cls in self._classes.values())


_NOUNS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def knob_type(field: dataclasses.Field) -> type:
  """A knob's type without its None: int, float, bool or str."""
  return next(t for t in (typing.get_args(field.type) or (field.type,)) if t is not type(None))


def _is_a(value, kind: type) -> bool:
  """Whether value is of a knob's type (a number: an int or a float, never a bool)."""
  if kind in (int, float):
    numbers = (int,) if kind is int else (int, float)
    return isinstance(value, numbers) and not isinstance(value, bool)
  return isinstance(value, kind)


def knob(default=None, help: str = ""):  # pylint: disable=redefined-builtin
  """A method's knob: a dataclass field with its help text."""
  return dataclasses.field(default=default, metadata={"help": help})


def knob_help(field: dataclasses.Field) -> str:
  return field.metadata.get("help", "")


class Method:
  """Common class attributes of every position method."""
  name: typing.ClassVar[str]
  summary: typing.ClassVar[str]     # a few words for help texts
  paper: typing.ClassVar[str]       # citation for the README table
