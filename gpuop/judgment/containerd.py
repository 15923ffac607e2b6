"""What each containerd version does with its configs: how it merges a main config and its drop-ins,
what it loads at its next start, and its words (CRI answers, logs, a sandbox refused). The configs
themselves, as the lab and the repair write them, are in ``gpuop.judgment.configs``."""

import os
import re
import tomllib
from dataclasses import dataclass

from gpuop.judgment.tomlpath import find_tables, key_path, tables

CRI_PLUGIN = "io.containerd.grpc.v1.cri"
RUNTIMES_SUFFIX = ("containerd", "runtimes")


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

        runtime_names(seed_config("/x/*.toml")) -> ["runc"]
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

    @property
    def written(self) -> list:
        """Every runtime the files name: the main config's, then the drop-ins' new ones.

        analyze_merge(seed_config("/x"), [nvidia_dropin()]).written -> ["runc", "nvidia"]
        """
        return self.main_runtimes + [n for n in self.dropin_runtimes if n not in self.main_runtimes]


def _tables_with_entries(doc: dict) -> list:
    return [path for path, table in tables(doc) if table]


def conflict_table(main_doc: dict, dropin_docs: list):
    """The deepest table both the main config and a drop-in define entries under, or None.

    containerd merges the top-level ``plugins`` map plugin by plugin, so a table counts from
    ``plugins.<plugin>`` down: two drop-ins for different plugins do not conflict.

        conflict_table(seed_config("/x"), [nvidia_dropin()])
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


def parsed_toml(path: str, text: str) -> tuple:
    """A config file's TOML: ``(document, None)``, or ``(None, the error naming the file)``.

    parsed_toml("/etc/containerd/config.toml", "x = [") -> (None, "/etc/containerd/config.toml is not valid TOML: ...")
    """
    try:
        return tomllib.loads(text), None
    except tomllib.TOMLDecodeError as e:
        return None, f"{path} is not valid TOML: {e}"


def analyze_merge(main_doc: dict, dropin_docs: list) -> MergeAnalysis:
    """What the main config and its drop-ins define, and where they collide.

    analyze_merge(seed_config("/x"), [nvidia_dropin()]).dropin_runtimes -> ["nvidia"]
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


def release(version: str) -> tuple:
    """A containerd version as numbers, ``(0, 0, 0)`` when unknown.

    release("2.0.5") -> (2, 0, 5)
    """
    parts = re.findall(r"\d+", version)[:3]
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts)) if parts else (0, 0, 0)


# containerd issue 11600: on 2.0.0 to 2.0.5, `config dump` runs no plugin migrations, so a
# version-2 file's CRI runtimes are missing from it though the daemon loads them; `config
# migrate` runs them, as the daemon does at start (fixed in 2.0.6 and 2.1.0).
DUMP_WITHOUT_MIGRATIONS = tuple(f"2.0.{patch}" for patch in range(6))


def start_subcommand(version: str) -> str:
    """The ``containerd config`` subcommand whose output is what this version loads at start.

    start_subcommand("2.0.5") -> "migrate";  start_subcommand("1.7.35") -> "dump"
    """
    return "migrate" if version in DUMP_WITHOUT_MIGRATIONS else "dump"


def cri_plugin(version: str) -> str:
    """The plugin whose ``containerd`` table holds the runtimes this version's CRI loads."""
    return "io.containerd.cri.v1.runtime" if release(version) >= (2,) else CRI_PLUGIN


def start_rule(version: str) -> str:
    """How this containerd builds its config at start, from its source and trackers, in words
    (each rule checked on a real binary: tests/containerd/test_versions.py).

        start_rule("1.6.20") -> "containerd 1.6: the runtimes an imported file names replace ..."
    """
    v = release(version)
    line = f"containerd {v[0]}.{v[1]}"
    if v < (2,):
        stops = (
            " and a version above 2 stops the daemon"
            if v >= (1, 7, 17) or (1, 6, 32) <= v < (1, 7)
            else "; a version above 2 is not checked (1.6.32 and 1.7.17 stop the daemon on it)"
        )
        return f"{line}: the runtimes an imported file names replace the main config's whole{stops}"
    if version in DUMP_WITHOUT_MIGRATIONS:
        return (
            f"{line}: plugin sections merge deeply and version-2 files are migrated at start "
            "(its config dump skips that: forecast from config migrate)"
        )
    if (2, 3) <= v < (2, 3, 5):
        return (
            f"{line}: plugin sections merge deeply, and a drop-in whose version is above the "
            "root config's stops the daemon"
        )
    if v >= (2, 3):
        return f"{line}: plugin sections merge deeply, every file migrated before the merge"
    return f"{line}: plugin sections merge deeply, version-2 files migrated; with mixed versions the highest wins"


