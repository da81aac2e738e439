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


PARTS = ("simulator", "workloads", "policies", "calibration")  # folders, installed as servesim.<folder>
API = ["servesim.api"]  # and `import servesim` itself (its __init__ imports the API on first use)
# the error type, the file readers and the interrupt rule (files.py writes a run's files under it): they import no
# other module
LEAVES = {"servesim.simulator.errors", "servesim.simulator.files", "servesim.simulator.interrupts"}


@pytest.mark.parametrize("package", ["workloads", "policies"])
def test_workloads_and_policies_never_import_the_simulator(package):
    assert offending(package, ["servesim.simulator", "servesim.calibration", *API], allowed=LEAVES) == []


def test_the_leaves_they_may_use_import_nothing_else_of_ours():
    for leaf in LEAVES:
        ours = {m for m in imports(ROOT / (leaf.removeprefix("servesim.").replace(".", "/") + ".py"), False)
                if m.split(".")[0] in (*PARTS, "servesim")}
        assert ours <= {"servesim.simulator.errors", "servesim.simulator.interrupts"} - {leaf}, leaf


def test_the_core_imports_neither_the_api_nor_calibration_at_import_time():
    """simulator/ reads profiles as data; it imports calibration code only inside the commands that run it."""
    assert offending("simulator", API) == []
    assert [p.name for p in modules("simulator") if "servesim" in imports(p, False)] == []
    assert offending("simulator", ["servesim.calibration"], top_level_only=True) == []


@pytest.mark.parametrize("package", ["simulator", "workloads", "policies", "servesim"])
def test_torch_stays_in_calibration(package):
    assert offending(package, ["torch", "pynvml", "triton"]) == []


def test_only_the_cli_imports_the_cli():
    users = [p for pkg in ("simulator", "workloads", "policies", "servesim", "calibration") for p in modules(pkg)
             if "servesim.simulator.cli" in imports(p, False) and p.name not in ("cli.py", "__main__.py", "entry.py")]
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


def test_our_modules_are_named_under_servesim():
    """Installed, the folders are servesim's parts: an import of a bare `simulator` or `policies` would find nothing
    (or someone else's module of that name), and one file imported under two names has two states."""
    sources = [p for folder in (*PARTS, "servesim", "tests", "notebooks") for p in (ROOT / folder).glob("**/*.py")]
    bare = [f"{p.relative_to(ROOT)}: {m}" for p in sources for m in sorted(imports(p, False)) if m.split(".")[0] in PARTS]
    assert bare == []


def test_installed_names_are_servesims_only(tmp_path):
    """Outside the source tree (cwd elsewhere), `servesim.simulator` imports and a bare `simulator` does not."""
    import subprocess
    import sys

    code = ("import importlib.util as u, servesim.simulator.config, servesim.calibration.profile_io; "
            "print([u.find_spec(n) is None for n in ('simulator', 'policies', 'workloads', 'calibration')])")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[True, True, True, True]"
