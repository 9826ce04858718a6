"""Flags that tune the diagnosis, shared by `lab`, `diagnose`, `serve` and `tui`."""

from __future__ import annotations

import click

from agent.diagnosis import DiagnosisConfig, load_config

_OPTIONS = [
    click.option("--config", "config_path", type=click.Path(dir_okay=False),
                 help="TOML file with thresholds and hysteresis ([diagnosis], [thresholds.SIGNAL])."),
    click.option("--threshold", "thresholds", multiple=True, metavar="SIGNAL=WARN:FIRING",
                 help="Override one signal's thresholds; repeatable."),
]


def diagnosis_options(func):
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def diagnosis_config(config_path: str | None, thresholds: tuple[str, ...]) -> DiagnosisConfig:
    return load_config(config_path, thresholds)
