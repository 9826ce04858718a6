import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """One weight-file directory for the whole run, so each preset's weights are written once."""
    return str(tmp_path_factory.mktemp("models"))
