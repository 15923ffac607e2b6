"""The lab node's real containerd: loaded is what the daemon holds, a restart is forecast (issue 9).

Every test runs against a real daemon, Debian's containerd 1.6.20 and 2.4.2 built from its Go
module; the restart runs on every version of lab/versions.env too. 1.x and 2.x merge the
drop-in differently, and the forecast must say so on each. The module shares one lab root: each
test starts with a rerun of deploy.py that brings it to the incident on the version it needs
(switching the binary replays only the daemon's start).
"""

import pytest

from tests.helpers.expected import MERGE
from tests.helpers.kube import lab_up, reset_lab
from tests.helpers.labcontainerd import (
    binary,
    check_loaded,
    crictl_info,
    kill,
    loaded,
    restart,
    write_dropin_keeping_runc,
)
from tests.helpers.playbook import deploy, lab_daemon_pid, tree

pytestmark = [pytest.mark.lab, pytest.mark.every_containerd]  # see pytest.ini

# What a restart of each version's daemon loads, with the incident's files on disk.
ONE_X_FAILS = (
    "RESTART_RUNTIMES=nvidia",
    "RESTART_CRI=fails",
    'RESTART_REASON=default_runtime_name "runc" has no runtime in containerd.runtimes '
    "(configured: nvidia); containerd {minor}: the runtimes an imported file names replace "
    "the main config's whole",
)
FORECAST = {
    "1.6.20": [
        *ONE_X_FAILS[:2],
        ONE_X_FAILS[2].format(minor="1.6")
        + "; a version above 2 is not checked (1.6.32 and 1.7.17 stop the daemon on it)",
    ],
    "1.7.35": [*ONE_X_FAILS[:2], ONE_X_FAILS[2].format(minor="1.7") + " and a version above 2 stops the daemon"],
    **{
        v: ["RESTART_RUNTIMES=nvidia,runc", "RESTART_CRI=ok"]
        for v in ("2.0.5", "2.0.14", "2.1.9", "2.2.9", "2.3.3", "2.4.2")
    },
}


# Every test runs on one version of each merge (Debian's 1.x, the newest 2.x); the restart, the
# one thing each version decides for itself, runs on all of them.
EACH_MERGE = ("1.6.20", "2.4.2")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The module's lab root, on a lab cluster as `make lab-up` leaves it."""
    lab_up()  # whatever the lab's tests before it left: kwok's nodes again
    reset_lab()
    return tmp_path_factory.mktemp("containerd") / "gpuop"


def incident_on(root, version):
    """The incident with the lab node on containerd ``version``, from whatever the last test
    left: (root, version, data)."""
    data = (f"containerd_binary={binary(version)}",)
    run = deploy(root, *data)
    assert run.code == 0, run.log
    return root, version, data


@pytest.fixture(scope="module", params=EACH_MERGE)
def version(request):
    return request.param  # module-scoped: the tests of one version run together


@pytest.fixture
def lab(root, version):
    return incident_on(root, version)


def report(root, name):
    return (root / "out" / name).read_text()


def files(root):
    return {rel: body for rel, (_, _, body) in tree(root).items() if body is not None and ".gpuop-bak." not in rel}


def restart_lines(version):
    return [f"CONTAINERD_VERSION={version}", "LOADED_RUNTIMES=runc", "LOADED_FROM=cri", *FORECAST[version]]


def assert_incident_daemon(root, version):
    """The daemon holds runc alone while the drop-in declaring nvidia is on disk; the reports say so."""
    assert loaded(root) == ["runc"]
    assert "runtimes.nvidia]" in (root / "etc/containerd/conf.d/99-nvidia.toml").read_text()
    assert report(root, "merge.txt") == MERGE
    assert report(root, "restart.txt").splitlines() == restart_lines(version)


def test_loaded_is_the_daemon_s_answer_and_a_restart_is_forecast(lab):
    root, version, data = lab
    assert_incident_daemon(root, version)
    code, info = crictl_info(root)
    assert info["config"]["containerd"]["defaultRuntimeName"] == "runc"
    # The recorded observation is not what merge.txt reports where a daemon answers.
    run = deploy(root, *data, "loaded_runtimes_observed=bogus")
    assert run.code == 0 and run.changed == 0, run.changed_ops()
    assert report(root, "merge.txt") == MERGE


def test_check_loaded_says_the_incident_daemon_lacks_nvidia(lab):
    root, _, _ = lab
    result = check_loaded(root)
    assert result.returncode == 1, result
    assert "nvidia runtime NOT loaded; the daemon holds: runc" in result.stderr


def test_a_real_restart_does_what_the_forecast_said_and_a_rerun_replays_the_incident(lab):
    restart_then_replay(*lab)


