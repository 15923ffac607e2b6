"""A deploy that writes one file of ``size`` bytes with the playbook's own file operation
(tests/harness/test_big_file.py runs it)."""

from pyinfra import host

from runbook.run.files import text

size = int(host.data.get("size"))
line = "0123456789abcdef" * 4 + "\n"
text(name="a big file", path=host.data.get("path"), content=(line * (size // len(line) + 1))[:size])
