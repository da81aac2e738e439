"""`servesim validate vllm`: the simulator against a real vLLM engine on this machine.

The scenario's workload runs on vLLM (CPU build, its own venv, `make vllm-env`) through
calibration/vllm_driver.py: warm-up, then N repeats per load level in one engine start.
The same requests are simulated with the engine's resolved settings (block size, KV
blocks, budgets) twice: with the scenario's profile (from the torch harness) and with a
profile fitted to the engine's own per-step log (observe, then fit). Both are reported
next to the real runs' own spread.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from servesim.calibration.fit import fit_step_model
from servesim.calibration.profile_io import profile_dict, write_profile
from servesim.calibration.real_runs import read_run
from servesim.calibration.validate import METRICS, STATS, auto_loads, cdf_plot, load_sets, write_command
from servesim.simulator.errors import ConfigError
from servesim.simulator.metrics import latency_stats

DRIVER = Path(__file__).with_name("vllm_driver.py")


def client_metrics(requests: list[dict]) -> tuple[dict, SimpleNamespace]:
    """The driver's streamed chunks -> vLLM bench metrics (and arrays for the CDF plot)."""
    ttft, e2el, tpot, itl, out_tokens = [], [], [], [], 0
    first = min(r["arrival_time"] for r in requests)
    last = first
    for r in requests:
        times = np.array([c[0] for c in r["chunks"]])
        ttft.append(times[0] - r["arrival_time"])
        e2el.append(times[-1] - r["arrival_time"])
        if r["output_tokens"] > 1:
            tpot.append((times[-1] - times[0]) / (r["output_tokens"] - 1))
        itl.extend(np.diff(times))
        out_tokens += r["output_tokens"]
        last = max(last, times[-1])
    s: dict = {"completed": len(requests)}
    duration = last - first
    s["request_throughput"] = len(requests) / duration
    s["output_throughput"] = out_tokens / duration
    s["num_preemptions"] = None  # not visible from the client
    for key, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        latency_stats(key, np.array(values), s)
    frame = pd.DataFrame({"ttft": ttft, "e2el": e2el, "status": "finished"})
    return s, SimpleNamespace(requests=frame, itls=np.array(itl))


DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def require_python(python: str) -> None:
    """The engine's Python, with vLLM in it: else one line, before any work (a Python without vLLM failed deep
    inside, when the driver first ran)."""
    from servesim.calibration.vllm_harness import vllm_importable

    if not Path(python).is_file():
        raise ConfigError("--vllm-python", f"{python} not found: build the engine's venv with `make vllm-env`")
    if not vllm_importable(python):
        raise ConfigError("--vllm-python", f"{python} cannot import vLLM: build the engine's venv with `make vllm-env`")


def level_specs(rs) -> tuple[list, int | None]:
    """A load level's requests as the engine is sent them, and its closed-loop concurrency (None: open loop)."""
    if rs.scenario.workload.max_concurrency is not None:
        raise ConfigError("workload.max_concurrency", "not replayed on vLLM by these levels: give a closed loop "
                                                      "(arrival.process: closed_loop) for a concurrency level")
    src = rs.scenario.workload.source(rs.scenario.seed, rs.max_model_len)
    concurrency = getattr(src, "concurrency", None)
    specs = src.initial() if concurrency is None else \
        [next(src.templates) for _ in range(rs.scenario.workload.num_requests or 100)]
    return specs, concurrency


def build_model(python: str, arch, out: Path) -> Path:
    """A random-weight model of the architecture with a local tokenizer, made by vLLM's own transformers."""
    require_python(python)
    model_dir = out / "model"
    if not (model_dir / "config.json").is_file():
        (out / "architecture.json").write_text(json.dumps(arch.model_dump(mode="json")))
        subprocess.run([python, str(DRIVER), "--make-model", str(out / "architecture.json"), "--model-dir",
                        str(model_dir)], check=True, env=os.environ | {"HF_HUB_OFFLINE": "1"}, capture_output=True)
    return model_dir


