"""A TCP forwarder on loopback that can stop forwarding without closing anything: what a network
that drops a connection unseen does to it (a load balancer's idle timeout, a peer gone), the
client's socket still open and silent.

    with Blackhole(("127.0.0.1", 6443)) as hole:
        client reaches ("127.0.0.1", hole.port); hole.cut(); ...; hole.mend()
"""

import socket
import threading


class Blackhole:
    def __init__(self, target: tuple):
        self.target, self.open = target, threading.Event()
        self.open.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0  # accepted so far: a client that came back makes a new one

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *_):
        self.open.set()
        self.listener.close()

    def cut(self):
        """Nothing more forwarded, either way, on any connection; each stays open."""
        self.open.clear()

    def mend(self):
        self.open.set()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            self.connections += 1
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self.open.wait()  # cut: held here, never sent
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
