"""What the tests share: the real playbook run from a test (``playbook``), the lab cluster
(``kube``), the lab containerd (``labcontainerd``), the incident's end state (``incident``) and
SPEC's reports (``expected``), processes with deadlines (``proc``), OpenSSH servers on loopback
(``ssh``) and the simulated fleet of real nodes (``fleet``)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project
