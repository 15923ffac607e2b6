"""Several facts read in one round trip."""

from pyinfra.api import FactBase

_PART_END = "--- gpuop: part ended, exit"


class PartFailed(Exception):
    """A part of a ``Batch`` whose command failed: its exit status and its output."""


class Batch(FactBase):
    """
    Several facts read in one round trip: their commands run at once in one shell command, each
    in its own subshell, and each one's output goes to its own ``process``. The
    result has one entry per part: the fact's value, its default when the part printed nothing,
    or, when the part's command failed or its ``process`` raised, that exception (``PartFailed``
    with the exit status and output, or the fact's own), for the caller to judge. With
    ``first_alone`` the first part runs to its end before the others start: what it does (the
    run lock taken) holds for what they read.

    .. code:: python

        host.get_fact(Batch, parts=((Files, {"paths": ("/root/gpuop/etc/containerd/config.toml",)}),
                                    (KubeObjects, {"resources": "nodes"})))
        [{"/root/gpuop/etc/containerd/config.toml": {"mode": "644", "text": "..."}},
         [{"kind": "Node", "metadata": {"name": "lab-node-0", ...}}, ...]]
    """

    @staticmethod
    def default():
        return []

    def command(self, parts, first_alone=False):
        # pyinfra calls command() and process() on one instance: the parts' facts wait here.
        self.facts = [cls() for cls, _ in parts]
        # The parts run at once, each into its own file, which ends with its exit status; then
        # one `cat` prints them in order (two processes a part cost the lab host's read 6 ms).
        runs = [
            f'( ( {fact.command(**kwargs)} ) >"$d/{i}"; echo "{_PART_END} $?" >>"$d/{i}" )'
            for i, (fact, (_, kwargs)) in enumerate(zip(self.facts, parts))
        ]
        started = " ".join(f"{run}{';' if first_alone and i == 0 else ' &'}" for i, run in enumerate(runs))
        outputs = " ".join(f'"$d/{i}"' for i in range(len(parts)))
        return f'd=$(mktemp -d) && {{ {started} wait; cat {outputs}; rm -rf "$d"; }}'

    def process(self, output):
        results, lines = [], []
        for line in output:
            if line.startswith(_PART_END):
                results.append(_part(self.facts[len(results)], lines, line.rsplit(" ", 1)[1]))
                lines = []
            else:
                lines.append(line)
        return results


def _part(fact: FactBase, lines: list, status: str):
    if status != "0":
        return PartFailed(f"{fact.name} exited {status}: {' '.join(lines)[-500:]}")
    if not lines:
        return fact.default()
    try:
        return fact.process(lines)
    except Exception as e:  # noqa: BLE001 (the caller judges a part that could not be read, as with a failed one)
        return e
