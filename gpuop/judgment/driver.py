"""The NVIDIA driver of a node in three views, from the node read's ``driver`` section
(``gpuop/reach/node_read.sh``, ``driver_read``): *loaded* (the kernel modules' versions, the kernel's
own line, the device nodes), *written* (the userspace libraries' version, Fabric Manager's, the GPU
Operator's driver), and *after the next start* (the kernel the next boot starts, by the boot
loader's own rules, and the NVIDIA module installed for it). Pure: the formats are those
docs/driver.md quotes, with their sources.

    facts = driver_facts(lines)          # the section's lines, parsed
    facts["loaded"]["version"]           # -> "580.159.04"
    facts["next_boot"]["kernel"]         # -> "6.8.0-60-generic"
"""

import re

# The main module's names (Debian packages it as nvidia-current), and nvidia_uvm's, as sysfs and
# modules.dep name them ("-" and "_" are one to the kernel).
MAIN_MODULES = ("nvidia", "nvidia_current")
UVM_MODULES = ("nvidia_uvm", "nvidia_current_uvm")
_VERSION = re.compile(r"(?<![\d.])(\d+\.\d+(?:\.\d+)?)(?![\d.])")


def module_name(path_or_name: str) -> str:
    """A module's name as the kernel knows it, from its file's path or its name.

    module_name("updates/dkms/nvidia-current-uvm.ko.zst") -> "nvidia_current_uvm"
    """
    base = path_or_name.rsplit("/", 1)[-1]
    return re.sub(r"\.ko(\.\w+)?$", "", base).replace("-", "_")


def proc_version(line: str) -> tuple:
    """The loaded module's version and flavour from ``/proc/driver/nvidia/version``'s first line.

    proc_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  (dvs-builder@U16)")
    -> ("565.57.01", "open")
    proc_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017")
    -> ("384.98", "proprietary")
    """
    after = line.split("Module", 1)[-1]
    found = _VERSION.search(after.replace("x86_64", "").replace("aarch64", ""))
    flavour = "open" if "Open Kernel Module" in line else "proprietary" if "Kernel Module" in line else ""
    return (found.group(1) if found else ""), flavour


def library_version(path: str) -> str:
    """The driver version a userspace library's file name carries.

    library_version("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04") -> "580.159.04"
    """
    found = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", path)
    return found.group(1) if found else ""


def fabric_manager_version(line: str) -> str:
    """Fabric Manager's version from ``nv-fabricmanager --version``.

    fabric_manager_version("Fabric Manager version is : 535.161.08") -> "535.161.08"
    """
    found = re.search(r"version is\s*:\s*(\S+)", line)
    return found.group(1) if found else ""


def dkms_status(line: str) -> dict | None:
    """One line of ``dkms status``, either format (DKMS 2.8.6 and later, and before).

    dkms_status("nvidia/570.86.15, 6.8.0-52-generic, x86_64: installed")
    -> {"module": "nvidia", "version": "570.86.15", "kernel": "6.8.0-52-generic", "arch": "x86_64",
        "state": "installed"}
    dkms_status("nvidia, 396.45, 4.15.0-20-generic, x86_64: built")["state"] -> "built"
    dkms_status("nvidia/570.86.15: added")["kernel"] -> ""
    """
    head, sep, state = line.strip().rpartition(": ")
    if not sep:
        return None
    parts = [p.strip() for p in head.split(",")]
    if "/" in parts[0]:
        module, version = parts[0].split("/", 1)
        rest = parts[1:]
    elif len(parts) >= 2:
        module, version, rest = parts[0], parts[1], parts[2:]
    else:
        return None
    kernel, arch = (rest + ["", ""])[:2]
    return {"module": module, "version": version, "kernel": kernel, "arch": arch, "state": state.split(" (")[0]}


def grubenv(lines: list) -> dict:
    """GRUB's environment block (``saved_entry``, ``next_entry``) as ``key value`` lines.

    grubenv(["saved_entry gnulinux-advanced-1>gnulinux-6.8.0-52-generic-advanced-1"]) -> {"saved_entry": "..."}
    """
    return dict(line.split(" ", 1) for line in lines if " " in line)


