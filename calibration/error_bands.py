"""The known error of each kind of cost model against real GPU serving runs: per kind (kernel tables, roofline),
the least and greatest out-of-sample error (sim / real - 1) of the simulated latencies over the public vLLM runs
that `validate serving` replays, none of them fitted to. A recommendation resting on that kind carries the band
(`servesim recommend`: does the SLO still hold at the band's edge?). `make fidelity-gpu` writes it to
results/fidelity/gpu/bands.yaml and ships it as simulator/data/cost-model-bands.yaml; a test keeps the shipped
file equal to what the committed results give."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

METRICS = ("TTFT", "TPOT", "E2EL")  # validate serving's latency rows: "TTFT p99 (ms)", ...
STATS = ("mean", "p50", "p90", "p99")
HEADER = """\
# Written by `servesim validate serving` (calibration/error_bands.py; `make fidelity-gpu` copies it to
# simulator/data/cost-model-bands.yaml): per cost-model kind, the least and greatest error (sim / real - 1) of
# each simulated latency over the real-GPU vLLM runs of {source}, none of them fitted to
# (docs/fidelity.md). Negative: the simulation is faster than the real server. `servesim recommend` checks each
# candidate's SLOs at its kind's band edge.
"""


def error_bands(table: pd.DataFrame, report: list[dict]) -> dict:
    """{kind: {"runs": [...], "ttft_p99": [least, greatest], ...}} from validate serving's table and run report."""
    from servesim.simulator.profile_select import cost_model_kind

    kinds = {r["run"]: r.get("cost_model_kind") or cost_model_kind(r["cost_model_source"])
             for r in report if "cost_model_source" in r}
    bands = {}
    for kind in sorted(set(kinds.values())):
        runs = sorted(run for run, k in kinds.items() if k == kind)
        rows = table[table["run"].isin(runs)]
        entry: dict = {"runs": runs}
        for metric in METRICS:
            for stat in STATS:
                errors = rows.loc[rows["metric"] == f"{metric} {stat} (ms)", "error"].dropna()
                if len(errors):
                    entry[f"{metric.lower()}_{stat}"] = [round(float(errors.min()), 4), round(float(errors.max()), 4)]
        bands[kind] = entry
    return bands


def write_bands(path: Path, bands: dict, source: str) -> None:
    from servesim.simulator.files import dump_yaml

    path.write_text(HEADER.format(source=source) + dump_yaml({"source": source, "bands": bands}))
