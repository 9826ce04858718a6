import pytest

from tests.helpers.tools import tool_path


def pytest_runtest_setup(item):
    """`@pytest.mark.tool("NAME")`: the test needs that program (tests/helpers/tools.py says what a missing one
    does)."""
    for mark in item.iter_markers("tool"):
        tool_path(*mark.args)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """One weight-file directory for the whole run, so each preset's weights are written once."""
    return str(tmp_path_factory.mktemp("models"))
