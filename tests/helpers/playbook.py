"""Running the real playbook from tests: `pyinfra inventory.py deploy.py -y --json`."""

import json
import os
import re
import sys
import time
from dataclasses import dataclass

from lab import labproc
from tests.helpers import LAB
from tests.helpers.proc import Started, run

PYINFRA = os.path.join(os.path.dirname(sys.executable), "pyinfra")
# On the second lab (GPUOP_LAB: make test's tests beside the lab's), every run names its context:
# the lab lock is named after it, so runs on the two labs never wait on each other's lock.
LAB_CONTEXT = f"kwok-{LAB}" if os.environ.get("GPUOP_LAB") else ""
LAB_DATA = (f"kube_context={LAB_CONTEXT}",) if LAB_CONTEXT else ()
CLUSTER_WORDS = f"context {LAB_CONTEXT}" if LAB_CONTEXT else "the current kubeconfig context"  # in the product's errors
LAB_LOCK = f"/tmp/gpuop-{LAB_CONTEXT or 'current-context'}.lock"  # the runs' lab lock, as the product names it


@dataclass
class Run:
    code: int
    doc: dict | None
    log: str

    @property
    def results(self) -> dict:
        return self.doc["results"]

    @property
    def changed(self) -> int:
        return self.results["totals"]["success"]

    def changed_ops(self) -> list:
        """The operations that changed something; a run that printed no results (it failed
        before its report): its log's tail, for the assertion that called this to show."""
        if self.doc is None:
            return [f"no results, exit {self.code}: {self.log[-3000:]}"]
        return [op["name"] for op in self.results["operations"] if op["success"]]


RUN_DEADLINE_S = 300  # a whole pyinfra run in a test; the product's own waits end at wait_timeout_s


def deploy(
    root,
    *data,
    env=None,
    dry=False,
    script="deploy.py",
    inventory="inventory.py",
    debug=False,
    timeout_s=RUN_DEADLINE_S,
) -> Run:
    """Run the playbook with extra ``key=value`` data: against @local with ``gpuop_root=root``,
    or (root None) against the hosts of ``GPUOP_HOSTS`` in ``env`` with their own roots.
    ``debug``: pyinfra's --debug, whose log shows every command run on a target. A run that
    outlasts ``timeout_s`` fails the test, with its last output."""
    args = [PYINFRA, inventory, script, "--json", "--dry" if dry else "-y", *(["--debug"] if debug else [])]
    for item in LAB_DATA + ((f"gpuop_root={root}",) if root else ()) + data:
        args += ["--data", item]
    result = run(args, timeout_s, env={**os.environ, **(env or {})})
    try:
        doc = json.loads(result.stdout)
    except json.JSONDecodeError:
        doc = None
    return Run(result.returncode, doc, result.stderr)


_COMMAND = "Running command on "  # the local and SSH connectors' debug line


def target_commands(log: str) -> list:
    """The commands a --debug run executed on its targets, in order, as ``(host, what)``: what
    is the fact a read was for (``"runbook.reach.batch.Batch (parts=..."``), or ``"change"``."""
    found, fact = [], None
    for line in log.splitlines():
        if "Getting fact: " in line:
            fact = line.split("Getting fact: ", 1)[1]
        elif _COMMAND in line:
            where = line.split(_COMMAND, 1)[1].split(":", 1)[0]
            found.append((where, fact or "change"))
            fact = None
    return found


def reads_repeated(log: str) -> list:
    """The run's batched reads (files, cluster, containerd) made again with nothing changed since
    their last read: empty when every read between two changes is made once. A live read (a
    wait's poll, the API server's dry run) counts as a change: it is made when the world moves."""
    repeated, since = [], set()
    for _, what in target_commands(log):
        if what.startswith("runbook.reach.batch.Batch"):
            parts = re.findall(r"<class '([\w.]+)'>", what)
            repeated += [p for p in parts if p in since]
            since |= set(parts)
        else:
            since = set()
    return repeated


# The lab containerd's own runtime state under a root (pid, socket, state, its root, log): the
# daemon's, not files the playbook writes.
DAEMON_DIRS = ("run", "var")


def tree(root) -> dict:
    """Every file and directory under root but the daemon's: path -> (mode, mtime_ns, bytes)."""
    found = {}
    for base, dirs, files in os.walk(root):
        if base == str(root):
            dirs[:] = [d for d in dirs if d not in DAEMON_DIRS]
        for name in dirs + files:
            path = os.path.join(base, name)
            st = os.stat(path)
            body = open(path, "rb").read() if name in files else None
            found[os.path.relpath(path, root)] = (oct(st.st_mode & 0o777), st.st_mtime_ns, body)
    return found


def start(root, *data, script: str = "deploy.py") -> Started:
    """The playbook started in the background against @local with ``gpuop_root=root`` (and the
    lab's context, as ``deploy`` names it), for a test that acts while it runs."""
    args = [PYINFRA, "inventory.py", script, "-y", "--data", f"gpuop_root={root}"]
    for item in LAB_DATA + data:
        args += ["--data", item]
    return Started(args)


def fresh_incident(tmp_path_factory, name, *data):
    """A fresh lab and one successful run of the playbook into a new temporary root."""
    from tests.helpers.kube import reset_lab

    reset_lab()
    root = tmp_path_factory.mktemp(name) / "gpuop"
    run = deploy(root, *data)
    assert run.code == 0, run.log
    return root


def fake_containerd(directory, dump_text):
    """A containerd first on PATH whose ``config dump`` prints ``dump_text``: returns the env
    that puts it there and the file holding the dump (rewrite it to change what is loaded)."""
    bin_dir = directory / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    dump = directory / "dump.toml"
    dump.write_text(dump_text)
    fake = bin_dir / "containerd"
    fake.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'config dump' ] && exec /bin/cat {dump}\nexit 2\n")
    fake.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}, dump


def lab_daemon_pid(root):
    """The pid of the lab containerd a run started under ``root`` while it runs, else None."""
    try:
        pid = int((root / "run/containerd.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None


def wait_gone(pid, timeout_s=30):
    """Wait until process ``pid`` has exited; fail naming it if it has not in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return  # a child of this test process (restarted by hand), now reaped
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"process {pid} still runs after {timeout_s}s")


def stop_daemons_under(path):
    """Stop every lab containerd whose root is under ``path`` (a test's roots), and wait."""
    labproc.stop(f"the lab containerds under {path}", labproc.under(str(path)))
