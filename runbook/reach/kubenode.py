"""
Read a Kubernetes node through its cluster, with no SSH: ``@kubenode/NODE``.

Each command runs in one short-lived Pod bound to the node (``gpuop.reach.nodepod``: host PID,
privileged, in the node's own namespaces, as ``kubectl debug node/NODE --profile=sysadmin``),
and comes back through the Pod's log, which the API server reads from the node's kubelet. The
Pod is deleted once read, ends by itself at its deadline (``activeDeadlineSeconds``) if this
run dies first, and a later run removes any left on the node. The cluster is the one of the
host's ``kubeconfig`` and ``kube_context``; the image is ``node_pod_image`` (any image with a
shell and ``nsenter``), in namespace ``node_pod_namespace``.

.. code:: shell

    pyinfra @kubenode/gpu-a audit.py   # nodes.py names each node so with reach=cluster

Read-only: files cannot be put or got this way.
"""

import json
import secrets
import time

from pyinfra import logger
from pyinfra.api.exceptions import ConnectError, InventoryError
from pyinfra.connectors.base import BaseConnector
from pyinfra.connectors.util import CommandOutput, OutputLine, extract_control_arguments, make_unix_command_for_host

from gpuop.knobs import KnobError, parse_node_knobs
from gpuop.reach import nodepod

PROGRESS_S = 10  # how often a read Pod still running is said (one watch request each)