@dataclass(frozen=True)
class Forecast:
    """What this containerd would load at its next start: whether the daemon starts at all, and
    whether its CRI plugin loads, with which runtimes; ``reason`` says why not, and by which of
    its version's rules (``start_rule``)."""

    runtimes: list
    default_runtime: str
    cri_ok: bool
    reason: str
    starts: bool = True


def restart_forecast(version: str, start_doc: dict) -> Forecast:
    """What a restart loads, from the binary's own merge of the files on disk (``start_doc``: its
    ``config dump``, or ``config migrate`` where the dump misses migrations), read where this
    version's CRI takes its runtimes, and judged by the CRI plugin's rule: its
    ``default_runtime_name`` must name a configured runtime, or the plugin refuses to load (and
    the node serves no Pods).

        restart_forecast("1.6.20", tomllib.loads(dump)) -> Forecast(["nvidia"], "runc", False, "...")
    """
    table = ((start_doc.get("plugins") or {}).get(cri_plugin(version)) or {}).get("containerd") or {}
    runtimes = [k for k, v in (table.get("runtimes") or {}).items() if isinstance(v, dict)]
    default = table.get("default_runtime_name", "")
    if not default:
        why = "the CRI plugin has no default_runtime_name"
    elif default not in runtimes:
        why = (
            f'default_runtime_name "{default}" has no runtime in containerd.runtimes '
            f"(configured: {','.join(runtimes) or 'none'})"
        )
    else:
        return Forecast(runtimes, default, True, "")
    return Forecast(runtimes, default, False, f"{why}; {start_rule(version)}")


def unreadable_config(version: str, error: str) -> Forecast:
    """The forecast when the binary cannot even read its config: containerd will not start.

    unreadable_config("2.3.3", "drop-in config version 3 higher than root config version 2")
    """
    return Forecast([], "", False, f"the daemon will not start: {error}; {start_rule(version)}", starts=False)


_MSG = re.compile(r'msg="((?:[^"\\]|\\.)*)"')


def logged_words(line: str) -> str:
    """The words of a logrus log line (crictl's, CRI-O's: ``time=... level=fatal msg="..."``), or
    the line itself.

        logged_words('level=fatal msg="validating runtime config: ..."') -> "validating runtime config: ..."
    """
    m = _MSG.search(line)
    return m.group(1).replace('\\"', '"') if m else line.strip()


_LOG_RECORD = re.compile(r'\s*(?:time="|level=)')


def in_one_line(message: str) -> str:
    """A runtime's message as one line of a report. runc's, through the kubelet, spans several:
    its warnings first, the error last (``container create failed: time=... level=warning
    msg=...`` then ``... level=error msg="runc create failed: ..."``). It becomes the words
    before its log and the last record's words; lines that are not a log, the first and the
    last joined.

        in_one_line('container create failed: time="t" level=warning msg="a"\ntime="t" level=error msg="b"')
        -> "container create failed: b"
    """
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) < 2:
        return lines[0] if lines else ""
    lead = _LOG_RECORD.split(lines[0], maxsplit=1)[0].strip()
    last = logged_words(lines[-1])
    return f"{lead} ... {last}" if lead == lines[0] else f"{lead} {last}".strip()


def binary_version(version_line: str) -> str:
    """The release in ``containerd --version``, as the project names it.

    binary_version("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1")
    -> "1.6.20"
    binary_version("containerd github.com/containerd/containerd/v2 v2.4.2 ") -> "2.4.2"
    """
    words = version_line.split()
    release = words[2] if len(words) > 2 else (words[-1] if words else "unknown")
    return re.split(r"[~+-]", release.lstrip("v"), maxsplit=1)[0] or "unknown"


