"""Every alert has a runbook and every runbook an alert; each has its sections and its links resolve."""

import pathlib
import re

from stagelens.runbook_files import runbook_ref, runbook_stem, stage_runbook
from stagelens.vocabulary import STAGE_ALERTS, STAGES
from tests.helpers.alert_rules import read_alerts

RUNBOOK_DIR = pathlib.Path("runbooks")
SECTIONS = ["Meaning", "Impact", "Diagnosis", "Mitigation", "Escalation"]


def test_every_alert_has_a_runbook_and_every_runbook_an_alert():
    alerts = set(read_alerts())
    runbooks = {p.stem for p in RUNBOOK_DIR.glob("*.md")}
    assert alerts - runbooks == set(), "alerts without a runbook"
    assert runbooks - alerts == set(), "runbooks without an alert"


def test_every_runbook_url_resolves_to_a_file():
    for name, rule in read_alerts().items():
        assert pathlib.Path(rule["annotations"]["runbook_url"]).is_file(), name


def test_the_diagnosis_points_at_existing_runbooks():
    for stage in STAGES:
        assert pathlib.Path(stage_runbook(stage)).is_file(), stage


def test_a_runbook_is_named_after_its_alert_and_read_back_to_it():
    for stage, alert in STAGE_ALERTS.items():
        assert stage_runbook(stage) == runbook_ref(alert) == f"runbooks/{alert}.md"
        assert runbook_stem(stage_runbook(stage)) == alert


def test_each_runbook_has_its_sections_in_order_and_says_something_in_each():
    for path in RUNBOOK_DIR.glob("*.md"):
        text = path.read_text()
        assert text.startswith(f"# {path.stem}\n"), path
        headings = re.findall(r"^## (.+)$", text, flags=re.M)
        assert headings[: len(SECTIONS)] == SECTIONS, (path, headings)
        bodies = re.split(r"^## .+$", text, flags=re.M)[1:]
        assert all(len(body.strip()) > 40 for body in bodies), path


def test_runbooks_name_real_metrics_and_their_links_resolve(model_dir):
    from tests.helpers.exposition import exported_metric_names

    exported = exported_metric_names(model_dir)
    recorded = set(re.findall(r"- record: (\S+)", pathlib.Path("dashboards/prometheus/stagelens-recording.yml")
                              .read_text()))
    for path in RUNBOOK_DIR.glob("*.md"):
        text = path.read_text()
        for metric in set(re.findall(r"(?<![:\w])(stagelens_[a-z0-9_]+)", text)):
            assert metric in exported, (path.name, metric)
        for record in set(re.findall(r"\b((?:instance|cluster):[a-z0-9_]+:[a-z0-9_]+)", text)):
            assert record in recorded, (path.name, record)
        for link in re.findall(r"\]\(([^)#]+\.md)\)", text):
            assert (path.parent / link).is_file(), (path.name, link)


def test_stage_runbooks_carry_the_reports_fixes():
    kv = (RUNBOOK_DIR / "KVCacheStageFiring.md").read_text()
    assert "--allocator paged" in kv and "--block-size" in kv
    scheduler = (RUNBOOK_DIR / "SchedulerStageFiring.md").read_text()
    assert "--enable-chunked-prefill --max-num-batched-tokens 8192" in scheduler
    assert "--policy short-first" in scheduler and "--long-prefill-token-threshold" in scheduler
    cold = (RUNBOOK_DIR / "ColdPathStageFiring.md").read_text()
    assert "--num-preload-models 2" in cold and "anti-affinity" in cold and "stagelens topo" in cold
