"""The rules of a node's NVIDIA driver (``gpuop.judgment.driver``'s facts): what is loaded against
what is written, and what the next boot's kernel would load against both. Each gap kind sets one
condition (``gpuop.judgment.condition``: the next boot's kinds are in ``NEXT_START``), each
sentence names the versions and the file that says them (docs/driver.md). A driver the GPU
Operator builds at its every start is said as such, not forecast; a node with nothing of NVIDIA's
has no gap here.

    driver_gaps(facts)
    -> [{"kind": "driver-library-mismatch", "subject": "nvidia", "views": ["loaded", "written"], ...}]
"""

from gpuop.judgment.driver import has_driver, operator_built
from gpuop.judgment.gaps import gap

SUBJECT = "nvidia"  # the driver, as a finding names it
PROC_VERSION = "/proc/driver/nvidia/version"
# The next boot's gap kinds (each sets RESTART_UNSAFE; gpuop.judgment.condition.NEXT_START).
NEXT_BOOT = (
    "next-boot-no-module",
    "next-boot-module-mismatch",
    "fabric-manager-next-boot-mismatch",
    "cdi-spec-stale-after-boot",
)
# Every kind of the driver's: what no repair of the runtime changes.
KINDS = (
    "driver-not-loaded",
    "nvidia-uvm-not-loaded",
    "driver-library-mismatch",
    "fabric-manager-mismatch",
    "cdi-spec-files-missing",
    *NEXT_BOOT,
)


def driver_gaps(facts: dict | None) -> list:
    """Every gap of the driver: loaded against written now (Problem), the next boot's kernel's
    module against the libraries (RestartUnsafe), Fabric Manager against both, the NVIDIA CDI
    specs' files.

        driver_gaps(driver_facts(lines))  # the package upgraded under its module
        -> [{"kind": "driver-library-mismatch", ...}]
    """
    if not facts:
        return []
    if not has_driver(facts):  # a spec may outlive its driver: its files are still judged
        return _cdi(facts)
    return _now(facts) + _fabric_manager(facts) + _cdi(facts) + _next_boot(facts)


def _loaded_words(facts: dict) -> str:
    loaded = facts["loaded"]
    where = f"/sys/module/{loaded['module']}/version" if loaded["module"] else PROC_VERSION
    return f"{loaded['version']} loaded ({where})"


def _library_words(facts: dict) -> str:
    nvml = next((p for p in facts["libraries"] if "libnvidia-ml.so." in p), next(iter(facts["libraries"]), ""))
    return f"the libraries {facts['library_version']} ({nvml})"


def _now(facts: dict) -> list:
    """The driver as it is now: a GPU with no module, a module without nvidia_uvm, a module whose
    version is not the libraries' (every NVML and CUDA call fails: Driver/library version mismatch)."""
    loaded, gaps = facts["loaded"], []
    if facts["gpus"] and not loaded["version"]:
        gaps.append(
            gap(
                "driver-not-loaded",
                SUBJECT,
                ["loaded"],
                f"{len(facts['gpus'])} NVIDIA GPU(s) on the PCI bus ({', '.join(facts['gpus'][:4])}) and no NVIDIA "
                "kernel module loaded (/sys/module/nvidia): the device plugin advertises nothing, every GPU Pod fails",
            )
        )
    if loaded["version"] and not loaded["uvm"]:
        gaps.append(
            gap(
                "nvidia-uvm-not-loaded",
                SUBJECT,
                ["loaded"],
                f"the NVIDIA module {_loaded_words(facts)} without nvidia_uvm (/sys/module/nvidia_uvm): "
                "nvidia-smi works and every CUDA program fails",
            )
        )
    if loaded["version"] and facts["library_version"] and loaded["version"] != facts["library_version"]:
        gaps.append(
            gap(
                "driver-library-mismatch",
                SUBJECT,
                ["loaded", "written"],
                f"the NVIDIA module {_loaded_words(facts)} and {_library_words(facts)} differ: every NVML and CUDA "
                "call fails with 'Driver/library version mismatch' until the module is reloaded or the node reboots",
            )
        )
    return gaps


