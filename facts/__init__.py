"""Custom pyinfra facts: questions asked on the target about what is live."""
