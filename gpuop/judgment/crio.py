"""CRI-O, read in its own words: its files, the merge its binary prints (``crio config``), what
its running daemon holds (``crictl info``), and the rules it applies at start and on SIGHUP
(docs/cri-o.md). No pyinfra here.

CRI-O reads ``/etc/crio/crio.conf``, then every file of ``/etc/crio/crio.conf.d`` in name order,
the last file to set a key winning; a runtime is a table ``[crio.runtime.runtimes.NAME]``. At
start (and on SIGHUP, which rereads the runtimes) it drops a runtime whose binary is missing,
and refuses to start when that runtime is the default one (``ValidateRuntimes`` in
``pkg/config/config.go``).
"""

import json
import posixpath
import re
import tomllib

from gpuop.judgment.containerd import Forecast, logged_words, parsed_toml

NAME = "cri-o"  # the runtime's name in every report
MERGE_FAILED = "--- merge failed"  # the read's line between `crio config`'s output and its error
PATHS = "--- runtime paths"  # the read's line before each runtime's "NAME|PATH|yes|no"


def version_of(said: str) -> str:
    """The release in ``crio version``'s output.

    version_of("Version:        1.36.3\\nGitCommit: ...") -> "1.36.3"
    """
    m = re.search(r"^Version:\s*v?(\S+)", said, re.M)
    return m.group(1) if m else "unknown"


def runtimes_of(doc: dict) -> tuple:
    """The runtimes a CRI-O TOML document defines, and its ``default_runtime`` ("" where unset).

    runtimes_of({"crio": {"runtime": {"default_runtime": "crun", "runtimes": {"crun": {}}}}})
    -> ({"crun": {}}, "crun")
    """
    runtime = (doc.get("crio") or {}).get("runtime") or {}
    tables = {k: v for k, v in (runtime.get("runtimes") or {}).items() if isinstance(v, dict)}
    return tables, runtime.get("default_runtime", "")


def written_view(config: str, config_dir: str, files: dict) -> dict:
    """What CRI-O's files say: the runtimes they define (the config's, then each drop-in's in name
    order), the default runtime the last of them sets, and which files those are.

        written_view("/etc/crio/crio.conf", "/etc/crio/crio.conf.d", {path: {"text": "..."}})
        -> {"runtimes": ["crun", "nvidia"], "default_runtime": "crun",
            "dropins": ["/etc/crio/crio.conf.d/99-nvidia.toml"], "errors": []}

    A config file that is missing is no error (CRI-O skips it); one that is not TOML is.
    """
    dropins = sorted(p for p in files if posixpath.dirname(p) == config_dir.rstrip("/"))
    runtimes, default, errors = [], "", []
    for path in ([config] if config in files else []) + dropins:
        doc, error = parsed_toml(path, files[path]["text"])
        if doc is None:
            errors.append(error)
            continue
        tables, said = runtimes_of(doc)
        runtimes += [name for name in tables if name not in runtimes]
        default = said or default
    return {"runtimes": runtimes, "default_runtime": default, "dropins": dropins, "errors": errors}


def binaries_answer(lines: list) -> dict:
    """The read's "NAME|PATH|yes|no" lines: each runtime of the merge, its binary (where the merge
    gives none, CRI-O looks its name up on its PATH at start) and whether it is on the node.

        binaries_answer(["crun||no", "nvidia|/usr/bin/nvidia-container-runtime|yes"])
        -> {"crun": ("", False), "nvidia": ("/usr/bin/nvidia-container-runtime", True)}
    """
    found = {}
    for line in lines:
        name, path, there = (line.strip().split("|") + ["", ""])[:3]
        if name:
            found[name] = (path, there == "yes")
    return found


def restart_forecast(merged: dict, binaries: dict) -> Forecast:
    """What CRI-O loads at its next start (or reload), from its own merge of the files
    (``crio config``, which validates the files but not the binaries), judged by its start's rule:
    a runtime whose binary is missing is dropped, and a missing default runtime stops the start.
    ``binaries``: ``binaries_answer`` of the node (a runtime not in it is taken as there).

        restart_forecast(tomllib.loads(merge), {"crun": ("", False), "runc": ("/usr/sbin/runc", True)})
        -> Forecast(["runc"], "runc", True, "runtime crun's binary (crun on its PATH) is missing, ...")
    """
    tables, default = runtimes_of(merged)
    missing = [name for name in tables if not binaries.get(name, ("", True))[1]]
    runtimes = [name for name in tables if name not in missing]

    def binary(name):
        return binaries[name][0] or f"{name} on its PATH"

    dropped = "; ".join(
        f"runtime {name}'s binary ({binary(name)}) is missing, so CRI-O drops it" for name in missing if name != default
    )
    if default in missing:
        return Forecast(
            runtimes,
            default,
            False,
            f"the daemon will not start: runtime validation: the binary of its default_runtime "
            f"{default} ({binary(default)}) is missing" + (f"; {dropped}" if dropped else ""),
            starts=False,
        )
    return Forecast(runtimes, default, True, dropped)


