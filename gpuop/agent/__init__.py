"""The node agent: the one judgment of its own node, said where the cluster listens, in
node-problem-detector's contract: a Node condition (``gpuop.judgment.condition``), an Event on the
Node at each change, and metrics on a port, with ``/healthz`` and ``/readyz`` beside them.

    python -m gpuop.agent --node gpu-a                                         # on the node itself
    python -m gpuop.agent --node gpu-a --enter "nsenter -t 1 -m -u --"   # in a host-PID Pod

Its rooms, one job each: ``flags`` (its knobs, checked in one place), ``watched`` (the cluster's
objects it judges by, kept by list-then-watch), ``noderead`` (the node's read, under one
deadline, its CPU counted), ``events`` (its Events, correlated as client-go's), ``health`` (its
endpoints), ``metrics`` (its series) and ``agent`` (the loop: a judgment when the node's clock
ticks or the cluster announces a change, a write only when the condition changes or its
heartbeat is due).
"""
