"""NVIDIA driver states planted as a node holds them, and the node read's driver section run over
them: the modules' sysfs and procfs files, ``/boot`` and ``/lib/modules`` trees whose module files
``modinfo`` really reads (a ``.modinfo`` section, made with the machine's own binutils, compressed
as a kernel's own modules are), the libraries, DKMS's own tree (read by Debian's real ``dkms
status``), the boot loader's files, CDI specs, and a stand-in only for Fabric Manager's version line.

The section runs in a mount namespace of its own (``unshare -m``), where the planted files are laid
over the namespace's own paths as a simulated node lays them (``lab/drivertree.sh``: read-only
overlays, the host's files beneath): the host is never touched, and the shell is the node read's own.

    tree = Tree(tmp_path)
    tree.loaded("580.159.04"); tree.libraries("580.159.04"); tree.kernel(RUNNING, module="580.159.04")
    facts = read_driver(tree)     # gpuop.judgment.driver's facts, through node_read's parse
"""

import os
import platform
import shutil
import subprocess

from gpuop.reach.node_read import node_read, parse
from tests.helpers import ROOT

RUNNING = platform.release()  # the kernel that runs: `uname -r` in the namespace too
NEW, OLD = "580.159.04", "570.86.15"  # two drivers' versions
NEWER = f"{int(RUNNING.split('.')[0]) + 1}.0.0-1-generic"  # a kernel newer than it, by version sort
LIBS = "/usr/lib/x86_64-linux-gnu"
LAY = os.path.join(ROOT, "lab", "drivertree.sh")  # lay_driver TREE


