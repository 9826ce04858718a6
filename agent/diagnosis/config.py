"""Diagnosis settings: thresholds (defaults in docs/stages.md), hysteresis and window, from a TOML
file and flags.

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
from typing import Any

from stagelens.bounded_read import read_bounded
from stagelens.diagnosis.signals import SIGNALS_BY_ID
from stagelens.errors import UserError
from stagelens.numbers import checked_number

# a config file is a few lines; this refuses a device or a wrong file whole
MAX_CONFIG_BYTES = 2**20
# The [diagnosis] settings and their bounds: a window the sampler's history can hold (900 samples),
# hysteresis of at most a hundred samples.
SETTINGS: dict[str, dict[str, Any]] = {"window_s": dict(min=0, min_open=True, max=3600, unit="s"),
                                       "rise": dict(min=1, max=100, integer=True, unit="samples"),
                                       "clear": dict(min=1, max=100, integer=True, unit="samples")}


@dataclass(frozen=True)
class Threshold:
    warn: float | None
    firing: float | None

    def __post_init__(self) -> None:
        for name in ("warn", "firing"):
            value = getattr(self, name)
            # a reader parses text first; a Threshold holds numbers only
            if isinstance(value, str):
                raise UserError(f"threshold {name}: must be a number, got {value[:40]!r}")
            if value is not None:
                checked_number(f"threshold {name}", value, min=0)


@dataclass
class DiagnosisConfig:
    """Every setting passes `checked_number` on the way in, whichever way it comes (constructor,
    `replace`, assignment): a config never holds a NaN, an infinity or an out-of-range window."""
    window_s: float = 10.0
    rise: int = 2
    clear: int = 3
    thresholds: dict[str, Threshold] = field(
        default_factory=lambda: {s.id: Threshold(s.warn, s.firing) for s in SIGNALS_BY_ID.values()})

    def __setattr__(self, name: str, value) -> None:
        if name in SETTINGS:
            value = checked_number(f"[diagnosis] {name}", value, **SETTINGS[name])
        elif name == "thresholds" and not (isinstance(value, dict) and set(value) <= set(SIGNALS_BY_ID) and all(
                isinstance(t, Threshold) for t in value.values())):
            raise TypeError("DiagnosisConfig.thresholds: a dict of signal id -> Threshold")
        super().__setattr__(name, value)

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
    raw = read_bounded(path, MAX_CONFIG_BYTES, f"{path}: cannot read the config file: {{error}}",
                       f"{path}: not a config file: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not a TOML text file: byte {exc.start} is not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    apply_document(config, path, data)


def apply_document(config: DiagnosisConfig, source: str, data: dict) -> None:
    """Settings in the config file's shape onto `config`; `source` (a file, a URL) names it in
    errors."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a table with [diagnosis] and [thresholds.*]")
    unknown = set(data) - {"diagnosis", "thresholds"}
    if unknown:
        raise UserError(f"{source}: unknown section [{str(sorted(unknown)[0])[:40]}] "
                        f"(expected [diagnosis] and [thresholds.*])")
    section, thresholds = data.get("diagnosis", {}), data.get("thresholds", {})
    if not isinstance(section, dict) or not isinstance(thresholds, dict):
        raise UserError(f"{source}: [diagnosis] and [thresholds] must be tables")
    for key, value in section.items():
        if key not in SETTINGS:
            raise UserError(f"{source}: [diagnosis] has no setting {str(key)[:40]!r} ({', '.join(SETTINGS)})")
        try:
            setattr(config, key, value)
        except UserError as exc:
            raise UserError(f"{source}: {exc}") from None
    for signal_id, table in thresholds.items():
        at = f"{source}: [thresholds.{str(signal_id)[:40]}]"
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
    where = f"--threshold {text[:80]}"
    if signal_id not in SIGNALS_BY_ID:
        raise UserError(f"{where}: unknown signal {signal_id[:40]!r} (known: {', '.join(SIGNALS_BY_ID)})")
    try:
        warn = float(warn_text) if warn_text else None
        firing = float(firing_text) if firing_text else None
    except ValueError:
        raise UserError(f"{where}: use SIGNAL=WARN:FIRING with numbers, e.g. kv_fragmentation_ratio=0.2:0.3") from None
    config.thresholds[signal_id] = _checked(where, warn, firing, signal_id)


def _checked(where: str, warn, firing, signal_id: str) -> Threshold:
    """A signal's thresholds: finite, not negative (no signal is), in the signal's unit, in its
    order."""
    signal = SIGNALS_BY_ID[signal_id]
    warn, firing = (None if value is None else checked_number(f"{where}: {name}", value, min=0, unit=signal.unit)
                    for name, value in (("warn", warn), ("firing", firing)))
    if warn is not None and firing is not None:
        worse_first = signal.direction == "above"
        if (worse_first and firing < warn) or (not worse_first and firing > warn):
            raise UserError(f"{where}: firing ({firing}) must be past warn ({warn}) for a signal "
                            f"where {'higher' if worse_first else 'lower'} is worse")
    return Threshold(warn, firing)
