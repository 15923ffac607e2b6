"""Nothing a node holds ends its reader or makes it say a stale word: a file too large to carry or
not UTF-8 text is named unread and judged ``view-unread``, never parsed as if it were the file; a
process named like a kubelet or k3s in another PID namespace (a container's) is not the node's; a
read that prints without end is cut at its bound, one whose output cannot be parsed is said not
read (the agent's condition Unknown), never the agent's end."""

import subprocess

from gpuop.agent.noderead import OUTPUT_MAX, NodeRead
from gpuop.judgment.rules import findings
from gpuop.judgment.view import node_view
from gpuop.reach.node_read import FILE_KIB, parse
from tests.helpers.nodereads import node, read_shell


def test_a_file_too_large_or_not_text_is_named_unread_and_the_rest_is_read(tmp_path):
    etc = tmp_path / "etc" / "containerd"
    (etc / "conf.d").mkdir(parents=True)
    config = etc / "config.toml"
    config.write_text('version = 2\nimports = ["conf.d/*.toml"]\n')
    (etc / "conf.d" / "10-ok.toml").write_text('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.a]\n')
    (etc / "conf.d" / "50-binary.toml").write_bytes(b"version = 2\n\xff\xfe\x00 not text\n")
    huge = etc / "conf.d" / "90-huge.toml"
    with open(huge, "wb") as f:
        f.truncate(FILE_KIB * 1024 + 1)  # one byte past the bound, sparse: nothing written to the disk
    out = read_shell(f"runtime_files {config}")
    lines = out.stdout.splitlines()
    assert lines[1:] == [f"large {FILE_KIB * 1024 + 1} {huge}"], out
    assert len(out.stdout) < 4096, len(out.stdout)  # the large file named, not carried
    read = parse(
        ["--- gpuop hostname gpu-a", "--- gpuop containerd 812", "/usr/bin/containerd", "", str(config), "", ""]
        + ["--- gpuop runtime 812", *lines]
    )
    files = read["containerds"][0]["files"]
    assert sorted(files) == sorted([str(config), str(etc / "conf.d" / "10-ok.toml")]), files
    assert read["unread"] == {
        f"file {etc}/conf.d/50-binary.toml": "not UTF-8 text",
        f"file {huge}": "1.0 MiB, above the read's bound of 1 MiB",
    }
    gaps = {g["subject"]: g for g in findings(node_view(read), [node()], "gpu-a") if g["kind"] == "view-unread"}
    assert sorted(gaps) == [f"file {etc}/conf.d/50-binary.toml", f"file {huge}"], gaps
    said = gaps[f"file {etc}/conf.d/50-binary.toml"]
    assert said["views"] == ["written"], said
    assert said["detail"] == (
        f"the file {etc}/conf.d/50-binary.toml of containerd unknown was not read (not UTF-8 text): what it says "
        "is not judged, the rest is"
    )


def test_a_fifo_or_a_link_loop_in_conf_d_is_named_never_opened(tmp_path):
    """A drop-in that is a FIFO (a read of it would block) or a link to itself: named, not read,
    and the read of the rest goes on at once."""
    import os
    import time

    etc = tmp_path / "containerd"
    (etc / "conf.d").mkdir(parents=True)
    config = etc / "config.toml"
    config.write_text('version = 2\nimports = ["conf.d/*.toml"]\n')
    os.mkfifo(etc / "conf.d" / "50-fifo.toml")
    os.symlink(etc / "conf.d" / "60-loop.toml", etc / "conf.d" / "60-loop.toml")
    began = time.monotonic()
    lines = read_shell(f"runtime_files {config}", timeout_s=10).stdout.splitlines()
    assert time.monotonic() - began < 5
    read = parse(
        ["--- gpuop hostname gpu-a", "--- gpuop containerd 812", "/usr/bin/containerd", "", str(config), "", ""]
        + ["--- gpuop runtime 812", *lines]
    )
    assert list(read["containerds"][0]["files"]) == [str(config)], read
    odd = "not a regular file: a FIFO, a socket, a link to nothing or to itself"
    assert read["unread"] == {f"file {etc}/conf.d/50-fifo.toml": odd, f"file {etc}/conf.d/60-loop.toml": odd}


def test_a_container_s_process_named_k3s_or_kubelet_is_not_the_node_s(tmp_path):
    """The read's process list holds the node's own PID namespace only: the same binary named k3s
    in a PID namespace of its own (as a container's process is) is left out; in the node's, found."""
    k3s = tmp_path / "k3s"
    k3s.write_bytes(open("/bin/sleep", "rb").read())
    k3s.chmod(0o755)
    contained = subprocess.Popen(["unshare", "--pid", "--fork", str(k3s), "60"])
    own = subprocess.Popen([str(k3s), "60"])
    try:
        listed = []
        for _ in range(50):  # until the contained one has exec'd (unshare forks it)
            found = read_shell("processes").stdout.split()
            listed = [x for x in found if x.startswith("k3s:")]
            if len(_k3s_pids(k3s)) == 2:
                break
        pids = _k3s_pids(k3s)
        assert len(pids) == 2 and own.pid in pids, pids
        assert listed == [f"k3s:{own.pid}"], (listed, pids)
    finally:
        for p in (contained, own):
            p.kill()
            p.wait()
        subprocess.run(["pkill", "-KILL", "-f", str(k3s)], check=False)


def _k3s_pids(k3s) -> list:
    found = subprocess.run(["pgrep", "-f", f"^{k3s} 60"], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def test_a_read_that_prints_without_end_is_cut_at_its_bound():
    enter = ["sh", "-c", f"head -c {OUTPUT_MAX + 2**20} /dev/zero | tr '\\0' x; sleep 30", "enter"]
    answer = NodeRead(enter, "crictl", 60)()
    assert (answer.read, answer.unread) == (None, f"the node's read printed more than {OUTPUT_MAX // 2**20} MiB")


def test_a_read_whose_output_cannot_be_parsed_is_said_not_read():
    enter = ["sh", "-c", "echo '--- gpuop containerd not-a-pid'", "enter"]
    answer = NodeRead(enter, "crictl", 30)()
    assert answer.read is None
    assert answer.unread.startswith("the node's read could not be parsed: ValueError: "), answer
