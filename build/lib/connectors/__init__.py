"""pyinfra connectors of the project: @kubenode, a node read through its cluster."""
