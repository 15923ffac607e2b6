"""The GPU proof's verdicts (docs/gpu-proof.md), pure: the cluster objects each stage of
bench/gpu/proof.sh stands for, what the one judgment says the GPU does for each Pod (``forecast``)
and after a restart, read beside what the GPU did (proof.sh's observed file). bench/gpu/judge.py
reads a run's files and prints the table."""

from gpuop.judgment.cluster import gpus_asked
from gpuop.judgment.containerd import release
from gpuop.judgment.driver_rules import KINDS as DRIVER_KINDS
from gpuop.judgment.objects import of_kind, ref
from gpuop.judgment.rules import judge
from gpuop.judgment.view import node_view

NODE = "gpu-node"  # proof.sh's hostname for every stage
NAMESPACE = "gpuop-proof"
HANDLER = "nvidia"
PROBE_IMAGE = "gpuop.io/gpu-probe:1"


def pod(name: str, runtime_class: str = "", gpus: int = 0, phase: str = "Running") -> dict:
    asks = {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}} if gpus else {}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeName": NODE,
            **({"runtimeClassName": runtime_class} if runtime_class else {}),
            "containers": [{"name": "gpu", "image": PROBE_IMAGE, **asks}],
        },
        "status": {"phase": phase},
    }


def stage_objects(stage: str, probe: dict | None = None) -> list:
    """The cluster objects stage ``stage`` stands for: a Node that advertises the GPU, the
    RuntimeClass of the GPU handler, and the stage's Pods, as proof.sh runs them; stage 7's is the
    repair's probe Pod, ``probe`` (bench/gpu/judge.py's ``probe_pod``).

        [ref(p) for p in of_kind(stage_objects("3-cdi"), "Pod")] -> ["gpuop-proof/cdi-pod", "gpuop-proof/plain-pod"]
    """
    gpus = {"nvidia.com/gpu": "1"}
    base = [
        {"kind": "Node", "metadata": {"name": NODE}, "status": {"capacity": gpus, "allocatable": gpus}},
        {"kind": "RuntimeClass", "metadata": {"name": HANDLER}, "handler": HANDLER},
    ]
    pods = {
        "0-driver": [],
        "1-incident": [pod("gpu-pod", HANDLER, 1, "Pending")],
        "2-restarted": [pod("gpu-pod", HANDLER, 1)],
        "3-cdi": [pod("cdi-pod", gpus=1), pod("plain-pod")],
        "4-cdi-off": [pod("cdi-pod", gpus=1)],
        "5-version-4": [pod("gpu-pod", HANDLER, 1)],
        "6-crio": [pod("gpu-pod", HANDLER, 1, "Pending")],
        "6-crio-restarted": [pod("gpu-pod", HANDLER, 1)],
        "7-probe": None,
    }[stage]
    return base + (pods if pods is not None else [probe])


STAGES = (
    "0-driver",
    "1-incident",
    "2-restarted",
    "3-cdi",
    "4-cdi-off",
    "5-version-4",
    "6-crio",
    "6-crio-restarted",
    "7-probe",
)
REFUSED = ("sandbox-fails", "sandbox-refuses-loaded")  # its sandbox is refused
WITHOUT = ("gpu-pod-cdi-off", "cdi-spec-missing", "dra-claim-cdi-off")  # its GPU request is not met


def forecast(entry: dict, pod: dict) -> str:
    """What the judgment says the GPU does for ``pod``: ``refused`` (no sandbox, or its GPU
    request refused), ``none`` (it runs without a GPU), ``gpu`` (it gets one).

        forecast({"gaps": [{"kind": "sandbox-fails", "subject": "gpuop-proof/gpu-pod"}], ...}, pod) -> "refused"
    """
    kinds = {g["kind"] for g in entry["gaps"] if g["subject"] == ref(pod)}
    if kinds & set(REFUSED):
        return "refused"
    if kinds & set(WITHOUT):
        # containerd 2.3 and later refuse a CDI request while CDI is off; earlier ones drop it
        return "refused" if entry["runtime"] == "containerd" and release(entry["version"]) >= (2, 3) else "none"
    return "gpu" if gpus_asked(pod) else "none"


def restart_forecast(entry: dict) -> str:
    """Whether the judgment says the runtime comes back from a restart (its CRI answering)."""
    return "back" if entry["cri_after_restart"] == "ok" else "not-back"


def driver_forecast(entry: dict, read: dict) -> str:
    """What the judgment says of the driver: its loaded version where it has no gap of the
    driver's, ``none`` where no NVIDIA module is loaded, else its gaps' kinds.

        driver_forecast(entry, parse(lines)) -> "580.159.04"
    """
    gaps = sorted({g["kind"] for g in entry["gaps"] if g["kind"] in DRIVER_KINDS})
    if gaps:
        return "gaps " + ",".join(gaps)
    return ((read.get("driver") or {}).get("loaded") or {}).get("version") or "none"


def observed(text: str) -> dict:
    """proof.sh's observed file: ``pod NAME OUTCOME WORDS``, ``restart OUTCOME WORDS`` and
    ``driver VERSION|none WORDS`` lines, as {"pods": {name: (outcome, words)}, "restart": (outcome,
    words) or None, "driver": (version, words) or None}.

        observed("pod gpu-pod refused no runtime\\nrestart back\\n")["pods"] -> {"gpu-pod": ("refused", "no runtime")}
    """
    found = {"pods": {}, "restart": None, "driver": None}
    for line in text.splitlines():
        kind, *rest = line.split(" ", 1)
        if kind == "pod" and rest:
            name, outcome, *words = rest[0].split(" ", 2) + [""]
            found["pods"][name] = (outcome, words[0].strip())
        elif kind in ("restart", "driver") and rest:
            outcome, *words = rest[0].split(" ", 1) + [""]
            found[kind] = (outcome, words[0].strip())
    return found


def judged_stage(stage: str, read: dict, seen: dict, objects: list) -> dict:
    """One stage: its node read (``gpuop.reach.node_read.parse``'s) judged with its objects
    (``stage_objects``), each of its Pods' forecast beside what the GPU did, and the restart's
    where one was tried; ``agrees`` where every one matches and every Pod that ran has its object.

        judged_stage("1-incident", parse(lines), observed(text), stage_objects("1-incident"))["agrees"] -> True
    """
    entry = judge(node_view(read), objects, NODE, HANDLER)
    pods = {p["metadata"]["name"]: p for p in of_kind(objects, "Pod")}
    checks = []
    for name, (outcome, words) in seen["pods"].items():
        said = forecast(entry, pods[name]) if name in pods else "no object"
        checks.append((name, outcome, said, words))
    if seen["restart"]:
        checks.append(("restart", seen["restart"][0], restart_forecast(entry), seen["restart"][1]))
    if seen.get("driver"):
        checks.append(("driver", seen["driver"][0], driver_forecast(entry, read), seen["driver"][1]))
    agrees = bool(checks) and all(outcome == said for _, outcome, said, _ in checks)
    return {"stage": stage, "entry": entry, "checks": checks, "agrees": agrees}