def _fabric_manager(facts: dict) -> list:
    """Fabric Manager (NVSwitch systems) must be the driver's own version, now and after the next boot."""
    fm, loaded, nxt = facts["fabric_manager"], facts["loaded"]["version"], facts["next_boot"]
    if not fm:
        return []
    gaps = []
    if loaded and fm != loaded:
        gaps.append(
            gap(
                "fabric-manager-mismatch",
                "nv-fabricmanager",
                ["loaded", "written"],
                f"Fabric Manager {fm} (nv-fabricmanager --version) is not the loaded driver's {loaded}: it does not "
                "start, and CUDA fails with error 802, system not yet initialized",
            )
        )
    if nxt["version"] and nxt["version"] != fm:
        gaps.append(
            gap(
                "fabric-manager-next-boot-mismatch",
                "nv-fabricmanager",
                ["written", "after-restart"],
                f"Fabric Manager {fm} (nv-fabricmanager --version) is not the version of the NVIDIA module the next "
                f"boot loads, {nxt['version']} ({nxt['module']}, kernel {nxt['kernel']}): after the reboot CUDA fails "
                "with 802",
            )
        )
    return gaps


def _cdi(facts: dict) -> list:
    """NVIDIA CDI specs that name driver files no longer there, and whether a boot makes them again."""
    gaps, refresh = [], facts["cdi_refresh"]
    for path, spec in sorted(facts["cdi"].items()):
        if not spec["missing"]:
            continue
        named = ", ".join(spec["missing"][:3]) + (
            f" and {len(spec['missing']) - 3} more" if len(spec["missing"]) > 3 else ""
        )
        version = f" (driver {spec['version']})" if spec["version"] else ""
        gaps.append(
            gap(
                "cdi-spec-files-missing",
                path,
                ["written", "loaded"],
                f"the CDI spec {path}{version} names files that are not there: {named}: every container given a GPU "
                "through it fails to start",
            )
        )
        if not refresh or not path.startswith(("/var/run/cdi/", "/run/cdi/")):
            why = (
                "nothing makes it again at boot (no nvidia-cdi-refresh.service enabled)"
                if not refresh
                else f"a static spec, which {refresh} does not write"
            )
            gaps.append(
                gap(
                    "cdi-spec-stale-after-boot",
                    path,
                    ["written", "after-restart"],
                    f"the CDI spec {path}{version} will still name the missing files after the next boot: {why}",
                )
            )
    return gaps


def _next_boot(facts: dict) -> list:
    """The kernel the next boot starts: its NVIDIA module missing (DKMS skipped it, a precompiled
    package not there), or of another version than the libraries'. The Operator's driver is built
    at its start: said as such, no gap."""
    nxt = facts["next_boot"]
    if operator_built(facts) or not nxt["kernel"]:
        return []
    pending = " (a reboot is pending: /run/reboot-required)" if facts["reboot_required"] else ""
    if not nxt["module"]:
        said = _dkms_words(facts["dkms"], nxt["kernel"])
        return [
            gap(
                "next-boot-no-module",
                SUBJECT,
                ["after-restart"],
                f"the next boot starts kernel {nxt['kernel']} ({nxt['by']}){pending}, which has no NVIDIA module "
                f"(/lib/modules/{nxt['kernel']}/modules.dep){said}: after it the GPUs are gone; build it "
                f"(dkms autoinstall -k {nxt['kernel']}, its headers installed) or install the module package for it",
            )
        ]
    want = facts["library_version"]
    if want and nxt["version"] and nxt["version"] != want:
        return [
            gap(
                "next-boot-module-mismatch",
                SUBJECT,
                ["written", "after-restart"],
                f"the next boot starts kernel {nxt['kernel']} ({nxt['by']}){pending}, whose NVIDIA module is "
                f"{nxt['version']} ({nxt['module']}), not {_library_words(facts)}: after it every NVML and CUDA "
                "call fails with 'Driver/library version mismatch'",
            )
        ]
    return []


def _dkms_words(statuses: list, kernel: str) -> str:
    """DKMS's word on the NVIDIA module for ``kernel``: its state there, or that it built nothing."""
    nvidia = [s for s in statuses if s["module"].startswith("nvidia")]
    there = next((s for s in nvidia if s["kernel"] == kernel), None)
    if there:
        return f"; dkms status: {there['module']}/{there['version']}, {kernel}: {there['state']}"
    if nvidia:
        return f"; DKMS holds {nvidia[0]['module']}/{nvidia[0]['version']} and built nothing for {kernel}"
    return ""
