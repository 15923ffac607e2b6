"""The audits: a lab host's (``lab_steps``: ``audit_lab``; ``lab_audit``: its report) and real GPU
nodes' (``node_steps``: ``audit_node``; ``node_audit``: each node read and judged once, the cluster
read once, the fleet reported once). Both judge through the one door, ``gpuop.judgment.rules.judge``."""
