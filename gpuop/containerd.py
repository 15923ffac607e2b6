"""containerd configs: the incident's main config and drop-in, and what merging them means."""

import os
from dataclasses import dataclass

from .tomlpath import find_tables, key_path, tables

CRI_PLUGIN = "io.containerd.grpc.v1.cri"
RUNTIMES_SUFFIX = ("containerd", "runtimes")


def main_config(imports_glob: str, default_runtime: str = "runc") -> dict:
    """The node's main config.toml as data (tomli-w quotes the dotted plugin key by construction).

    + imports_glob: where drop-ins are found, e.g. "/root/gpuop/etc/containerd/conf.d/*.toml"
    + default_runtime: the runtime containerd uses when a Pod names none

        tomli_w.dumps(main_config("/etc/containerd/conf.d/*.toml"))
    """
    return {
        "version": 2,
        "imports": [imports_glob],
        "plugins": {
            CRI_PLUGIN: {
                "containerd": {
                    "default_runtime_name": default_runtime,
                    "runtimes": {
                        "runc": {
                            "runtime_type": "io.containerd.runc.v2",
                            "options": {"SystemdCgroup": True},
                        },
                    },
                },
            },
        },
    }


def nvidia_dropin(binary: str = "/usr/bin/nvidia-container-runtime") -> dict:
    """The drop-in the NVIDIA container toolkit writes: one more runtime, same cgroup driver.

        tomli_w.dumps(nvidia_dropin())
    """
    return {
        "plugins": {
            CRI_PLUGIN: {
                "containerd": {
                    "runtimes": {
                        "nvidia": {
                            "runtime_type": "io.containerd.runc.v2",
                            "options": {"BinaryName": binary, "SystemdCgroup": True},
                        },
                    },
                },
            },
        },
    }


def import_globs(main_doc: dict, main_path: str) -> list:
    """The main config's ``imports``, relative entries resolved against its directory.

        import_globs({"imports": ["conf.d/*.toml"]}, "/etc/containerd/config.toml")
        -> ["/etc/containerd/conf.d/*.toml"]
    """
    base = os.path.dirname(main_path)
    return [os.path.join(base, entry) for entry in main_doc.get("imports", [])]


def runtime_names(doc: dict) -> list:
    """Runtime handler names a config defines, in the order it defines them.

    Any table ending in ``containerd.runtimes`` counts, so both the v2 CRI plugin path and
    containerd 2's ``io.containerd.cri.v1.runtime`` path are read.

        runtime_names(main_config("/x/*.toml")) -> ["runc"]
    """
    names = []
    for _, table in find_tables(doc, RUNTIMES_SUFFIX):
        names.extend(k for k, v in table.items() if isinstance(v, dict) and k not in names)
    return names


@dataclass(frozen=True)
class MergeAnalysis:
    main_runtimes: list
    dropin_runtimes: list
    conflict_table: tuple | None


def _tables_with_entries(doc: dict) -> list:
    return [path for path, table in tables(doc) if table]


def conflict_table(main_doc: dict, dropin_docs: list):
    """The deepest table both the main config and a drop-in define entries under, or None.

    containerd merges the top-level ``plugins`` map plugin by plugin, so a table counts from
    ``plugins.<plugin>`` down: two drop-ins for different plugins do not conflict.

        conflict_table(main_config("/x"), [nvidia_dropin()])
        -> ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes")
    """
    main_paths = _tables_with_entries(main_doc)
    shared = set()
    for doc in dropin_docs:
        shared.update(_tables_with_entries(doc))
    candidates = [p for p in main_paths if p in shared and len(p) >= 2]
    if not candidates:
        return None
    deepest = max(len(p) for p in candidates)
    return next(p for p in candidates if len(p) == deepest)


def analyze_merge(main_doc: dict, dropin_docs: list) -> MergeAnalysis:
    """What the main config and its drop-ins define, and where they collide.

        analyze_merge(main_config("/x"), [nvidia_dropin()]).dropin_runtimes -> ["nvidia"]
    """
    dropin_runtimes = []
    for doc in dropin_docs:
        dropin_runtimes.extend(n for n in runtime_names(doc) if n not in dropin_runtimes)
    return MergeAnalysis(
        main_runtimes=runtime_names(main_doc),
        dropin_runtimes=dropin_runtimes,
        conflict_table=conflict_table(main_doc, dropin_docs),
    )


def merge_lines(analysis: MergeAnalysis, loaded_runtimes: list) -> list:
    """The five lines of merge.txt.

        merge_lines(analyze_merge(main, [dropin]), ["runc"])
        -> ["MAIN_RUNTIMES=runc", "DROPIN_RUNTIMES=nvidia", "CONFLICT=yes", ...]
    """
    table = analysis.conflict_table
    return [
        "MAIN_RUNTIMES=" + ",".join(analysis.main_runtimes),
        "DROPIN_RUNTIMES=" + ",".join(analysis.dropin_runtimes),
        "CONFLICT=" + ("yes" if table else "no"),
        "CONFLICT_TABLE=" + (key_path(table) if table else ""),
        "LOADED_RUNTIMES=" + ",".join(loaded_runtimes),
    ]

