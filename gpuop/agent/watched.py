"""The node's own objects a judgment joins, its Node and its Pods, kept by list-then-watch as
client-go's reflector keeps them, so that a judgment sends no read: one list
(``resourceVersion=0``: from the API server's watch cache, not etcd), then one watch from its
version, with bookmarks; each watch ends at a random time between ``WATCH_S`` and twice that (half
an hour to an hour), and is taken up again from the last version seen; a version the server no
longer has (410 Gone) is listed again; a broken list or watch is tried again after a backoff with
full jitter (so that every agent of a fleet does not come back in the same second after an API
server restart). A watch that hears nothing, no event and no bookmark, for ``SILENT_S`` (a
connection that died unseen: a load balancer's idle timeout, a peer gone) is ended and taken up
again, not waited on until its own end; meanwhile it is not in sync (``/readyz``).

    node = Watched(api, "Node", on_change, field_selector="metadata.name=gpu-a")
    node.start(); node.synced.wait(10); node.items()   # [{"kind": "Node", "metadata": {...}, ...}]
"""

import collections
import json
import logging
import random
import threading
import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from gpuop.reach.kubeapi import CONNECT_TIMEOUT_S, in_words

LOG = logging.getLogger("gpuop.agent")
# A watch request's shortest end (timeoutSeconds; its longest twice that, drawn): held half an hour
# to an hour, so that its renewals cost the API server less than the heartbeats (client-go's
# reflector draws 5 to 10 minutes; a client's timeoutSeconds is honoured as asked).
WATCH_S = 1800
BACKOFF_S = (0.8, 30)  # a broken list or watch waits uniformly up to 0.8 s x 2^failures, at most 30 s
LIST_DEADLINE_S = 30  # one list request
# The API server's watch cache sends a bookmark about every minute to a watch that asks for them
# (its bookmarkFrequency; seen here: at 60 s, 120 s, and 2 s before the watch's end); nothing at
# all, no event and no bookmark, for this long is a dead watch.
SILENT_S = 90
VERSIONS_KEPT = 64  # the versions its last events brought: a writer asks whether its own write came back

# Each kind the agent watches: its API class and list call.
APIS = {
    "Node": ("CoreV1Api", "list_node"),
    "Pod": ("CoreV1Api", "list_pod_for_all_namespaces"),
}


def backoff_s(failures: int, rand=random.random) -> float:
    """How long to wait after ``failures`` broken requests in a row: full jitter (uniform from 0)
    over an exponential cap.

        backoff_s(1) -> between 0 and 1.6; backoff_s(10) -> between 0 and 30
    """
    return rand() * min(BACKOFF_S[1], BACKOFF_S[0] * 2**failures)


class Watched:
    """One kind's objects as the API server last said them, by ``namespace/name``, plain JSON
    with their ``kind``. ``on_change(kind, listed)`` is called after each change (``listed``: a
    whole list, or the first change a watch brings after it broke, as when an API server came back:
    every agent of a fleet hears it at once; not one object's event); ``synced`` is set once
    listed; ``up`` says whether its last request succeeded, ``behind`` why
    not in words; ``versions`` are those its last events brought."""

    def __init__(self, api: client.ApiClient, kind: str, on_change, field_selector: str = "", silent_s=SILENT_S):
        group, call = APIS[kind]
        self.kind, self.lister = kind, getattr(getattr(client, group)(api), call)
        self.on_change, self.selector, self.silent_s = on_change, field_selector, silent_s
        self.objects, self.version = {}, None
        self.synced, self.up, self.lists, self.failures = threading.Event(), False, 0, 0
        self.heard, self.behind, self.broke = time.monotonic(), "not listed yet", False
        self.versions = collections.deque(maxlen=VERSIONS_KEPT)
        self.thread = None

    def items(self) -> list:
        return list(self.objects.values())

    def _selected(self) -> dict:
        return {"field_selector": self.selector} if self.selector else {}

    def _key(self, obj: dict) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    def list(self):
        """One list, from the watch cache; the objects replaced by it, its version kept."""
        answer = self.lister(
            **self._selected(),
            resource_version="0",
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_S, LIST_DEADLINE_S),
        )
        body = json.loads(answer.data)
        self.objects = {self._key(o): {**o, "kind": self.kind} for o in body.get("items") or []}
        self.version = body["metadata"]["resourceVersion"]
        self.lists += 1

    def watch(self):
        """One watch from the version last seen, until the server ends it, it breaks, or it is silent
        past ``silent_s`` (each read of the connection waits that long at most). Its lines read
        here, not by ``kubernetes.watch``: that one reads an ERROR line (a 410) as a model's."""
        timeout = int(WATCH_S * (1 + random.random()))
        answer = self.lister(
            **self._selected(),
            watch=True,
            resource_version=self.version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_S, self.silent_s),
        )
        self.up, self.failures, self.heard, self.behind = True, 0, time.monotonic(), ""  # a quiet one sends nothing
        try:
            for line in iter_resp_lines(answer):
                self.heard = time.monotonic()
                if line:
                    self._seen(json.loads(line))
        finally:
            answer.close()
            answer.release_conn()

    def silent(self) -> bool:
        """Whether its watch has heard nothing for ``silent_s``."""
        return self.up and time.monotonic() - self.heard > self.silent_s

    def _seen(self, event: dict):
        obj, kind = event["object"], event["type"]
        if kind == "ERROR":  # a Status: 410 where the version expired
            raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
        self.up, self.failures = True, 0
        self.version = obj["metadata"]["resourceVersion"]
        if kind == "BOOKMARK":  # no change: only where the watch is, for a watch taken up later
            self.broke = False  # what it missed while broken came before this
            return
        self.versions.append(self.version)
        if kind == "DELETED":
            self.objects.pop(self._key(obj), None)
        else:
            self.objects[self._key(obj)] = {**obj, "kind": self.kind}
        self.on_change(self.kind, self.broke)
        self.broke = False

    def _keep(self):
        while True:
            try:
                if self.version is None:
                    self.list()
                    self.up, self.failures, self.behind, self.broke = True, 0, "", False
                    self.synced.set()
                    self.on_change(self.kind, True)
                self.watch()
            except ApiException as e:
                if e.status == 410:  # the version expired: listed again, at once
                    self.version = None
                    continue
                self._broken(e)
            except Exception as e:  # noqa: BLE001 (the API server away or restarted: tried again after a backoff)
                self._broken(e)

    def _broken(self, e: Exception):
        silent = self.up and time.monotonic() - self.heard >= self.silent_s  # a watch, not a list, fell silent
        words = (
            f"heard nothing for {self.silent_s:.0f}s, no event and no bookmark"
            if silent
            else in_words(e, LIST_DEADLINE_S)
        )
        self.up, self.failures, self.behind, self.broke = False, self.failures + 1, words, True
        wait = backoff_s(self.failures)
        LOG.warning("the %ss' watch broke: %s; again in %.1fs", self.kind, words, wait)
        time.sleep(wait)

    def start(self):
        """Its thread, once."""
        if self.thread is None:
            self.thread = threading.Thread(target=self._keep, name=f"watch-{self.kind}", daemon=True)
            self.thread.start()


def node_watches(api: client.ApiClient, node: str, on_change) -> dict:
    """What one node's judgment keeps by a watch, two of them: its Node and the Pods bound to it,
    each by field selector (the rest it reads only when a Pod needs it: ``gpuop.agent.kept``)."""
    return {
        "Node": Watched(api, "Node", on_change, f"metadata.name={node}"),
        "Pod": Watched(api, "Pod", on_change, f"spec.nodeName={node}"),
    }
