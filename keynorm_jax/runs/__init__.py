"""Trained runs as the evaluator, the exporter and the study take them, below both training and
evaluation: finding and restoring a run's checkpoint (loading.py), the config of the model that
trained a step (phases.py), and a source of runs to evaluate (source.py)."""

from keynorm_jax.runs.loading import TrainedRun, abstract_params, find_runs, load_run
from keynorm_jax.runs.phases import config_at_step, phase_configs
from keynorm_jax.runs.source import RunSource, workdir_source

__all__ = ["RunSource", "TrainedRun", "abstract_params", "config_at_step", "find_runs",
           "load_run", "phase_configs", "workdir_source"]
