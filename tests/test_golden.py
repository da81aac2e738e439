"""Golden outputs: a dozen scenarios covering every mechanism, their summaries and request/step tables
pinned, so a refactor that changes any result shows here.

The tables are pinned by digest (columns, dtypes, values; floats at float32 precision, so a
last-bit difference of a libm on another machine does not count, a change of behaviour does);
the summaries value by value. After a change of behaviour that is meant, rewrite them with
`SERVESIM_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from servesim.simulator.config import load
from servesim.simulator.engine import simulate

GOLDEN = Path(__file__).parent / "golden" / "outputs.json"

SMALL = ["workload.num_requests=200", "workload.arrival.rate=12"]
TIGHT = ["engine.num_gpu_blocks_override=500", "engine.max_model_len=4096"]
SCENARIOS: dict[str, list[str]] = {  # none needs ../shared: built-in profiles or the roofline
    "default": SMALL,
    "chunked-preemption": SMALL + TIGHT,
    "swap": SMALL + TIGHT + ["policies.preemption_mode=swap", "engine.swap_space=0.05"],
    "static-batching": SMALL + ["policies.batching=static", "policies.static_batch_size=16"],
    "priority-preemption": SMALL + ["engine.num_gpu_blocks_override=300", "engine.max_model_len=4096",
                                    "policies.queue=priority", "workload.priorities=[0, 1, 2]"],
    "reservation": SMALL + TIGHT + ["policies.admission.reserve=quantile"],
    "sjf-no-chunking": SMALL + ["policies.queue=sjf", "engine.enable_chunked_prefill=false",
                                "engine.max_model_len=8192"],
    "slo-shedding": SMALL + ["workload.arrival.rate=60", "workload.slo_classes={chat: {ttft_ms: 300, tpot_ms: 30}}",
                             "policies.admission.shed_on_ttft_slo=true"],
    "speculative-adaptive": SMALL + ["profile=roofline", "speculative.method=adaptive",
                                     "speculative.acceptance_rate=0.6"],
    "prefix-affinity-cluster": SMALL + ["cluster.replicas=3", "cluster.router=prefix_affinity",
                                        "workload.shared_prefix={tokens: 2000, count: 4}", "workload.arrival.rate=30"],
    "disaggregated": SMALL + ["cluster.replicas=2", "cluster.prefill_replicas=1"],
    "chat-sessions": ["workload={type: sessions, num_sessions: 30, think_time_s: {dist: exponential, mean: 2}}"],
    "closed-loop": SMALL + ["workload.arrival={process: closed_loop, concurrency: 48, think_time_s: 0.5}"],
    "moe-expert-parallel": SMALL + ["model=qwen3-30b-a3b", "profile=roofline", "engine.data_parallel_size=2",
                                    "engine.enable_expert_parallel=true"],
    "sliding-window-hybrid": SMALL + ["model=gpt-oss-120b", "profile=roofline", "hardware.gpu=h200-sxm"],
}


def table_digest(df: pd.DataFrame) -> str:
    """Columns, dtypes and values; floats at float32 precision, lists and objects by their text."""
    h = hashlib.sha256(json.dumps([[c, str(t)] for c, t in df.dtypes.items()]).encode())
    for col in df.columns:
        s = df[col]
        if pd.api.types.is_float_dtype(s):
            h.update(s.to_numpy(dtype=np.float64).astype(np.float32).tobytes())
        elif pd.api.types.is_integer_dtype(s) or pd.api.types.is_bool_dtype(s):
            h.update(s.to_numpy(dtype=np.int64).tobytes())
        else:
            h.update(json.dumps([None if v is None or (isinstance(v, float) and math.isnan(v)) else
                                 (list(v) if isinstance(v, (list, tuple, np.ndarray)) else str(v)) for v in s],
                                default=int).encode())
    return h.hexdigest()


def outputs(sets: list[str]) -> dict:
    r = simulate(load(None, sets))
    summary = json.loads(json.dumps(r.summary, default=float))
    return {"summary": summary, "requests": table_digest(r.requests), "steps": table_digest(r.steps)}


def _close(got, want, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{where}: keys differ"
        for k in want:
            _close(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), f"{where}: {got!r} != {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.fixture(scope="module")
def golden() -> dict:
    if os.environ.get("SERVESIM_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps({name: outputs(sets) for name, sets in SCENARIOS.items()}, indent=1) + "\n")
    return json.loads(GOLDEN.read_text())


def test_every_scenario_is_pinned_and_exercises_its_mechanism(golden):
    assert set(golden) == set(SCENARIOS)
    s = {name: g["summary"] for name, g in golden.items()}
    assert s["chunked-preemption"]["num_preemptions"] > 0 and s["priority-preemption"]["num_preemptions"] > 0
    assert s["swap"]["num_swaps"] > 0 and s["slo-shedding"]["failed"] > 0
    assert s["static-batching"]["useful_work_fraction"] < 1 and s["speculative-adaptive"]["spec_decode_draft_tokens"] > 0
    assert s["prefix-affinity-cluster"]["prefix_cache_hit_rate"] > 0.3 and s["chat-sessions"]["prefix_cache_hit_rate"] > 0.5
    assert s["disaggregated"]["replicas"] == 3 and s["moe-expert-parallel"]["replicas"] == 2


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_outputs_equal_the_golden_ones(golden, name):
    got, want = outputs(SCENARIOS[name]), golden[name]
    _close(got["summary"], want["summary"], f"{name}.summary")
    assert (got["requests"], got["steps"]) == (want["requests"], want["steps"]), f"{name}: tables differ"
