"""The product's pyinfra half, by room: what pyinfra asks for (deploy files' steps as ``@deploy``s,
operations, facts, a connector), each in the room of what it serves. The entry points at the top
level (``deploy.py``, ``fix.py``, ``audit.py``, ``nodes.py``) call the steps; every room imports only
the rooms below it and ``gpuop`` (docs/layout.md).

- ``replay``: the lab's replay of the incident (deploy.py): its eight steps, the lab host as a
  target, its containerd, its cluster objects, its reports and their rewind;
- ``audit``: the audits, of a lab host and of real GPU nodes;
- ``repair``: the repairs, of a lab host and of real GPU nodes (the rollout);
- ``run``: what every run shares: its state, its batched reads, its waits, its lock, its
  preflight, its last words, a node's knobs, pyinfra's overhead made cheaper;
- ``reach``: pyinfra's questions to a target (facts), the ``@kubenode`` connector, and the
  nodes a run reaches (``fleet_inventory``).
"""

import os

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project: group_data/, templates/, files/
