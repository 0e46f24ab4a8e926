"""Position methods: training-time encodings, inference-time changes and the position indices
every encoding reads, in three registries.

Adding a method means one class in training_methods.py, in indices.py, or in its family's module of
inference/ (RoPE scalings, relative-position rewrites, temperatures, windows, ALiBi scalings), its
test, and a line in the README's method table; the config, model, evaluator and CLI help read the
registries.
"""

from keynorm_jax.positions.indices import (INDICES, Indices, indices_knob_defaults,
                                           position_indices)
from keynorm_jax.positions.inference import (EvalColumn, INFERENCE_METHODS, InferenceMethod,
                                             inference_method)
from keynorm_jax.positions.layer_spec import (SCALING_KNOBS, AttentionSpec, PathSpec, RotarySpec,
                                              alibi_slopes, rope_scaling_defaults, rotary_inv_freq,
                                              scaled_from)
from keynorm_jax.positions.registry import UnknownMethodError, knob_type
from keynorm_jax.positions.training_methods import (TRAINING_METHODS, TrainingMethod,
                                                    knob_defaults, training_method)

__all__ = ["INDICES", "Indices", "indices_knob_defaults", "position_indices",
           "INFERENCE_METHODS", "EvalColumn", "InferenceMethod", "inference_method",
           "UnknownMethodError", "knob_type", "AttentionSpec", "PathSpec", "RotarySpec",
           "alibi_slopes", "rotary_inv_freq", "scaled_from", "SCALING_KNOBS",
           "rope_scaling_defaults", "TRAINING_METHODS", "TrainingMethod", "knob_defaults", "training_method"]
