"""The lab's replay of the incident (``deploy.py``): the eight steps as ``@deploy``s (``incident``),
the lab host as a target (``lab_host``), the incident's objects by name (``manifests``), the lab
containerd's operations (``containerd``), the cluster's (``kube``), the live and moment reports
(``reports``) and bringing a moment back (``rewind``)."""
