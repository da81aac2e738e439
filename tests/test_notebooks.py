"""Each notebook runs top to bottom (nbclient), as a user would open it, and is committed executed with its figures."""

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat/nbclient are test extras")
nbclient = pytest.importorskip("nbclient", reason="nbformat/nbclient are test extras")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
NEEDS = {"token_budget_azure.ipynb": SHARED / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv",
         "sizing_a_deployment.ipynb": SHARED / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv"}


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_notebook_runs(name, monkeypatch):
    if name in NEEDS and not NEEDS[name].is_file():
        pytest.skip(f"{NEEDS[name]} not found (../shared is absent)")
    if name == "calibration_quality.ipynb":
        pytest.importorskip("torch", reason="torch is in the calibrate extra")
    monkeypatch.setenv("SERVESIM_NOTEBOOK_SMALL", "1")
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any(o.get("output_type") in ("execute_result", "stream") for o in outputs)
    assert any("image/png" in o.get("data", {}) for o in outputs), "no figure inline"  # not drawn to Agg unseen


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_committed_notebooks_are_executed_with_their_figures(name):
    """A reader opening one on GitHub sees what it computed at its stated size (make_notebooks.py --execute)."""
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code")
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
