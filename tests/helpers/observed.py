"""What each containerd release was seen to do with the incident's files: the unit tests'
record, held against the real binaries by tests/containerd."""

OK, FAILS, REFUSES = "ok nvidia,runc", "fails", "refuses-start"

OBSERVED = {
    "1.6.20": (FAILS, (2, OK), (2, OK), (2, OK), (2, OK), "ok runc", "ok runc", FAILS, REFUSES),
    "1.7.35": (FAILS, (2, OK), (2, OK), (2, OK), (2, OK), REFUSES, REFUSES, FAILS, REFUSES),
    "2.0.5": (OK, (2, OK), (3, OK), (2, OK), (3, OK), OK, REFUSES, FAILS, REFUSES),
    "2.0.14": (OK, (2, OK), (3, OK), (2, OK), (3, OK), OK, REFUSES, FAILS, REFUSES),
    "2.1.9": (OK, (2, OK), (3, OK), (2, OK), (3, OK), OK, REFUSES, FAILS, REFUSES),
    "2.2.9": (OK, (2, OK), (3, OK), (2, OK), (3, OK), OK, REFUSES, FAILS, REFUSES),
    "2.3.3": (OK, (2, OK), (4, REFUSES), (2, OK), (4, REFUSES), REFUSES, REFUSES, FAILS, REFUSES),
    "2.3.7": (OK, (2, OK), (4, OK), (2, OK), (4, OK), OK, OK, FAILS, REFUSES),
    "2.4.2": (OK, (2, OK), (4, OK), (2, OK), (4, OK), OK, OK, FAILS, REFUSES),
}


DROPINS = (
    "seed",
    "ctk-1.19.1-file",
    "ctk-1.19.1-command",
    "ctk-1.20.2-file",
    "ctk-1.20.2-command",
    "version-3",
    "version-4",
    "default-unconfigured",
    "invalid-toml",
)
