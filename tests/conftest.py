import pytest

from tests.helpers.needs import kinds_of
from tests.helpers.tools import tool_path


def pytest_collection_modifyitems(items):
    """Each test marked `engine` and `server` as its file needs them (tests/helpers/needs.py)."""
    for item in items:
        for kind in sorted(kinds_of(item.path)):
            item.add_marker(kind)


def pytest_runtest_setup(item):
    """`@pytest.mark.tool("NAME")`: the test needs that program (tests/helpers/tools.py says what a missing one
    does)."""
    for mark in item.iter_markers("tool"):
        tool_path(*mark.args)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """One weight-file directory for the whole run, so each preset's weights are written once."""
    return str(tmp_path_factory.mktemp("models"))
