"""The node read's driver section over each driver state a node can hold (tests/helpers/drivers.py:
the files planted as the node holds them, modinfo and Debian's dkms asked for real, in a mount
namespace of the test's own), judged by the driver's rules: each gap in its condition, each
sentence naming the versions and the file that says them, and no gap on the healthy node."""

import os

import pytest

from gpuop.judgment.condition import RESTART_UNSAFE, condition_type
from gpuop.judgment.driver import known_modules, summary
from gpuop.judgment.driver_rules import driver_gaps
from tests.helpers import simnodes
from tests.helpers.drivers import (
    NEW,
    NEWER,
    OLD,
    RUNNING,
    Tree,
    healthy,
    kernel_without_module,
    read_driver,
    read_lines,
)


@pytest.fixture
def tree(tmp_path):
    """A healthy node: one GPU, the driver loaded, its libraries, the running kernel's module built
    by DKMS, GRUB's default; each test changes it into its state."""
    t = Tree(tmp_path / "node")
    healthy(t)
    return t


def judged(tree: Tree) -> dict:
    """Each gap kind found, with its condition and its sentence."""
    return {g["kind"]: (condition_type(g["kind"]).split("/")[1], g["detail"]) for g in driver_gaps(read_driver(tree))}


def test_a_healthy_node_is_read_whole_and_has_no_gap(tree):
    facts = read_driver(tree)
    assert facts["gpus"] == ["0000:17:00.0"]
    assert facts["loaded"] | {"kernel_line": ""} == {
        "module": "nvidia",
        "version": NEW,
        "flavour": "open",
        "uvm": True,
        "modules": {"nvidia": NEW, "nvidia_modeset": NEW, "nvidia_uvm": NEW},
        "kernel_line": "",
        "devices": [],
    }
    assert facts["library_version"] == NEW
    assert facts["next_boot"]["kernel"] == RUNNING and facts["next_boot"]["version"] == NEW
    assert facts["next_boot"]["module"] == f"/lib/modules/{RUNNING}/updates/dkms/nvidia.ko.zst"
    assert facts["dkms"] == [
        {"module": "nvidia", "version": NEW, "kernel": RUNNING, "arch": "x86_64", "state": "installed"}
    ]
    assert driver_gaps(facts) == []
    assert summary(facts)["managed_by"] == "host"


def test_a_driver_package_upgraded_under_its_module_fails_now_and_the_next_boot_heals_it(tree):
    tree.loaded(OLD)
    found = judged(tree)
    assert list(found) == ["driver-library-mismatch"]
    condition, words = found["driver-library-mismatch"]
    assert condition == "GPURuntimeProblem"
    assert f"{OLD} loaded (/sys/module/nvidia/version)" in words
    assert f"the libraries {NEW} (/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{NEW})" in words
    assert "Driver/library version mismatch" in words


@pytest.mark.parametrize("compress", ["zst", "xz", ""])
def test_a_new_kernel_without_its_module_is_restart_unsafe_naming_the_kernel_and_dkms(tree, compress):
    """The headers were missing at the new kernel's install: DKMS built nothing for it, the kernel
    install succeeded, a reboot is pending; the running kernel's module (however compressed) is fine."""
    kernel_without_module(tree)
    tree.kernel(RUNNING, module=NEW, compress=compress)
    facts = read_driver(tree)
    assert facts["reboot_required"] and facts["reboot_packages"] == [f"linux-image-{NEWER}"]
    found = judged(tree)
    assert list(found) == ["next-boot-no-module"]
    condition, words = found["next-boot-no-module"]
    assert condition == "GPURuntimeRestartUnsafe"
    assert f"the next boot starts kernel {NEWER} (GRUB_DEFAULT=0: the newest kernel in /boot)" in words
    assert "a reboot is pending: /run/reboot-required" in words
    assert f"/lib/modules/{NEWER}/modules.dep" in words
    assert f"DKMS holds nvidia/{NEW} and built nothing for {NEWER}" in words
    assert f"dkms autoinstall -k {NEWER}" in words


def test_a_new_kernel_whose_module_is_another_version_is_restart_unsafe(tree):
    tree.kernel(NEWER, module=OLD, compress="xz", where="kernel/nvidia-570srv")
    found = judged(tree)
    assert list(found) == ["next-boot-module-mismatch"]
    condition, words = found["next-boot-module-mismatch"]
    assert condition == "GPURuntimeRestartUnsafe"
    assert f"whose NVIDIA module is {OLD} (/lib/modules/{NEWER}/kernel/nvidia-570srv/nvidia.ko.xz)" in words


