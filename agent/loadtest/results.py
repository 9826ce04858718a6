"""`results.json`: the run's configuration, its points and the knee; written by every run, read
by compare."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

from stagelens.errors import UserError
from stagelens.loadtest.knee import Knee
from stagelens.loadtest.point import Point

FORMAT = "stagelens-bench/1"


@dataclass
class Results:
    mode: str                   # steady | stress | sweep
    variable: str               # the EngineConfig / WorkloadConfig field varied (steady: the load)
    target: str                 # "bundled engine" or the endpoint's URL
    config: dict                # the base configuration of every point
    rule: dict                  # the knee rule's settings
    points: list[Point]
    knee: Knee | None = None
    created: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))

    @property
    def flag(self) -> str:
        return "--" + self.variable.replace("_", "-")

    def to_dict(self) -> dict:
        return {"format": FORMAT, "mode": self.mode, "variable": self.variable, "flag": self.flag,
                "target": self.target, "created": self.created, "config": self.config,
                "knee_rule": self.rule, "points": [p.to_dict() for p in self.points],
                "knee": self.knee.to_dict(self.points) if self.knee else None}

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")


def load_results(path: str) -> Results:
    """Read a results.json; anything malformed is a UserError that names the file."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f"{path}: not a stagelens bench result (expected \"format\": \"{FORMAT}\")")
    points = data.get("points")
    if not isinstance(points, list) or not points:
        raise UserError(f"{path}: no points")
    try:
        parsed = [Point.from_dict(p) for p in points]
        for p in parsed:
            for key in ("latency_p99_s", "ttft_p99_s"):
                value = getattr(p, key)
                if value is not None and not isinstance(value, int | float):
                    raise ValueError(f"{key} is not a number")
        knee = Knee.from_dict(data["knee"]) if data.get("knee") else None
    except (TypeError, ValueError, KeyError) as exc:
        raise UserError(f"{path}: malformed point: {exc}") from None
    return Results(data.get("mode", "?"), str(data.get("variable", "?")), data.get("target", "?"),
                   data.get("config") or {}, data.get("knee_rule") or {}, parsed, knee,
                   data.get("created", ""))
