"""The fleet screen (agent/tui/fleet/) driven by Textual's pilot: FleetView objects built by hand and posted as the
refresh thread posts them (`Fetched`), the thread off, and a tiny fake query standing in for Prometheus's answers
where a test presses `r`. Snapshots at 80×24 and 160×48 (update with `pytest tests/tui/test_tui_fleet.py
--snapshot-update` after looking at the new SVGs). The query itself is tested in test_fleet_output.py."""

from __future__ import annotations

import threading

import pytest

import stagelens.tui.fleet as fleet_pkg
from stagelens.errors import UserError
from stagelens.fleet.model import Evidence, FleetView, NodeRow, stage_cells
from stagelens.tui.feed import Feed, Poll
from stagelens.tui.fleet import FleetApp, open_node_tui, run_fleet_app
from stagelens.tui.fleet.app import Fetched
from stagelens.tui.fleet.help import FleetHelpScreen
from stagelens.tui.fleet.node import NodeApp
from stagelens.tui.fleet.refresher import Refresher
from tests.helpers.tui_support import text_of

NOW = 1_700_000_000.0   # 2023-11-14T22:13:20Z: every age on screen counts from the answer's time
PROM = "http://prometheus:9090"
ALL_OK = {s: ("ok", NOW - 7200) for s in ("kv_cache", "scheduler", "cold_path")}


def node(n: int, verdict: str, labels: dict, **kwargs) -> NodeRow:
    kwargs.setdefault("stages", stage_cells(ALL_OK))
    kwargs.setdefault("frame_age_s", 1.0)
    return NodeRow(f"10.0.0.{n}:9400", labels, kwargs.pop("up", True), verdict, kwargs.pop("root_stage", None),
                   url=kwargs.pop("url", f"http://10.0.0.{n}:9400"), **kwargs)


def rows() -> list[NodeRow]:
    """Six nodes, in no particular order: ok, warn, down, firing, unknown, and ok with its agent's frames stale."""
    return [
        node(1, "ok", {"cluster": "eu-1", "gpu": "h100", "model": "llama-70b"}),
        node(2, "warn", {"cluster": "us-2", "gpu": "a100", "model": "llama-8b"}, root_stage="kv_cache",
             stages=stage_cells({**ALL_OK, "kv_cache": ("warn", NOW - 300)}),
             evidence=Evidence("kv_cache", "kv_fragmentation_ratio", "warn", 0.41, "ratio"),
             tail={"kv_cache": 0.4, "scheduler": 0.1, "cold_path": 0.0, "compute": 0.5}),
        node(3, "unknown", {"cluster": "eu-1", "gpu": "h100"}, up=False, stages=stage_cells({}), frame_age_s=None),
        node(4, "firing", {"cluster": "eu-1", "gpu": "h100", "model": "llama-70b"}, root_stage="scheduler",
             stages=stage_cells({"kv_cache": ("ok", NOW - 3600), "scheduler": ("firing", NOW - 180),
                                 "cold_path": ("warn", NOW - 45)}),
             evidence=Evidence("scheduler", "scheduler_wait_p99", "firing", 0.9, "seconds"),
             tail={"kv_cache": 0.1, "scheduler": 0.62, "cold_path": 0.0, "compute": 0.28}),
        node(5, "unknown", {"cluster": "us-2", "gpu": "l40s"}, stages=stage_cells({}), url=None),
        node(6, "ok", {"cluster": "us-2", "gpu": "a100", "model": "llama-8b"}, frame_age_s=95.0,
             collector_failures=2),
    ]


SEVERITY_ORDER = ["10.0.0.3:9400", "10.0.0.4:9400", "10.0.0.2:9400", "10.0.0.1:9400", "10.0.0.6:9400",
                  "10.0.0.5:9400"]   # down, firing, warn, ok (by instance), unknown


def view(rows_=None, error=None, fetched=NOW) -> FleetView:
    return FleetView(rows() if rows_ is None else rows_, fetched_unix=fetched, error=error, prometheus=PROM)