def version_key(kernel: str) -> list:
    """A kernel release's sort key, as ``sort -V`` and GRUB's ``version_sort`` order them.

    sorted(["6.8.0-9-generic", "6.8.0-52-generic"], key=version_key)[-1] -> "6.8.0-52-generic"
    """
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.findall(r"\d+|\D+", kernel)]


def _named(entry: str, kernels: list) -> str:
    """The kernel a boot entry's title, id or path names: the longest installed release in it."""
    found = [k for k in kernels if k and k in entry]
    return max(found, key=len) if found else ""


def next_boot(boot: dict, kernels: list, running: str) -> dict:
    """The kernel the next boot starts, by the boot loader's own rules, and why.

    + boot: ``grub_default`` (GRUB_DEFAULT, /etc/default/grub's last), ``grubenv`` (saved_entry,
      next_entry), ``bls`` (Boot Loader Spec entries, id -> {version, linux, title}),
      ``sd_default`` (systemd-boot's loader.conf default)
    + kernels: the kernels installed (/boot/vmlinuz-*)

    GRUB: a one-time ``next_entry`` first; ``GRUB_DEFAULT=saved``: ``saved_entry``; a title or id:
    the kernel it names; ``0`` (or none): the newest kernel (``version_sort``, 10_linux's order).
    Boot Loader Spec (RHEL and kin, systemd-boot): the saved or default entry, else the newest.

        next_boot({"grub_default": "0"}, ["6.8.0-52-generic", "6.8.0-60-generic"], "6.8.0-52-generic")
        -> {"kernel": "6.8.0-60-generic", "by": "GRUB_DEFAULT=0: the newest kernel in /boot"}
    """
    env, bls = boot.get("grubenv") or {}, boot.get("bls") or {}
    every = sorted(set(kernels) | {v.get("version", "") for v in bls.values()} - {""}, key=version_key)
    entries = {i: e.get("version") or _named(e.get("linux", ""), every) for i, e in bls.items()}

    def entry(value: str) -> str:
        if value in entries:
            return entries[value]
        return _named(value, every)

    if env.get("next_entry"):
        kernel = entry(env["next_entry"])
        if kernel:
            return {"kernel": kernel, "by": f"grub-reboot's one-time next_entry={env['next_entry']}"}
    default = (boot.get("grub_default") or "").strip().strip("\"'")
    if bls and boot.get("sd_default"):
        kernel = entry(boot["sd_default"].removesuffix(".conf"))
        if kernel:
            return {"kernel": kernel, "by": f"systemd-boot's default {boot['sd_default']}"}
    if (default == "saved" or (bls and not default)) and env.get("saved_entry"):
        kernel = entry(env["saved_entry"])
        if kernel:
            return {"kernel": kernel, "by": f"GRUB's saved_entry={env['saved_entry']}"}
    if default and default not in ("0", "saved"):
        kernel = entry(default)
        if kernel:
            return {"kernel": kernel, "by": f"GRUB_DEFAULT={default}"}
        if re.fullmatch(r"[\d>]+", default):
            return {"kernel": "", "by": f"GRUB_DEFAULT={default} names an entry by its place in the menu"}
    if every:
        by = (
            "the newest Boot Loader Spec entry" if bls else f"GRUB_DEFAULT={default or '0'}: the newest kernel in /boot"
        )
        return {"kernel": every[-1], "by": by}
    # a container's or a VM's whose kernel the hypervisor gives: what it boots is not its own to say
    return {"kernel": "", "by": f"no kernel in /boot (the running one, {running or 'unknown'}, came from elsewhere)"}


def _sections(lines: list) -> dict:
    """The section's ``key value`` lines, grouped by key."""
    by = {}
    for line in lines:
        key, _, value = line.strip().partition(" ")
        if key:
            by.setdefault(key, []).append(value)
    return by


