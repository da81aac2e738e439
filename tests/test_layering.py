"""The architecture's arrows (docs/architecture.md), checked on the source: workloads -> simulator <- policies,
calibration -> profile data -> simulator, the API and the CLI on top, torch only in calibration."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imports(path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).glob("**/*.py"))


def offending(package: str, banned, top_level_only: bool = False, allowed=()) -> list[str]:
    return [f"{p.relative_to(ROOT)}: {m}" for p in modules(package) for m in sorted(imports(p, top_level_only))
            if any(m == b or m.startswith(b + ".") for b in banned) and m not in allowed]


LEAVES = {"simulator.errors", "simulator.files"}  # the error type and the file readers: they import no other module


@pytest.mark.parametrize("package", ["workloads", "policies"])
def test_workloads_and_policies_never_import_the_simulator(package):
    assert offending(package, ["simulator", "calibration", "servesim"], allowed=LEAVES) == []


def test_the_leaves_they_may_use_import_nothing_else_of_ours():
    for leaf in LEAVES:
        ours = {m for m in imports(ROOT / (leaf.replace(".", "/") + ".py"), False)
                if m.split(".")[0] in ("simulator", "workloads", "policies", "calibration", "servesim")}
        assert ours <= {"simulator.errors"}, leaf


def test_the_core_imports_neither_the_api_nor_calibration_at_import_time():
    """simulator/ reads profiles as data; it imports calibration code only inside the commands that run it."""
    assert offending("simulator", ["servesim"]) == []
    assert offending("simulator", ["calibration"], top_level_only=True) == []


@pytest.mark.parametrize("package", ["simulator", "workloads", "policies", "servesim"])
def test_torch_stays_in_calibration(package):
    assert offending(package, ["torch", "pynvml", "triton"]) == []


def test_only_the_cli_imports_the_cli():
    users = [p for pkg in ("simulator", "workloads", "policies", "servesim", "calibration") for p in modules(pkg)
             if "simulator.cli" in imports(p, False) and p.name != "cli.py"]
    assert [str(p.relative_to(ROOT)) for p in users] == []


def test_derived_settings_are_read_resolved_not_raw():
    """engine.max_num_seqs and the other values resolve derives may be None in the scenario: code outside
    config.py reads ResolvedScenario's (rs.max_num_seqs), never the raw field beside it."""
    import re

    raw = re.compile(r"\.engine\.(max_num_seqs|max_num_batched_tokens|max_model_len|async_scheduling|"
                     r"max_cudagraph_capture_size)\b|\bprofile\s*==\s*['\"]auto")
    found = [f"{p.relative_to(ROOT)}:{i}" for pkg in ("simulator", "calibration", "servesim") for p in modules(pkg)
             if p.name != "config.py" for i, line in enumerate(p.read_text().splitlines(), 1)
             if raw.search(line.split("#")[0])]
    assert found == []