def run_driver(python: str, out: Path, plan: list[dict], engine: dict, repeats: int, kv_gib: float) -> tuple[dict, Path]:
    """The plan's load levels on vLLM (calibration/vllm_driver.py), every engine step logged; the driver's result
    and the step log. `engine`: the driver's flags (dtype, max_model_len, max_num_seqs, ...), by their names."""
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    steps_log = out / "engine-steps.jsonl"
    steps_log.unlink(missing_ok=True)
    cmd = [python, str(DRIVER), "--plan", str(out / "plan.json"), "--model-dir", str(out / "model"),
           "--out", str(out / "vllm-runs.json"), "--repeats", str(repeats)]
    for k, v in engine.items():
        cmd += [f"--{k.replace('_', '-')}", str(v).lower() if isinstance(v, bool) else str(v)]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": f"{kv_gib:g}",
                        "SERVESIM_STEP_LOG": str(steps_log), "PYTHONPATH": str(DRIVER.parent)}
    with open(out / "vllm.log", "w") as log:
        p = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    if p.returncode:
        raise ConfigError("vllm", f"the engine run failed (exit {p.returncode}); see {out / 'vllm.log'}")
    return json.loads((out / "vllm-runs.json").read_text()), steps_log


def engine_flags(rs) -> dict:
    """The engine flags both harnesses give vLLM (by vLLM's names), from the resolved scenario."""
    return {"dtype": DTYPES[rs.arch.dtype], "max_model_len": rs.max_model_len, "max_num_seqs": rs.max_num_seqs,
            "max_num_batched_tokens": rs.max_num_batched_tokens, "block_size": rs.scenario.engine.block_size,
            "seed": rs.scenario.seed}


