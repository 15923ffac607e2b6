"""gpuop's half with no pyinfra, by rooms: the judgment (``judgment``, pure: no I/O), the target's
reach through the API server and a node's read (``reach``), the repair's plan (pure) and its API
steps (``repair``), the reports (``outputs``), the node agent (``agent``), the knobs (``knobs``) and
the lab root's layout (``layout``). The pure rooms are unit-tested without a cluster; the rest
against the lab's real API server and nodes."""
