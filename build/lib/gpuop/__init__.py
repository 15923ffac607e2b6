"""Pure logic of the gpuop playbook: no pyinfra import, unit-tested without a cluster."""
