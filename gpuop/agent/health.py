"""The agent's endpoints on its metrics port: ``/metrics`` (Prometheus' own handler), ``/healthz``
(200 while a judgment has ended within ``bound_s``, else 503: the DaemonSet's liveness probe, so
that the kubelet restarts an agent that is stuck) and ``/readyz`` (200 once every watch has
listed and its last request answered: the cluster side is in sync).

    health = Health(bound_s=330, watches=agent.watched.values())
    serve(9909, registry, health)     # GET /healthz -> 200 "ok: judged 4s ago"
"""

import threading
import time
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler


class Health:
    """Whether the agent lives (a judgment ended lately) and is ready (its watches synced)."""

    def __init__(self, bound_s: float, watches, clock=time.monotonic):
        self.bound_s, self.watches, self.clock = bound_s, list(watches), clock
        self.started = self.last = clock()

    def judged(self):
        """A judgment ended (the node read or not, the cluster answering or not: the loop turns)."""
        self.last = self.clock()

    def live(self) -> tuple:
        """(alive, in words): alive while the last judgment, or the start, is within ``bound_s``."""
        age = self.clock() - self.last
        if age <= self.bound_s:
            return True, f"ok: judged {age:.0f}s ago"
        return False, f"no judgment for {age:.0f}s, past {self.bound_s:.0f}s (three intervals and the read's deadline)"

    def ready(self) -> tuple:
        """(ready, in words): every watch listed once and its last request answered."""
        behind = [w.kind for w in self.watches if not (w.synced.is_set() and w.up)]
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