class FakeQuery:
    """Prometheus's answers, one a fetch (the last one repeats)."""

    prometheus_url = PROM
    selector = '{job="stagelens"}'

    def __init__(self, *answers: FleetView) -> None:
        self.answers = list(answers) or [view()]
        self.fetches = 0

    def fetch(self) -> FleetView:
        self.fetches += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def make_app(*answers: FleetView, **kwargs) -> FleetApp:
    return FleetApp(FakeQuery(*answers), autopoll=False, **kwargs)


async def show(app, pilot, fleet: FleetView | None = None) -> None:
    app.post_message(Fetched(fleet or view()))
    await pilot.pause()


def shown(app) -> list[str]:
    return [row.instance for row in app.shown]


# --- the screen --------------------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_rows_sort_most_severe_first_with_the_counts_and_the_source_on_top():
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        assert "asking Prometheus" in text_of(app) and "STARTING" in text_of(app)
        await show(app, pilot)
        assert shown(app) == SEVERITY_ORDER and app.table.row_count == 6
        screen = text_of(app)
        assert "● LIVE" in screen and PROM in screen and "22:13:20Z" in screen and "every 5s" in screen
        assert "6 nodes  1 DOWN  1 FIRING  1 WARN  2 OK  1 UNKNOWN" in screen
        lines = screen.splitlines()
        firing = next(line for line in lines if "10.0.0.4:9400" in line)
        for piece in ("FIRING", "scheduler", "OK 1h", "FIRING 3m", "WARN 45s", "scheduler_wait_p99 900 ms",
                      "scheduler 62%", "up"):
            assert piece in firing
        assert "DOWN" in next(line for line in lines if "10.0.0.3:9400" in line)
        assert "frames 1m old, 2 failing" in next(line for line in lines if "10.0.0.6:9400" in line)
        await pilot.press("down")
        assert "scheduler FIRING 3m (since 22:10:20Z)   cold path WARN 45s (since 22:12:35Z)" in text_of(app)


@pytest.mark.asyncio
async def test_the_arrows_move_the_selection_and_the_detail_follows():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await show(app, pilot)
        assert app.selected_row.instance == "10.0.0.3:9400"
        await pilot.press("down")
        assert app.selected_row.instance == "10.0.0.4:9400"
        screen = text_of(app)
        assert "evidence  scheduler_wait_p99 900 ms FIRING" in screen
        assert "scheduler 62%  compute 28%  kv_cache 10%  cold_path 0%" in screen
        assert "KV cache OK 1h   scheduler FIRING 3m   cold path WARN 45s" in screen   # no room for the times
        await pilot.press("down", "down", "up")
        assert app.selected_row.instance == "10.0.0.2:9400"
        await pilot.press("end")
        assert app.selected_row.instance == "10.0.0.5:9400"


@pytest.mark.asyncio
async def test_the_selection_stays_on_its_node_when_a_refresh_reorders_the_rows():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await show(app, pilot)
        await pilot.press("down", "down")
        assert app.selected_row.instance == "10.0.0.2:9400"
        calmer = [r for r in rows() if r.instance != "10.0.0.4:9400"]   # the firing node is gone
        await show(app, pilot, view(calmer))
        assert app.selected_row.instance == "10.0.0.2:9400" and app.table.cursor_row == 1


@pytest.mark.asyncio
async def test_enter_ends_the_fleet_screen_with_the_selected_nodes_url():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await show(app, pilot)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert not app.is_running
    assert app.return_value == "http://10.0.0.4:9400"
    assert app.memory.selected == "10.0.0.4:9400"


@pytest.mark.asyncio
async def test_enter_on_a_node_without_an_agent_url_says_so_and_stays():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await show(app, pilot)
        await pilot.press("end", "enter")
        await pilot.pause()
        assert app.is_running
        assert "no agent URL" in " ".join(n.message for n in app._notifications)


