"""The project as its wheel installs it (the node agent's image, deploy/agent/Containerfile)."""

import fnmatch
import os
import tomllib


def test_the_wheel_carries_every_file_of_its_packages_that_is_not_python():
    """The agent's image installs the wheel: a file a package reads at run time (the node read's
    shell) must be in its package data, or the agent cannot read its node (seen in the lab's
    DaemonSet Pod before shell.sh was listed)."""
    with open("pyproject.toml", "rb") as f:
        tool = tomllib.load(f)["tool"]["setuptools"]
    for package in tool["packages"]:
        folder = package.replace(".", "/")
        data = [
            n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)) and not n.endswith((".py", ".pyc"))
        ]
        patterns = tool.get("package-data", {}).get(package, [])
        assert [n for n in data if not any(fnmatch.fnmatch(n, p) for p in patterns)] == [], package
