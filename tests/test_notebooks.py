"""Each notebook runs top to bottom on small inputs (nbclient), as a user would open it."""

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat/nbclient are test extras")
nbclient = pytest.importorskip("nbclient", reason="nbformat/nbclient are test extras")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
NEEDS = {"token_budget_azure.ipynb": SHARED / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv"}


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
    assert any(o.get("output_type") in ("execute_result", "display_data", "stream")
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
