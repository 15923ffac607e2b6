"""The reach: how gpuop gets at a cluster and its nodes (I/O). The operator's kubeconfig as a client
and the cluster's one paged read (`kubeapi`), a node read through a short-lived Pod (`nodepod`), the
hosts and nodes files (`hosts`, `nodes_file`).
"""
