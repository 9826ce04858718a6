"""The alert and recording rules read from dashboards/, and the metric names they use."""

import pathlib
import re

RULES = pathlib.Path("dashboards/prometheus")


ALERTS_FILE = RULES / "stagelens-alerts.yml"


RECORDING_FILE = RULES / "stagelens-recording.yml"


def read_alerts(path: pathlib.Path = ALERTS_FILE) -> dict[str, dict]:
    """{alert name: {"expr", "for", "labels", "annotations"}} from a rule file in our layout."""
    alerts = {}
    for block in re.split(r"\n\s+- alert: ", path.read_text())[1:]:
        name, _, body = block.partition("\n")
        rule = {"expr": "", "for": None, "labels": {}, "annotations": {}}
        section = None
        for line in body.splitlines():
            key, _, rest = line.strip().partition(":")
            indent = len(line) - len(line.lstrip())
            if indent == 8 and key in ("expr", "for", "labels", "annotations"):
                section = key
                if key in ("expr", "for"):
                    rule[key] = rest.strip()
            elif section == "expr" and indent > 8:
                rule["expr"] += " " + line.strip()
            elif section in ("labels", "annotations") and indent == 10 and rest:
                rule[section][key] = rest.strip().strip('"')
            elif section in ("labels", "annotations") and indent > 10:
                last = list(rule[section])[-1]
                rule[section][last] += " " + line.strip()
        alerts[name.strip()] = rule
    return alerts


def rule_metric_names(text: str) -> set[str]:
    """Every stagelens metric named in PromQL text (label values in quotes left out)."""
    text = re.sub(r'"[^"]*"', '""', text)
    return set(re.findall(r"(?<![:\w])(stagelens_[a-z0-9_]+)", text))


def recorded_names() -> set[str]:
    return set(re.findall(r"- record: (\S+)", RECORDING_FILE.read_text()))
