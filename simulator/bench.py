"""`servesim bench`: how fast the simulator is, on a fixed workload anyone can rerun.

10,000 requests with ShareGPT-like lengths (lognormal fits of the ShareGPT length
stats: prompt median 1,730, output median 415 tokens) at a rate near the default
deployment's saturation. Reports medians over repeats, since machines are noisy.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time

BENCH_OVERRIDES = [
    "workload.prompt_tokens={dist: lognormal, median: 1730, sigma: 0.9, max: 7000}",
    "workload.output_tokens={dist: lognormal, median: 415, sigma: 0.6, max: 1024}",
]


def run_bench(args) -> int:
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    flags = {"workload.num_requests": ("--requests", args.requests), "workload.arrival.rate": ("--rate", args.rate),
             "simulation.decode_runs": ("--step-by-step", args.step_by_step)}
    for item in args.set:  # a --set comes last and wins: said, as a setting nothing reads is
        key = item.split("=", 1)[0].strip()
        if key in flags:
            flag, value = flags[key]
            print(f"servesim: warning: --set {item} replaces {flag} ({value})", file=sys.stderr)
    rs = load(None, BENCH_OVERRIDES + [f"{key}={not v if key == 'simulation.decode_runs' else v}"
                                       for key, (_, v) in flags.items()] + args.set)
    walls, sim_time, result = [], 0.0, None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        result = simulate(rs)
        walls.append(time.perf_counter() - t0)
    wall = statistics.median(walls)
    s = result.summary
    sim_time = s["duration"]
    requests = s["completed"] + s["failed"] + s.get("unfinished", 0)  # what ran (a --set may override the flags)
    arrival = getattr(rs.scenario.workload, "arrival", None)
    rate = arrival.rate if arrival is not None and arrival.open_loop else None
    report = {
        "requests": requests, "rate": rate, "repeats": args.repeats,
        "decode_runs": rs.scenario.simulation.decode_runs, "wall_s_median": wall, "wall_s_all": walls,
        "simulated_requests_per_wall_s": requests / wall,
        "simulated_s_per_wall_s": sim_time / wall,
        "simulated_duration_s": sim_time, "steps": s["num_steps"], "steps_per_wall_s": s["num_steps"] / wall,
        "mean_batch_size": s["mean_batch_size"], "kv_cache_usage_mean": s["kv_cache_usage_mean"],
        "python": platform.python_version(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        at = f"at {rate:g} req/s" if rate is not None else f"({arrival.process if arrival else 'a trace'})"
        print(f"servesim bench: {requests:,} requests {at}, "
              f"{args.repeats} repeats{'' if report['decode_runs'] else ', step by step'}")
        print(f"  wall time, median          {wall:.2f} s   (all: {', '.join(f'{w:.2f}' for w in walls)})")
        print(f"  simulated requests / wall-s {report['simulated_requests_per_wall_s']:,.0f}")
        print(f"  simulated seconds / wall-s  {report['simulated_s_per_wall_s']:,.0f}")
        print(f"  scheduler steps / wall-s    {report['steps_per_wall_s']:,.0f}  ({s['num_steps']:,} steps, "
              f"mean batch {s['mean_batch_size']:.0f}, KV usage {s['kv_cache_usage_mean']:.0%})")
    return 0