@pytest.mark.asyncio
async def test_slash_filters_by_label_and_esc_clears():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await show(app, pilot)
        await pilot.press("slash", *"cluster=eu-1 gpu=h100")
        assert app.focused is app.filter_input
        assert shown(app) == ["10.0.0.3:9400", "10.0.0.4:9400", "10.0.0.1:9400"]   # narrowed as it is typed
        await pilot.press("enter")
        assert app.focused is app.table and not app.filter_input.has_class("-open")
        screen = text_of(app)
        assert "3 of 6 nodes" in screen and "filter cluster=eu-1 gpu=h100" in screen and "10.0.0.2:9400" not in screen
        await pilot.press("slash", "ctrl+u", *"model=llama-8b", "enter")   # the kept filter, edited
        assert shown(app) == ["10.0.0.2:9400", "10.0.0.6:9400"]
        await pilot.press("escape")
        assert shown(app) == SEVERITY_ORDER and app.memory.filter_text == ""


@pytest.mark.asyncio
async def test_a_word_matches_the_instance_or_a_label_and_a_bad_term_is_not_applied():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await show(app, pilot)
        await pilot.press("slash", *"l40s")
        assert shown(app) == ["10.0.0.5:9400"]
        await pilot.press("ctrl+u", *"=x")
        assert app.filter_input.has_class("-invalid") and shown(app) == SEVERITY_ORDER   # '' applied before '='
        await pilot.press("enter")
        assert app.focused is app.filter_input and "expected LABEL=VALUE" in " ".join(
            n.message for n in app._notifications)
        await pilot.press("escape")
        assert shown(app) == SEVERITY_ORDER and app.focused is app.table


@pytest.mark.asyncio
async def test_a_failed_refresh_shows_stale_with_the_reason_and_keeps_the_rows():
    why = f"prometheus {PROM}: could not connect: Connection refused"
    app = make_app(view(), view(error=why), view([], error=why))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("r")
        assert "● LIVE" in text_of(app) and len(app.shown) == 6
        await pilot.press("r")                          # the query's failure: the last rows, the reason
        screen = text_of(app)
        assert "▲ STALE" in screen and "STALE: could not connect: Connection refused — rows as of 22:13:20Z" in screen
        assert shown(app) == SEVERITY_ORDER
        await pilot.press("r")                          # a failure that lost the rows: the screen keeps its own
        assert "▲ STALE" in text_of(app) and shown(app) == SEVERITY_ORDER
        await show(app, pilot, view())                  # and the next answer is LIVE again
        assert "● LIVE" in text_of(app) and "STALE" not in text_of(app)
        assert app.fleet_query.fetches == 3


@pytest.mark.asyncio
async def test_q_quits_but_is_typed_in_the_filter():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await show(app, pilot)
        await pilot.press("slash", "q")
        assert app.is_running and app.filter_input.value == "q"
        await pilot.press("escape", "q")
        await pilot.pause()
        assert not app.is_running
    assert app.return_value is None


@pytest.mark.asyncio
async def test_question_mark_opens_the_help_and_any_key_closes_it():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, FleetHelpScreen) and "LABEL=VALUE" in text_of(app)
        await pilot.press("x")
        assert not isinstance(app.screen, FleetHelpScreen) and app.is_running


@pytest.mark.asyncio
async def test_no_target_says_which_selector_matched_nothing():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await show(app, pilot, view([]))
        assert '0 nodes' in text_of(app) and 'no target matches {job="stagelens"}' in text_of(app)


# --- opening a node and coming back ------------------------------------------------------------------------
class HeadlessFleet(FleetApp):
    """The fleet screen as run_fleet_app runs it, headless, each run driven by the next script."""
    scripts: list = []
    seen: list = []

    def run(self, **kwargs):
        script = self.scripts.pop(0)

        async def drive(pilot):
            await pilot.pause()
            for _ in range(200):       # the refresh thread's first answer (on the first screen)
                if self.shown:
                    break
                await pilot.pause(0.01)
            self.seen.append((list(shown(self)), self.memory.filter_text, self.selected_row.instance,
                              [n.message for n in self._notifications]))
            await script(pilot)

        return super().run(headless=True, size=(100, 30), auto_pilot=drive)


