"""Hugging Face model folders: Llama-family checkpoints read into this project's TransformerLM."""

from keynorm_jax.huggingface.hf_config import FAMILIES
from keynorm_jax.huggingface.llama import load_llama

__all__ = ["FAMILIES", "load_llama"]