def restart_answer(lines: list) -> dict:
    """What the read printed for the restart view: ``crio version``'s Version line, the binary's
    own merge (or its refusal after ``MERGE_FAILED``), then ``PATHS`` and the runtime binaries.
    As ``runbook.reach.containerd.restart_answer``: the version and ``Forecast``'s fields; None where the
    merge printed is not TOML.

        restart_answer(["Version: 1.36.3", "[crio]", ..., "--- runtime paths", "crun|/usr/bin/crun|yes"])
        -> {"version": "1.36.3", "runtimes": ["crun"], "default_runtime": "crun", "cri_ok": True, ...}
    """
    version = version_of(lines[0]) if lines and lines[0].startswith("Version:") else "unknown"
    lines = lines[1:] if version != "unknown" else lines
    at = lines.index(PATHS) if PATHS in lines else len(lines)
    body, binaries = lines[:at], binaries_answer(lines[at + 1 :])
    if MERGE_FAILED in body:
        said = [logged_words(line) for line in body[body.index(MERGE_FAILED) + 1 :] if line.strip()]
        forecast = Forecast(
            [], "", False, f"the daemon will not start: {said[-1] if said else 'crio config failed'}", starts=False
        )
    else:
        try:
            merged = tomllib.loads("\n".join(body))
        except tomllib.TOMLDecodeError:  # not crio config's output (cut short): no forecast
            return None
        forecast = restart_forecast(merged, binaries)
    return {"version": version, **forecast.__dict__}


def status_answer(lines: list) -> dict:
    """What ``crio status config`` printed (the running daemon's config, through its own API on
    its socket), then its exit status, as a CRI answer (``runbook.reach.containerd.cri_answer``'s shape,
    ``via`` "status"); None where it did not answer.

        status_answer(["[crio.runtime]", 'default_runtime = "runc"', ..., "0"])
        -> {"cri": "ok", "runtimes": ["runc"], "default_runtime": "runc", "via": "status", ...}
    """
    if not lines or lines[-1].strip() != "0":
        return None
    try:
        doc = tomllib.loads("\n".join(lines[:-1]))
    except tomllib.TOMLDecodeError:
        return None
    tables, default = runtimes_of(doc)
    dirs = ((doc.get("crio") or {}).get("runtime") or {}).get("cdi_spec_dirs") or []
    return {
        "cri": "ok",
        "runtimes": list(tables),
        "default_runtime": default,
        "error": "",
        "crictl": False,
        "cdi": True,
        "cdi_spec_dirs": list(dirs),
        "via": "status",
    }


def sandbox_error(handler: str, loaded: list) -> str:
    """What CRI-O answers kubelet for a sandbox whose handler it does not hold
    (``ValidateRuntimeHandler`` in ``internal/oci/oci.go``: Go's print of its runtime map, each
    handler with its pointer, here ``<ptr>``).

        sandbox_error("nvidia", ["runc", "crun"])
        -> "failed to find runtime handler nvidia from runtime list map[crun:<ptr> runc:<ptr>]"
    """
    listed = " ".join(f"{name}:<ptr>" for name in sorted(loaded))
    return f"failed to find runtime handler {handler} from runtime list map[{listed}]"


def hooked_gpus(hook_files: dict) -> list:
    """The OCI hook files that hand GPUs to every container (the NVIDIA hook the GPU Operator
    installs on CRI-O without CDI): JSON files naming nvidia-container-runtime-hook or
    nvidia-container-toolkit in their ``hook.path``.

        hooked_gpus({"/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json": {"text": "..."}})
        -> ["/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"]
    """
    found = []
    for path, f in sorted(hook_files.items()):
        try:
            hook = (json.loads(f["text"]) or {}).get("hook") or {}
        except (ValueError, AttributeError):
            continue
        if re.search(r"nvidia-container-(runtime-hook|toolkit)", str(hook.get("path", ""))):
            found.append(path)
    return found
