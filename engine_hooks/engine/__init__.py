"""The bundled paged-attention serving engine. Pure torch; it knows nothing of who observes it."""

from .config import ConfigError, EngineConfig
from .engine import LLMEngine, StepStats
from .request import Request, SamplingParams, Status

__all__ = ["ConfigError", "EngineConfig", "LLMEngine", "Request", "SamplingParams", "Status", "StepStats"]
