"""What the tests share: the real playbook run from a test (``playbook``), the lab cluster
(``kube``), the lab containerd (``labcontainerd``), the incident's end state (``incident``) and
the seed's reports (``expected``), processes with deadlines (``proc``), OpenSSH servers on
loopback (``ssh``) and the simulated fleet of real nodes: the nodes (``simnodes``), how real
nodes lay out their runtime (``layouts``), their kubelets (``kubelets``), their objects in the
cluster (``fleetobjects``) and the nodes files that list them (``nodesfiles``)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project
# The cluster the tests drive, its context current: `make lab-up`'s, or, for the tests `make test`
# runs beside the lab's (marker beside), a second one, in a kubeconfig of its own (KUBECONFIG).
LAB = os.environ.get("GPUOP_LAB", "gpuop-lab")
