"""A node read through the cluster: the short-lived Pod that runs one command on a node, as
``kubectl debug node/NAME --profile=sysadmin`` does, and what its log and status say.

Plain data in and out; ``runbook.reach.kubenode`` creates, watches and deletes the Pod. The Pod runs
the command in the node's own namespaces (``nsenter -t 1``: host PID, so PID 1 is the node's
init) by the node's own ``/bin/sh`` (a path: busybox's nsenter would run its own applets for a
bare ``sh``, and the node's tools are the ones to ask), privileged, bound to the node by name (no scheduler) and
tolerating every taint. Its
output comes back through its log, where stdout and stderr are one stream: stderr's lines and
the exit status are marked with a token of the read's own, so that no output can forge them.
"""

from datetime import datetime

from gpuop.judgment.containerd import in_one_line

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuop"}
NODE_LABEL = "gpuop.io/read-node"  # the node a read Pod reads: the next run removes what is left
NAME_PREFIX = "gpuop-read-"
# The node's commands are found as a login finds them, whatever PATH the image sets.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The kubelet ends a read Pod this long after the read's own deadline: the read gives up first
# and says where its Pod is (the two racing, the Pod's end would hide why it never ran).
KUBELET_MARGIN_S = 30


def wrapped(command: str, token: str) -> str:
    """``command`` as the read Pod's shell runs it: its stdout as is, then, once it has ended,
    each of its stderr lines after ``TOKEN err `` and its exit status as ``TOKEN exit N`` (held
    back till then, since one stream cannot interleave the two without cutting a line: a
    warning amid a long base64 line would corrupt it).

        wrapped("echo hi", "gpuop-1f") -> "exec 4>&1; e=$( ( echo hi ) 2>&1 1>&4 4>&-; echo \"$?\" ); ..."
    """
    return (
        f'exec 4>&1; e=$( ( {command} ) 2>&1 1>&4 4>&-; echo "$?" ); '
        f"printf '%s\\n' \"$e\" | sed -e '$!s/^/{token} err /' -e '$s/^/{token} exit /'"
    )


def parsed_log(text: str, token: str) -> tuple:
    """The read Pod's log, split back: (exit status or None when the log has none, stdout lines,
    stderr lines). The first mark may end a last stdout line that had no newline of its own.

        parsed_log("a\ngpuop-1f err oops\ngpuop-1f exit 3\n", "gpuop-1f") -> (3, ["a"], ["oops"])
    """
    status, out, err = None, [], []
    for line in text.splitlines():
        at = line.find(f"{token} ")
        if at > 0:
            out.append(line[:at])
            line = line[at:]
        if line.startswith(f"{token} err "):
            err.append(line[len(token) + 5 :])
        elif line.startswith(f"{token} exit ") and line[len(token) + 6 :].strip().isdigit():
            status = int(line[len(token) + 6 :])
        else:
            out.append(line)
    return status, out, err


def pod_manifest(node: str, command: str, token: str, image: str, namespace: str, deadline_s: int) -> dict:
    """The read Pod for ``node``: host PID, network and IPC, privileged, bound by ``nodeName``,
    every taint tolerated, never restarted, ended by the kubelet ``KUBELET_MARGIN_S`` after the
    read's ``deadline_s`` (``activeDeadlineSeconds``), no service account token, labelled for
    its cleanup.

        pod_manifest("gpu-a", "cat /etc/os-release", "gpuop-1f", "busybox:1.37", "default", 150)["spec"]["nodeName"]
        -> "gpu-a"
    """
    script = wrapped(command, token)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": NAME_PREFIX, "namespace": namespace, "labels": {**MANAGED_BY, NODE_LABEL: node}},
        "spec": {
            "nodeName": node,
            "hostPID": True,
            "hostNetwork": True,
            "hostIPC": True,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": deadline_s + KUBELET_MARGIN_S,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "read",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "/bin/sh", "-c", script],
                    "env": [{"name": "PATH", "value": PATH}],
                    "securityContext": {"privileged": True},
                }
            ],
        },
    }


