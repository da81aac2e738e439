"""`servesim validate serving` (`make fidelity-gpu`): simulate public real-GPU vLLM runs, compare per request.

Each run in ../shared/data/serving/ (see its README) is a real vLLM server with its engine arguments
(`vllm/meta.json`), one row per request (`vllm/requests.jsonl`: arrival, queued, scheduled, first and last
token times) and a once-a-second log of running and waiting requests (`vllm/timeseries.csv`). servesim
replays the same arrivals and lengths with the same engine settings, on the cost model `profile: auto`
picks for that GPU (kernel tables plus the default overhead, or the roofline where the GPU has no tables):
nothing is fitted to the run it is compared with. Reported: mean / p50 / p90 of TTFT, TPOT, queue time and
E2E latency side by side, their CDFs, and running / waiting over time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import ConfigError
from workloads.spec import RequestSpec

# the runs' folder names -> servesim's built-in GPUs and models
GPUS = {"RTX4090": "rtx-4090", "RTXPRO6000": "rtx-pro-6000"}
MODELS = {"meta-llama/Llama-3.1-8B": "llama-3.1-8b", "Qwen/Qwen3-32B": "qwen3-32b"}
# prefill = TTFT - queue time: first scheduled to first token, the prompt's service time without the wait
METRICS = [("ttft", "TTFT"), ("tpot", "TPOT"), ("queue_time", "queue"), ("prefill", "prefill"), ("e2el", "E2E")]
STATS = [("mean", np.mean), ("p50", np.median), ("p90", lambda v: np.percentile(v, 90))]
VLLM_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default, where a run does not record its own


@dataclass
class ServingRun:
    name: str
    path: Path
    sets: list[str] = field(default_factory=list)
    specs: list[RequestSpec] = field(default_factory=list)
    real: pd.DataFrame | None = None  # per request: ttft, tpot, queue_time, e2el (s)
    timeseries: pd.DataFrame | None = None
    skip: str | None = None  # why it is not simulated


def find_runs(root: str | Path) -> list[Path]:
    root = Path(root)
    if not root.is_dir():
        raise ConfigError("serving", f"no serving runs at {root}")
    return sorted(p.parent.parent for p in root.rglob("vllm/requests.jsonl"))


REQUEST_COLUMNS = ["input_toks", "output_toks", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts"]


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError("serving", f"cannot read {what} {path}: {str(exc).splitlines()[0]}") from None


def _read_requests(path: Path) -> pd.DataFrame:
    """requests.jsonl, every row checked: positive token counts, timestamps in lifecycle order."""
    rows = []
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("serving", f"cannot read {path}: {exc}") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            vals = [float(row[c]) for c in REQUEST_COLUMNS]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError("serving", f"{path} line {i}: not a request row with numeric "
                                         f"{', '.join(REQUEST_COLUMNS)} ({type(exc).__name__}: {exc})") from None
        n_in, n_out, queued, sched, first, last = vals
        if not all(np.isfinite(vals)) or n_in < 1 or n_out < 1 or n_in != int(n_in) or n_out != int(n_out):
            raise ConfigError("serving", f"{path} line {i}: token counts must be positive integers and times finite")
        if not queued <= sched <= first <= last:
            raise ConfigError("serving", f"{path} line {i}: times out of order (queued <= scheduled <= first token "
                                         f"<= last token)")
        rows.append(dict(zip(REQUEST_COLUMNS, vals)))
    if not rows:
        raise ConfigError("serving", f"{path} holds no requests")
    return pd.DataFrame(rows)


def load_run(path: Path, root: Path) -> ServingRun:
    """A run folder -> servesim settings, the requests as they arrived at the engine, and the real metrics."""
    run = ServingRun(str(path.relative_to(root)), path)
    meta = _read_json(path / "vllm" / "meta.json", "run metadata")
    kw = meta.get("engine_kwargs") if isinstance(meta, dict) else None
    if not isinstance(kw, dict) or not {"max_num_seqs", "max_num_batched_tokens"} <= set(kw):
        raise ConfigError("serving", f"{path / 'vllm' / 'meta.json'} lacks engine_kwargs with max_num_seqs and "
                                     f"max_num_batched_tokens")
    gpu = GPUS.get(path.parent.name)
    model = MODELS.get(kw.get("model") or meta.get("model"))
    if kw.get("data_parallel_size", 1) > 1 or kw.get("enable_expert_parallel"):
        run.skip = "data / expert parallel mixture-of-experts deployment (servesim has no MoE model yet)"
    elif gpu is None or model is None:
        run.skip = f"no built-in GPU or model for {path.parent.name} / {kw.get('model')}"
    if run.skip:
        return run
    cache = meta.get("kv_cache") or {}
    run.sets = [f"model={model}", f"hardware.gpu={gpu}", "profile=auto",
                f"engine.tensor_parallel_size={kw.get('tensor_parallel_size', 1)}",
                f"engine.max_num_seqs={kw['max_num_seqs']}", f"engine.max_num_batched_tokens={kw['max_num_batched_tokens']}",
                f"engine.gpu_memory_utilization={cache.get('gpu_memory_utilization', VLLM_GPU_MEMORY_UTILIZATION)}",
                f"engine.enable_prefix_caching={str(cache.get('enable_prefix_caching', True)).lower()}",
                f"engine.block_size={cache.get('block_size', 16)}"]
    if kw.get("max_model_len"):
        run.sets.append(f"engine.max_model_len={kw['max_model_len']}")
    if cache.get("num_gpu_blocks"):  # the pool the engine really had
        run.sets.append(f"engine.num_gpu_blocks_override={cache['num_gpu_blocks']}")
    if kw.get("kv_cache_dtype", "auto") != "auto":
        run.sets.append(f"engine.kv_cache_dtype={kw['kv_cache_dtype']}")
    df = _read_requests(path / "vllm" / "requests.jsonl").sort_values("queued_ts", kind="stable").reset_index(drop=True)
    t0 = df["queued_ts"].iloc[0]
    run.specs = [RequestSpec(i, float(r.queued_ts - t0), int(r.input_toks), int(r.output_toks),
                             max_tokens=int(r.output_toks)) for i, r in enumerate(df.itertuples())]
    run.real = pd.DataFrame({
        "ttft": df["first_token_ts"] - df["queued_ts"],
        "tpot": ((df["last_token_ts"] - df["first_token_ts"]) / (df["output_toks"] - 1)).where(df["output_toks"] > 1),
        "queue_time": df["scheduled_ts"] - df["queued_ts"],
        "prefill": df["first_token_ts"] - df["scheduled_ts"],
        "e2el": df["last_token_ts"] - df["queued_ts"]})
    ts = path / "vllm" / "timeseries.csv"
    run.timeseries = None
    if ts.is_file():
        try:
            t = pd.read_csv(ts)
            if {"t", "running", "waiting"} <= set(t.columns) and len(t):
                run.timeseries = t
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
            pass  # the timeline plot is left out; the per-request comparison does not need it
    return run


def _stats(values: pd.Series) -> dict:
    v = values.dropna().to_numpy(float)
    return {label: float(f(v)) * 1000 if v.size else np.nan for label, f in STATS}


def compare_run(run: ServingRun, sim_requests: pd.DataFrame, kernels_only: pd.DataFrame | None = None) -> pd.DataFrame:
    """Real vs simulated statistics; with `kernels_only`, also the same simulation without the overhead terms."""
    sims = {"sim": sim_requests} | ({"sim_kernels_only": kernels_only} if kernels_only is not None else {})
    sims = {k: v.assign(prefill=v["ttft"] - v["queue_time"]) for k, v in sims.items()}
    stats = {k: {col: _stats(v.loc[v["status"] == "finished", col]) for col, _ in METRICS} for k, v in sims.items()}
    rows = []
    for col, name in METRICS:
        real = _stats(run.real[col])
        for label, _ in STATS:
            rows.append({"run": run.name, "metric": f"{name} {label} (ms)", "real": real[label]}
                        | {k: stats[k][col][label] for k in sims})
    t = pd.DataFrame(rows)
    t["error"] = (t["sim"] - t["real"]) / t["real"]
    if kernels_only is not None:
        t["error_kernels_only"] = (t["sim_kernels_only"] - t["real"]) / t["real"]
    return t


def sim_timeseries(steps: pd.DataFrame, seconds: np.ndarray) -> pd.DataFrame:
    """Running and waiting as vLLM's once-a-second logger sees them: the last step that started before each tick."""
    starts = steps["start"].to_numpy()
    idx = np.searchsorted(starts, seconds, side="right") - 1
    ok = idx >= 0
    out = pd.DataFrame({"t": seconds, "running": np.nan, "waiting": np.nan})
    out.loc[ok, "running"] = steps["num_running"].to_numpy()[idx[ok]]
    out.loc[ok, "waiting"] = steps["num_waiting"].to_numpy()[idx[ok]]
    return out


