"""The cluster reach's read Pod (gpuop/reach/nodepod.py): its command, its log read back, its state."""

import subprocess
import time

from gpuop.reach import nodepod

TOKEN = "gpuop-0123456789abcdef"


def through_the_pod_shell(command: str) -> str:
    """What the read Pod's log holds for ``command``: its wrapped script run by a real sh."""
    return subprocess.run(
        ["sh", "-c", nodepod.wrapped(command, TOKEN)], capture_output=True, text=True, timeout=10, check=True
    ).stdout


def test_stdout_stderr_and_the_exit_status_come_back_apart():
    log = through_the_pod_shell("echo one; echo oops >&2; echo two; exit 3")
    assert nodepod.parsed_log(log, TOKEN) == (3, ["one", "two"], ["oops"])


def test_stderr_written_amid_a_long_stdout_line_does_not_cut_it():
    # as tar's warnings amid the base64 of the node's files
    log = through_the_pod_shell("i=0; while [ $i -lt 50 ]; do printf '%04000d' 0; echo w$i >&2; i=$((i+1)); done; echo")
    assert nodepod.parsed_log(log, TOKEN) == (0, ["0" * 200000], [f"w{i}" for i in range(50)])


def test_a_command_that_succeeds_says_0_and_its_output_may_not_forge_the_marks():
    log = through_the_pod_shell("echo 'gpuop-ffff exit 9'; printf 'no newline'")
    assert nodepod.parsed_log(log, TOKEN) == (0, ["gpuop-ffff exit 9", "no newline"], [])


def test_a_background_child_does_not_hold_the_status_back():
    started = time.monotonic()
    log = through_the_pod_shell("(sleep 5 >/dev/null 2>&1 4>&- &); echo done")
    assert nodepod.parsed_log(log, TOKEN) == (0, ["done"], [])
    assert time.monotonic() - started < 4


def test_a_log_that_ends_before_the_command_has_no_status():
    assert nodepod.parsed_log("half of it\n", TOKEN) == (None, ["half of it"], [])


def test_the_pod_is_bound_privileged_in_the_nodes_namespaces_and_labelled():
    pod = nodepod.pod_manifest("gpu-a", "cat /etc/hostname", TOKEN, "busybox:1.37", "default", 150)
    spec = pod["spec"]
    # the read gives up first: the kubelet ends the Pod a margin after the read's deadline
    assert (spec["nodeName"], spec["hostPID"], spec["activeDeadlineSeconds"]) == (
        "gpu-a",
        True,
        150 + nodepod.KUBELET_MARGIN_S,
    )
    assert spec["tolerations"] == [{"operator": "Exists"}] and spec["restartPolicy"] == "Never"
    [container] = spec["containers"]
    assert container["command"][:9] == ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--"]
    assert container["securityContext"] == {"privileged": True}
    assert pod["metadata"]["labels"][nodepod.NODE_LABEL] == "gpu-a"


def test_a_pod_that_did_not_start_is_said_with_its_wait_and_newest_event():
    pod = {
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"state": {"waiting": {"reason": "ErrImageNeverPull", "message": "image not present"}}}
            ],
        }
    }
    events = [
        {"reason": "Scheduled", "message": "old", "lastTimestamp": "2026-12-02T06:00:00Z"},
        {
            "reason": "ErrImageNeverPull",
            "message": 'Container image "x" is not present',
            "lastTimestamp": "2026-12-02T06:00:05Z",
        },
    ]
    assert nodepod.pod_state(pod, events) == (
        "phase Pending, container waiting: ErrImageNeverPull (image not present), "
        'last event ErrImageNeverPull: Container image "x" is not present'
    )
    assert nodepod.pod_state({"status": {"phase": "Pending"}}, []) == "phase Pending, no kubelet has taken it"


def test_a_pod_ended_before_it_ran_is_said_with_who_ended_it():
    evicted = {"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory. "}}
    assert nodepod.pod_state(evicted, []) == "phase Failed, reason Evicted (The node was low on resource: memory.)"


def test_a_pod_ran_only_once_its_container_ended():
    ended = {
        "status": {
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}],
        }
    }
    assert nodepod.finished(ended) and not nodepod.ran(ended)
    assert nodepod.ran(
        {"status": {"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"exitCode": 0}}}]}}
    )


def test_leftovers_are_ended_pods_and_those_past_their_deadline_not_a_live_read():
    def pod(name, phase, age_s, deadline_s=150):
        born = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - age_s))
        return {
            "metadata": {"name": name, "creationTimestamp": born},
            "spec": {"activeDeadlineSeconds": deadline_s},
            "status": {"phase": phase},
        }

    pods = [
        pod("done", "Succeeded", 5),
        pod("failed", "Failed", 5),
        pod("live", "Running", 20),
        pod("stuck", "Pending", 400),
    ]
    assert nodepod.leftovers(pods, time.time()) == ["done", "failed", "stuck"]


def test_a_read_pod_whose_image_cannot_be_pulled_is_given_up_after_two_tries():
    assert not nodepod.pull_given_up([])
    assert not nodepod.pull_given_up(["ContainerCreating", "ErrImagePull", "ImagePullBackOff"])
    assert nodepod.pull_given_up(["ContainerCreating", "ErrImagePull", "ImagePullBackOff", "ErrImagePull"])
    assert nodepod.pull_given_up(["InvalidImageName"])  # no retry can help
    pulling = {"status": {"containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull", "message": "x"}}}]}}
    assert nodepod.waiting_reason(pulling) == "ErrImagePull" and nodepod.waiting_reason({"status": {}}) == ""


# runc's answer through CRI-O's to a privileged container where the host's bounding set lacks a
# capability (seen on the lab's CRI-O 1.36.3: it grants every capability the kernel knows)
RUNC_REFUSED = (
    'container create failed: time="2026-12-04T13:47:07Z" level=warning msg="cannot toggle freezer: '
    'cgroups not configured for container"\n'
    'time="2026-12-04T13:47:07Z" level=warning msg="lstat : no such file or directory"\n'
    'time="2026-12-04T13:47:07Z" level=error msg="runc create failed: unable to start container '
    'process: unable to apply caps: operation not permitted"\n'
)


def test_a_runtimes_message_of_many_lines_is_said_in_one_its_error_kept():
    pod = {
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"state": {"waiting": {"reason": "CreateContainerError", "message": RUNC_REFUSED}}}],
        }
    }
    assert nodepod.pod_state(pod, [{"reason": "Failed", "message": "Error: first\nstderr: second\n"}]) == (
        "phase Pending, container waiting: CreateContainerError (container create failed: runc create failed: "
        "unable to start container process: unable to apply caps: operation not permitted), "
        "last event Failed: Error: first ... stderr: second"
    )
