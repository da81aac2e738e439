"""`servesim bench`: how fast the simulator is, on a fixed workload anyone can rerun.

`sharegpt` (the default): 10,000 requests with ShareGPT-like lengths (lognormal fits of the
ShareGPT length stats: prompt median 1,730, output median 415 tokens) at 10 req/s, near the
default deployment's saturation. `azure-conv`: the Azure 2023 conversation trace's (prompt,
output) pairs, resampled, at 80% of the capacity the deployment is measured to have for them
(a burst of CAPACITY_PROBE requests at once, its completions per second), a production load
for scale runs. Reports medians over repeats, since machines are noisy.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH_OVERRIDES = [
    "workload.prompt_tokens={dist: lognormal, median: 1730, sigma: 0.9, max: 7000}",
    "workload.output_tokens={dist: lognormal, median: 415, sigma: 0.6, max: 1024}",
]
AZURE_CONV = ("traces", "azure2023", "AzureLLMInferenceTrace_conv.csv")  # in ../shared/data
CAPACITY_PROBE = 2000  # requests arriving at once, whose completions per second measure the capacity
LOAD = 0.8  # of that capacity


def _azure_conv(trace: str | None, sets: list[str], rate: float | None) -> tuple[list[str], float, float | None]:
    """The azure-conv workload's settings, its rate (the given one, else LOAD x the measured capacity) and the
    capacity (None when a rate is given: nothing is measured)."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate
    from servesim.simulator.errors import ConfigError
    from servesim.simulator.files import dump_yaml, shared_data

    path = Path(trace) if trace else shared_data(*AZURE_CONV) or Path("../shared/data", *AZURE_CONV)
    if path.is_dir():
        raise ConfigError("--trace", f"{path} is a folder: give the trace file (AzureLLMInferenceTrace_conv.csv)")
    if not path.is_file():
        raise ConfigError("--trace", f"{path}: no such file; --workload azure-conv resamples the Azure 2023 "
                                     f"conversation trace's lengths (AzureLLMInferenceTrace_conv.csv)")
    if path.name != AZURE_CONV[-1]:  # r174: Mooncake's lengths were benched and published as azure-conv, unsaid
        print(f"servesim: warning: --trace {path} is not {AZURE_CONV[-1]}: the bench resamples its lengths, "
              f"reported as azure-conv with this trace named", file=sys.stderr)
    section = lambda n, rate: "workload=" + dump_yaml(  # noqa: E731
        {"type": "synthetic", "num_requests": n, "arrival": {"process": "poisson", "rate": rate},
         "lengths": {"path": str(path.resolve())}}, flow=True).strip()
    if rate is not None:
        return [section(CAPACITY_PROBE, rate)], rate, None
    # the deployment the user set, run to the end: a cut burst would measure the cut, not the capacity
    deployment = [s for s in sets if not s.split("=", 1)[0].strip().startswith(("workload", "simulation"))]
    probe = simulate(load(None, [section(CAPACITY_PROBE, 10_000.0)] + deployment)).summary
    if not probe["completed"]:
        raise ConfigError("--workload", f"the deployment completed none of a burst of {CAPACITY_PROBE:,} of the "
                                        f"trace's requests ({probe['failed']:,} rejected): it has no capacity to load "
                                        f"to {LOAD:.0%}; give --rate")
    capacity = probe["request_throughput"]
    return [section(CAPACITY_PROBE, 1.0)], LOAD * capacity, capacity


def _process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc), so start-up counts the interpreter and the imports."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime - ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None


def _peak_rss_mib() -> float:
    """The process's peak resident memory: Linux's VmHWM (the counter VmRSS is read from), else getrusage."""
    peak = _status_mib("VmHWM")
    if peak is not None:
        return peak
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _status_mib(key: str) -> float | None:
    """A memory figure of /proc/self/status (Linux), None elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _rss_mib() -> float | None:
    """The process's resident memory now (Linux), None elsewhere."""
    return _status_mib("VmRSS")


def _timed_repeat(rs) -> tuple[dict, dict, object]:
    """One run, phase by phase: build (requests and replicas), the event loop, metrics, writing the files; each
    phase's time, and the resident memory after it (what the next phase starts from; the peak is the process's)."""
    from servesim.simulator.engine import build, collect, run_to_end

    phases, rss, t = {}, {}, time.perf_counter()
    sim = build(rs)
    phases["build_s"], t = time.perf_counter() - t, time.perf_counter()
    rss["build"] = _rss_mib()
    run_to_end(sim, rs)
    phases["simulation_s"], t = time.perf_counter() - t, time.perf_counter()
    rss["simulation"] = _rss_mib()
    result = collect(sim, rs)
    phases["metrics_s"], t = time.perf_counter() - t, time.perf_counter()
    del sim
    rss["metrics"] = _rss_mib()
    with tempfile.TemporaryDirectory() as out:
        result.write(out)
    phases["writing_s"] = time.perf_counter() - t
    rss["writing"] = _rss_mib()
    return phases, rss, result


