"""The fleet audit run through the cluster reach (a read Pod on each node)."""

import json
import os

from tests.helpers.playbook import deploy


def audit(path, root, *data, name="fleet.json", debug=False):
    report = os.path.join(root, name)
    run = deploy(
        None, f"report={report}", *data, env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py", debug=debug
    )
    assert os.path.exists(report), run.log[-4000:]
    with open(report) as f:
        return run, json.load(f)