def finished(pod: dict) -> bool:
    """Whether the read Pod has ended (its container ran to an end, or it was ended)."""
    return ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed")


def ran(pod: dict) -> bool:
    """Whether the read Pod's container ran to an end (it has a log to read)."""
    return any(
        (cs.get("state") or {}).get("terminated") for cs in (pod.get("status") or {}).get("containerStatuses") or []
    )


# A pull that fails for good at once (no retry can help), and one the kubelet retries after a back-off.
_PULL_REFUSED = ("InvalidImageName", "ErrImageNeverPull")
_PULL_FAILED = "ErrImagePull"
PULL_TRIES = 2  # a read Pod whose image failed to pull this many times is given up on


def waiting_reason(pod: dict) -> str:
    """The read container's waiting reason, or empty.

    waiting_reason({"status": {"containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}})
    -> "ErrImagePull"
    """
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return reason
    return ""


def pull_given_up(reasons: list) -> bool:
    """Whether the read Pod's image is not to be waited for any more, from its container's waiting
    reasons in the order seen: refused outright, or failed ``PULL_TRIES`` times (each failure is
    an ErrImagePull after something else, the kubelet's ImagePullBackOff between them).

        pull_given_up(["ContainerCreating", "ErrImagePull", "ImagePullBackOff", "ErrImagePull"]) -> True
    """
    if any(r in _PULL_REFUSED for r in reasons):
        return True
    failures = sum(1 for i, r in enumerate(reasons) if r == _PULL_FAILED and (i == 0 or reasons[i - 1] != r))
    return failures >= PULL_TRIES


def pod_state(pod: dict, events: list) -> str:
    """Where a read Pod is, in words on one line, for a read that did not complete: its phase,
    its container's waiting or end reason, and the newest of its events.

        pod_state({"status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting":
                  {"reason": "ErrImagePull", "message": "not found"}}}]}}, [])
        -> "phase Pending, container waiting: ErrImagePull (not found)"
    """
    status = pod.get("status") or {}
    words = [f"phase {status.get('phase') or 'unknown'}"]
    if status.get("reason"):  # the Pod's own end (evicted, its deadline), in the words of who ended it
        words.append(
            f"reason {status['reason']}" + (f" ({in_one_line(status['message'])})" if status.get("message") else "")
        )
    for cs in status.get("containerStatuses") or []:
        for how, state in (cs.get("state") or {}).items():
            if state and how in ("waiting", "terminated"):
                said = state.get("reason") or (f"exit {state.get('exitCode')}" if how == "terminated" else "")
                words.append(
                    f"container {how}: {said}" + (f" ({in_one_line(state['message'])})" if state.get("message") else "")
                )
    if (
        status.get("phase", "Pending") == "Pending"
        and not status.get("containerStatuses")
        and not status.get("conditions")
    ):
        words.append("no kubelet has taken it")
    newest = sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    if newest:
        e = newest[-1]
        words.append(f"last event {e.get('reason')}: {in_one_line(e.get('message') or '')}")
    return ", ".join(words)


def leftovers(pods: list, now_s: float) -> list:
    """The read Pods an earlier run left: ended ones, and those older than their deadline (the
    kubelet of a node gone never ends them); a running one within its deadline is another
    run's read, and stays.

        leftovers([{"metadata": {"name": "gpuop-read-x", "creationTimestamp": ...}, ...}], time.time())
        -> ["gpuop-read-x"]
    """
    found = []
    for pod in pods:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        born = meta.get("creationTimestamp")
        age = now_s - datetime.fromisoformat(str(born).replace("Z", "+00:00")).timestamp() if born else 0
        if finished(pod) or age > (spec.get("activeDeadlineSeconds") or 0) + 30:
            found.append(meta["name"])
    return sorted(found)
