"""A run's state, in one object: what the run's operations keep between its hosts and from its
plan to its execution (``Run``). pyinfra hands an operation its own State (``host.state``), never
an object of ours, so ``run_of`` is the one place that maps one to the other; it holds the State
weakly, so a run that ends takes its state with it (the tests run many in one process).

    run = run_of(host.state)
    run.reads[host.name]   # that host's batched reads (runbook/run/reads.py)
"""

import weakref
from dataclasses import dataclass, field


@dataclass
class Run:
    scopes: dict = field(default_factory=dict)  # host name -> what its batched read covers (reads._Scope)
    reads: dict = field(default_factory=dict)  # host name -> its batched reads (reads._Reads)
    reports_seen: dict = field(
        default_factory=dict
    )  # host name -> {report file name: text}, as this run wrote or found it
    node_audit: object = None  # the node audit's cluster read and entries (node_audit.NodeAudit), once a node asks
    rollout: object = None  # the fleet repair's plans and rollout (node_repair.Rollout), once a node plans


_RUNS = weakref.WeakKeyDictionary()  # pyinfra's State -> its Run


def run_of(state) -> Run:
    """The Run of pyinfra's ``state``, made at its first ask.

    run_of(host.state).reports_seen.setdefault(host.name, {})
    """
    return _RUNS.setdefault(state, Run())
