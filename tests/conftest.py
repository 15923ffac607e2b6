import os
import sys

# Tests import the project's modules (gpuop, facts, operations) from the repository root.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.chdir(ROOT)


import pytest  # noqa: E402

pytest_plugins = ["pytester"]  # tests/harness: a suite run inside the suite


def pytest_collection_modifyitems(items):
    """The tests that need every containerd built (marker every_containerd) run after the rest,
    in the order they had: on a new machine `make test` builds them beside the tests meanwhile."""
    items.sort(key=lambda item: item.get_closest_marker("every_containerd") is not None)


@pytest.fixture(scope="session", autouse=True)
def lab_daemons_stop_at_the_end(tmp_path_factory):
    """Every run's lab containerd lives under pytest's temporary roots; none outlives the tests."""
    yield
    from tests.helpers.playbook import stop_daemons_under

    stop_daemons_under(tmp_path_factory.getbasetemp())
