"""Inference-time position methods (the evaluator's columns; weights unchanged), one class each, by
family: RoPE scalings, relative-position rewrites, logit temperatures, windows, ALiBi scalings.

The modules are imported in this order, which is the registry's: the README table and --help list
the methods so.
"""

# isort: off  (registration order)
from keynorm_jax.positions.inference.base import AsTrained  # pylint: disable=unused-import
from keynorm_jax.positions.inference import rope_scaling  # pylint: disable=unused-import
from keynorm_jax.positions.inference import relative  # pylint: disable=unused-import
from keynorm_jax.positions.inference import temperature  # pylint: disable=unused-import
from keynorm_jax.positions.inference import windows  # pylint: disable=unused-import
from keynorm_jax.positions.inference import alibi_scaling  # pylint: disable=unused-import
# isort: on
from keynorm_jax.positions.inference.base import (INFERENCE_METHODS, InferenceMethod,
                                                  inference_method)
from keynorm_jax.positions.inference.column import EvalColumn

__all__ = ["INFERENCE_METHODS", "InferenceMethod", "inference_method", "EvalColumn"]
