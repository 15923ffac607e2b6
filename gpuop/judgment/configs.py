"""The containerd configs gpuop writes: the incident's main config (``seed_config``), the NVIDIA
toolkit's drop-in (``nvidia_dropin``), and the drop-in that survives a version's merge
(``repaired_dropin``), for the lab's fix and the fleet's repair alike."""

from gpuop.judgment.containerd import CRI_PLUGIN, release


def seed_config(imports_glob: str, default_runtime: str = "runc", node_cri: dict | None = None) -> dict:
    """The node's main config.toml as data (tomli-w quotes the dotted plugin key by construction).

    + imports_glob: where drop-ins are found, e.g. "/root/gpuop/etc/containerd/conf.d/*.toml"
    + default_runtime: the runtime containerd uses when a Pod names none
    + node_cri: where a real kubelet runs Pods on it, what its machine needs (``kubelet_node_cri``)

        tomli_w.dumps(seed_config("/etc/containerd/conf.d/*.toml"))
    """
    cri = {
        **(node_cri or {}),
        "containerd": {
            "default_runtime_name": default_runtime,
            "runtimes": {
                "runc": {
                    "runtime_type": "io.containerd.runc.v2",
                    "options": {"SystemdCgroup": node_cri is None},
                },
            },
        },
    }
    return {"version": 2, "imports": [imports_glob], "plugins": {CRI_PLUGIN: cri}}


def kubelet_node_cri(cni_bin_dir: str, cni_conf_dir: str) -> dict:
    """The CRI settings a real kubelet's Pods need on the lab's kind of machine (``seed_config``'s
    ``node_cri``): the lab node's own CNI; a Pod's ``oom_score_adj`` no lower than containerd's
    own (this machine refuses to lower it, and runc would fail every sandbox); and, there being
    no systemd, runc's cgroupfs driver.

        kubelet_node_cri("/root/gpuop/var/node/cni/bin", "/root/gpuop/var/node/cni/net.d")
    """
    return {"restrict_oom_score_adj": True, "cni": {"bin_dir": cni_bin_dir, "conf_dir": cni_conf_dir}}


def systemd_cgroup(main_doc: dict) -> bool:
    """Whether the main config's runc uses systemd's cgroup driver (the toolkit's runtime follows it).

    systemd_cgroup(seed_config("/x")) -> True
    """
    runc = main_doc.get("plugins", {}).get(CRI_PLUGIN, {}).get("containerd", {}).get("runtimes", {}).get("runc", {})
    return bool(runc.get("options", {}).get("SystemdCgroup", False))


def nvidia_dropin(binary: str = "/usr/bin/nvidia-container-runtime", systemd: bool = True) -> dict:
    """The drop-in the NVIDIA container toolkit writes: one more runtime, with the main config's
    cgroup driver (``systemd_cgroup``).

        tomli_w.dumps(nvidia_dropin())
    """
    return {
        "plugins": {
            CRI_PLUGIN: {
                "containerd": {
                    "runtimes": {
                        "nvidia": {
                            "runtime_type": "io.containerd.runc.v2",
                            "options": {"BinaryName": binary, "SystemdCgroup": systemd},
                        },
                    },
                },
            },
        },
    }


def _deep_merge(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        merged[key] = (
            _deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def dropin_keeping_cri(main_doc: dict, dropin_doc: dict) -> dict:
    """A drop-in that survives containerd 1.x's merge: every plugin section the drop-in names is
    carried whole, the main config's own settings of it included (runc, the default runtime), with
    the drop-in's added, as the NVIDIA toolkit 1.18 writes it. 1.x then loads both runtimes.

        dropin_keeping_cri(seed_config("/x"), nvidia_dropin())  # runtimes runc and nvidia
    """
    main_plugins, plugins = main_doc.get("plugins", {}), dropin_doc.get("plugins", {})
    return {
        **dropin_doc,
        "plugins": {name: _deep_merge(main_plugins.get(name, {}), section) for name, section in plugins.items()},
    }


def repaired_dropin(version: str, main_doc: dict, handler: str = "nvidia") -> dict:
    """The drop-in that gives ``handler`` to this containerd and survives its merge, in its root
    config's version and layout: 1.x replaces a plugin's whole section with the drop-in's, so it
    carries the root's CRI section too; 2.x merges deeply, so the handler alone, in the version-3
    layout where the root is version 3 or more (a drop-in above the root's version is what
    2.3.0-2.3.4 refuse to start on). The lab's fix and the fleet's repair both write this one.

        repaired_dropin("1.6.20", seed_config("/x"))  # runc, the default runtime, and nvidia
        repaired_dropin("2.4.2", seed_config("/x")) == nvidia_dropin()
        repaired_dropin("2.4.2", {"version": 3}, "gpu")["version"] -> 3
    """
    dropin = nvidia_dropin(systemd=systemd_cgroup(main_doc))
    cri = next(iter(dropin["plugins"]))
    runtime = dropin["plugins"][cri]["containerd"]["runtimes"].pop("nvidia")
    dropin["plugins"][cri]["containerd"]["runtimes"][handler] = runtime
    root_version = main_doc.get("version", 1)
    if release(version) < (2,):
        return dropin_keeping_cri(main_doc, dropin)
    if root_version >= 3:
        return {
            "version": root_version,
            "plugins": {"io.containerd.cri.v1.runtime": {"containerd": {"runtimes": {handler: runtime}}}},
        }
    return dropin
