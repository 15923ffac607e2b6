"""Lab hosts from a small YAML file a user edits without touching Python.

defaults:                 # optional, for every host
  ssh_user: root
  ssh_key: ~/.ssh/gpuop_ed25519
hosts:
  lab-a:
    ssh_hostname: 192.0.2.10
    ssh_port: 22
    gpuop_root: /root/gpuop       # any knob of group_data/all.py, per host
    kube_context: kwok-gpuop-lab
"""

import os

import yaml

from gpuop.knobs import PARSERS

# _sudo: a login that is not root gets sudo, unless it is a uid-0 account that says false.
SSH_KEYS = {
    "ssh_hostname",
    "ssh_port",
    "ssh_user",
    "ssh_key",
    "ssh_known_hosts_file",
    "ssh_strict_host_key_checking",
    "_sudo",
}
# Secrets never live in a project file: keys and an agent, not passwords.
SECRET_KEYS = {"ssh_password", "ssh_key_password", "sudo_password", "_sudo_password", "_su_password", "password"}
# Host keys are verified; "accept-new" (pyinfra's default) or "no" would trust a stranger.
STRICT = "yes"


class HostsFileError(ValueError):
    """The hosts file is unusable: which file, which host, which key, what was expected."""


def _expand(path):
    return os.path.expanduser(str(path))


def host_data(name: str, spec: dict, source: str, what: str = "the lab VM", knobs=PARSERS) -> dict:
    """One host's pyinfra data: SSH settings with safe defaults, plus its knobs (the keys of
    ``knobs``: a lab host's, or a real node's ``NODE_PARSERS``).

        host_data("lab-a", {"ssh_hostname": "10.0.0.5", "ssh_user": "ubuntu"}, "hosts.yaml")
        -> {"ssh_hostname": "10.0.0.5", "ssh_user": "ubuntu", "_sudo": True,
            "ssh_strict_host_key_checking": "yes", "ssh_known_hosts_file": "/home/me/.ssh/known_hosts"}
    """
    where = f"{source}: host {name}"
    for key, value in spec.items():
        if key in SECRET_KEYS:
            raise HostsFileError(
                f"{where}: key {key} is refused: no password or secret in a "
                "file; use an SSH key (ssh_key) and passwordless sudo"
            )
        if key not in SSH_KEYS and key not in knobs:
            raise HostsFileError(
                f"{where}: unknown key {key}; expected one of {', '.join(sorted(SSH_KEYS | set(knobs)))}"
            )
    if "ssh_hostname" not in spec and spec.get("reach") != "cluster":
        raise HostsFileError(f"{where}: ssh_hostname missing; expected the address of {what}")
    if spec.get("ssh_strict_host_key_checking", STRICT) != STRICT:
        raise HostsFileError(
            f"{where}: ssh_strict_host_key_checking="
            f"{spec['ssh_strict_host_key_checking']!r} refused; host keys are "
            "always verified (add the host to known_hosts)"
        )
    data = {"ssh_strict_host_key_checking": STRICT, "ssh_known_hosts_file": _expand("~/.ssh/known_hosts")}
    for key, value in spec.items():
        data[key] = _expand(value) if key in ("ssh_key", "ssh_known_hosts_file") else value
    if data.get("ssh_user", "root") != "root":
        data.setdefault("_sudo", True)  # the lab's paths are under /root (a uid-0 login sets false)
    return data


def yaml_document(text: str, source: str, keys: tuple) -> dict:
    """The file's YAML mapping, its top-level keys among ``keys``."""
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise HostsFileError(f"{source}: not valid YAML{where}: {problem}") from None
    if not isinstance(doc, dict):
        raise HostsFileError(f"{source}: expected a mapping of {', '.join(keys)}")
    unknown = set(doc) - set(keys)
    if unknown:
        raise HostsFileError(f"{source}: unknown top-level keys {sorted(unknown)}; expected {', '.join(keys)}")
    for key in ("defaults", "overrides"):
        if not isinstance(doc.get(key) or {}, dict):
            raise HostsFileError(f"{source}: {key} must be a mapping")
    return doc


def load_hosts(text: str, source: str, what: str = "the lab VM", knobs=PARSERS) -> list:
    """The inventory's hosts, ``[(name, data), ...]``, from the hosts file's text: a lab's hosts
    file, or the nodes file of real nodes (``what`` names them in errors; ``knobs``, the keys a
    host may set: ``NODE_PARSERS`` for real nodes).

        load_hosts(open("hosts.yaml").read(), "hosts.yaml") -> [("lab-a", {...}), ...]
    """
    doc = yaml_document(text, source, ("defaults", "hosts"))
    if not isinstance(doc.get("hosts"), dict) or not doc["hosts"]:
        raise HostsFileError(f"{source}: expected a mapping with a non-empty 'hosts' mapping")
    defaults = doc.get("defaults") or {}
    return [
        (name, host_data(name, {**defaults, **(spec or {})}, source, what, knobs))
        for name, spec in doc["hosts"].items()
    ]


def read_text(path: str, listing: str, example: str, env: str) -> str:
    """The hosts file's text; one that is missing or cannot be read is a ``HostsFileError``
    saying which file and what to do (``listing``, ``example`` and ``env`` name the way out)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise HostsFileError(
            f"{path}: no such file; list {listing} in one (see {example}), or point {env} at one"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise HostsFileError(f"{path}: cannot be read ({why}); {env} names the hosts file") from None


def read_hosts(
    path: str,
    what: str = "the lab VM",
    knobs=PARSERS,
    listing: str = "the lab hosts",
    example: str = "hosts.example.yaml",
    env: str = "GPUOP_HOSTS",
) -> list:
    """``load_hosts`` of the file at ``path`` (see ``read_text``).

    read_hosts("/nonexistent") -> HostsFileError("/nonexistent: no such file; list the lab hosts ...")
    """
    return load_hosts(read_text(path, listing, example, env), path, what, knobs)
