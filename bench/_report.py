"""How every bench script prints its figures: one JSON object, or aligned `name value` lines."""

from __future__ import annotations

import json


def emit(figures: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(figures, indent=2))
        return
    width = max(len(k) for k in figures) + 2
    for key, value in figures.items():
        print(f"{key:<{width}}{value:.4g}" if isinstance(value, float) else f"{key:<{width}}{value}")
