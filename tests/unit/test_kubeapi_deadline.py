"""A client given a request deadline fails a request to an API server that accepts and never
answers, instead of holding the run (the fleet repair's every request)."""

import socket
import threading
import time

import pytest
import yaml
from kubernetes import client

from gpuop.reach.kubeapi import api_client


def test_a_stalled_api_server_fails_the_request_at_its_deadline(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []
    threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()  # accepts, never answers
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "stalled",
                "clusters": [{"name": "stalled", "cluster": {"server": f"http://127.0.0.1:{server.getsockname()[1]}"}}],
                "contexts": [{"name": "stalled", "context": {"cluster": "stalled", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    started = time.monotonic()
    with pytest.raises(Exception, match="(?i)timed out|timeout"):
        client.CoreV1Api(api_client(str(kubeconfig), "", request_deadline_s=1)).read_node("gpu-a")
    assert time.monotonic() - started < 5
    server.close()
