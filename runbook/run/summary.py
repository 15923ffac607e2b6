"""The run's last words: what the incident showed on each host, logged after pyinfra's results.

The report operations note each report's text as the run leaves it (``seen``); when pyinfra
disconnects from a host whose reports are all there, its summary goes to pyinfra's logger, so
``--json`` output stays clean. A host that failed part-way has no summary: its error is the news.
"""

import os

from pyinfra import logger
from pyinfra.api.state import BaseStateCallback

from gpuop.outputs.reports import incident_summary
from runbook.run.state import run_of


def seen(host, path: str, content: str):
    """Note a report's text as this run leaves it (while executing: planning sees the old state)."""
    if host.state.is_executing:
        run_of(host.state).reports_seen.setdefault(host.name, {})[os.path.basename(path)] = content


class IncidentSummary(BaseStateCallback):
    """Logs each expected host's summary when pyinfra disconnects from it, after its results table."""

    def __init__(self):
        self.expected = {}  # host name -> (out directory, report names)

    def host_disconnect(self, state, host):
        out_dir, names = self.expected.get(host.name, ("", ()))
        reports = run_of(state).reports_seen.pop(host.name, {})
        if names and all(name in reports for name in names):
            for line in incident_summary(host.name, out_dir, reports):
                logger.info(line)


def at_end(host, out_dir: str, reports):
    """
    Log what the incident showed on this host at the end of the run, from ``reports`` (file names
    in ``out_dir``) as the run left them.

    .. code:: python

        at_end(host, "/root/gpuop/out", ("merge.txt", "restart.txt", ...))
    """
    handlers = host.state.callback_handlers
    summary = next((h for h in handlers if isinstance(h, IncidentSummary)), None)
    if summary is None:
        summary = IncidentSummary()
        host.state.add_callback_handler(summary)
    summary.expected[host.name] = (out_dir, tuple(reports))