def driver_facts(lines: list) -> dict:
    """The ``driver`` section's lines (``driver_read``) as the driver's three views.

    driver_facts(["module nvidia 580.159.04", "lib /usr/lib64/libnvidia-ml.so.580.159.04", "running 6.8.0"])
    -> {"gpus": [], "loaded": {"version": "580.159.04", ...}, "libraries": {...}, "next_boot": {...}, ...}
    """
    by = _sections(lines)
    libraries, operator = _written(by)
    installed = _installed(by)
    return {
        "gpus": by.get("gpu", []),
        "loaded": _loaded(by),
        "libraries": libraries,
        "library_version": _one(libraries),
        "fabric_manager": fabric_manager_version((by.get("fm") or [""])[0]),
        "operator": operator,
        "running_kernel": (by.get("running") or [""])[0].strip(),
        "kernels": sorted({k.strip() for k in by.get("kernel", [])}, key=version_key),
        "next_boot": _after_next_start(by, installed),
        "installed": installed,
        "dkms": [s for s in map(dkms_status, by.get("dkms", [])) if s],
        "reboot_required": bool(by.get("reboot-required")),
        "reboot_packages": " ".join(by.get("reboot-pkgs", [])).split(),
        "cdi": _cdi_specs(by),
        "cdi_refresh": (by.get("cdi-refresh") or [""])[0].strip(),
    }


def _loaded(by: dict) -> dict:
    """What the kernel holds: the modules' versions (sysfs), the kernel's own line, the device nodes."""
    modules = {}
    for value in by.get("module", []):
        name, _, version = value.partition(" ")
        modules[module_name(name)] = version.strip()
    line = (by.get("procfs") or [""])[0]
    proc, flavour = proc_version(line) if line else ("", "")
    main = next((m for m in MAIN_MODULES if m in modules), "")
    return {
        "module": main,
        "version": modules.get(main) or proc,
        "flavour": flavour,
        "uvm": any(m in modules for m in UVM_MODULES),
        "modules": modules,
        "kernel_line": line,
        "devices": by.get("dev", []),
    }


def _written(by: dict) -> tuple:
    """The libraries in use, each with its version (the Operator's, under its driver root, where
    its driver is the node's), and the Operator's driver: its root, its validator's word."""
    libraries = {p: library_version(p) for p in by.get("lib", []) if library_version(p)}
    operator = {"root": bool(by.get("operator-root")), "host_driver": _host_driver(by.get("driver-ready", []))}
    on_host = {p: v for p, v in libraries.items() if not p.startswith("/run/nvidia/driver/")}
    in_operator = {p: v for p, v in libraries.items() if p.startswith("/run/nvidia/driver/")}
    from_operator = operator["root"] and operator["host_driver"] is not True and in_operator
    return (in_operator if from_operator else on_host), operator


def _installed(by: dict) -> dict:
    """Each installed kernel's NVIDIA modules, ``{kver: {name: {"path", "version", "size",
    "mtime"}}}``: ``kmod KVER FILE`` lines, the main module's with ``VERSION SIZE MTIME`` (``-``:
    no version read)."""
    installed = {}
    for value in by.get("kmod", []):
        kernel, path, *rest = value.split()
        version, size, mtime = (rest + ["-", "", ""])[:3]
        installed.setdefault(kernel, {})[module_name(path)] = {
            "path": path,
            "version": "" if version == "-" else version,
            "size": size,
            "mtime": mtime,
        }
    return installed


def known_modules(facts: dict | None) -> dict:
    """The main NVIDIA module files a read found with their versions, ``{path: (size, mtime,
    version)}``: what the next read need not ask modinfo again (``node_read``'s ``known_modules``).

        known_modules(facts)
        -> {"/lib/modules/6.8.0-60-generic/updates/dkms/nvidia.ko.zst": ("17", "1733", "580.159.04")}
    """
    found = {}
    for modules in ((facts or {}).get("installed") or {}).values():
        for name in MAIN_MODULES:
            m = modules.get(name)
            if m and m["version"] and m["size"]:
                found[m["path"]] = (m["size"], m["mtime"], m["version"])
    return found


def known_kmods(known: dict) -> str:
    """``known_modules`` as the read's ``KNOWN_KMODS``: ``PATH SIZE MTIME VERSION`` a line.

    known_kmods({"/lib/modules/6.8/nvidia.ko": ("17", "1733", "580.159.04")})
    -> "/lib/modules/6.8/nvidia.ko 17 1733 580.159.04"
    """
    return "\n".join(f"{path} {size} {mtime} {version}" for path, (size, mtime, version) in sorted(known.items()))


