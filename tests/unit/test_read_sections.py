"""A node's read section by section (gpuop/reach/node_read.sh's ``section``): a section that does not
end within its deadline (a file that blocks reads: here a FIFO) is ended with all it started and
named unread, the next section is still read; the read's output parsed with it unread, and the
node judged on the rest, the view it leaves unread named."""

import os
import subprocess
import time

from gpuop.judgment.rules import findings, judge
from gpuop.judgment.view import node_view
from gpuop.reach.node_read import node_read, parse
from tests.helpers.nodereads import RC, daemon, gpu_pod, kinds, node, read, read_shell, with_cdi


def test_a_section_that_blocks_is_ended_named_unread_and_the_next_is_read(tmp_path):
    fifo = tmp_path / "cdi" / "stuck.yaml"
    fifo.parent.mkdir()
    os.mkfifo(fifo)  # grep opens it and waits for a writer that never comes
    answer = f'{{"config": {{"cdiSpecDirs": ["{fifo.parent}"]}}}}'
    began = time.monotonic()
    out = read_shell(f"section cdi 1 cdi_specs '{answer}'; section started 1 started $$")
    took = time.monotonic() - began
    lines = out.stdout.splitlines()
    assert lines[:3] == ["--- gpuop cdi", "--- gpuop unread cdi 1s", "--- gpuop started"], out
    assert lines[3].isdigit() and len(lines) == 4, out
    assert took < 6, took
    # ended with all it started: no grep left waiting on the FIFO
    left = [p for p in os.listdir("/proc") if p.isdigit() and str(fifo).encode() in _cmdline(p)]
    assert left == [], left


def test_a_section_that_ends_is_not_named_unread(tmp_path):
    spec = tmp_path / "nvidia.yaml"
    spec.write_text("kind: nvidia.com/gpu\n")
    out = read_shell(f'section cdi 5 cdi_specs \'{{"cdiSpecDirs": ["{tmp_path}"]}}\'')
    assert out.stdout.splitlines() == ["--- gpuop cdi", str(spec)], out


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_the_read_parsed_with_sections_unread_leaves_their_parts_unread():
    output = [
        "--- gpuop hostname gpu-a",
        "--- gpuop containerd 812",
        "/usr/bin/containerd",
        "",
        "--- gpuop unread containerd 812 10s",
        "--- gpuop containerd 900",
        "/usr/bin/containerd",
        "",
        "/etc/containerd/config.toml",
        "/run/containerd/containerd.sock",
        "/usr/bin/containerd",
        "--- gpuop runtime 900",
        "H4sIAAAA",  # cut short
        "--- gpuop unread runtime 900 10s",
        "--- gpuop restart",
        "--- gpuop unread restart 100s",
        "--- gpuop started",
        "1796380000",
        "--- gpuop cri",
        "--- gpuop unread cri 15s",
        "--- gpuop cdi",
        "--- gpuop unread cdi 10s",
        "--- gpuop nvidia",
    ]
    got = parse(output)
    assert got["unread"] == {
        "containerd 812": "10s",
        "runtime 900": "10s",
        "restart": "100s",
        "cri": "15s",
        "cdi": "10s",
    }
    (d,) = got["containerds"]  # the one unread is in no list: named by it alone
    assert (d["pid"], d["serves"], d["files"], d["restart"], d["started"]) == (900, True, {}, None, 1796380000)
    assert (d["loaded"]["cri"], d["loaded"]["error"]) == ("unanswered", "crictl did not answer within 15s")
    view = node_view(got)
    assert (view["loaded_from"], view["cri_after_restart"], view["config_errors"]) == ("crictl-hung", "unknown", [])
    assert view["restart_reason"] == "its own merge of the files did not end within 100s"
    gaps = [(g["subject"], g["views"]) for g in findings(view, [], "") if g["kind"] == "view-unread"]
    # crictl's first (the loaded view), then each section in the read's order
    assert gaps == [
        ("containerd", ["loaded"]),
        ("containerd 812", ["loaded"]),
        ("containerd", ["written"]),
        ("containerd", ["after-restart"]),
        ("containerd", ["loaded"]),
    ], gaps


def test_a_pod_is_not_judged_on_cdi_specs_that_were_not_read():
    objects = [node(), RC, gpu_pod("cdi")]
    unread = {**read(with_cdi(daemon(loaded=("nvidia", "runc"), version="2.4.2"), True)), "unread": {"cdi": "10s"}}
    entry = judge(node_view(unread), objects, "gpu-a")
    assert kinds(entry["gaps"]) == [("view-unread", "containerd")]
    assert entry["gaps"][0]["detail"] == (
        "the CDI specs in the spec directories of containerd 2.4.2 were not read: their read did not end within "
        "10s (a file that blocks reads: a FIFO, a hung mount): no Pod is judged on them, the rest is"
    )
    read_whole = read(with_cdi(daemon(loaded=("nvidia", "runc"), version="2.4.2"), True))
    assert kinds(judge(node_view(read_whole), objects, "gpu-a")["gaps"]) == [("cdi-spec-missing", "ns/cdi")]


def test_a_daemon_whose_flags_were_not_read_is_named_not_taken_for_no_containerd():
    unread = {**read(), "unread": {"containerd 812": "10s"}}
    gaps = findings(node_view(unread), [node()], "gpu-a")
    assert kinds(gaps) == [("view-unread", "containerd 812")], gaps
    assert gaps[0]["detail"].startswith(
        "the flags of containerd pid 812 (its config and socket) were not read within 10s"
    )


def test_a_section_gets_only_what_is_left_of_the_whole_read_s_deadline(tmp_path):
    """The sections fit inside the whole read's deadline (GPUOP_END): a section asking 10 s with 1 s
    left gets 1 s, and one with none left is named unread at once, not run."""
    fifo = tmp_path / "cdi" / "stuck.yaml"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    answer = f'{{"config": {{"cdiSpecDirs": ["{fifo.parent}"]}}}}'
    began = time.monotonic()
    out = read_shell(
        f"GPUOP_END=$(($(date +%s) + 1)); section cdi 10 cdi_specs '{answer}'; section started 10 started $$"
    )
    took = time.monotonic() - began
    lines = out.stdout.splitlines()
    assert lines[:2] == ["--- gpuop cdi", "--- gpuop unread cdi 1s"], out
    assert lines[2:] == ["--- gpuop started", "--- gpuop unread started 0s"], out
    assert took < 6, took


def test_the_read_ends_within_its_deadline_the_process_list_included():
    """The whole read under a 6 s deadline (1 s once its margin is kept) on this machine: it ends
    within it, whatever runs here; its process list is a section, named unread if it had no time."""
    command = node_read("crictl", 6)
    began = time.monotonic()
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
    assert time.monotonic() - began < 6, out
    assert out.stdout.startswith("--- gpuop hostname "), out
    read = parse(out.stdout.splitlines())
    # a section of its own per daemon found ("containerd 812", "runtime 812"): named by its first word
    sections = {name.split()[0] for name in read["unread"]}
    every = set("processes containerd crio kubelet runtime restart started cri cdi status hooks nvidia".split())
    assert sections <= every, read


def test_a_process_list_not_read_is_named_not_taken_for_no_containerd():
    got = parse(["--- gpuop hostname gpu-a", "--- gpuop processes", "--- gpuop unread processes 10s"])
    assert (got["unread"], got["containerds"]) == ({"processes": "10s"}, [])
    gaps = findings(node_view(got), [node()], "gpu-a")
    assert [g["kind"] for g in gaps] == ["view-unread"], gaps
    assert gaps[0]["detail"].startswith("the node's processes were not listed within 10s"), gaps
