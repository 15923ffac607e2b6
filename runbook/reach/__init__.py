"""pyinfra's questions to a target, each one command parsed (facts: ``files``, ``containerd``,
``kube``, ``batch``, ``node``), the ``@kubenode`` connector (``kubenode``: a node read through its
cluster) and the nodes a run reaches (``fleet_inventory``); the shell and the parsing live in
``gpuop.reach``."""