@pytest.mark.parametrize("other", [v for v in FORECAST if v not in EACH_MERGE])
def test_every_other_version_restarts_as_forecast_and_replays_the_incident(root, other):
    root, version, data = incident_on(root, other)
    assert_incident_daemon(root, version)
    restart_then_replay(root, version, data)


def restart_then_replay(root, version, data):
    """A real restart of the incident's daemon does what restart.txt said; the rerun replays the
    incident, and the run after changes nothing."""
    fresh = files(root)
    restart(root, binary(version))
    code, info = crictl_info(root)
    if version.startswith("1."):
        # The CRI plugin refused to load: the node can run no Pod at all.
        assert code != 0 and "unknown service runtime.v1.RuntimeService" in info
        checked = check_loaded(root)
        assert checked.returncode == 2
        assert "the CRI of containerd at unix://" in checked.stderr and "does not answer" in checked.stderr
    else:
        assert code == 0 and sorted(info["config"]["containerd"]["runtimes"]) == ["nvidia", "runc"]
        assert check_loaded(root).returncode == 0
    run = deploy(root, *data)
    assert run.code == 0, run.log
    assert "the lab containerd is not the incident's" in run.log
    assert_incident_daemon(root, version)
    assert files(root) == fresh
    again = deploy(root, *data)
    assert again.code == 0 and again.changed == 0, again.changed_ops()


def test_a_killed_daemon_is_brought_back_at_its_moment(lab):
    root, version, data = lab
    fresh = files(root)
    kill(root)
    run = deploy(root, *data)
    assert run.code == 0, run.log
    assert "the lab containerd is not the incident's: it died (pid " in run.log
    assert_incident_daemon(root, version)
    assert files(root) == fresh
    assert not list((root / ".gpuop/conf.d-aside").iterdir())  # the drop-in is back, nothing left aside
    again = deploy(root, *data)
    assert again.code == 0 and again.changed == 0, again.changed_ops()


def test_a_drop_in_that_keeps_runc_loads_nvidia_after_a_restart(lab):
    root, version, data = lab
    write_dropin_keeping_runc(root)
    restart(root, binary(version))
    assert loaded(root) == ["nvidia", "runc"]
    result = check_loaded(root)
    assert result.returncode == 0, result
    assert "nvidia runtime loaded" in result.stdout
    # The rerun replays the incident: the seed's drop-in is back (the other one kept), runc only.
    run = deploy(root, *data)
    assert run.code == 0, run.log
    assert_incident_daemon(root, version)
    assert list((root / "etc/containerd/conf.d").glob("99-nvidia.toml.gpuop-bak.*"))


@pytest.mark.parametrize("containerd_binary", ["", "/nonexistent/containerd"])
def test_without_a_lab_containerd_loaded_is_the_recorded_observation(tmp_path, containerd_binary):
    root = tmp_path / "gpuop"  # a root of its own beside the module's, on the same cluster
    data = (f"containerd_binary={containerd_binary}", "loaded_runtimes_observed=runc,bogus")
    run = deploy(root, *data)
    assert run.code == 0, run.log
    assert report(root, "merge.txt").splitlines()[-1] == "LOADED_RUNTIMES=runc,bogus"
    assert report(root, "restart.txt") == (
        "CONTAINERD_VERSION=none\nLOADED_RUNTIMES=runc,bogus\nLOADED_FROM=recorded\nRESTART_RUNTIMES=\n"
        "RESTART_CRI=unknown\nRESTART_REASON=no lab containerd on this host to ask\n"
    )
    assert lab_daemon_pid(root) is None
    again = deploy(root, *data)
    assert again.code == 0 and again.changed == 0, again.changed_ops()


def test_drop_ins_left_aside_by_an_interrupted_run_come_back_and_nothing_is_lost(lab):
    """A run stopped between setting the drop-in aside and putting it back; meanwhile someone
    wrote another drop-in of the same name. The rerun loses neither."""
    root, version, data = lab
    aside = root / ".gpuop/conf.d-aside"
    aside.mkdir(parents=True, exist_ok=True)
    dropin = root / "etc/containerd/conf.d/99-nvidia.toml"
    seed = dropin.read_text()
    dropin.rename(aside / "99-nvidia.toml")
    kill(root)
    dropin.write_text(seed + "# written by hand meanwhile\n")
    run = deploy(root, *data)
    assert run.code == 0, run.log
    assert_incident_daemon(root, version)
    assert not list(aside.iterdir())
    kept = sorted(p.read_text() for p in dropin.parent.glob("99-nvidia.toml.gpuop-bak.*"))
    assert seed in kept and seed + "# written by hand meanwhile\n" in kept
    assert dropin.read_text() == seed
