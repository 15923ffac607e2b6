"""Several facts in one round trip: the real shell command, each part to its own fact."""

import pytest
from pyinfra.api import FactBase

from runbook.reach.batch import Batch, PartFailed
from runbook.reach.files import Files
from tests.helpers.proc import run as run_process


class Fails(FactBase):
    def command(self):
        return "echo half-way; exit 3"


def run(parts):
    batch = Batch()
    command = batch.command(parts)
    out = run_process(["sh", "-c", command], timeout_s=30, check=True)
    return batch.process(out.stdout.splitlines())


def test_each_part_gets_its_own_output(tmp_path):
    (tmp_path / "a.toml").write_text("x = 1\n")
    (tmp_path / "b.toml").write_text("")
    glob = str(tmp_path / "*.toml")
    files, missing = run(((Files, {"paths": (glob,)}), (Files, {"paths": (str(tmp_path / "none"),)})))
    assert files == {
        str(tmp_path / "a.toml"): {"mode": "644", "text": "x = 1\n"},
        str(tmp_path / "b.toml"): {"mode": "644", "text": ""},
    }
    assert missing == {}


def test_files_keep_their_modes_follow_links_and_skip_directories(tmp_path):
    script = tmp_path / "check.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    (tmp_path / "link.sh").symlink_to(script)
    (tmp_path / "dir.sh").mkdir()
    (files,) = run(((Files, {"paths": (str(tmp_path / "*.sh"),)}),))
    assert files == {
        str(script): {"mode": "755", "text": "#!/bin/sh\nexit 0\n"},
        str(tmp_path / "link.sh"): {"mode": "755", "text": "#!/bin/sh\nexit 0\n"},
    }


def test_files_that_come_back_unreadable_say_so():
    with pytest.raises(ValueError, match="came back unreadable"):
        Files().process(["bm90IGEgdGFy"])


def test_a_failed_part_is_its_exception_and_the_others_still_answer(tmp_path):
    (tmp_path / "a").write_text("kept\n")
    failed, files = run(((Fails, {}), (Files, {"paths": (str(tmp_path / "a"),)})))
    assert isinstance(failed, PartFailed) and "exited 3: half-way" in str(failed)
    assert files[str(tmp_path / "a")]["text"] == "kept\n"


def test_the_first_part_alone_ends_before_the_others_start(tmp_path):
    """What the first part does (a lock taken) holds for what the others read; without
    ``first_alone`` they all start at once."""
    from pyinfra.facts.server import Command

    mark = tmp_path / "taken"
    parts = (
        (Command, {"command": f"sleep 0.3; echo taken > {mark}; echo took"}),
        (Command, {"command": f"cat {mark}"}),
    )
    batch = Batch()
    ordered = run_process(["sh", "-c", batch.command(parts, first_alone=True)], timeout_s=30, check=True)
    assert batch.process(ordered.stdout.splitlines()) == ["took", "taken"]
    mark.unlink()
    together = run_process(["sh", "-c", batch.command(parts)], timeout_s=30, check=True)
    took, unread = batch.process(together.stdout.splitlines())
    assert took == "took" and isinstance(unread, PartFailed), unread


def test_the_server_s_refusal_is_its_own_line_not_kubectl_s_warning():
    from runbook.reach.kube import ServerAnswer

    answer = ServerAnswer().process(
        [
            "refused Warning: resource runtimeclasses/nvidia is missing the "
            "kubectl.kubernetes.io/last-applied-configuration annotation",
            'refused The RuntimeClass "nvidia" is invalid: handler: Invalid value: "nvidia": field is immutable',
            'create Error from server (AlreadyExists): error when creating "runtimeclass.yaml": '
            'runtimeclasses.node.k8s.io "nvidia" already exists',
        ]
    )
    assert answer == {
        "refused": 'The RuntimeClass "nvidia" is invalid: handler: Invalid value: "nvidia": field is immutable',
        "recreate": True,
    }
    invalid = ServerAnswer().process(
        [
            'refused The Pod "x" is invalid: spec.containers: Required value',
            'create The Pod "x" is invalid: spec.containers: Required value',
        ]
    )
    assert invalid["recreate"] is False  # not valid as written: applied as it is, to fail in the open
    assert ServerAnswer().process(["update-accepted"]) == {"refused": "", "recreate": False}


def test_kubectl_runs_with_its_collector_off_up_to_a_memory_limit_within_its_deadline(tmp_path):
    """The helper's command line, run by a shell as on a target: kubectl (here a script that
    says what it got) sees GOGC=off and GOMEMLIMIT through timeout, and its own arguments."""
    from runbook.reach.kube import kubectl

    fake = tmp_path / "kubectl"
    fake.write_text('#!/bin/sh\necho "GOGC=$GOGC GOMEMLIMIT=$GOMEMLIMIT args=$*"\n')
    fake.chmod(0o755)
    said = run_process(
        ["sh", "-c", f"PATH={tmp_path}:$PATH; {kubectl('kwok-x', 'get', 'nodes')}"], timeout_s=30, check=True
    )
    assert said.stdout == "GOGC=off GOMEMLIMIT=256MiB args=--context kwok-x --request-timeout=10s get nodes\n"
