"""Report files: rendering, and the stamps that say a moment report is still the one captured."""

import hashlib
import json


def render(lines) -> str:
    """Report text: one line each, ending with a newline.

    render(["A=1", "B=2"]) -> "A=1\\nB=2\\n"
    """
    return "".join(f"{line}\n" for line in lines)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def inputs_digest(inputs: dict) -> str:
    """A digest of the knobs a moment depends on: when they change, the moment is captured anew."""
    return digest(json.dumps(inputs, sort_keys=True, default=list))


def stamp_text(report_text: str, inputs: dict) -> str:
    """What is recorded beside a captured moment report.

    stamp_text("Unschedulable\\n...", {"nodes": [...]}) -> "sha256=...\\ninputs=...\\n"
    """
    return render([f"sha256={digest(report_text)}", f"inputs={inputs_digest(inputs)}"])


def stamp_holds(stamp: str | None, report_text: str | None, inputs: dict) -> bool:
    """Whether a report file is still exactly the moment captured for these inputs.

    A missing or edited report, a missing stamp, or changed inputs all mean: capture again.
    """
    if stamp is None or report_text is None:
        return False
    return stamp == stamp_text(report_text, inputs)


def key_values(text: str) -> dict:
    """A ``KEY=VALUE`` report as a dict (lines without ``=`` are skipped).

    key_values("A=1\\nB=x=y\\n") -> {"A": "1", "B": "x=y"}
    """
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def incident_summary(where: str, out_dir: str, reports: dict) -> list:
    """What the incident showed, in a few lines naming the report each comes from: the run's last
    words. ``reports`` maps report file names to their texts, as the run wrote or found them.

        incident_summary("@local", "/root/gpuop/out", {"merge.txt": "MAIN_RUNTIMES=runc\\n...", ...})
        -> ["What the incident showed on @local (reports in /root/gpuop/out):",
            "  written    main config runc; drop-in nvidia, which replaces ... (merge.txt)", ...]
    """
    merge, restart = key_values(reports["merge.txt"]), key_values(reports["restart.txt"])
    slots, rollout = key_values(reports["slots.txt"]), key_values(reports["rollout.txt"])
    reason, message = (reports["unscheduled.txt"].splitlines() + ["", ""])[:2]
    gpus = reports["node-gpu.txt"].splitlines()[1:]
    dropin = f"drop-in {merge['DROPIN_RUNTIMES']}"
    if merge["CONFLICT"] == "yes":
        dropin += f", which replaces {merge['CONFLICT_TABLE']}"
    after = f"containerd {restart['CONTAINERD_VERSION']} would load {restart['RESTART_RUNTIMES']}"
    if restart["RESTART_CRI"] == "fails":
        after += f"; its CRI fails: {restart.get('RESTART_REASON', 'no reason given')}"
    else:
        after += f"; CRI {restart['RESTART_CRI']}"
    return [
        f"What the incident showed on {where} (reports in {out_dir}):",
        f"  written    main config {merge['MAIN_RUNTIMES']}; {dropin} (merge.txt)",
        f"  loaded     {merge['LOADED_RUNTIMES']}, from {restart['LOADED_FROM']} (merge.txt, restart.txt)",
        f"  restart    {after} (restart.txt)",
        f"  scheduled  the GPU Pod Pending, {reason}: {message} (unscheduled.txt)",
        f"  GPUs       {', '.join(gpus)} (node-gpu.txt)",
        f"  slots      {slots['ADVERTISED']} advertised from {slots['PHYSICAL_GPUS']} GPUs x "
        f"{slots['REPLICAS']}; {slots['VRAM_GUARANTEED_PER_SLOT_GIB']} GiB guaranteed per slot, "
        f"isolation {slots['ISOLATION']} (slots.txt)",
        f"  rollout    {rollout['UPDATED']}/{rollout['DESIRED']} updated, {rollout['READY']} Ready, "
        f"{rollout['OLD_IMAGE_PODS']} on the old image; blocker {rollout['BLOCKER']} (rollout.txt)",
    ]