def test_a_one_time_boot_entry_is_the_next_boot_s_kernel(tree):
    """GRUB's default is the running kernel, saved; grub-reboot set a one-time entry of a kernel
    with no module: that is the next boot's."""
    tree.kernel(NEWER)
    tree.grub("saved", saved=f"gnulinux-{RUNNING}-advanced-f00d", once=f"gnulinux-{NEWER}-advanced-f00d")
    _, words = judged(tree)["next-boot-no-module"]
    assert f"kernel {NEWER} (grub-reboot's one-time next_entry=gnulinux-{NEWER}-advanced-f00d)" in words
    tree.grub("saved", saved=f"gnulinux-{RUNNING}-advanced-f00d")
    assert judged(tree) == {}


def test_fabric_manager_behind_the_driver_now_and_after_the_next_boot(tree):
    tree.fabric_manager(OLD)
    found = judged(tree)
    assert sorted(found) == ["fabric-manager-mismatch", "fabric-manager-next-boot-mismatch"]
    assert found["fabric-manager-mismatch"][0] == "GPURuntimeProblem"
    assert (
        f"Fabric Manager {OLD} (nv-fabricmanager --version) is not the loaded driver's {NEW}"
        in (found["fabric-manager-mismatch"][1])
    )
    assert found["fabric-manager-next-boot-mismatch"][0] == "GPURuntimeRestartUnsafe"
    tree.fabric_manager(NEW)
    assert judged(tree) == {}


def test_a_static_cdi_spec_of_the_old_driver_names_files_gone_now_and_after_the_boot(tree):
    tree.cdi_spec(OLD)
    found = judged(tree)
    assert sorted(found) == ["cdi-spec-files-missing", "cdi-spec-stale-after-boot"]
    condition, words = found["cdi-spec-files-missing"]
    assert condition == "GPURuntimeProblem"
    assert f"the CDI spec /etc/cdi/nvidia.yaml (driver {OLD}) names files that are not there" in words
    assert f"/usr/lib/x86_64-linux-gnu/libcuda.so.{OLD}" in words
    assert "no nvidia-cdi-refresh.service enabled" in found["cdi-spec-stale-after-boot"][1]
    tree.cdi_spec(NEW)  # the spec of the driver's own version names files that are there: no gap
    assert judged(tree) == {}


def test_the_gpu_operator_s_driver_is_said_as_such_and_not_forecast(tree):
    """Its driver container builds the module at its every start: a new kernel without a host
    module is no gap; its libraries (under its root) are the ones held against the module."""
    tree.operator(NEW)
    tree.kernel(NEWER)
    facts = read_driver(tree)
    assert summary(facts)["managed_by"] == "gpu-operator"
    assert all(p.startswith("/run/nvidia/driver/") for p in facts["libraries"])
    assert driver_gaps(facts) == []
    tree.loaded(OLD)
    assert list(judged(tree)) == ["driver-library-mismatch"]


def test_gpus_with_no_module_loaded_and_a_module_without_nvidia_uvm(tmp_path):
    bare = Tree(tmp_path / "bare")
    bare.gpu()
    bare.libraries(NEW)
    bare.kernel(RUNNING, module=NEW)
    assert list(judged(bare)) == ["driver-not-loaded"]
    bare.loaded(NEW, uvm=False)
    found = judged(bare)
    assert list(found) == ["nvidia-uvm-not-loaded"]
    assert "nvidia-smi works and every CUDA program fails" in found["nvidia-uvm-not-loaded"][1]


def test_every_gap_of_the_next_boot_sets_restart_unsafe_and_nothing_is_written(tree):
    """The read is read-only: the planted tree is byte for byte the same after it."""
    before = simnodes.tree(tree.root)
    read_lines(tree)
    assert simnodes.tree(tree.root) == before
    for kind in ("next-boot-no-module", "next-boot-module-mismatch", "fabric-manager-next-boot-mismatch"):
        assert condition_type(kind) == RESTART_UNSAFE


def test_a_module_file_an_earlier_read_found_unchanged_is_not_decompressed_again(tree):
    """modinfo decompresses a whole module (a second or more for an xz one of ~100 MB): the agent
    hands its last read's files to the next, which takes the version of a file whose size and
    time are unchanged from it, and asks modinfo again of one that changed."""
    first = read_driver(tree)
    known = known_modules(first)
    path = f"/lib/modules/{RUNNING}/updates/dkms/nvidia.ko.zst"
    assert set(known) == {path} and known[path][2] == NEW
    # the file unchanged, an earlier answer said another version: that answer is taken, no modinfo
    planted = {path: (*known[path][:2], "1.2.3")}
    assert read_driver(tree, planted)["next_boot"]["version"] == "1.2.3"
    # its time moved (a package wrote it again): modinfo is asked, the file's own version read
    os.utime(tree.path(f"/usr/lib/modules/{RUNNING}/updates/dkms/nvidia.ko.zst"), (1, 1))
    assert read_driver(tree, planted)["next_boot"]["version"] == NEW