def read_engine_info(path: Path) -> dict:
    """What the measured engine resolved (engine-info.json), its numbers checked: a damaged file is one line
    naming it (r135: an internal error)."""
    try:
        info = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(str(path), f"not readable as JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(info, dict):
        raise ConfigError(str(path), "must be an object of the engine's resolved settings")
    for key in ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens"):
        value = info.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(str(path), f"{key}: must be an integer >= 1, got {value!r:.40}")
    return info


def engine_sets(info: dict) -> list[str]:
    """What the engine resolved (its block size, KV blocks, budgets), as the simulation's --set overrides."""
    return [f"engine.block_size={info['block_size']}", f"engine.num_gpu_blocks_override={info['num_gpu_blocks']}",
            f"engine.max_num_seqs={info['max_num_seqs']}", f"engine.max_num_batched_tokens={info['max_num_batched_tokens']}"]


def _write_levels(scenario: str, sets: list[str], rs, levels: list[str], out: Path) -> list[dict]:
    """Each load level's requests as JSONL for the driver; its plan (name, workload file, concurrency)."""
    from servesim.simulator.config import load
    from servesim.workloads.traces import write_jsonl

    plan = []
    for i, level in enumerate(levels):
        specs, concurrency = level_specs(rs if level == "as-configured" else load(scenario, sets + load_sets(level)))
        write_jsonl(specs, out / f"workload-{i}.jsonl")
        plan.append({"name": level, "workload": str(out / f"workload-{i}.jsonl"), "concurrency": concurrency})
    return plan


def _level_of_steps(steps: pd.DataFrame, levels: list[dict]) -> np.ndarray:
    """The load level each engine step ran in (-1: warm-up, which belongs to none)."""
    level_of = np.full(len(steps), -1)
    for i, lv in enumerate(levels):
        for r in lv["runs"]:
            level_of[(steps["t"] >= r["start"]) & (steps["t"] <= r["end"] + 1.0)] = i
    return level_of


def _engine_profile(steps: pd.DataFrame, level_of: np.ndarray, steps_log: Path, arch, exclude: int | None, path: Path):
    """A profile fitted to the engine's steps, leaving out the level it will be compared on (when there are others)."""
    train = steps[level_of != exclude] if exclude is not None else steps
    fit = fit_step_model(train, source=str(steps_log))
    write_profile(profile_dict(
        fit, name=f"vllm-cpu-{arch.name}-{arch.dtype}", device="vLLM 0.32.0 CPU engine",
        source=f"fitted to {len(train):,} steps logged by vLLM's scheduler on this machine"
               + (f", load level {exclude} left out" if exclude is not None else ""),
        model=arch.name, dtype=arch.dtype), path)
    return path, fit


def _row(name: str, metric: str, real: float, spread, sims: dict, sim_of, relative: bool = True) -> dict:
    """One table row: the real runs' median and spread, each simulation's value and relative error."""
    row = {"load": name, "metric": metric, "real": real, "real_spread": spread}
    for label, r in sims.items():
        row[f"sim_{label}"] = sim_of(r)
        row[f"error_{label}"] = (sim_of(r) - real) / real if relative and real else None
    return row


def _level_rows(name: str, runs: list, sims: dict, steps: pd.DataFrame, lv: dict) -> list[dict]:
    """A level's rows: each latency statistic, throughput, and the engine's preemptions (from its step log)."""
    rows = []
    for key, mname in METRICS:
        for stat, slabel in STATS:
            k = f"{stat}_{key}_ms"
            vals = np.array([m[k] for m, _ in runs], dtype=float)
            med = float(np.median(vals))
            rows.append(_row(name, f"{mname} {slabel} (ms)", med, float((vals.max() - vals.min()) / med) if med else None,
                             sims, lambda r, k=k: r.summary[k]))
    vals = np.array([m["request_throughput"] for m, _ in runs])
    med = float(np.median(vals))
    rows.append(_row(name, "throughput (req/s)", med, float(np.ptp(vals) / med), sims,
                     lambda r: r.summary["request_throughput"]))
    if "preempted" in steps:
        pre = [int(steps.loc[(steps["t"] >= r["start"]) & (steps["t"] <= r["end"] + 1.0), "preempted"].sum())
               for r in lv["runs"]]
        rows.append(_row(name, "preemptions", float(np.median(pre)), float(np.ptp(pre)), sims,
                         lambda r: r.summary["num_preemptions"], relative=False))
    return rows


def validate_vllm(scenario: str, sets: list[str], python: str, repeats: int, loads: list[str] | None,
                  kv_gib: float, out: str | Path, command: list[str] | None = None):
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    require_python(python)  # before any work: the engine is the point
    rs = load(scenario, sets)
    if loads == ["auto"]:
        loads = auto_loads(rs, sets, scenario)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    build_model(python, rs.arch, out)
    plan = _write_levels(scenario, sets, rs, loads or ["as-configured"], out)
    e = rs.scenario.engine
    real, steps_log = run_driver(python, out, plan, engine_flags(rs) | {
        "enable_chunked_prefill": e.enable_chunked_prefill, "enable_prefix_caching": e.enable_prefix_caching},
        repeats, kv_gib)
    with gzip.open(out / "vllm-runs.json.gz", "wt") as f:  # every streamed chunk's time, kept small
        json.dump(real, f)

    # the engine's resolved settings, and a profile fitted to its own steps
    steps = read_run(steps_log).steps  # calibration/real_runs.py: shapes, and each step's time
    level_of = _level_of_steps(steps, real["levels"])
    steps.assign(level=level_of).to_parquet(out / "engine-steps.parquet", index=False)
    _, fit = _engine_profile(steps, level_of, steps_log, rs.arch, None, out / "engine-profile.yaml")  # every step
    cross = len(real["levels"]) > 1

    rows, per_level = [], {}
    for i, lv in enumerate(real["levels"]):
        name = lv["name"]
        runs = [client_metrics(r["requests"]) for r in lv["runs"]]
        held_out = _engine_profile(steps, level_of, steps_log, rs.arch, i, out / f"engine-profile-without-{i}.yaml")[0] \
            if cross else out / "engine-profile.yaml"
        base = sets + ([] if name == "as-configured" else load_sets(name)) + engine_sets(real)
        sims = {label: simulate(load(scenario, base + ([f"profile={prof}"] if prof else [])))
                for label, prof in (("harness", None), ("engine", str(held_out)))}
        per_level[name] = {"real": [m for m, _ in runs], "sim_harness": sims["harness"].summary,
                           "sim_engine": sims["engine"].summary}
        rows += _level_rows(name, runs, sims, steps, lv)
        cdf_plot({"vLLM (first repeat)": runs[0][1], "sim, harness profile": sims["harness"],
                  "sim, engine profile": sims["engine"]}, out / f"cdf-{i}.png",
                 f"{rs.arch.name} on vLLM CPU, load {name}")
    table = pd.DataFrame(rows)
    table.to_csv(out / "table.csv", index=False)
    summary = {"engine": {k: real[k] for k in ("startup_s", "num_gpu_blocks", "block_size", "max_num_seqs",
                                                "max_num_batched_tokens", "async_scheduling")},
               "engine_profile_fit": {"held_out": fit.held_out, "train": fit.train, "steps": len(steps),
                                      "end_to_end": "each level simulated with a profile fitted without that level's steps"
                                      if cross else "in sample: one level only"},
               "mean_abs_error": {label: float(table[f"error_{label}"].abs().mean()) for label in ("harness", "engine")},
               "mean_real_spread": float(table.loc[table["metric"] != "preemptions", "real_spread"].mean()),
               "levels": per_level}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    write_command(out, command)
    return table, summary
