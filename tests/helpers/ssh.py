"""Real OpenSSH servers on loopback for the SSH tests: one per lab host, each with its own port
and host key, key authentication only."""

import os
import socket
import subprocess
import time

from tests.helpers.proc import run

SSHD = "/usr/sbin/sshd"


def keygen(path):
    if not os.path.exists(path):
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], timeout_s=30, check=True)
    return open(f"{path}.pub").read().strip()


def sshd_config(port: int, host_key: str, authorized: str, pidfile: str = "none") -> str:
    """An sshd on 127.0.0.1:port: its own host key, key authentication only, trusting
    ``authorized`` (and a user's own ``~/.ssh/authorized_keys``)."""
    return f"""Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {pidfile}
AuthorizedKeysFile {authorized} .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
Subsystem sftp internal-sftp
"""


class Sshd:
    """``sshd -D`` on 127.0.0.1:port, trusting ``authorized_keys`` in its own directory (and a
    user's own ``~/.ssh/authorized_keys``, for users who cannot read that directory)."""

    def __init__(self, workdir, port):
        self.dir, self.port = workdir, port
        os.makedirs(workdir, exist_ok=True)
        self.host_key = keygen(os.path.join(workdir, "host_ed25519"))
        self.authorized = os.path.join(workdir, "authorized_keys")
        self.proc = None

    def known_hosts_line(self):
        return f"[127.0.0.1]:{self.port} {self.host_key}"

    def start(self, authorized_keys):
        with open(self.authorized, "w") as f:
            f.write("\n".join(authorized_keys) + "\n")
        config = os.path.join(self.dir, "sshd_config")
        with open(config, "w") as f:
            f.write(sshd_config(self.port, f"{self.dir}/host_ed25519", self.authorized, f"{self.dir}/sshd.pid"))
        os.makedirs("/run/sshd", exist_ok=True)
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", config], stderr=open(os.path.join(self.dir, "sshd.log"), "w")
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError(
                        f"sshd on port {self.port} did not start: " + open(os.path.join(self.dir, "sshd.log")).read()
                    )
                time.sleep(0.1)

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(10)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
