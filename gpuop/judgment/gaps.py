"""A gap: one view of a GPU node against another, the finding both audits report (the lab
host's and a real node's, both through gpuop/judgment/rules.py), in one shape.

The views are where the runtime handlers and GPUs are seen: ``written`` (the config files),
``loaded`` (the running daemon, asked through CRI), ``after-restart`` (the binary's own merge of
the files at its next start) and ``scheduled`` (the cluster's objects: RuntimeClasses, Pods,
Nodes, DaemonSets).
"""

VIEWS = ("written", "loaded", "after-restart", "scheduled")


def gap(kind: str, subject: str, views, detail: str) -> dict:
    """One finding: its kind, what it is about, the views it joins, and a sentence.

    gap("handler-not-loaded", "nvidia", ["written", "loaded"], "runtime handler nvidia is written but ...")
    -> {"kind": "handler-not-loaded", "subject": "nvidia", "views": ["written", "loaded"], "detail": "..."}
    """
    unknown = [v for v in views if v not in VIEWS]
    if unknown:
        raise ValueError(f"gap {kind}: unknown view(s) {', '.join(unknown)}; expected {', '.join(VIEWS)}")
    return {"kind": kind, "subject": subject, "views": list(views), "detail": detail}
