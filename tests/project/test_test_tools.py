"""The one rule for a program a test drives (tests/helpers/tools.py): skipped where missing, saying how to
install it; a failure under CI where .ci/run installs it."""

import pytest

from tests.helpers.tools import tool_path


def test_a_missing_program_skips_the_test_and_says_how_to_install_it(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"tmux is not installed \(apt-get install tmux\)"):
        tool_path("tmux")


def test_under_ci_a_program_ci_installs_must_be_there(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing under CI"):
        tool_path("promtool")
    with pytest.raises(pytest.skip.Exception):       # CI does not install kubectl: still a skip
        tool_path("kubectl")
