"""The fleet read from Prometheus: one instant query a refresh, whatever the fleet's size, grouped
by node.

Prometheus already scrapes every agent, so the fleet view asks it, not the nodes. One PromQL
expression (`fleet_expression`) returns, for every target of the agents' job: `up`, the verdict, the
root stage, each stage's state and since when, the latest frame's time, and only the rows that
matter beyond those: the signals in warn or firing (their state and value), the collectors failing,
the P99 TTFT tail's shares. A healthy node is about a dozen series, so a thousand nodes stay one
answer of a few megabytes at most.

Set operations match series on their labels without the metric's name, so each `or` operand has its
own set of label names (target labels; + stage; + stage, signal; + collector; + metric, percentile,
stage): none hides another's series. `fetch()` never raises and never waits past its deadline: an
unreachable, slow or failing server gives a FleetView whose `error` says why in one line, with the
last answer's rows (shown STALE).

Nothing in the answer is trusted: every label is made printable (agent.printable: no terminal
escapes reach the screen), a time outside what a clock can say (±1e300) reads as not known, a state
value that is none of the agent's reads unknown and never hides the states of the node's stages, and
a bad series touches its node's row only. The Prometheus URL's credentials are used, never shown.
"""

from __future__ import annotations

import math
import re
import time
import urllib.parse

from stagelens import catalogue as c
from stagelens.diagnosis.signals import SIGNALS, SIGNALS_BY_ID
from stagelens.errors import UserError
from stagelens.fleet.model import STATE_OF_VALUE, Evidence, FleetView, NodeRow, by_severity, stage_cells
from stagelens.http_client import EXCHANGE_ERRORS, check_url, exchange_reason, redact_url, request
from stagelens.json_answer import AnswerRefused, NotJson, parse_answer
from stagelens.printable import printable
from stagelens.vocabulary import STAGES, STATES

DEFAULT_SELECTOR = '{job="stagelens"}'
# a thousand nodes answer a few MB; this is the cap, not the expectation
MAX_ANSWER_BYTES = 64 * 2**20
# the tail the diagnosis blames a stage for (agent.diagnosis.whole_run)
TAIL_METRIC = "ttft"
LAST_TIMESTAMP = 253402300799.0   # 9999-12-31T23:59:59Z, the last second a date can be written for

# The series read as they are (one selector, told apart by their names) ...
PLAIN = ("up", *(f.metric for f in (c.VERDICT_STATE, c.ROOT_STAGE, c.STAGE_STATE,
                                    c.STAGE_STATE_SINCE, c.FRAME_TIMESTAMP)))
# ... and the labels each metric has of its own: the rest are the target's (cluster, model, gpu,
# ...)
OWN_LABELS = {f.metric: set(f.labels) for f in (c.ROOT_STAGE, c.STAGE_STATE, c.STAGE_STATE_SINCE,
                                                c.SIGNAL_STATE, c.SIGNAL_VALUE, c.COLLECTOR_SUCCESS,
                                                c.TAIL_SHARE)}
URL_LABEL = c.TARGET_URL_LABEL
NOT_LABELS = {"__name__", "job", "instance", URL_LABEL}

