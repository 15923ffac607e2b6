import os
import sys
import time

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


HEALED = pytest.StashKey[list]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test of a lab cluster (marker lab or beside) starts on a whole control plane, whatever a
    test before it left (a controller that gave its lease up during an earlier test's disturbance
    has exited, and nothing would schedule or delete again): before its fixtures, one look
    (tests/helpers/kube.py control_plane_faults), and `lab/lab.sh heal` where anything is down,
    said in the suite's output. The test can read what was healed (fixture lab_healed)."""
    if not (item.get_closest_marker("lab") or item.get_closest_marker("beside")):
        return
    from tests.helpers import LAB
    from tests.helpers.kube import control_plane_faults, heal_lab

    faults = item.stash[HEALED] = control_plane_faults()
    if faults:
        started = time.monotonic()
        heal_lab()
        said = (
            f"lab {LAB} healed before {item.nodeid}: {'; '.join(faults)} "
            f"(lab/lab.sh heal, {time.monotonic() - started:.0f}s)"
        )
        with item.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
            item.config.pluginmanager.getplugin("terminalreporter").write_line("\n" + said)


@pytest.fixture
def lab_healed(request) -> list:
    """What of the lab's control plane was down before this test and healed (empty: it was whole)."""
    return request.node.stash.get(HEALED, [])


@pytest.fixture(scope="session", autouse=True)
def lab_daemons_stop_at_the_end(tmp_path_factory):
    """Every run's lab containerd lives under pytest's temporary roots; none outlives the tests."""
    yield
    from tests.helpers.playbook import stop_daemons_under

    stop_daemons_under(tmp_path_factory.getbasetemp())
