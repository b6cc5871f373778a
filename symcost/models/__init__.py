"""Transformer and inference cost models on the engine (book Parts 4, 7 and 8)."""
from .config import ModelConfig, load_model_config, model_presets

__all__ = ["ModelConfig", "load_model_config", "model_presets"]
