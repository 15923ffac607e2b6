"""The restart forecast holds on every containerd a GPU node runs (issue 18): each version against
each drop-in, forecast first, then restarted for real and asked through CRI (tests/containerd/
matrix.py). A forecast that differs from what the restart did fails its cell."""

import shutil
import tempfile

import pytest

from tests.helpers.labcontainerd import binary, crictl, nvidia_ctk_of
from tests.helpers.matrix import DROPINS, VERSIONS, cell
from tests.helpers.observed import DROPINS as SEEN_DROPINS
from tests.helpers.observed import OBSERVED
from tests.helpers.proc import run

pytestmark = [pytest.mark.daemons, pytest.mark.every_containerd]  # daemons of its own, no cluster: see pytest.ini

CELLS = [(v, d) for v in VERSIONS for d in DROPINS]


@pytest.fixture(scope="module")
def tools():
    """The lab's crictl, and a short directory for the cells' daemons (a unix
    socket path has at most 104 bytes; pytest's temporary paths are longer)."""
    base = tempfile.mkdtemp(prefix="gpuop-m-", dir="/tmp")
    yield {"crictl": crictl(), "base": base}
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("version,dropin", CELLS, ids=[f"{v}-{d}" for v, d in CELLS])
def test_the_forecast_equals_what_the_restart_did(tools, version, dropin):
    got = cell(version, dropin, binary(version), tools["crictl"], nvidia_ctk_of, tools["base"])
    assert got.forecast == got.observed, (
        f"{version} {dropin}: forecast {got.forecast} ({got.reason}), the restart: {got.observed} ({got.said})"
    )
    if not got.observed.startswith("ok "):
        assert f"containerd {'.'.join(version.split('.')[:2])}:" in got.reason  # its version's rule
    seen = dict(zip(SEEN_DROPINS, OBSERVED[version]))[dropin]  # as recorded for the unit tests
    assert (got.written, got.observed) == seen if isinstance(seen, tuple) else got.observed == seen


@pytest.mark.parametrize("version", VERSIONS)
def test_make_picks_the_version_asked_for(version):
    """`make run CONTAINERD=<v>` runs the playbook with that containerd (1.6.20: Debian's)."""
    planned = run(["make", "-n", "run", f"CONTAINERD={version}"], timeout_s=60, check=True).stdout
    if version == "1.6.20":
        assert "containerd_binary" not in planned
    else:
        assert f"--data containerd_binary=$(lab/build.sh containerd {version})/containerd" in planned
    refused = run(["make", "-n", "run", "CONTAINERD=1.5.0"], timeout_s=60)
    assert refused.returncode != 0 and "CONTAINERD=1.5.0: expected debian, 1.6.20 or one of" in refused.stderr