def run_bench(args) -> int:
    from servesim.simulator.config import load

    started = _process_age_s()
    t0 = time.perf_counter()
    # a --set of the workload's kind (or the whole section) brings its own workload: bench's lengths, request
    # count and rate are a synthetic workload's and are not applied
    own = any(item.split("=", 1)[0].strip() in ("workload", "workload.type") for item in args.set)
    base, rate, capacity = BENCH_OVERRIDES, 10.0, None
    if own:
        base = []
        if args.workload != "sharegpt":
            print(f"servesim: warning: --workload {args.workload} is not applied: the --set workload brings its own",
                  file=sys.stderr)
    elif args.workload == "azure-conv":
        base, rate, capacity = _azure_conv(args.trace, args.set, args.rate)
    elif args.trace is not None:
        print("servesim: warning: --trace is read by --workload azure-conv only", file=sys.stderr)
    # setting: (its flag, the flag's value, the setting it gives)
    flags = {"simulation.decode_runs": ("--step-by-step", args.step_by_step, not args.step_by_step)}
    for key, flag, value, default in (("workload.num_requests", "--requests", args.requests, 10_000),
                                      ("workload.arrival.rate", "--rate", args.rate, rate)):
        if not own:
            flags[key] = (flag, value, default if value is None else value)
        elif value is not None:
            print(f"servesim: warning: {flag} {value:g} is not applied: the --set workload brings its own",
                  file=sys.stderr)
    for item in args.set:  # a --set comes last and wins (its whole section too): said, as a setting nothing reads is
        key = item.split("=", 1)[0].strip()
        for flagged, (flag, value, setting) in flags.items():  # a flag given (r151: one never given was "replaced")
            if (flagged == key or flagged.startswith(key + ".")) and value not in (None, False):
                print(f"servesim: warning: --set {item} replaces {flag}" + ("" if value is True else f" ({value})"),
                      file=sys.stderr)
    rs = load(None, base + [f"{key}={setting}" for key, (_, _, setting) in flags.items()] + args.set)
    startup = (started or 0.0) + time.perf_counter() - t0  # interpreter, imports and resolving the scenario
    repeats = [_timed_repeat(rs) for _ in range(args.repeats)]
    result, rss_after = repeats[-1][2], repeats[-1][1]
    phases = {k: statistics.median(p[k] for p, _, _ in repeats) for k in repeats[0][0]}
    walls = [sum(p.values()) for p, _, _ in repeats]
    wall = statistics.median(walls)
    s = result.summary
    sim_time = s["duration"]
    requests = s["completed"] + s["failed"] + s.get("unfinished", 0)  # what ran (a --set may override the flags)
    request_steps = int(result.step_columns["num_seqs"].sum())
    arrival = getattr(rs.scenario.workload, "arrival", None)
    rate = arrival.rate if arrival is not None and arrival.open_loop else None
    report = {
        "workload": "own" if own else args.workload, "requests": requests, "rate": rate,
        "trace": str(Path(args.trace).resolve()) if args.trace and args.workload == "azure-conv" and not own else None,
        "capacity_req_s": capacity, "repeats": args.repeats,
        "decode_runs": rs.scenario.simulation.decode_runs, "wall_s_median": wall, "wall_s_all": walls,
        "startup_s": startup, "phases_s_median": phases,
        "simulated_requests_per_wall_s": requests / wall,
        "simulated_s_per_wall_s": sim_time / wall,
        "simulated_s_per_wall_s_with_startup": sim_time / (wall + startup),
        "simulated_duration_s": sim_time, "steps": s["num_steps"], "steps_per_wall_s": s["num_steps"] / wall,
        "request_steps": request_steps, "request_steps_per_wall_s": request_steps / wall,
        # the kernel's RSS counters are per-CPU batched: a sample taken earlier may read a few pages above the
        # high-water mark read now, so the peak is at least every sample
        "peak_rss_mib": max([_peak_rss_mib(), *(v for v in rss_after.values() if v is not None)]),
        "rss_mib_after_phases": rss_after,
        "mean_batch_size": s["mean_batch_size"], "kv_cache_usage_mean": s["kv_cache_usage_mean"],
        "python": platform.python_version(),
    }
    limit = rs.scenario.simulation.max_sim_time_s
    if result.cut:  # its rates are over the cut window
        print(f"servesim: warning: simulation.max_sim_time_s={limit:g} ended each run: "
              f"{s.get('unfinished', 0):,} request(s) unfinished", file=sys.stderr)
    from servesim.simulator.cli_output import answer

    if not answer(report):
        at = f"at {rate:g} req/s" if rate is not None else f"({arrival.process if arrival else 'a trace'})"
        if capacity is not None and rate is not None:
            at += f" ({rate / capacity:.0%} of the {capacity:.3g} req/s measured for these lengths)"
        named = f" ({Path(report['trace']).name})" if report["trace"] and Path(report["trace"]).name != AZURE_CONV[-1] \
            else ""
        print(f"servesim bench: {report['workload']}{named}, {requests:,} requests {at}, "
              f"{args.repeats} repeat{'s' * (args.repeats != 1)}{'' if report['decode_runs'] else ', step by step'}")
        print(f"  wall time, median          {wall:.2f} s   (all: {', '.join(f'{w:.2f}' for w in walls)}); "
              f"start-up {startup:.2f} s")
        print("  phases, median             " + ", ".join(f"{k[:-2]} {v:.2f} s" for k, v in phases.items()))
        print(f"  simulated requests / wall-s {report['simulated_requests_per_wall_s']:,.0f}")
        print(f"  simulated seconds / wall-s  {report['simulated_s_per_wall_s']:,.0f}  "
              f"({report['simulated_s_per_wall_s_with_startup']:,.0f} with start-up)")
        print(f"  request-steps / wall-s      {report['request_steps_per_wall_s']:,.0f}  ({request_steps:,})")
        print(f"  scheduler steps / wall-s    {report['steps_per_wall_s']:,.0f}  ({s['num_steps']:,} steps, "
              f"mean batch {s['mean_batch_size']:.0f}, KV usage {s['kv_cache_usage_mean']:.0%})")
        print(f"  peak RSS                    {report['peak_rss_mib']:,.0f} MiB")
        if None not in rss_after.values():
            print("  RSS after each phase        " + ", ".join(f"{k} {v:,.0f}" for k, v in rss_after.items()) + " MiB")
    return 0