def cri_runtimes(info: dict) -> tuple:
    """Handler names and default runtime a running daemon reports through CRI (``crictl info``):
    containerd's, or CRI-O's.

        cri_runtimes({"config": {"containerd": {"runtimes": {"runc": {}}, "defaultRuntimeName": "runc"}}})
        -> (["runc"], "runc")
        cri_runtimes({"config": {"crio": {"Runtimes": {"crun": {}}, "DefaultRuntime": "crun"}}}) -> (["crun"], "crun")
    """
    config = info.get("config") or {}
    if "crio" in config:  # CRI-O's answer: its whole runtime config (gpuop.judgment.crio)
        return list((config["crio"].get("Runtimes") or {}).keys()), config["crio"].get("DefaultRuntime", "")
    cri = config.get("containerd") or {}
    return list((cri.get("runtimes") or {}).keys()), cri.get("defaultRuntimeName", "")


def cri_cdi(info: dict) -> tuple:
    """Whether a running daemon says it resolves CDI devices, and where it reads their specs
    (``crictl info``: ``enableCDI``, ``cdiSpecDirs``); None where it does not say (containerd
    2.4 has no ``enableCDI``: CDI is always on there, see ``cdi_enabled``).

        cri_cdi({"config": {"enableCDI": True, "cdiSpecDirs": ["/etc/cdi", "/var/run/cdi"]}})
        -> (True, ["/etc/cdi", "/var/run/cdi"])
    """
    config = info.get("config") or {}
    if "crio" in config:  # CRI-O resolves CDI devices always; it has no setting to turn it off
        return True, list(config["crio"].get("CDISpecDirs") or [])
    said = config.get("enableCDI")
    return (None if said is None else bool(said)), list(config.get("cdiSpecDirs") or [])


def cdi_enabled(version: str, said: bool | None) -> bool:
    """Whether containerd ``version`` resolves CDI devices, from what its CRI status says
    (``cri_cdi``): its word where it gives one; where it gives none, on from 2.0 (its default
    since 2.0, and 2.4 dropped the setting: always on), off before (1.7's default).

        cdi_enabled("2.4.2", None) -> True
    """
    return said if said is not None else release(version) >= (2,)


def restart_lines(version: str, loaded: list, loaded_from: str, forecast: Forecast | None) -> list:
    """The lines of restart.txt: what this node's containerd holds, and what a restart would load.

    + version: the lab containerd's release, or "none"
    + loaded: handlers it holds now
    + loaded_from: "cri" (asked live), "cri-down" (it runs, its CRI does not answer) or "recorded"
    + forecast: the restart forecast, None where there is no binary to ask

        restart_lines("1.6.20", ["runc"], "cri", restart_forecast(dump))
        -> ["CONTAINERD_VERSION=1.6.20", "LOADED_RUNTIMES=runc", "LOADED_FROM=cri",
            "RESTART_RUNTIMES=nvidia", "RESTART_CRI=fails", "RESTART_REASON=..."]
    """
    lines = [f"CONTAINERD_VERSION={version}", "LOADED_RUNTIMES=" + ",".join(loaded), f"LOADED_FROM={loaded_from}"]
    if forecast is None:
        return lines + [
            "RESTART_RUNTIMES=",
            "RESTART_CRI=unknown",
            "RESTART_REASON=no lab containerd on this host to ask",
        ]
    lines += [
        "RESTART_RUNTIMES=" + ",".join(forecast.runtimes),
        "RESTART_CRI=" + ("ok" if forecast.cri_ok else "fails"),
    ]
    return lines + ([] if forecast.cri_ok else [f"RESTART_REASON={forecast.reason}"])


def sandbox_error(version: str, handler: str) -> str:
    """What containerd of ``version`` answers kubelet for a sandbox whose handler it does not load
    (kubelet's event: ``Failed to create pod sandbox: rpc error: code = Unknown desc = ...``).

        sandbox_error("1.6.20", "nvidia") -> 'failed to get sandbox runtime: no runtime for "nvidia" is configured'
    """
    cause = f'no runtime for "{handler}" is configured'
    if release(version) >= (2,):
        return f'unable to get OCI runtime for sandbox "<id>": {cause}'
    return f"failed to get sandbox runtime: {cause}"
