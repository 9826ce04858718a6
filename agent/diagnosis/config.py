"""Diagnosis settings: thresholds (STAGES.md defaults), hysteresis and window, from a TOML file and flags.

    [diagnosis]
    window_s = 10        # frames the share-of-samples signals look back over
    rise = 2             # samples a worse state must hold before it is reported
    clear = 3            # samples a better state must hold before it is reported

    [thresholds.kv_fragmentation_ratio]
    warn = 0.25
    firing = 0.4
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace

from agent.diagnosis.signals import SIGNALS_BY_ID
from agent.errors import UserError


@dataclass(frozen=True)
class Threshold:
    warn: float | None
    firing: float | None


@dataclass
class DiagnosisConfig:
    window_s: float = 10.0
    rise: int = 2
    clear: int = 3
    thresholds: dict[str, Threshold] = field(
        default_factory=lambda: {s.id: Threshold(s.warn, s.firing) for s in SIGNALS_BY_ID.values()})

    def threshold(self, signal_id: str) -> Threshold:
        return self.thresholds[signal_id]

    def to_dict(self) -> dict:
        """The settings in the config file's shape (what `GET /api/v1/config` answers)."""
        return {"diagnosis": {"window_s": self.window_s, "rise": self.rise, "clear": self.clear},
                "thresholds": {k: {"warn": t.warn, "firing": t.firing} for k, t in self.thresholds.items()}}


def load_config(path: str | None = None, overrides: list[str] | tuple[str, ...] = (),
                base: DiagnosisConfig | None = None) -> DiagnosisConfig:
    """`base` (a server's settings) or the defaults, then the TOML file, then `--threshold
    SIGNAL=WARN:FIRING` flags."""
    config = replace(base, thresholds=dict(base.thresholds)) if base is not None else DiagnosisConfig()
    if path:
        _apply_file(config, path)
    for text in overrides:
        _apply_flag(config, text)
    return config


def _apply_file(config: DiagnosisConfig, path: str) -> None:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the config file: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    apply_document(config, path, data)


def apply_document(config: DiagnosisConfig, source: str, data: dict) -> None:
    """Settings in the config file's shape onto `config`; `source` (a file, a URL) names it in errors."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a table with [diagnosis] and [thresholds.*]")
    unknown = set(data) - {"diagnosis", "thresholds"}
    if unknown:
        raise UserError(f"{source}: unknown section [{sorted(unknown)[0]}] (expected [diagnosis] and [thresholds.*])")
    section, thresholds = data.get("diagnosis", {}), data.get("thresholds", {})
    if not isinstance(section, dict) or not isinstance(thresholds, dict):
        raise UserError(f"{source}: [diagnosis] and [thresholds] must be tables")
    for key, value in section.items():
        if key not in ("window_s", "rise", "clear"):
            raise UserError(f"{source}: [diagnosis] has no setting {key!r} (window_s, rise, clear)")
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise UserError(f"{source}: [diagnosis] {key} must be a positive number, got {value!r}")
        if key in ("rise", "clear") and not isinstance(value, int):
            raise UserError(f"{source}: [diagnosis] {key} must be a whole number of samples, got {value!r}")
        setattr(config, key, value)
    for signal_id, table in thresholds.items():
        at = f"{source}: [thresholds.{signal_id}]"
        if signal_id not in SIGNALS_BY_ID:
            raise UserError(f"{at}: unknown signal (known: {', '.join(SIGNALS_BY_ID)})")
        if not isinstance(table, dict) or set(table) - {"warn", "firing"}:
            raise UserError(f"{at}: only 'warn' and 'firing' may be set")
        current = config.thresholds[signal_id]
        config.thresholds[signal_id] = _checked(at, table.get("warn", current.warn),
                                                table.get("firing", current.firing), signal_id)


def _apply_flag(config: DiagnosisConfig, text: str) -> None:
    signal_id, _, levels = text.partition("=")
    warn_text, _, firing_text = levels.partition(":")
    where = f"--threshold {text}"
    if signal_id not in SIGNALS_BY_ID:
        raise UserError(f"{where}: unknown signal {signal_id!r} (known: {', '.join(SIGNALS_BY_ID)})")
    try:
        warn = float(warn_text) if warn_text else None
        firing = float(firing_text) if firing_text else None
    except ValueError:
        raise UserError(f"{where}: use SIGNAL=WARN:FIRING with numbers, e.g. kv_fragmentation_ratio=0.2:0.3") from None
    config.thresholds[signal_id] = _checked(where, warn, firing, signal_id)


def _checked(where: str, warn, firing, signal_id: str) -> Threshold:
    for name, value in (("warn", warn), ("firing", firing)):
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise UserError(f"{where}: {name} must be a number, got {value!r}")
    if warn is not None and firing is not None:
        worse_first = SIGNALS_BY_ID[signal_id].direction == "above"
        if (worse_first and firing < warn) or (not worse_first and firing > warn):
            raise UserError(f"{where}: firing ({firing}) must be past warn ({warn}) for a signal where "
                            f"{'higher' if worse_first else 'lower'} is worse")
    return Threshold(warn, firing)
