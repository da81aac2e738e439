"""`servesim validate replay`: simulation against measured replay of the same workload.

Both runs use the simulator's scheduler and KV manager; the replay's step times are real
forward passes (calibration/measured_executor.py), the simulation's come from the
profile. Two comparisons: the run-level metrics side by side, and the profile's
prediction for every batch the replay actually ran against its measured time.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from servesim.simulator.errors import ConfigError
from servesim.simulator.metrics import step_shapes

METRICS = [("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")]
STATS = [("median", "p50"), ("p90", "p90"), ("p99", "p99")]


def make_out_dir(out: str | Path, inputs=()) -> Path:
    """The results folder, created; one error line when it cannot be (a file in the way) or when it holds one of
    the command's `inputs`."""
    from servesim.simulator.files import (COMPARISON, OUTPUT_SUFFIXES, hold_folder, refuse_folder_holding_inputs,
                                          refuse_link, refuse_other_results)

    refuse_folder_holding_inputs(out, "--out", inputs)
    refuse_other_results(Path(out), (), "--out", COMPARISON)  # not among a run's, a sweep's, ... (r168)
    out = Path(out)
    if out.is_dir():  # what these commands write are tables, summaries, plots and logs: none through a link
        for entry in sorted(out.iterdir()):
            if entry.suffix.lower() in OUTPUT_SUFFIXES:
                refuse_link(entry, "--out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("--out", f"cannot create {out}: {exc.strerror or exc}") from None
    hold_folder(out)  # one command writes a results folder at a time
    return out


def write_command(out: Path, command: list[str] | None) -> None:
    """The exact command that made a result, beside it."""
    argv = sys.argv[1:] if command is None else command
    (out / "command.txt").write_text("servesim " + " ".join(shlex.quote(a) for a in argv) + "\n")


def compare(sim: dict, real: dict, real_label: str = "replay") -> pd.DataFrame:
    rows = []
    for key, name in METRICS:
        for stat, label in STATS:
            k = f"{stat}_{key}_ms"
            rows.append({"metric": f"{name} {label} (ms)", "sim": sim.get(k), real_label: real.get(k)})
    for k, name in (("request_throughput", "throughput (req/s)"), ("output_throughput", "output (tok/s)"),
                    ("num_preemptions", "preemptions")):
        rows.append({"metric": name, "sim": sim.get(k), real_label: real.get(k)})
    t = pd.DataFrame(rows)
    t["error"] = (t["sim"] - t[real_label]) / t[real_label].where(t[real_label] != 0)
    return t


def predicted_durations(cost_model, steps: pd.DataFrame) -> np.ndarray:
    """The cost model's time (s) for each logged step's batch."""
    return np.array([cost_model.step_time(s) for s in step_shapes(steps)])


def step_errors(cost_model, steps: pd.DataFrame) -> dict:
    """The profile's prediction for each batch that really ran, against its measured time."""
    pred = predicted_durations(cost_model, steps)
    meas = steps["duration"].to_numpy()
    ape = np.abs(pred - meas) / meas
    return {"steps": int(len(meas)), "mape": float(ape.mean()), "p90_ape": float(np.percentile(ape, 90)),
            "median_ratio_predicted_to_measured": float(np.median(pred / meas))}


def cdf_plot(runs: dict, path: Path, title: str) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servesim.simulator.plots import plain

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (col, name) in zip(axes, (("ttft", "TTFT"), ("itl", "ITL"), ("e2el", "E2E latency"))):
        for label, r in runs.items():
            v = np.sort((r.itls if col == "itl" else r.requests.loc[r.requests.status == "finished", col].to_numpy()) * 1000)
            if v.size:
                ax.plot(v, np.arange(1, v.size + 1) / v.size, label=label)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(f"{name} (ms, log scale)")
        ax.set_ylabel("fraction of requests" if col != "itl" else "fraction of token gaps")
        ax.set_title(plain(name))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(plain(title))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_sets(load: str) -> list[str]:
    """One --loads level as the arrival it stands for; its number checked as the flags check theirs."""
    import argparse

    from servesim.simulator.cli_args import COUNT, number
    from servesim.simulator.errors import ConfigError
    from servesim.workloads.settings import MAX_RATE, MIN_RATE

    kind, _, value = load.partition("=")
    parse = {"rate": number(float, ge=MIN_RATE, le=MAX_RATE), "concurrency": COUNT}.get(kind)
    if parse is None:
        raise ConfigError("--loads", f"{load!r}: use rate=R (open loop, req/s) or concurrency=N (closed loop)")
    try:
        v = parse(value)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError("--loads", f"{load!r}: {exc}") from None
    if kind == "rate":
        return [f"workload.arrival={{process: poisson, rate: {v}}}"]
    return [f"workload.arrival={{process: closed_loop, concurrency: {v}}}"]


def parse_loads(text: str | None) -> list[str] | None:
    """--loads as its levels, each checked before the scenario is read; a level listed twice (rate=5,rate=5.0)
    would be measured twice as two points, so it is refused, as sweep refuses a value listed twice."""
    from servesim.simulator.errors import ConfigError

    if text is None:
        return None
    if not text.strip():  # r129: taken as the default levels, unsaid
        raise ConfigError("--loads", "empty: give the levels (rate=R, concurrency=N), auto or as-configured")
    levels, seen = text.split(","), {}
    for level in levels:
        key = (level,) if level in ("as-configured", "auto") else tuple(load_sets(level))
        if key in seen:
            raise ConfigError("--loads", f"{level!r} is {seen[key]!r} again: each level is measured once")
        seen[key] = level
    return levels


def auto_loads(rs, sets, scenario, rates=(0.2, 0.45, 0.7, 0.9), concurrencies=(0.1, 0.3, 0.6, 1.0)) -> list[str]:
    """Open-loop rates at these fractions of the saturation the profile predicts (default: four, light to
    ~90%), and closed-loop concurrencies at these fractions of the batch that saturation runs at."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    burst = simulate(load(scenario, sets + ["workload.arrival={process: burst}"])).summary
    sat = burst["request_throughput"]
    top = max(2, int(round(burst["mean_batch_size"])))
    conc = sorted({max(1, int(round(top * f))) for f in concurrencies})
    return [f"rate={sat * f:.3g}" for f in rates] + [f"concurrency={c}" for c in conc]


def validate_replay(scenario: str | None, sets: list[str], device: str, threads: int | None, out: str | Path,
                    loads: list[str] | None = None, command: list[str] | None = None, deadline: float | None = None,
                    attention: str | None = None):
    """Per load level: simulation vs measured replay. Returns (table, step errors, tolerance).

    With a deadline (time.monotonic()), levels not started by then are skipped and listed as such:
    a lent GPU's call has a hard time limit, and finished levels are worth keeping."""
    from servesim.calibration.harness import _torch, measured_here, usable_device
    from servesim.calibration.measured_executor import MeasuredExecutor
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    usable_device(_torch(), device)  # before the scenario, whose warnings would come first
    rs = load(scenario, sets)
    measured_here(rs.profile.device, f"profile {rs.profile.name}", device)  # else the verdict judges the hardware
    rs.arch.require_dense("the measured replay (servesim's torch model)")  # r135: it replayed a dense model
    e = rs.scenario.engine  # on one device in their place, as `calibrate run` and `calibrate check` refuse to
    for name, value in (("tensor_parallel_size", e.tensor_parallel_size), ("data_parallel_size", e.data_parallel_size)):
        if value > 1:
            raise ConfigError(f"engine.{name}", f"{value}: the measured replay runs the model on one device")
    if loads == ["auto"]:
        loads = auto_loads(rs, sets, scenario)
    levels = loads or ["as-configured"]
    ex = MeasuredExecutor(rs.arch, device, rs.profile.dtype if rs.profile.dtype in ("fp32", "bf16", "fp16")
                          else "fp32", rs.scenario.engine.block_size, rs.num_gpu_blocks, threads, rs.scenario.seed,
                          attention or rs.profile.attention or "gather")
    out = make_out_dir(out, rs.input_files())  # the scenario, its --profile, a trace: none in the results
    tables, all_steps, per_load, skipped = [], [], {}, []
    for i, level in enumerate(levels):
        if deadline is not None and time.monotonic() > deadline:
            skipped = levels[i:]
            break
        lrs = rs if level == "as-configured" else load(scenario, sets + load_sets(level))
        sim = simulate(lrs)
        rep = simulate(lrs, executor=ex)
        tables.append(compare(sim.summary, rep.summary).assign(load=level))
        all_steps.append(rep.steps.assign(load=level))
        per_load[level] = {"sim": sim.summary, "replay": rep.summary, "step_errors": step_errors(lrs.cost_model, rep.steps)}
        cdf_plot({"simulation": sim, "measured replay": rep}, out / f"cdf-{i}.png",
                 f"{rs.arch.name} on {device}, load {level}: simulation ({rs.profile.name}) vs measured replay")
    if not tables:
        raise ConfigError("loads", "the deadline passed before the first load level")
    table = pd.concat(tables, ignore_index=True)[["load", "metric", "sim", "replay", "error"]]
    replayed = pd.concat(all_steps, ignore_index=True)
    replayed["time_ms"] = replayed["duration"] * 1e3  # as `calibrate fit` reads measurements
    replayed.to_parquet(out / "replayed-steps.parquet", index=False)  # each real batch and its measured time
    steps = step_errors(rs.cost_model, replayed)
    tol = rs.profile.tolerance if rs.profile.tolerance is not None else 0.10
    from servesim.calibration.profile_io import within_tolerance

    table.to_csv(out / "table.csv", index=False)
    (out / "summary.json").write_text(json.dumps(
        {"profile": rs.profile.name, "device": device, "loads": levels[:len(levels) - len(skipped)],
         "skipped_for_time": skipped, "step_errors": steps, "tolerance": tol,
         "ok": within_tolerance(steps["mape"], steps["median_ratio_predicted_to_measured"], tol),
         "per_load": per_load}, indent=2, default=str) + "\n")
    write_command(out, command)
    return table, steps, tol