_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_STRING = r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|`[^`]*`'
_MATCHER = re.compile(rf"\s*({_NAME})\s*(=~|!~|!=|=)\s*({_STRING})\s*")


def parse_selector(selector: str) -> list[str]:
    """The label matchers of `{a="x", b=~"y.*"}` as PromQL text (['a="x"', 'b=~"y.*"']);
    UserError otherwise."""
    text = selector.strip()
    problem = None
    if not (text.startswith("{") and text.endswith("}")):
        problem = "must be label matchers in braces, like {job=\"stagelens\"}"
    matchers: list[str] = []
    body, at = text[1:-1], 0
    while problem is None and body[at:].strip():
        match = _MATCHER.match(body, at)
        if match is None:
            problem = f"cannot read a label matcher at {body[at:at + 30]!r} (expected label=\"value\", !=, =~ or !~)"
            break
        name, op, value = match.groups()
        if name == "__name__":
            problem = "__name__ is the fleet view's to choose: give label matchers only"
            break
        matchers.append(f"{name}{op}{value}")
        at = match.end()
        if at < len(body):
            if body[at] != ",":
                problem = f"expected a comma at {body[at:at + 30]!r}"
                break
            at += 1
    if problem:
        raise UserError(f"--selector {selector!r}: {problem}")
    return matchers


def fleet_expression(matchers: list[str]) -> str:
    """The one PromQL expression a refresh asks: every node's series the fleet view shows, and
    nothing else."""
    def sel(name: str = "", *extra: str) -> str:
        return name + "{" + ", ".join((*extra, *matchers)) + "}"

    plain = sel("", f'__name__=~"{"|".join(PLAIN)}"')
    signals = sel("", f'__name__=~"{c.SIGNAL_STATE.metric}|{c.SIGNAL_VALUE.metric}"')
    return " or ".join((
        plain,
        f"({signals} and on(instance, stage, signal) ({sel(c.SIGNAL_STATE.metric)} >= 1))",
        f"({sel(c.COLLECTOR_SUCCESS.metric)} == 0)",
        sel(c.TAIL_SHARE.metric, f'metric="{TAIL_METRIC}"'),
    ))


def parse_filters(filters) -> dict[str, str]:
    """`LABEL=VALUE` texts as {label: value}; UserError for one without `=` or a label."""
    out: dict[str, str] = {}
    for item in filters or ():
        label, eq, value = item.partition("=")
        if not eq or not re.fullmatch(_NAME, label.strip()):
            raise UserError(f"--filter {item!r}: expected LABEL=VALUE, like cluster=eu-1")
        out[label.strip()] = value
    return out


def matches(row: NodeRow, filters: dict[str, str]) -> bool:
    """The row's labels (and its instance) hold every filter's value."""
    return all((row.instance if label == "instance" else row.labels.get(label)) == value
               for label, value in filters.items())


class FleetQuery:
    """Asks Prometheus for the fleet, one instant query a refresh; remembers the last answer's
    rows."""

    def __init__(self, prometheus_url: str, selector: str = DEFAULT_SELECTOR,
                 timeout_s: float = 5.0, filters: dict[str, str] | None = None) -> None:
        self._parts = check_url(prometheus_url.rstrip("/"), f"--prometheus {redact_url(prometheus_url)!r}: expected "
                                "the http:// or https:// URL of a Prometheus server, like http://prometheus:9090")
        # as shown; _parts holds the credentials
        self.prometheus_url = redact_url(prometheus_url.rstrip("/"))
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise UserError(f"timeout: must be a positive number of seconds, got {timeout_s!r}")
        self.selector = selector
        self.expression = fleet_expression(parse_selector(selector))
        self.timeout_s = float(timeout_s)
        self.filters = dict(filters or {})
        self.last = FleetView(prometheus=self.prometheus_url)
        # what the latest answer held: series and bytes (bench/fleet.py reads them)
        self.last_series = 0
        self.last_bytes = 0

    def fetch(self) -> FleetView:
        """The fleet now; on any failure the last rows with `error` set. Never raises, never
        outlasts timeout_s (plus the parsing of what came)."""
        try:
            rows = [row for row in build_rows(self._query()) if matches(row, self.filters)]
        except _Failed as exc:
            return self._failed(str(exc))
        except Exception as exc:    # whatever the server sent, the screen keeps its last rows
            return self._failed(f"unexpected answer ({type(exc).__name__}: {exc})")
        self.last = FleetView(rows=rows, fetched_unix=time.time(), error=None,
                              prometheus=self.prometheus_url)
        return self.last

    def _failed(self, why: str) -> FleetView:
        line = printable(re.sub(r"\s+", " ", why).strip()[:300])
        return FleetView(rows=self.last.rows, fetched_unix=self.last.fetched_unix,
                         error=f"prometheus {self.prometheus_url}: {line}",
                         prometheus=self.prometheus_url)

    def _query(self) -> list:
        """The instant vector's samples; _Failed with the reason otherwise."""
        deadline = time.monotonic() + self.timeout_s
        # Prometheus gives up on its side at the same deadline (its `timeout`, seconds)
        form = urllib.parse.urlencode({"query": self.expression, "timeout": f"{self.timeout_s:g}"}).encode()
        try:
            status, _, body = request("POST", self._parts, self._parts.path + "/api/v1/query", {
                "Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
                deadline, MAX_ANSWER_BYTES, form)
        except EXCHANGE_ERRORS as exc:
            raise _Failed(exchange_reason(exc, self.timeout_s, MAX_ANSWER_BYTES,
                                          "could not connect: {}")) from None
        self.last_bytes = len(body)
        try:
            # bounded in items: 64 MiB of tiny series once held 756 MB
            answer = parse_answer(body)
        except NotJson:
            answer = None
        except AnswerRefused as exc:
            raise _Failed(f"HTTP {status}: the answer {exc}") from None
        if not isinstance(answer, dict):
            raise _Failed(f"HTTP {status}: the answer is not Prometheus's JSON" if status != 200
                          else "the answer is not Prometheus's JSON (is this a Prometheus server?)")
        if answer.get("status") != "success":
            kind, why = answer.get("errorType", "error"), answer.get("error", "no reason given")
            raise _Failed(f"HTTP {status}: {kind}: {why}")
        data = answer.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise _Failed("the answer is not an instant vector")
        self.last_series = len(data["result"])
        return data["result"]


class _Failed(Exception):
    pass


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _timestamp(value) -> float | None:
    """A Unix time, if it is one a date can be written for; None otherwise (±1e300 is no time)."""
    number = _number(value)
    return number if number is not None and 0 <= number <= LAST_TIMESTAMP else None


def _state(value: float | None) -> str:
    return STATE_OF_VALUE.get(int(value), "unknown") if value is not None and value == int(value) else "unknown"


class _Node:
    """What the answer held for one instance, before it becomes a NodeRow."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self.up: float | None = None
        self.labels: dict[str, str] | None = None
        self.url: str | None = None           # the target's stagelens_url label
        self.verdict: float | None = None
        self.roots: list[str] = []
        self.states: dict[str, float | None] = {}
        self.since: dict[str, float | None] = {}
        self.signals: dict[tuple[str, str], dict[str, float | None]] = {}
        self.failing: set[str] = set()
        self.tail: dict[str, dict[str, float]] = {}   # by percentile
        self.frame: float | None = None
        self.evaluated: float | None = None


def build_rows(result: list) -> list[NodeRow]:
    """The instant vector's samples grouped by instance into rows, most severe first (down,
    firing, warn, ok, unknown), ties by instance. Samples without an instance or a name are left
    out."""
    nodes: dict[str, _Node] = {}
    for sample in result:
        if not isinstance(sample, dict) or not isinstance(sample.get("metric"), dict):
            continue
        metric = {printable(k): printable(v) for k, v in sample["metric"].items() if isinstance(k, str)
                  and isinstance(v, str)}
        name, instance = metric.get("__name__"), metric.get("instance")
        if name is None or instance is None:
            continue
        node = nodes.get(instance) or nodes.setdefault(instance, _Node(instance))
        pair = sample.get("value")
        pair = pair if isinstance(pair, list) and len(pair) == 2 else [None, None]
        value = _number(pair[1])
        node.evaluated = node.evaluated or _timestamp(pair[0])
        own = OWN_LABELS.get(name, set())
        labels = {k: v for k, v in metric.items() if k not in NOT_LABELS and k not in own}
        if name == "up":
            node.up, node.labels, node.url = value, labels, metric.get(URL_LABEL)
            continue
        node.url = node.url or metric.get(URL_LABEL)
        if node.labels is None:
            node.labels = labels
        stage, signal = metric.get("stage"), metric.get("signal")
        if name == c.VERDICT_STATE.metric:
            node.verdict = value
        elif name == c.ROOT_STAGE.metric and value == 1 and stage:
            node.roots.append(stage)
        elif name == c.STAGE_STATE.metric and stage:
            node.states[stage] = value
        elif name == c.STAGE_STATE_SINCE.metric and stage:
            node.since[stage] = _timestamp(value)
        elif name == c.FRAME_TIMESTAMP.metric:
            node.frame = _timestamp(value)
        elif name in (c.SIGNAL_STATE.metric, c.SIGNAL_VALUE.metric) and stage and signal:
            node.signals.setdefault((stage, signal), {})[name.rpartition("_")[2]] = value
        elif name == c.COLLECTOR_SUCCESS.metric and value == 0:
            node.failing.add(metric.get("collector", ""))
        elif name == c.TAIL_SHARE.metric and stage and value is not None:
            node.tail.setdefault(metric.get("percentile", ""), {})[stage] = value
    rows = []
    for node in nodes.values():
        try:
            rows.append(_row(node))
        # a value no rule here foresaw: that node reads unknown, the rest of the fleet is shown
        except Exception:
            rows.append(NodeRow(node.instance, node.labels or {}, node.up == 1, "unknown", None,
                                stage_cells({})))
    rows.sort(key=by_severity)
    return rows


def _row(node: _Node) -> NodeRow:
    exported = node.verdict is not None or bool(node.states)
    # no `up`: the series say the target was scraped
    up = node.up == 1 if node.up is not None else exported
    url = node.url or f"http://{node.instance}"
    if not up:
        return NodeRow(node.instance, node.labels or {}, False, "unknown", None, stage_cells({}),
                       url=url)
    states = {stage: (_state(value), node.since.get(stage)) for stage, value in node.states.items()}
    # the worse of the verdict exported and its stages' states: a verdict that is none of the
    # agent's values (or claims less than a stage) cannot hide a firing stage
    worst_stage = max((state for state, _ in states.values()), key=STATES.index, default="unknown")
    verdict = max(_state(node.verdict), worst_stage, key=STATES.index)
    roots = [stage for stage in STAGES if stage in node.roots] or node.roots
    frame_age = None
    if node.frame is not None and node.evaluated is not None:
        frame_age = max(0.0, node.evaluated - node.frame)
    tail = None
    if node.tail:
        tail = node.tail[max(node.tail, key=lambda p: _number(p) or 0)]
    return NodeRow(node.instance, node.labels or {}, True, verdict, roots[0] if roots else None,
                   stage_cells(states), evidence=_evidence(node, roots[0] if roots else None),
                   tail=tail, frame_age_s=frame_age, collector_failures=len(node.failing), url=url)


_ORDER = {s.id: i for i, s in enumerate(SIGNALS)}


def _evidence(node: _Node, root: str | None) -> Evidence | None:
    """The worst warn-or-firing signal: firing before warn, the root stage's first, then the
    furthest past the agent's default threshold of its level (how far a reading lies is the
    agent's call; this only orders)."""
    best, best_key = None, None
    for (stage, signal), read in node.signals.items():
        state = _state(read.get("state"))
        if state not in ("warn", "firing"):
            continue
        value = read.get("value")
        key = (STATES.index(state), stage == root, _excess(signal, state, value),
               -_ORDER.get(signal, len(_ORDER)), signal)
        if best_key is None or key > best_key:
            spec = SIGNALS_BY_ID.get(signal)
            best, best_key = Evidence(stage, signal, state, value, spec.unit if spec else ""), key
    return best


def _excess(signal: str, state: str, value: float | None) -> float:
    """How far past its threshold for `state` a value is, relative to that threshold (0 when not
    known)."""
    spec = SIGNALS_BY_ID.get(signal)
    limit = None if spec is None else (spec.firing if state == "firing" else spec.warn)
    if value is None or limit is None:
        return 0.0
    past = value - limit if spec.direction == "above" else limit - value
    return past / abs(limit) if limit else past
