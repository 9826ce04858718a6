"""Which stage is firing, with evidence: a pure function of a window of frames."""

from agent.diagnosis.config import DiagnosisConfig, load_config
from agent.diagnosis.evaluate import diagnose
from agent.diagnosis.model import Diagnosis

__all__ = ["Diagnosis", "DiagnosisConfig", "diagnose", "load_config"]