class Tree:
    """A node's driver files under ``root``, as its paths are on the node."""

    def __init__(self, root):
        self.root = str(root)
        for d in ("boot", "sys/module", "proc/driver"):
            os.makedirs(self.path(d), exist_ok=True)

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel.lstrip("/"))

    def write(self, rel: str, text: str = "", mode: int = 0o644) -> str:
        path = self.path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def gpu(self, address: str = "0000:17:00.0"):
        self.write(f"/sys/bus/pci/devices/{address}/vendor", "0x10de\n")
        self.write(f"/sys/bus/pci/devices/{address}/class", "0x030200\n")

    def loaded(self, version: str, uvm: bool = True, open_modules: bool = True):
        """The modules in sysfs, and the kernel's own line in procfs (two spaces between fields)."""
        for m in ("nvidia", "nvidia_modeset") + (("nvidia_uvm",) if uvm else ()):
            self.write(f"/sys/module/{m}/version", f"{version}\n")
        head = "NVIDIA UNIX Open Kernel Module for x86_64" if open_modules else "NVIDIA UNIX x86_64 Kernel Module"
        self.write(
            "/proc/driver/nvidia/version",
            f"NVRM version: {head}  {version}  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Oct 30 2025\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
        )

    def libraries(self, version: str, under: str = ""):
        for lib in ("libnvidia-ml.so", "libcuda.so"):
            self.write(f"{under}{LIBS}/{lib}.{version}")

    def kernel(self, release: str, module: str = "", compress: str = "zst", where: str = "updates/dkms"):
        """An installed kernel (/boot/vmlinuz-RELEASE), with the NVIDIA modules of ``module``'s
        version in its tree and its modules.dep, where given (its tree planted again)."""
        shutil.rmtree(self.path(f"/usr/lib/modules/{release}"), ignore_errors=True)
        self.write(f"/boot/vmlinuz-{release}", "")
        deps = []
        for name in ("nvidia", "nvidia-uvm", "nvidia-modeset") if module else ():
            rel = f"{where}/{name}.ko" + (f".{compress}" if compress else "")
            self._module(f"/usr/lib/modules/{release}/{rel}", name, module, compress)
            deps.append(f"{rel}:")
        self.write(f"/usr/lib/modules/{release}/modules.dep", "".join(f"{d}\n" for d in deps))

    def _module(self, rel: str, name: str, version: str, compress: str):
        """A kernel module file modinfo reads: an ELF object with a .modinfo section."""
        path = self.path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        info, empty, ko = path + ".info", path + ".o", path.removesuffix(f".{compress}") if compress else path
        with open(info, "wb") as f:
            f.write(f"version={version}\0license=Dual MIT/GPL\0name={name.replace('-', '_')}\0".encode())
        subprocess.run(["gcc", "-c", "-x", "c", "-", "-o", empty], input=b"int x;\n", check=True, timeout=60)
        subprocess.run(
            [
                "objcopy",
                "--add-section",
                f".modinfo={info}",
                "--set-section-flags",
                ".modinfo=alloc,readonly",
                empty,
                ko,
            ],
            check=True,
            timeout=60,
        )
        os.remove(info), os.remove(empty)
        if compress:
            tool = {"zst": ["zstd", "-q", "--rm"], "xz": ["xz"], "gz": ["gzip"]}[compress]
            subprocess.run([*tool, ko], check=True, timeout=60)

    def dkms(self, version: str, built_for: tuple = ()):
        """DKMS's tree: the module's source added, and built and installed for ``built_for``."""
        self.write(
            f"/usr/src/nvidia-{version}/dkms.conf",
            f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{version}"\nBUILT_MODULE_NAME[0]="nvidia"\n'
            'DEST_MODULE_LOCATION[0]="/updates/dkms"\nAUTOINSTALL="yes"\n',
        )
        os.makedirs(self.path(f"/var/lib/dkms/nvidia/{version}"), exist_ok=True)
        os.symlink(f"/usr/src/nvidia-{version}", self.path(f"/var/lib/dkms/nvidia/{version}/source"))
        for release in built_for:
            self._module(f"/var/lib/dkms/nvidia/{version}/{release}/x86_64/module/nvidia.ko", "nvidia", version, "")
            # installed: its kernel-KVER-ARCH link names this build (dkms's _is_module_installed)
            os.symlink(f"{version}/{release}/x86_64", self.path(f"/var/lib/dkms/nvidia/kernel-{release}-x86_64"))

    def grub(self, default: str = "0", saved: str = "", once: str = ""):
        self.write("/etc/default/grub", f"GRUB_DEFAULT={default}\nGRUB_TIMEOUT=5\n")
        env = (
            "# GRUB Environment Block\n"
            + (f"saved_entry={saved}\n" if saved else "")
            + (f"next_entry={once}\n" if once else "")
        )
        self.write("/boot/grub/grubenv", env + "#" * (1024 - len(env)))

    def fabric_manager(self, version: str):
        """The stand-in for NVIDIA's binary: its version line, word for word."""
        self.write("/usr/bin/nv-fabricmanager", f'#!/bin/sh\necho "Fabric Manager version is : {version}"\n', 0o755)

    def cdi_spec(self, version: str, under: str = "/etc/cdi"):
        """nvidia-ctk's spec of one GPU, naming the driver's libraries of ``version``."""
        return self.write(
            f"{under}/nvidia.yaml",
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n"
            "    deviceNodes:\n    - path: /dev/nvidia0\ncontainerEdits:\n  hooks:\n  - hookName: createContainer\n"
            "    path: /usr/bin/nvidia-cdi-hook\n"
            f"    args: [nvidia-cdi-hook, enable-cuda-compat, --host-driver-version={version}]\n  mounts:\n"
            f"  - hostPath: {LIBS}/libcuda.so.{version}\n    containerPath: {LIBS}/libcuda.so.{version}\n"
            f"  - hostPath: {LIBS}/libnvidia-ml.so.{version}\n    containerPath: {LIBS}/libnvidia-ml.so.{version}\n",
        )

    def operator(self, version: str, host_driver: bool = False):
        """The GPU Operator's driver: its root, its libraries there, its validator's word."""
        self.libraries(version, under="/run/nvidia/driver")
        self.write(
            "/run/nvidia/validations/driver-ready",
            f"IS_HOST_DRIVER={str(host_driver).lower()}\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\n",
        )

    def reboot_required(self, packages: str):
        self.write("/run/reboot-required", "*** System restart required ***\n")
        self.write("/run/reboot-required.pkgs", packages + "\n")


_MOUNTS = """set -e
mount --make-rprivate /
. "$LAY"
lay_driver "$TREE"
set +e
"""


def read_lines(tree: Tree, known_modules: dict | None = None) -> list:
    """The node read's driver section over ``tree``, as its lines (its own section line first);
    ``known_modules``: an earlier read's module files (``node_read``'s)."""
    command = (
        node_read(known_modules=known_modules).removesuffix("\nread_node") + "\nsection driver $DRIVER_S driver_read"
    )
    script = _MOUNTS + command
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        env={**os.environ, "TREE": tree.root, "LAY": LAY},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def read_driver(tree: Tree, known_modules: dict | None = None) -> dict:
    """The driver's facts over ``tree``, through the node read's own parse."""
    return parse(read_lines(tree, known_modules))["driver"]


def healthy(tree: Tree):
    """A healthy node's driver: one GPU, the module loaded with nvidia_uvm, the libraries of its
    version, the running kernel's module built and installed by DKMS, GRUB's default."""
    tree.gpu()
    tree.loaded(NEW)
    tree.libraries(NEW)
    tree.kernel(RUNNING, module=NEW)
    tree.dkms(NEW, built_for=(RUNNING,))
    tree.grub("0")


def kernel_without_module(tree: Tree):
    """A newer kernel installed without its headers: DKMS built nothing for it, a reboot is
    pending, and GRUB's default boots it (over ``healthy``: the running kernel's module is fine)."""
    tree.kernel(NEWER)
    tree.reboot_required(f"linux-image-{NEWER}")