class KubeNodeConnector(BaseConnector):
    handles_execution = True

    @staticmethod
    def make_names_data(name=None):
        if not name:
            raise InventoryError("@kubenode needs the node's name: @kubenode/NODE")
        yield f"@kubenode/{name}", {"node_name": name}, ["@kubenode"]

    def connect(self) -> None:
        """The cluster's client (the kubernetes library is loaded here, by a fleet audit only), and
        the read Pods an earlier run left on this node, removed."""
        from kubernetes import client

        from gpuop.reach import kubeapi

        self.kubeapi = kubeapi
        try:
            self.knobs = parse_node_knobs(self.host.data)
        except KnobError as bad:
            raise ConnectError(f"{bad} (nothing was read)") from None
        self.node = self.knobs.node_name or self.host.name.split("/", 1)[-1]
        self.namespace = self.knobs.node_pod_namespace
        self.where = kubeapi.where(self.knobs.kubeconfig, self.knobs.kube_context)
        self.requests = 0
        try:
            self.api = kubeapi.api_client(self.knobs.kubeconfig, self.knobs.kube_context)
            self.core = client.CoreV1Api(self.api)
            self._remove_leftovers()
        except Exception as e:  # noqa: BLE001 (a missing file, a bad context, a refused or stalled API server)
            raise ConnectError(
                f"node {self.node} cannot be read through the cluster ({self.where}): "
                f"{self._words(e, self.knobs.cluster_read_timeout_s)}"
            ) from None

    def disconnect(self) -> None:
        api = getattr(self, "api", None)
        if api is not None:
            api.close()

    def _words(self, e: Exception, deadline_s: float) -> str:
        """A failed request in one sentence, with the API server's own words (an admission's refusal)."""
        try:
            message = json.loads(getattr(e, "body", None))["message"]
        except (TypeError, ValueError, KeyError):
            message = ""
        return self.kubeapi.in_words(e, deadline_s) + (f": {message}" if message else "")

    def _ask(self, call, *args, **kwargs):
        """One request to the API server, counted (the run's debug log says how many a read took)."""
        self.requests += 1
        return call(*args, **kwargs)

    def _timeout(self, left_s: float) -> tuple:
        left_s = max(0.1, left_s)
        return (min(self.kubeapi.CONNECT_TIMEOUT_S, left_s), left_s)

    def _remove_leftovers(self) -> None:
        pods = self._ask(
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=f"{nodepod.NODE_LABEL}={self.node}",
            _request_timeout=self._timeout(self.knobs.cluster_read_timeout_s),
        )
        found = [self.kubeapi.plain(self.api, p) for p in pods.items]
        for name in nodepod.leftovers(found, time.time()):
            logger.info(f"{self.host.print_prefix}removing read Pod {self.namespace}/{name}, left by an earlier run")
            self._delete(name)

    def _delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._ask(
                self.core.delete_namespaced_pod,
                name,
                self.namespace,
                grace_period_seconds=0,
                _request_timeout=self._timeout(self.knobs.cluster_read_timeout_s),
            )
        except ApiException as e:
            if e.status != 404:
                raise

    def run_shell_command(self, command, print_output=False, print_input=False, **arguments):
        """Run ``command`` in a read Pod on the node, within ``_timeout`` (else the node's
        ``node_read_timeout_s``): (success, its output). A Pod that does not complete in time
        is named with its state and its newest event."""
        control = extract_control_arguments(arguments)
        deadline_s = int(control.get("_timeout") or self.knobs.node_read_timeout_s)
        arguments.update(_sudo=False, _su_user=None)  # the Pod runs as the node's root
        unix = make_unix_command_for_host(self.state, self.host, command, **arguments).get_raw_value()
        logger.debug(f"--> Running command on {self.host.name}: (a read Pod in {self.namespace}) {unix}")
        if print_input:
            logger.info(f"{self.host.print_prefix}>>> {unix}")
        token = f"gpuop-{secrets.token_hex(8)}"
        manifest = nodepod.pod_manifest(self.node, unix, token, self.knobs.node_pod_image, self.namespace, deadline_s)
        started, name = time.monotonic(), None
        try:
            created = self._ask(
                self.core.create_namespaced_pod, self.namespace, manifest, _request_timeout=self._timeout(deadline_s)
            )
            name = created.metadata.name
            pod, pull_failed = self._wait(created, started, deadline_s)
            why = self._not_run(name, pod, pull_failed, deadline_s)
            if why:
                return False, _said(why)
            log = self._log(name, deadline_s - (time.monotonic() - started))
            status, out, err = nodepod.parsed_log(log.data.decode(errors="replace"), token)
        except Exception as e:  # noqa: BLE001 (the read Pod's every failure is the read's one sentence)
            return False, _said(f"read Pod on node {self.node} ({self.where}): {self._words(e, deadline_s)}")
        finally:
            if name is not None:
                try:
                    self._delete(name)
                except Exception as e:  # noqa: BLE001 (its deadline ends it; the next run removes it)
                    logger.warning(f"{self.host.print_prefix}read Pod {name} not deleted: {self._words(e, 5)}")
        if status is None:  # the container ended before the command did (nsenter missing, killed)
            return False, _said(
                f"read Pod {self.namespace}/{name} on node {self.node} ended "
                f"without the command's end: {nodepod.pod_state(pod, [])}",
                *out,
                *err,
            )
        logger.debug(
            f"--> read Pod {self.namespace}/{name} on node {self.node}: {self.requests} API requests "
            f"so far, {time.monotonic() - started:.2f}s"
        )
        lines = [OutputLine("stdout", line) for line in out] + [OutputLine("stderr", line) for line in err]
        if print_output:
            for line in lines:
                logger.info(f"{self.host.print_prefix}{line.line}")
        ok = status in (control.get("_success_exit_codes") or (0,))
        return ok, CommandOutput(lines)

    def _not_run(self, name: str, pod, pull_failed: bool, deadline_s: int) -> str:
        """Why the read Pod's command did not run to its end, in one sentence; "" where it did."""
        where = f"read Pod {self.namespace}/{name} on node {self.node}"
        if pull_failed:
            return (
                f"{where} given up: its image {self.knobs.node_pod_image} cannot be pulled there "
                f"({nodepod.PULL_TRIES} tries; node_pod_image names another): {self._state(name, pod)}"
            )
        if not nodepod.finished(pod):
            return f"{where} did not complete within {deadline_s}s: {self._state(name, pod)}"
        if not nodepod.ran(pod):  # ended before its container ran (evicted, deleted, its deadline)
            return f"{where} ended before its command ran: {self._state(name, pod)}"
        return ""

    def _log(self, name: str, left_s: float):
        """The read Pod's log, the command's output and status in it, within what is left of its deadline."""
        return self._ask(
            self.core.read_namespaced_pod_log,
            name,
            self.namespace,
            container="read",
            _preload_content=False,
            _request_timeout=self._timeout(left_s),
        )

    def _wait(self, created, started: float, deadline_s: int) -> tuple:
        """The read Pod once it has ended, else as last seen at its deadline or once its image
        failed to pull for good (``nodepod.pull_given_up``), and whether that is why: watched
        (one request per ``PROGRESS_S`` window, each window's end saying where it is), from the
        version its creation returned, so that no change is missed."""
        from kubernetes import watch

        pod = self.kubeapi.plain(self.api, created)
        name = pod["metadata"]["name"]
        reasons = []  # the container's waiting reasons, as they came
        while not nodepod.finished(pod) and not nodepod.pull_given_up(reasons):
            left = deadline_s - (time.monotonic() - started)
            if left <= 0:
                break
            if time.monotonic() - started >= PROGRESS_S:
                logger.info(
                    f"{self.host.print_prefix}waiting for read Pod {name} on node {self.node} "
                    f"({int(time.monotonic() - started)}s of {deadline_s}s): {nodepod.pod_state(pod, [])}"
                )
            watching = watch.Watch()
            self.requests += 1
            try:
                for event in watching.stream(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    field_selector=f"metadata.name={name}",
                    resource_version=pod["metadata"]["resourceVersion"],
                    timeout_seconds=max(1, int(min(PROGRESS_S, left))),
                    _request_timeout=self._timeout(left + 5),
                ):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        pod = self.kubeapi.plain(self.api, event["object"])
                        reason = nodepod.waiting_reason(pod)
                        if reason and (not reasons or reasons[-1] != reason):
                            reasons.append(reason)
                        if nodepod.finished(pod) or nodepod.pull_given_up(reasons):
                            watching.stop()
            except Exception as e:  # a watch the API server ends early (410 Gone): look once
                if getattr(e, "status", None) != 410:
                    raise
                pod = self.kubeapi.plain(
                    self.api,
                    self._ask(
                        self.core.read_namespaced_pod, name, self.namespace, _request_timeout=self._timeout(left)
                    ),
                )
        return pod, nodepod.pull_given_up(reasons) and not nodepod.finished(pod)

    def _state(self, name: str, pod: dict) -> str:
        """The read Pod's state, with its newest event."""
        try:
            events = self._ask(
                self.core.list_namespaced_event,
                self.namespace,
                field_selector=f"involvedObject.name={name}",
                _request_timeout=self._timeout(5),
            )
            events = [self.kubeapi.plain(self.api, e) for e in events.items]
        except Exception:  # noqa: BLE001 (the state alone is still worth saying)
            events = []
        return nodepod.pod_state(pod, events)

    def put_file(self, *args, **kwargs) -> bool:
        logger.error(f"{self.host.print_prefix}the cluster reach only reads: no file is put on node {self.node}")
        return False

    def get_file(self, *args, **kwargs) -> bool:
        logger.error(
            f"{self.host.print_prefix}the cluster reach runs one read command: no file is got from node {self.node}"
        )
        return False


def _said(*lines: str) -> CommandOutput:
    return CommandOutput([OutputLine("stderr", line) for line in lines])
