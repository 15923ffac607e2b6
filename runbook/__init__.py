"""The runbooks' steps, each a named pyinfra deploy, called in order by the entry points at the
top level: ``deploy.py`` (the incident), ``fix.py`` (the repair) and ``audit.py`` (the audits).

- ``target``: a lab host or a real node as a target: its knobs, its layout, what its run reads;
- ``manifests``: the incident's objects by name, rendered from ``templates/``;
- ``preflight``: what every lab run checks before it changes anything;
- ``incident``: the eight steps of the incident, the replay's reset and the reboot;
- ``repair``: the repair's steps;
- ``lab_audit`` and ``node_audit``: the audit of a lab host, and of a real GPU node.
"""
