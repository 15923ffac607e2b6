"""The house's shape: each room imports only the rooms below it (gpuop's and runbook's), the
repair's and the rules' modules only those below them; no product function over 60 lines and no
product module over 400, but those docs/layout.md names under "Sizes" with the reason."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


# Each room of gpuop/ and what it may import of the project: no arrow back up.
ROOMS = {
    "judgment": {"judgment"},
    "outputs": {"judgment", "outputs"},
    "reach": {"judgment", "reach", "knobs", "layout"},
    "repair": {"judgment", "reach", "repair", "layout", "knobs"},
    "agent": {"judgment", "reach", "agent"},
}
# runbook/, pyinfra's half, by room from the bottom up: each imports gpuop and the rooms before it.
RUNBOOK_ROOMS = ("reach", "run", "replay", "audit", "repair")


def _imported(path: pathlib.Path) -> list:
    """Every module ``path`` imports, by its dotted name."""
    names = []
    for statement in ast.walk(ast.parse(path.read_text())):
        if isinstance(statement, ast.ImportFrom):
            names.append(statement.module or "")
        elif isinstance(statement, ast.Import):
            names += [a.name for a in statement.names]
    return names


def test_the_rooms_import_only_the_rooms_below_them():
    for room, allowed in ROOMS.items():
        for path in sorted((ROOT / "gpuop" / room).glob("*.py")):
            for name in _imported(path):
                parts = name.split(".")
                if parts[0] in ("runbook", "lab", "pyinfra"):
                    raise AssertionError(f"{path.relative_to(ROOT)} imports {name}: a room below pyinfra's")
                if parts[0] == "gpuop" and len(parts) > 1:
                    assert parts[1] in allowed, f"{path.relative_to(ROOT)} imports {name}, above its room {room}"
                if room == "judgment":
                    assert parts[0] not in ("kubernetes", "prometheus_client", "urllib3"), (
                        f"{path.relative_to(ROOT)} imports {name}: the judgment does no I/O"
                    )


# gpuop/repair/, by module: what each may import of its room's (the Pods' rules and the plan pure,
# the drain's waits under the probe and the Lease).
REPAIR_MODULES = {
    "pods": set(),
    "plan": {"pods"},
    "drain": {"plan", "pods"},
    "probe": {"plan", "drain"},
    "lease": {"drain"},
}


def test_the_repair_s_modules_import_only_those_below_them_and_its_plan_does_no_io():
    assert sorted(p.stem for p in (ROOT / "gpuop" / "repair").glob("*.py") if p.stem != "__init__") == sorted(
        REPAIR_MODULES
    ), "a module of gpuop/repair not in the order"
    for module, allowed in REPAIR_MODULES.items():
        path = ROOT / "gpuop" / "repair" / f"{module}.py"
        for name in _imported(path):
            parts = name.split(".")
            if parts[:2] == ["gpuop", "repair"] and len(parts) > 2:
                assert parts[2] in allowed, f"{path.relative_to(ROOT)} imports {name}, beside or above it"
            if module in ("pods", "plan"):
                assert parts[0] not in ("kubernetes", "urllib3"), f"{path.relative_to(ROOT)} imports {name}: pure"


# gpuop/judgment's rules, by module: what each may import of the others (the door above them all,
# the entry's shape above the node's rules, the sandbox's words under them).
RULE_MODULES = {
    "sandbox": set(),
    "runtime_rules": set(),
    "node_rules": {"sandbox"},
    "cluster_rules": set(),
    "entry": {"node_rules"},
    "rules": {"runtime_rules", "node_rules", "cluster_rules", "entry"},
}


def test_the_rules_modules_import_only_those_below_them():
    for module, allowed in RULE_MODULES.items():
        path = ROOT / "gpuop" / "judgment" / f"{module}.py"
        for name in _imported(path):
            parts = name.split(".")
            if parts[:2] == ["gpuop", "judgment"] and len(parts) > 2 and parts[2] in RULE_MODULES:
                assert parts[2] in allowed, f"{path.relative_to(ROOT)} imports {name}, beside or above it"


def test_the_runbook_rooms_import_only_the_rooms_below_them():
    assert sorted(p.name for p in (ROOT / "runbook").iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(
        RUNBOOK_ROOMS
    ), "a room of runbook/ not in the order"
    for rank, room in enumerate(RUNBOOK_ROOMS):
        for path in sorted((ROOT / "runbook" / room).glob("*.py")):
            for name in _imported(path):
                parts = name.split(".")
                assert parts[0] != "lab", f"{path.relative_to(ROOT)} imports {name}: the lab's machinery"
                if parts[0] == "runbook" and len(parts) > 1:
                    assert parts[1] in RUNBOOK_ROOMS[: rank + 1], (
                        f"{path.relative_to(ROOT)} imports {name}, above its room {room}"
                    )


FUNCTION_MAX, MODULE_MAX = 60, 400


def _product() -> list:
    """The product's Python: gpuop/, runbook/ and the entry points beside them (not bench/, the lab or tests)."""
    return sorted([*ROOT.glob("gpuop/**/*.py"), *ROOT.glob("runbook/**/*.py"), *ROOT.glob("*.py")])


def _exceptions() -> dict:
    """docs/layout.md's "Sizes": each module allowed past MODULE_MAX lines, with its reason."""
    text = (ROOT / "docs" / "layout.md").read_text()
    section = text.split("\n## Sizes\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^- `([^`]+\.py)`: (.+)$", section, flags=re.M))


def test_no_product_function_over_60_lines_and_no_module_over_400_but_those_said_why():
    long = []
    for path in _product():
        for f in ast.walk(ast.parse(path.read_text())):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno + 1 > FUNCTION_MAX:
                long.append(f"{path.relative_to(ROOT)}:{f.lineno} {f.name} ({f.end_lineno - f.lineno + 1} lines)")
    assert long == [], long
    said = _exceptions()
    big = {
        path.relative_to(ROOT).as_posix(): n
        for path in _product()
        if (n := len(path.read_text().splitlines())) > MODULE_MAX
    }
    assert {p: n for p, n in big.items() if p not in said} == {}, (
        "a module past 400 lines with no reason in docs/layout.md"
    )
    assert [p for p in said if p not in big] == [], (
        "docs/layout.md gives a reason for a module no longer past 400 lines"
    )
