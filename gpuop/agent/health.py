"""The agent's endpoints on its metrics port: ``/metrics`` (Prometheus' own handler), ``/healthz``
(200 while a judgment whose writes went through, or that had none to make, has ended within
``bound_s``, else 503: the DaemonSet's liveness probe, so that the kubelet restarts an agent that
is stuck or cannot say what it judged) and ``/readyz`` (200 once every watch has listed, its last
request answered and, where its server sends bookmarks, it has heard from it lately: the cluster
side is in sync).

    health = Health(bound_s=330, watches=agent.watched.values())
    serve(9909, registry, health)     # GET /healthz -> 200 "ok: judged 4s ago"
"""

import threading
import time
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler


class Health:
    """Whether the agent lives (a judgment said lately) and is ready (its watches in sync)."""

    def __init__(self, bound_s: float, watches, clock=time.monotonic):
        self.bound_s, self.watches, self.clock = bound_s, list(watches), clock
        self.started = self.last = clock()
        self.unwritten = ""  # why the last judgment's writes did not go through; "" where they did

    def judged(self, unwritten: str = ""):
        """A judgment ended (the node read or not: the loop turns); ``unwritten`` says why what it
        judged could not be written (the API server refused or did not answer), "" where it was
        or there was nothing to write. Only a judgment said counts as alive."""
        self.unwritten = unwritten
        if not unwritten:
            self.last = self.clock()

    def live(self) -> tuple:
        """(alive, in words): alive while the last judgment said, or the start, is within ``bound_s``."""
        age = self.clock() - self.last
        if age <= self.bound_s:
            return True, f"ok: judged {age:.0f}s ago"
        why = f"; the last not written: {self.unwritten}" if self.unwritten else ""
        return False, (
            f"no judgment said for {age:.0f}s, past {self.bound_s:.0f}s (three intervals and the read's deadline){why}"
        )

    def ready(self) -> tuple:
        """(ready, in words): every watch listed once, its last request answered, and not silent."""
        behind = [
            f"{w.kind} ({w.behind})" if w.behind else w.kind
            for w in self.watches
            if not (w.synced.is_set() and w.up) or w.silent()
        ]
        if behind:
            return False, f"not in sync: {', '.join(behind)}"
        return True, "ok: every watch in sync"


def _handler(registry: CollectorRegistry, health: Health):
    metrics = MetricsHandler.factory(registry)

    class Handler(metrics):
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path not in ("/healthz", "/readyz"):
                return super().do_GET()
            ok, words = health.live() if path == "/healthz" else health.ready()
            body = (words + "\n").encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # a probe every few seconds is no news
            pass

    return Handler


def serve(port: int, registry: CollectorRegistry, health: Health) -> ThreadingHTTPServer:
    """The endpoints on ``port`` (every address), in a thread of their own."""
    server = ThreadingHTTPServer(("", port), _handler(registry, health))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="endpoints", daemon=True).start()
    return server
