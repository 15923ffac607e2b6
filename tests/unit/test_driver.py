"""The driver's formats, as docs/driver.md quotes them with their sources, and the next boot's
kernel by each boot loader's own rule: pure, no node."""

from gpuop.judgment.driver import (
    dkms_status,
    driver_facts,
    fabric_manager_version,
    library_version,
    next_boot,
    proc_version,
    version_key,
)
from gpuop.judgment.driver_rules import driver_gaps


def test_both_proc_version_lines_give_the_version_and_the_flavour():
    assert proc_version(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Oct 8 20:53:58 UTC 2024"
    ) == ("565.57.01", "open")
    assert proc_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017") == (
        "384.98",
        "proprietary",
    )
    assert proc_version("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.159.04  Release Build") == (
        "580.159.04",
        "open",
    )


def test_both_dkms_status_formats():
    assert dkms_status("nvidia/570.86.15, 6.8.0-52-generic, x86_64: installed") == {
        "module": "nvidia",
        "version": "570.86.15",
        "kernel": "6.8.0-52-generic",
        "arch": "x86_64",
        "state": "installed",
    }
    assert dkms_status("nvidia, 396.45, 4.15.0-20-generic, x86_64: installed") == {
        "module": "nvidia",
        "version": "396.45",
        "kernel": "4.15.0-20-generic",
        "arch": "x86_64",
        "state": "installed",
    }
    assert dkms_status("nvidia/570.86.15: added")["state"] == "added"
    warned = dkms_status(
        "nvidia/570.86.15, 6.8.0-52-generic, x86_64: installed (WARNING! Diff between built and installed module!)"
    )
    assert warned["state"] == "installed"
    assert dkms_status("Error! Could not locate dkms.conf file.") is None


def test_library_and_fabric_manager_versions():
    assert library_version("/usr/lib64/libnvidia-ml.so.580.159.04") == "580.159.04"
    assert library_version("/usr/lib/x86_64-linux-gnu/libcuda.so.1") == ""
    assert fabric_manager_version("Fabric Manager version is : 535.161.08") == "535.161.08"


def test_kernels_sort_as_version_sort_does():
    kernels = ["6.8.0-9-generic", "6.8.0-52-generic", "6.11.0-1-generic", "6.8.0-52-generic+debug"]
    assert sorted(kernels, key=version_key) == [
        "6.8.0-9-generic",
        "6.8.0-52-generic",
        "6.8.0-52-generic+debug",
        "6.11.0-1-generic",
    ]


KERNELS = ["6.8.0-52-generic", "6.8.0-60-generic"]


def test_grub_default_0_is_the_newest_kernel_and_a_one_time_entry_goes_first():
    assert next_boot({"grub_default": "0"}, KERNELS, "6.8.0-52-generic")["kernel"] == "6.8.0-60-generic"
    assert next_boot({}, KERNELS, "6.8.0-52-generic")["kernel"] == "6.8.0-60-generic"
    once = next_boot(
        {"grub_default": "saved", "grubenv": {"next_entry": "gnulinux-6.8.0-52-generic-advanced-f00d"}},
        KERNELS,
        "6.8.0-52-generic",
    )
    assert once == {
        "kernel": "6.8.0-52-generic",
        "by": "grub-reboot's one-time next_entry=gnulinux-6.8.0-52-generic-advanced-f00d",
    }


def test_grub_saved_and_titled_entries_name_their_kernel():
    saved = {
        "grub_default": '"saved"',
        "grubenv": {"saved_entry": "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-52-generic"},
    }
    assert next_boot(saved, KERNELS, "6.8.0-60-generic")["kernel"] == "6.8.0-52-generic"
    titled = {"grub_default": "'Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-52-generic'"}
    assert next_boot(titled, KERNELS, "6.8.0-60-generic")["kernel"] == "6.8.0-52-generic"
    by_place = next_boot({"grub_default": "1>2"}, KERNELS, "6.8.0-60-generic")
    assert by_place["kernel"] == "" and "by its place" in by_place["by"]


def test_boot_loader_spec_entries_and_systemd_boot():
    bls = {
        "f00d-5.14.0-427.el9.x86_64": {"version": "5.14.0-427.el9.x86_64", "linux": "/vmlinuz-5.14.0-427.el9.x86_64"},
        "f00d-5.14.0-503.el9.x86_64": {"version": "5.14.0-503.el9.x86_64", "linux": "/vmlinuz-5.14.0-503.el9.x86_64"},
    }
    kernels = ["5.14.0-427.el9.x86_64", "5.14.0-503.el9.x86_64"]
    assert next_boot({"bls": bls}, kernels, "5.14.0-427.el9.x86_64")["kernel"] == "5.14.0-503.el9.x86_64"
    saved = {"bls": bls, "grubenv": {"saved_entry": "f00d-5.14.0-427.el9.x86_64"}}
    assert next_boot(saved, kernels, "5.14.0-427.el9.x86_64")["kernel"] == "5.14.0-427.el9.x86_64"
    sd = {"bls": bls, "sd_default": "f00d-5.14.0-427.el9.x86_64.conf"}
    assert next_boot(sd, kernels, "5.14.0-503.el9.x86_64") == {
        "kernel": "5.14.0-427.el9.x86_64",
        "by": "systemd-boot's default f00d-5.14.0-427.el9.x86_64.conf",
    }


def test_a_node_with_nothing_of_nvidia_s_has_no_driver_gap():
    assert driver_gaps(driver_facts(["running 6.1.0", "kernel 6.1.0"])) == []
    assert driver_gaps(None) == []


def test_no_kernel_in_boot_forecasts_nothing_of_the_next_boot():
    """A container's or a VM's whose kernel comes from elsewhere (no /boot/vmlinuz-*): the next
    boot is not known, and no next-boot gap is said of a working driver."""
    assert next_boot({"grub_default": "0"}, [], "6.1.0")["kernel"] == ""
    working = ["gpu 0000:17:00.0", "module nvidia 580.159.04", "module nvidia_uvm 580.159.04", "running 6.1.0"]
    assert driver_gaps(driver_facts(working + ["lib /usr/lib64/libnvidia-ml.so.580.159.04"])) == []


def test_a_cdi_spec_alone_is_no_driver_and_still_judged_on_its_files():
    """The GPU Operator's CDI mode on a node whose driver is not read as such: a spec naming no
    missing file says nothing; one naming a missing library is that spec's gap."""
    from gpuop.judgment.driver import has_driver

    spec = driver_facts(["cdi /var/run/cdi/nvidia.yaml", "running 6.1.0"])
    assert not has_driver(spec) and driver_gaps(spec) == []
    stale = driver_facts(
        ["cdi /etc/cdi/nvidia.yaml", "cdi-missing /etc/cdi/nvidia.yaml /usr/lib64/libcuda.so.570.86.15"]
    )
    assert [g["kind"] for g in driver_gaps(stale)] == ["cdi-spec-files-missing", "cdi-spec-stale-after-boot"]
