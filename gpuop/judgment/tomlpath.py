"""TOML key paths: the hierarchy a parser builds, written back in TOML key syntax."""

import re

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def quote_key(key: str) -> str:
    """One key in TOML syntax: bare when it may be, quoted otherwise.

    + key: a single key as the parser sees it

        quote_key("runtimes")                  -> 'runtimes'
        quote_key("io.containerd.grpc.v1.cri") -> '"io.containerd.grpc.v1.cri"'
    """
    if _BARE_KEY.match(key):
        return key
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def key_path(keys) -> str:
    """A dotted key path in TOML syntax, each key quoted where it needs to be.

    key_path(("plugins", "io.containerd.grpc.v1.cri", "containerd"))
    -> 'plugins."io.containerd.grpc.v1.cri".containerd'
    """
    return ".".join(quote_key(k) for k in keys)


def tables(doc: dict, prefix=()):
    """Every table of a parsed document, depth first in document order, as (path, table).

    list(tables({"a": {"b": {}}})) -> [(("a",), {"b": {}}), (("a", "b"), {})]
    """
    for key, value in doc.items():
        if isinstance(value, dict):
            path = prefix + (key,)
            yield path, value
            yield from tables(value, path)


def find_tables(doc: dict, suffix) -> list:
    """The (path, table) pairs whose path ends with ``suffix``.

    find_tables(doc, ("containerd", "runtimes"))
    -> [(("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"), {...})]
    """
    suffix = tuple(suffix)
    return [(p, t) for p, t in tables(doc) if p[-len(suffix) :] == suffix]
