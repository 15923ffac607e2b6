"""
Lab hosts. With nothing configured the playbook targets this machine (``@local``).
"""

lab_hosts = ["@local"]
