"""The memory of a compiled XLA program, as the benchmarks print it."""


def compiled_gib(compiled) -> float:
  """Arguments + temporaries of a compiled step (GiB per device), or nan where XLA does not say."""
  analysis = compiled.memory_analysis()
  if analysis is None:
    return float("nan")
  return (analysis.argument_size_in_bytes + analysis.temp_size_in_bytes) / 2**30
