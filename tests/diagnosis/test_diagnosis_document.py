"""The diagnosis document read back: `Diagnosis.from_dict` is the exact inverse of `to_dict`, and a document
that is not one is refused with the field named."""

from __future__ import annotations

import copy
import pathlib

import pytest

from stagelens.bundle import read_bundle
from stagelens.diagnosis.model import Diagnosis, DiagnosisError, Evidence, Recommendation, StageDiagnosis
from stagelens.diagnosis.whole_run import judge_run
from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.runbook_files import stage_runbook
from stagelens.vocabulary import STAGES, STATES

BUNDLES = sorted((pathlib.Path(__file__).parents[1] / "fixtures" / "bundles").glob("*.jsonl"))


def _round_trip(d: Diagnosis) -> None:
    document = d.to_dict()
    back = Diagnosis.from_dict(copy.deepcopy(document))
    assert back.to_dict() == document
    assert back.exit_code == d.exit_code
    for stage, original in zip(back.stages, d.stages, strict=True):
        whole = None if original.since_unix is None else int(original.since_unix)   # `since` is to the second
        assert stage.since_unix == whole


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.stem for b in BUNDLES])
def test_the_recorded_bundles_diagnoses_read_back_as_written(bundle):
    recorded = read_bundle(str(bundle))
    run = judge_run(recorded.frames, [RequestTimeline.from_dict(t) for t in recorded.timelines])
    _round_trip(run.diagnosis)
    _round_trip(run.at_end)


def every_state() -> Diagnosis:
    """Each stage state and each evidence state once, with every optional field both set and empty."""
    evidence = [Evidence(f"signal_{state}", f"label {state}", value, 0.2, 0.3, "ratio", "10s", state)
                for state, value in zip((*STATES, "info"), (None, 0.1, 0.25, 0.9, 7), strict=True)]
    evidence.append(Evidence("no_limits", "no limits", 0.5, None, None, "seconds", "10s", "ok"))
    stages = [StageDiagnosis(stage, state, "2025-01-01T09:22:47Z" if state != "unknown" else None,
                             1735723367.0 if state != "unknown" else None, f"{stage} is {state}", evidence,
                             [Recommendation("--block-size 16: fewer empty slots")] if state == "firing" else [],
                             stage_runbook(stage), "kv_cache" if stage == "scheduler" else None)
              for stage, state in zip((*STAGES, STAGES[0]), STATES, strict=True)]
    return Diagnosis("firing", "kv_cache", stages, unavailable="the engine is down: it fell over",
                     disagreement="the window's P99 tail blames cold_path")


def test_a_diagnosis_with_every_state_reads_back_as_written():
    d = every_state()
    _round_trip(d)
    for verdict in STATES:
        _round_trip(Diagnosis(verdict, None, d.stages))
    _round_trip(Diagnosis("ok", None, []))


def _broken(path: tuple, value) -> dict:
    document = every_state().to_dict()
    target = document
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return document


@pytest.mark.parametrize("path, value, words", [
    (("verdict",), "great", "verdict: must be one of unknown, ok, warn, firing, got 'great'"),
    (("verdict",), KeyError, "verdict: missing"),
    (("root_stage",), 3, "root_stage: must be a string or null, got 3"),
    (("stages",), {}, "stages: must be a list, got {}"),
    (("stages", 1), [], "stages[1]: must be an object, got []"),
    (("stages", 1, "state"), None, "stages[1].state: must be one of"),
    (("stages", 2, "runbook"), KeyError, "stages[2].runbook: missing"),
    (("stages", 2, "since"), "yesterday", "stages[2].since: must be an RFC 3339 time"),
    (("stages", 2, "since"), "2025-01-01T09:22:47", "stages[2].since: must be an RFC 3339 time"),
    (("stages", 3, "recommendations", 0), {"text": "x"}, "stages[3].recommendations[0]: must be a string"),
    (("stages", 0, "evidence", 1, "value"), "0.5", "stages[0].evidence[1].value: must be a finite number or null"),
    (("stages", 0, "evidence", 1, "value"), float("nan"), "stages[0].evidence[1].value: must be a finite number"),
    (("stages", 0, "evidence", 1, "warn"), True, "stages[0].evidence[1].warn: must be a finite number"),
    (("stages", 0, "evidence", 4, "state"), "fine", "stages[0].evidence[4].state: must be one of"),
    (("disagreement",), ["no"], "disagreement: must be a string or null"),
])
def test_a_document_that_is_no_diagnosis_names_the_field(path, value, words):
    with pytest.raises(DiagnosisError) as err:
        Diagnosis.from_dict(_broken(path, value))
    assert words in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("data", [None, [], "firing", 3])
def test_a_document_that_is_not_an_object_is_refused(data):
    with pytest.raises(DiagnosisError, match="a diagnosis: must be an object"):
        Diagnosis.from_dict(data)


def test_fields_a_newer_agent_adds_are_left_aside():
    document = every_state().to_dict()
    newer = {**document, "confidence": 0.9, "stages": [{**s, "owner": "x"} for s in document["stages"]]}
    assert Diagnosis.from_dict(newer).to_dict() == document
