"""The project's own errors: the CLIs catch `KeynormError` and print its message on one line."""


class KeynormError(Exception):
  """Base of every error the user can cause and fix; the message says what to change."""


class ConfigError(KeynormError, ValueError):
  """A config that cannot run; the message says what to change."""
