"""The fix's predicted effect as the diagnosis and the TUI say it: a fix that leaves P99 TTFT where it is says so,
rather than show two equal figures for the reader to compare."""

from stagelens.whatif.fix_effect import render_effect, short_effect


def effect(before: float, after: float) -> dict:
    return {"set": {"allocator": "paged"}, "extrapolated": False,
            "predicted": {"ttft_p99_s": [before, after], "throughput_tokens_per_s": [60.0, 60.0]}}


def test_a_fix_that_moves_p99_ttft_shows_the_move_only():
    text = render_effect(effect(0.9, 0.2))
    assert "ttft_p99 900 -> 200 ms" in text and "unchanged" not in text
    assert "unchanged" not in short_effect(effect(0.9, 0.2))


def test_a_fix_predicted_alike_today_says_p99_ttft_is_unchanged():
    assert render_effect(effect(0.2000, 0.2001)).endswith("; P99 TTFT unchanged at today's load")
    assert short_effect(effect(0.2000, 0.2001)).endswith("; P99 TTFT unchanged at today's load")


def test_requests_the_simulation_left_out_are_said_beside_the_effect():
    left_out = {**effect(2.0, 1.0), "requests_never_run": 3}
    assert "(3 of the recorded requests left out: they could never run)" in render_effect(left_out)
    assert "(3 of the recorded requests left out: they could never run)" in short_effect(left_out)
