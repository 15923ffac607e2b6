"""Nothing in the suite waits without an end, and neither does the product (issues 17 and 21)."""

import os
import time

import pytest

from tests.helpers.playbook import CLUSTER_WORDS, deploy
from tests.helpers.proc import run

HANG_MARK = "gpuop-test-kubectl-that-hangs"


@pytest.fixture
def kubectl_that_hangs(tmp_path):
    """A ``kubectl`` first on PATH that says one line and then never answers (an API server that
    accepts connections and stalls)."""
    bin_dir = tmp_path / "hangbin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"
    fake.write_text(f"#!/bin/sh\necho '{HANG_MARK}: asked' >&2\nexec sleep 3600 # {HANG_MARK}\n")
    fake.chmod(0o755)
    yield {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    run(["pkill", "-f", HANG_MARK], timeout_s=10)


def left_running() -> list:
    return run(["pgrep", "-f", f"sleep 3600 # {HANG_MARK}"], timeout_s=10).stdout.split()


def test_a_run_that_hangs_fails_its_test_within_the_deadline(tmp_path, kubectl_that_hangs):
    """The test's own deadline is shorter than the product's: the test fails, naming the run and
    its last output, and what the run started is gone with it."""
    started = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        deploy(tmp_path / "gpuop", env=kubectl_that_hangs, timeout_s=8)
    took = time.monotonic() - started
    said = str(failed.value)
    assert said.startswith("did not finish within 8s: ") and "inventory.py deploy.py" in said, said
    assert "--- its last errors:" in said
    assert 8 <= took < 20, took
    assert left_running() == []  # the run's whole session was killed, its kubectl too


def test_a_kubectl_that_hangs_fails_the_run_naming_it(tmp_path, kubectl_that_hangs):
    """The product's own deadline: a kubectl that never answers ends after its deadline, and the
    run fails before changing anything, saying that the cluster did not answer in time."""
    root = tmp_path / "gpuop"
    started = time.monotonic()
    result = deploy(root, env=kubectl_that_hangs, timeout_s=120)
    took = time.monotonic() - started
    assert result.code != 0
    assert (
        f"[@local] preflight: the cluster of {CLUSTER_WORDS} is unreachable: "
        "kubectl gave no answer within 30s (it said: gpuop-test-kubectl-that-hangs: asked); "
        "nothing was changed"
    ) in result.log, result.log
    assert took < 60, took
    assert not (root / "etc").exists()


def test_a_test_that_hangs_fails_and_the_suite_goes_on(pytester):
    pytester.makepyfile(
        test_inner="""
        import time
        import pytest

        @pytest.mark.timeout(2)
        def test_hangs():
            time.sleep(60)

        def test_after_it():
            assert True
    """
    )
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    assert time.monotonic() - started < 60
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*Timeout (>2.0s) from pytest-timeout*"])
