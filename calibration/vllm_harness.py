"""`servesim calibrate run --engine vllm`: time vLLM's own engine, not our torch model, over a grid of batches.

The torch harness (calibration/harness.py) times servesim's plain-torch Llama; a real server runs vLLM's fused
kernels, its scheduler and its output processing, which cost something else (docs/fidelity.md). Here the
architecture is built with random weights inside vLLM's environment (no hub access, a local tokenizer) and
vLLM's engine is driven through requests designed to produce the grid's batches: B prompts of L tokens arriving
together (prefill steps, then a decode at L), B prompts of C tokens generating 16 tokens (decode steps at
context C), and D decodes joined by one L-token prompt (mixed chunked steps). Which batches really ran, and how
long each took, comes from the engine's own step log (vllm_driver.StepLoggingScheduler); those rows are what
`calibrate fit` fits, the same profile form as the torch harness.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from servesim.calibration.real_runs import read_run
from servesim.calibration.vllm_validate import DTYPES, build_model, run_driver
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import load_model
from servesim.workloads.spec import RequestSpec
from servesim.workloads.traces import write_jsonl

GRIDS = {  # (prefill B x L), (decode B x C), (mixed: D decodes at C + one L chunk)
    "quick": ([(1, 64), (2, 128), (1, 256)], [(1, 128), (4, 256), (8, 64)], [(4, 128, 128)]),
    "cpu": ([(1, 32), (1, 128), (2, 128), (1, 512), (4, 256), (2, 1024), (1, 2048)],
            [(1, 128), (4, 128), (16, 128), (1, 1024), (8, 512), (32, 256), (64, 128), (16, 1024)],
            [(4, 256, 512), (16, 512, 256), (8, 1024, 512)]),
}
DECODE_TOKENS = 16
MIXED_DECODE_TOKENS = 48


def grid_levels(grid: str, max_model_len: int) -> list[tuple[str, list[RequestSpec]]]:
    """One load level per grid point: the requests that make the engine run that batch."""
    if grid not in GRIDS:
        raise ConfigError("--grid", f"unknown grid {grid!r} for the vLLM engine; known: {', '.join(GRIDS)}")
    prefill, decode, mixed = GRIDS[grid]
    levels = []
    for b, n in prefill:
        levels.append((f"prefill {b}x{n}", [RequestSpec(i, 0.0, n, 2) for i in range(b)]))
    for b, c in decode:
        levels.append((f"decode {b}x{c}", [RequestSpec(i, 0.0, c, DECODE_TOKENS) for i in range(b)]))
    for d, c, n in mixed:  # the chunk arrives once the decodes run
        specs = [RequestSpec(i, 0.0, c, MIXED_DECODE_TOKENS) for i in range(d)]
        levels.append((f"mixed {d}x{c}+{n}", specs + [RequestSpec(d, 0.5, n, 2)]))
    return [(name, specs) for name, specs in levels
            if max(s.prompt_tokens + s.output_tokens for s in specs) <= max_model_len]


def run_vllm_calibration(model: str, dtype: str, out: str | Path, python: str, grid: str = "cpu",
                         block_size: int = 128, max_num_batched_tokens: int = 2048, kv_gib: float = 1.0) -> Path:
    """Drive the engine through the grid; write measurements.parquet (each logged step) and run.json."""
    arch = load_model(model)
    arch.require_dense("the vLLM harness's model builder", "--model")
    if dtype not in DTYPES:
        raise ConfigError("--dtype", f"the vLLM engine takes {', '.join(DTYPES)}, got {dtype}")
    arch = arch.model_copy(update={"dtype": dtype})
    max_len = min(arch.max_position_embeddings, 4096)
    levels = grid_levels(grid, max_len)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    build_model(python, arch, out)
    plan = []
    for i, (name, specs) in enumerate(levels):
        write_jsonl(specs, out / f"grid-{i}.jsonl")
        plan.append({"name": name, "workload": str(out / f"grid-{i}.jsonl"), "concurrency": None})
    real, log = run_driver(python, out, plan, {
        "dtype": DTYPES[dtype], "max_model_len": max_len, "max_num_seqs": 128,
        "max_num_batched_tokens": max_num_batched_tokens, "block_size": block_size, "enable_chunked_prefill": True,
        "enable_prefix_caching": False, "warmup_requests": 4}, 1, kv_gib)
    steps = read_run(log).steps
    first = min(r["start"] for lv in real["levels"] for r in lv["runs"])
    steps = steps[steps["t"] >= first].assign(kind="step")  # warm-up steps are slow; the grid starts after them
    if len(steps) < 8:
        raise ConfigError("vllm", f"the engine logged {len(steps)} steps over the grid; see {out / 'vllm.log'}")
    steps.to_parquet(out / "measurements.parquet", index=False)
    version = real.get("vllm_version", "?")
    meta = {"model": arch.name, "dtype": dtype, "device": f"vLLM {version} CPU engine", "harness": "vllm",
            "engine_version": f"vLLM {version}", "grid": grid, "block_size": real["block_size"],
            "points": int(len(steps)), "levels": len(levels), "wall_s": round(time.monotonic() - t0, 1),
            "engine": {k: real[k] for k in ("startup_s", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens",
                                            "async_scheduling")},
            "architecture": arch.model_dump(mode="json"),
            "hardware": {"name": f"vLLM {version} on this machine's CPU", "date": time.strftime("%Y-%m-%d")}}
    (out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    pd.DataFrame({"level": [n for n, _ in levels]}).to_csv(out / "grid.csv", index=False)
    return out


def vllm_importable(python: str) -> bool:
    """Whether that Python has vLLM, without importing it (seconds)."""
    import subprocess

    if not Path(python).is_file():
        return False
    p = subprocess.run([python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
                       capture_output=True)
    return p.returncode == 0