def _after_next_start(by: dict, installed: dict) -> dict:
    """The kernel the next boot starts (``next_boot``), its NVIDIA module (path and version, as
    its modules.dep and modinfo say: ``installed``), and whether it has nvidia_uvm."""
    bls = {}
    for value in by.get("bls", []):
        entry, key, rest = (value.split(" ", 2) + ["", ""])[:3]
        bls.setdefault(entry.removesuffix(".conf"), {})[key] = rest.strip()
    boot = {
        "grub_default": (by.get("grub-default") or [""])[-1],
        "grubenv": grubenv(by.get("grubenv", [])),
        "bls": bls,
        "sd_default": (by.get("sdboot-default") or [""])[-1].strip(),
    }
    kernels = [k.strip() for k in by.get("kernel", [])]
    nxt = next_boot(boot, kernels, (by.get("running") or [""])[0].strip())
    modules = installed.get(nxt["kernel"], {})
    main = next((modules[m] for m in MAIN_MODULES if m in modules), None)
    return {
        **nxt,
        "module": main["path"] if main else "",
        "version": main["version"] if main else "",
        "uvm": any(m in modules for m in UVM_MODULES),
    }


def _cdi_specs(by: dict) -> dict:
    """The NVIDIA CDI specs: each one's driver version and the files it names that are not there."""
    cdi = {v.strip(): {"version": "", "missing": []} for v in by.get("cdi", [])}
    for value in by.get("cdi-version", []):
        path, _, version = value.partition(" ")
        cdi.setdefault(path, {"version": "", "missing": []})["version"] = version.strip()
    for value in by.get("cdi-missing", []):
        path, _, missing = value.partition(" ")
        cdi.setdefault(path, {"version": "", "missing": []})["missing"].append(missing.strip())
    return cdi


def _host_driver(lines: list):
    """The GPU Operator validator's word (``IS_HOST_DRIVER=true|false``); None where it said none."""
    for line in lines:
        key, _, value = line.strip().partition("=")
        if key == "IS_HOST_DRIVER":
            return value.strip().lower() == "true"
    return None


def _one(libraries: dict) -> str:
    """The libraries' version: NVML's where there is one (what checks the module), else any."""
    nvml = [v for p, v in libraries.items() if "libnvidia-ml.so." in p]
    found = sorted(set(nvml or libraries.values()), key=version_key)
    return found[-1] if found else ""


def has_driver(facts: dict | None) -> bool:
    """Whether the node has anything of NVIDIA's driver: a GPU, a module loaded or installed,
    libraries, the Operator's driver. A node with none is judged on nothing here but its CDI specs
    (a spec alone, naming no missing file, is no driver).

    has_driver(driver_facts([])) -> False
    """
    if not facts:
        return False
    return bool(
        facts["gpus"]
        or facts["loaded"]["modules"]
        or facts["libraries"]
        or facts["operator"]["root"]
        or facts["next_boot"]["module"]
    )


def summary(facts: dict) -> dict:
    """The driver's three views as a report says them.

    summary(facts) -> {"loaded": "580.159.04", "flavour": "open", "libraries": "580.159.04", ...}
    """
    nxt = facts["next_boot"]
    return {
        "gpus": len(facts["gpus"]),
        "loaded": facts["loaded"]["version"],
        "flavour": facts["loaded"]["flavour"],
        "uvm": facts["loaded"]["uvm"],
        "libraries": facts["library_version"],
        "fabric_manager": facts["fabric_manager"],
        "managed_by": "gpu-operator" if operator_built(facts) else "host",
        "running_kernel": facts["running_kernel"],
        "next_kernel": nxt["kernel"],
        "next_kernel_by": nxt["by"],
        "next_module": nxt["version"] if nxt["module"] else "",
        "reboot_required": facts["reboot_required"],
    }


def operator_built(facts: dict) -> bool:
    """Whether the GPU Operator's driver container builds (or brings) the module at its every
    start: its root is there and its validator does not say the driver is the host's."""
    return facts["operator"]["root"] and facts["operator"]["host_driver"] is not True
