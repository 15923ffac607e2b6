"""The repairs: a lab host's (``lab_steps``) and real GPU nodes' (``node_steps``: ``repair_node``;
``rollout``: each node's plan from its gaps, then one rollout one node at a time; ``node_repair``:
one node's steps), beside the plan and the drain of ``gpuop.repair``."""
