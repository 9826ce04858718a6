"""Which stage is firing, with evidence: a pure function of a window of frames."""

from stagelens.diagnosis.config import DiagnosisConfig, load_config
from stagelens.diagnosis.evaluate import diagnose
from stagelens.diagnosis.model import Diagnosis

__all__ = ["Diagnosis", "DiagnosisConfig", "diagnose", "load_config"]