def _panels(path: Path, title: str, panels: list[tuple[str, str, list[tuple[str, np.ndarray, np.ndarray]]]],
            ylabel: str | None = None) -> Path:
    """One figure of side-by-side panels, each (title, x label, [(legend, x, y), ...]), saved to path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8))
    for ax, (name, xlabel, lines) in zip(np.atleast_1d(axes), panels):
        for label, x, y in lines:
            ax.plot(x, y, label=label)
        ax.set_xlabel(xlabel)
        if ylabel:
            ax.set_ylabel(ylabel)
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _cdf(label: str, values: pd.Series) -> tuple[str, np.ndarray, np.ndarray]:
    x = np.sort(values.dropna().to_numpy(float) * 1000)
    return label, x, np.arange(1, x.size + 1) / max(x.size, 1)


def plot_run(run: ServingRun, sim_requests: pd.DataFrame, steps: pd.DataFrame, out: Path) -> list[Path]:
    stem = run.name.replace("/", "-")
    done = sim_requests[sim_requests["status"] == "finished"]
    paths = [_panels(out / f"cdf-{stem}.png", f"{run.name}: per-request CDFs",
                     [(name, f"{name} (ms)", [_cdf("real vLLM", run.real[col]), _cdf("servesim", done[col])])
                      for col, name in METRICS[:3]], ylabel="fraction of requests")]
    if run.timeseries is not None:
        ts = run.timeseries
        sim = sim_timeseries(steps, ts["t"].to_numpy(float))
        paths.append(_panels(out / f"timeline-{stem}.png", f"{run.name}: engine state once a second",
                             [(f"{col} requests", "time (s)", [("real vLLM", ts["t"], ts[col]),
                                                               ("servesim", sim["t"], sim[col])])
                              for col in ("running", "waiting")]))
    return paths


def validate_serving(root: str | Path, out: str | Path, sets: list[str] | None = None,
                     command: list[str] | None = None) -> tuple[pd.DataFrame, list[dict]]:
    from calibration.validate import write_command
    from simulator.config import load
    from simulator.engine import simulate

    from calibration.validate import make_out_dir

    root, out = Path(root), make_out_dir(out)
    tables, runs = [], []
    for path in find_runs(root):
        run = load_run(path, root)
        if run.skip:
            runs.append({"run": run.name, "skipped": run.skip})
            continue
        rs = load(None, run.sets + list(sets or []))
        result = simulate(rs, run.specs)
        bare = None
        if rs.profile.overhead is not None:  # what the overhead terms are worth: the same run on kernel time alone
            inline = rs.profile.model_dump(mode="json") | {"overhead": None}
            bare = simulate(load(None, run.sets + list(sets or []) + [f"profile={json.dumps(inline)}"]),
                            run.specs).requests
        t = compare_run(run, result.requests, bare)
        tables.append(t)
        plot_run(run, result.requests, result.steps, out)
        runs.append({"run": run.name, "settings": run.sets + list(sets or []),
                     "cost_model_source": rs.cost_model_source, "requests": len(run.specs),
                     "mean_abs_error": float(t["error"].abs().mean())})
    if not tables:
        why = "; ".join(f"{r['run']}: {r['skipped']}" for r in runs) or "none found"
        raise ConfigError("--data", f"no run under {root} could be simulated ({why})")
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(out / "table.csv", index=False)
    (out / "summary.json").write_text(json.dumps({"source": str(root), "runs": runs}, indent=2))
    write_command(out, command)
    return table, runs