def test_run_fleet_app_opens_the_node_and_comes_back_to_the_fleet_as_it_was_left(monkeypatch):
    async def filter_and_open(pilot):
        await pilot.press("slash", *"cluster=eu-1", "enter", "down", "enter")

    async def open_again(pilot):
        await pilot.press("up", "enter")

    async def quit_(pilot):
        await pilot.press("q")

    HeadlessFleet.scripts, HeadlessFleet.seen = [filter_and_open, open_again, quit_], []
    monkeypatch.setattr(fleet_pkg, "FleetApp", HeadlessFleet)
    opened = []

    def open_node(url):
        opened.append(url)
        if len(opened) == 2:
            raise UserError("the agent is gone")

    query = FakeQuery()
    run_fleet_app(query, interval=60, open_node=open_node)
    assert opened == ["http://10.0.0.4:9400", "http://10.0.0.3:9400"]
    first, second, third = HeadlessFleet.seen
    assert first[1:3] == ("", "10.0.0.3:9400")
    assert second[:3] == (["10.0.0.3:9400", "10.0.0.4:9400", "10.0.0.1:9400"], "cluster=eu-1", "10.0.0.4:9400")
    assert third[2] == "10.0.0.3:9400" and any("the agent is gone" in m for m in third[3])
    assert query.fetches >= 3      # one refresh thread across the screens, asking again on each return


def test_open_node_returning_true_ends_the_fleet(monkeypatch):
    async def open_first(pilot):
        await pilot.press("enter")

    HeadlessFleet.scripts, HeadlessFleet.seen = [open_first], []
    monkeypatch.setattr(fleet_pkg, "FleetApp", HeadlessFleet)
    run_fleet_app(FakeQuery(), interval=60, open_node=lambda url: True)    # a signal in the node's TUI
    assert len(HeadlessFleet.seen) == 1


def test_a_url_that_can_never_answer_is_refused_before_any_screen():
    with pytest.raises(UserError, match="http"):
        open_node_tui("ftp://10.0.0.7:9400")


class IdleFeed(Feed):
    kind = "remote"

    def poll(self) -> Poll:
        return Poll()


@pytest.mark.asyncio
async def test_esc_leaves_the_node_tui_but_first_closes_a_screen_on_top():
    app = NodeApp(IdleFeed(), autopoll=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("t")                           # the topology screen: its own esc closes it
        assert app.screen is not app.screen_stack[0]
        await pilot.press("escape")
        assert app.is_running and app.screen is app.screen_stack[0]
        await pilot.press("escape")
        await pilot.pause()
        assert not app.is_running and not app.stopped_by_signal


def test_the_refresher_fetches_for_the_attached_screen_only():
    got, arrived = [], threading.Event()
    query = FakeQuery(view(), view(error="down"))
    refresher = Refresher(query, interval=60)

    def post(fleet):
        got.append(fleet)
        arrived.set()

    try:
        refresher.attach(post)
        assert arrived.wait(5) and got[0].error is None
        arrived.clear()
        refresher.wake()                                 # `r`: now, not in 60 s
        assert arrived.wait(5) and got[1].error == "down"
        refresher.detach()
        arrived.clear()
        refresher.wake()
        assert not arrived.wait(0.2) and len(got) == 2   # nobody attached: Prometheus is not asked
    finally:
        refresher.stop()


# --- snapshots ---------------------------------------------------------------------------------------------
SIZES = [(80, 24), (160, 48)]


def _answer(fleet: FleetView, *keys: str):
    async def run_before(pilot) -> None:
        pilot.app.post_message(Fetched(fleet))
        await pilot.pause()
        if keys:
            await pilot.press(*keys)
    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_fleet(snap_compare, size):
    """The firing node selected: its evidence, tail and agent in the detail pane below the table."""
    assert snap_compare(make_app(), terminal_size=size, run_before=_answer(view(), "down"))


def test_snapshot_stale_and_filtered(snap_compare):
    why = f"prometheus {PROM}: no complete answer within 5 s"
    assert snap_compare(make_app(memory=fleet_pkg.FleetMemory(filter_text="cluster=us-2")), terminal_size=(80, 24),
                        run_before=_answer(view(error=why)))


def test_snapshot_help(snap_compare):
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=_answer(view()), press=["question_mark"])
