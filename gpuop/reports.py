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
