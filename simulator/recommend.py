"""`servesim recommend`: the cheapest deployment that carries a traffic within its SLOs (servesim's addition).

The space is the product of the axes asked for (GPU, tensor parallelism, prefill/decode disaggregation, any
engine setting). Each candidate is pruned first by what it cannot hold (the weights on its GPUs, the heads over
its ranks: the resolver's own checks), then searched: the highest rate one unit carries within the SLOs (a
replica, or a disaggregated unit of P prefill and D decode replicas; `search.max_rate`, a bisection on load
whose answer is checked at twice the run length), the units the target rate then needs by arithmetic, and one
simulation of that fleet at the target rate to confirm it (one unit more when it does not hold). Cost is GPUs x
the price per GPU-hour of a price table (`simulator/data/gpu-prices.yaml`, list prices of a date, or the
user's), applied after the search; $ per million output tokens is that over the traffic's output tokens per hour.

Each row carries the cost model it was simulated with and that model's own measured error where it has one, so
a recommendation resting on a roofline says so. Finished candidates are kept in `OUT/candidates/` under a key of
everything they depend on: a rerun, or one stopped part-way, reuses them.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
from importlib import resources
from pathlib import Path

from servesim.simulator.errors import ConfigError
from servesim.simulator.files import add_written, clear_earlier, replace_written


MAX_PRICE = 1e6  # $ per GPU-hour: past any real price, and far from where a fleet's cost overflows


def load_prices(path: str | None) -> dict:
    """The price table: {gpu: {usd_per_gpu_hour, source, date}} and where it came from."""
    from servesim.simulator.files import load_yaml, read_settings_text

    if path is None:
        text, where = resources.files("servesim.simulator.data").joinpath("gpu-prices.yaml").read_text(), \
            "simulator/data/gpu-prices.yaml"
    else:
        text, where = read_settings_text(path, "--prices"), path
    data = load_yaml(text, "--prices", where)
    prices = (data or {}).get("prices") if isinstance(data, dict) else None
    if not isinstance(prices, dict) or not prices:
        raise ConfigError("--prices", f"{where}: needs `prices:` mapping each GPU to its usd_per_gpu_hour")
    unknown = [str(k) for k in data if k not in ("prices", "note")] + [
        f"prices.{gpu}.{k}" for gpu, row in prices.items() if isinstance(row, dict) for k in row
        if k not in ("usd_per_gpu_hour", "source", "date")]
    if unknown:  # r143: a misspelt optional key vanished
        raise ConfigError("--prices", f"{where}: unknown key {unknown[0]} (a price table holds `note` and `prices`, "
                                      f"each GPU's usd_per_gpu_hour, source and date)")
    texts = [("note", data.get("note"))] + [(f"prices.{gpu}.{k}", row[k]) for gpu, row in prices.items()
                                            if isinstance(row, dict) for k in ("source", "date") if k in row]
    for key, value in texts:  # said as text (r158: a list or a mapping was printed as Python's)
        if isinstance(value, (dict, list, bool)):
            raise ConfigError("--prices", f"{where}: {key} must be text (a date may be 2026-05-01), got "
                                          f"{type(value).__name__}")
    out = {}
    for gpu, row in prices.items():
        value = row.get("usd_per_gpu_hour") if isinstance(row, dict) else row  # or the price alone
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_PRICE:
            raise ConfigError("--prices", f"{where}: prices.{gpu}.usd_per_gpu_hour must be a positive number of "
                                          f"dollars up to {MAX_PRICE:g}, got {value!r}")
        out[str(gpu)] = {"usd_per_gpu_hour": float(value)} | (
            {k: str(row[k]) for k in ("source", "date") if k in row} if isinstance(row, dict) else {})
    if path is not None:
        _say_unknown_gpus(out, where)
    return {"prices": out, "table": where, "note": str(data.get("note", "")) if isinstance(data, dict) else ""}


def _say_unknown_gpus(prices: dict, where: str) -> None:
    """A price for a name no GPU has (H100-SXM for h100-sxm) is never used: said, with the name meant, so the
    row it was for is not silently left unpriced (a table may list GPUs servesim lacks, so it is not refused)."""
    import difflib

    from servesim.simulator.config import say_once
    from servesim.simulator.hardware import builtin_gpu_names

    known = builtin_gpu_names()
    for gpu in prices:
        if gpu not in known:
            near = [k for k in known if k.lower() == gpu.lower()] or difflib.get_close_matches(gpu, known, 1)
            say_once([f"servesim: warning: --prices: {where}: {gpu!r} is not a GPU servesim knows"
                      + (f" (did you mean {near[0]!r}?)" if near else "") + "; its price is never used"])


def candidates(axes: dict[str, list]) -> list[dict]:
    """Every combination of the axes' values, as settings (key -> value)."""
    keys = list(axes)
    return [dict(zip(keys, values)) for values in itertools.product(*(axes[k] for k in keys))]


DISAGG = "disaggregation"  # an axis: prefill:decode replicas of one unit ("1:2"), or "none" (one plain replica)
NAMED_FLAGS = {"hardware.gpu": "--gpu", "engine.tensor_parallel_size": "--tp", DISAGG: "--disagg"}


def disaggregation(value) -> tuple[int, int]:
    """A --disagg value as (prefill, decode) replicas of one unit; "none": (0, 1), no disaggregation."""
    text = str(value).strip().lower()
    if text in ("none", "off"):
        return 0, 1
    parts = text.split(":")
    if len(parts) != 2 or not all(p.isdigit() and 1 <= int(p) <= 64 for p in parts):
        raise ConfigError("--disagg", f"{value!r}: give prefill:decode replicas of a unit (1 to 64 each), e.g. 1:2, "
                                      f"or none")
    return int(parts[0]), int(parts[1])


def _disagg_text(value) -> str:
    prefill, decode = disaggregation(value)
    return f"{prefill}:{decode}" if prefill else "none"


def _sets(point: dict) -> list[str]:
    from servesim.simulator.config import override

    out = []
    for k, v in point.items():
        if k == DISAGG:  # the unit's replicas: the fleet is a number of such units
            prefill, decode = disaggregation(v)
            out += [override("cluster.prefill_replicas", prefill), override("cluster.replicas", decode)]
        else:
            out.append(override(k, v))
    return out


def _key(scenario, sets: list[str], point: dict, slos: dict, rate: float, tolerance: float) -> str:
    """What a candidate's answer depends on: its resolved configuration (the model, the profile, every default),
    the files it reads (a rewritten trace searches again), the SLOs, the target rate, the tolerance and
    servesim's code (all but the last three as a sweep keys a run)."""
    from servesim.simulator.config import load
    from servesim.simulator.sweep import run_id

    config = load(scenario, sets + _sets(point)).as_dict()
    text = json.dumps([run_id(config), slos, rate, tolerance], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def evaluate(scenario, sets: list[str], point: dict, slos: dict, rate: float | None, tolerance: float) -> dict:
    """One candidate: pruned, or its capacity per unit (one replica; disaggregated, its prefill and decode
    replicas together), the fleet of units for the target rate and that fleet's latencies. rate None: the
    traffic is the scenario's trace, replayed at its own workload.time_scale (the capacity is then searched over
    the replay speed). Priced afterwards (`priced`), so a rerun with other prices reuses it."""
    from servesim.simulator.config import load, load_scenario, override
    from servesim.simulator.engine import simulate
    from servesim.simulator.profile_select import cost_model_kind
    from servesim.simulator.search import LOAD, failed_because, max_rate, meets

    sets = sets + _sets(point)
    row: dict = dict(point) | {"gpu": point.get("hardware.gpu")}  # the resolved GPU's name replaces it
    try:
        rs = load(scenario, sets)
    except ConfigError as exc:  # the weights do not fit, the heads do not split: nothing to simulate
        return row | {"status": "pruned", "reason": str(exc)}
    e, cluster = rs.scenario.engine, rs.scenario.cluster
    gpu = rs.scenario.hardware.gpu or "custom"
    per_replica = e.tensor_parallel_size * e.pipeline_parallel_size * e.data_parallel_size
    unit_prefill, unit_decode = cluster.prefill_replicas, cluster.replicas  # one replica unless disaggregated
    unit_replicas = unit_prefill + unit_decode
    per_unit = unit_replicas * per_replica
    held = rs.profile.held_out_error or {}
    row |= {"gpu": gpu, "gpus_per_replica": per_replica, "gpus_per_unit": per_unit,
            "cost_model_source": rs.cost_model_source, "cost_model_kind": cost_model_kind(rs.cost_model_source,
                                                                                           rs.profile),
            "cost_model_error": held.get("mape")}
    trace = rate is None
    sessions = getattr(rs.scenario.workload, "type", None) == "sessions"  # the rate starts sessions, not requests
    knob = "time_scale" if trace else "rate"
    target = rs.scenario.workload.time_scale if trace else rate
    length = _length_setting(rs.scenario.workload)
    searched = [x for x in sets if x.split("=", 1)[0].strip() != LOAD[knob]]  # the search sets it
    # the doubling starts near the target, not at 0.05 req/s, and stops at 16 x the target: capacity past that
    # changes no fleet (one unit carries it); a unit failing at target / 32 is searched below it
    start, bottom = max(BOTTOM, target / 32), BOTTOM
    found = max_rate(scenario, searched, slos, low=start, tolerance=tolerance, load=knob, ceiling=16 * target)
    at_length = found.get("run_sets", [])  # the run length the capacity was found at (the fleet is checked there)
    if found["max_rate"] is None and "already at" in (found.get("reason") or "") and start > bottom:
        # below it, at the run length where it failed (a longer run's check can fail where the first passed)
        longer = found.get("run_sets", [])
        found = max_rate(scenario, searched + longer, slos, low=bottom, high=start, tolerance=tolerance, load=knob)
        at_length = longer + found.get("run_sets", [])
        if longer and found.get("reason"):
            found["reason"] += f" (run at {found.get('run_length') or ', '.join(longer)}, where the first answer " \
                               f"failed its check at twice the run length)"
    capacity, bound, note = found["max_rate"], "max", None
    if capacity is None and found.get("held_up_to"):
        # no failing load found (a short run's arrivals become a burst at high rates): what is known is that it
        # carries the target, which the fleet check below confirms; nothing is claimed above it
        capacity, bound = min(found["held_up_to"], target), "at least"
        unit = "x" if trace else "sessions/s" if sessions else "req/s"
        note = (f"no failing load found up to {found['held_up_to']:.4g} {unit} at this run "
                f"length: capacity at least the target, unknown above (a longer run, "
                f"{'more of the trace (workload.limit)' if trace else length}, finds it)")
    row |= {"max_rate_per_replica": capacity, "capacity": bound, "stable": found.get("stable"),
            "run_length": found.get("run_length")}  # where the capacity was found, and the fleet checked
    if capacity is None:
        return row | {"status": "unmet", "reason": found.get("reason")}
    units = max(1, math.ceil(target / capacity))
    row["replicas_by_capacity"] = units * unit_replicas  # the arithmetic alone (search max-rate, then divide)
    # each unit sees as many requests or sessions as the capacity was found with: a shorter run passes a load
    # that a longer one fails (a queue that grows slowly), and would cut the fleet below the capacity's
    # a trace bounded by workload.limit too: k units replay k times its rows at the same speed (r161: 7 replicas
    # shared the 800 rows one was sized on, 114 each, and met a TTFT target that 800 each miss); a whole trace is
    # all there is
    rows_of = load_scenario(scenario, sets + at_length).workload
    if trace and getattr(rows_of, "limit", None) is not None:
        length = "workload.limit"
    n = getattr(rows_of, length.split(".")[-1], None) if length else None

    def fleet(k: int, longer: int = 1):
        """The run of k units at the target load, each at the run length the capacity was found at (a trace's k
        times its rows; a whole trace: all of it), or `longer` times it."""
        sets_k = sets + at_length + [override("cluster.replicas", k * unit_decode), override(LOAD[knob], target)]
        if unit_prefill:
            sets_k.append(override("cluster.prefill_replicas", k * unit_prefill))
        if n is not None:  # k units see k times the requests (sessions, rows) in the same time, or the same time
            sets_k.append(override(length, n * (1 if length == "workload.duration_s" else k) * longer))
        return simulate(load(scenario, sets_k))

    try:
        run = fleet(units)
        if not meets(run.summary, slos):  # routing left the arithmetic's fleet short: one unit more
            units += 1
            run = fleet(units)
            if not meets(run.summary, slos):
                return row | {"status": "unmet", "replicas": units * unit_replicas,
                              "reason": f"at the target load over {units * unit_replicas} replicas: "
                                        f"{failed_because(run.summary, slos)}"}
        else:  # the capacity is the bracket's passing end: up to its failing end, fewer units may carry it
            fewest = max(1, math.ceil(target / found["fails_at"])) if found.get("fails_at") else units
            while units > fewest and meets((fewer := fleet(units - 1)).summary, slos):
                units, run = units - 1, fewer
        if bound == "at least" and n is not None and (grows := _queue_grows(run, fleet, units)):
            return row | {"status": "unmet", "replicas": units * unit_replicas, "reason": grows}
    except ConfigError as exc:  # a fleet past what one run holds: this candidate's answer, not the search's
        return row | {"status": "unmet", "replicas": units * unit_replicas,
                      "reason": f"the fleet for the target load ({units} x {per_unit} GPUs) cannot be "
                                f"simulated: {exc}"}
    s = run.summary
    # the file ran out: its rows carried by k units, each fewer than the capacity was found on (r164: said as if
    # k x limit rows had run; r165: said of one unit, which ran the rows its capacity was found on)
    if trace and n is not None and run.num_requests < units * min(n, run.num_requests):
        note = "; ".join(filter(None, (note, f"the trace holds only {run.num_requests:,} rows: the fleet of {units} "
                                             f"was checked on them, not on {units} x {min(n, run.num_requests):,}, so "
                                             f"each unit carried fewer requests than its capacity was found with")))
    if trace:  # the replay speed one unit carries, and the requests per second that is
        row |= {"max_time_scale_per_replica": capacity, "max_rate_per_replica": capacity * s["offered_rate"] / target}
    elif sessions:  # the sessions per second one unit starts, and the requests (all their turns) per second
        row |= {"max_sessions_per_s_per_replica": capacity,
                "max_rate_per_replica": capacity * s["offered_rate"] / target}
    row |= {"status": "meets", "replicas": units * unit_replicas,
            "prefill_replicas": units * unit_prefill, "gpus": units * per_unit,
            "achieved_rate": s.get("achieved_rate"), "request_throughput": s["request_throughput"],
            "output_throughput": s["output_throughput"],
            **({"request_goodput": s["request_goodput"]} if s.get("request_goodput") is not None else {}),
            **{k: s.get(k) for k in ("p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms")},
            **{f"slo_{k}": s.get(k) for k in slos if k not in ("p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms",
                                                                "p99_e2el_ms")},
            "headroom": 1 - max(_used(run, k, v) for k, v in slos.items()),  # the tightest SLO's slack
            "rps_per_gpu": row["max_rate_per_replica"] / per_unit,
            "reason": "; ".join(filter(None, (found.get("reason") if found.get("stable") is False else None, note)))
            or None}  # an unstable capacity says why, as the README promises
    return row


def _queue_grows(run, fleet, units: int) -> str | None:
    """Where no failing load bounded the capacity, SLOs that do not see the queue (TPOT alone) pass a fleet that
    cannot serve the target (r170: one prefill replica serving 23 req/s "carried" 60): its arrivals must span more
    lifetimes as its run grows, as a steady state's do, else its queue grows without bound. None: it steadies."""
    from servesim.simulator.search import STEADY_SPANS, steadiness

    spans = steadiness(run)
    if spans >= STEADY_SPANS:
        return None
    longer = fleet(units, 4)
    if steadiness(longer) >= min(STEADY_SPANS, 2 * spans) or longer.num_requests < 2 * run.num_requests:
        return None  # a lifetime that stays put: it steadies (or a trace with no more rows: said in a note)
    s = longer.summary
    return (f"at the target load over {units} unit(s) the queue grows: a run 4x as long spans "
            f"{steadiness(longer):.2g} p99 lifetimes where {run.num_requests:,} requests spanned {spans:.2g} (p99 TTFT "
            f"{s['p99_ttft_ms']:.4g} ms, {s['request_throughput']:.4g} req/s served of {s['offered_rate']:.4g}), and "
            f"the SLOs given do not bound the wait: give a TTFT or E2EL target (--slo ttft_p99_ms=...) to size the "
            f"fleet")


def _length_setting(workload) -> str | None:
    """The setting a run's length is counted in: requests, or a session workload's sessions, else its duration (a
    trace: its own; r171: a duration was none, its fleet never checked for a queue that grows)."""
    for name in ("num_requests", "num_sessions", "duration_s"):
        if getattr(workload, name, None) is not None:
            return f"workload.{name}"
    return None


def _evaluate_item(scenario, sets: list[str], slos: dict, rate: float | None, tolerance: float, item: tuple) -> tuple:
    """A worker's task: (row index, its record's path, the candidate's row)."""
    i, point, cached = item
    return i, cached, evaluate(scenario, sets, point, slos, rate, tolerance)


BOTTOM = 0.05  # the lowest load searched (search max-rate's default --low)


def priced(row: dict, prices: dict, tokens_per_hour: float) -> dict:
    """A candidate's cost: its GPUs at the table's price per GPU-hour, and that over the traffic's output tokens
    per hour (the same for every candidate that carries it, so equal $/h is equal $/M tokens)."""
    out = {k: v for k, v in row.items() if k not in ("usd_per_hour", "usd_per_million_output_tokens",
                                                      "price_source")}
    if out.get("status") != "meets":
        return out
    price = prices["prices"].get(out["gpu"])
    usd_h = out["gpus"] * price["usd_per_gpu_hour"] if price else None
    out |= {"usd_per_hour": usd_h,
            "usd_per_million_output_tokens": usd_h / (tokens_per_hour / 1e6) if usd_h and tokens_per_hour else None,
            "price_source": (price or {}).get("source")}
    if not price:
        out["reason"] = f"no price for {out['gpu']} in {prices['table']}: give one with --prices"
    return out


def _traffic(scenario, sets: list[str], rate: float | None):
    """The scenario at the target rate, and its traffic as sent, before any candidate's max_model_len refuses some
    (the base need not fit a GPU): every request (a session's later turns too), and how many arrivals the process
    times (a session's first turn)."""
    from servesim.simulator.config import load_scenario, override
    from servesim.simulator.model_arch import load_model

    sc = load_scenario(scenario, sets + ([override("workload.arrival.rate", rate)] if rate is not None else []))
    source = sc.workload.source(sc.seed, load_model(sc.model).max_position_embeddings)
    return (sc, *(source.traffic() or (source.initial(), len(source.initial()))))


def check_lengths_carried(scenario, sets: list[str], axes: dict[str, list], rate: float | None) -> None:
    """Every candidate carries the traffic as sent: a max_model_len in the space that cuts its prompts
    (workload.clip_to_max_model_len) would carry shorter requests, priced as if it served them all (r168: ranked
    first at 58% of the output)."""
    # as the setting takes them: 1.5e3 is 1500 (r170: a whole float was passed over); "auto" fits what it serves
    limits = [int(v) for v in axes.get("engine.max_model_len", [])
              if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v == int(v)]
    if not limits:
        return
    sc, specs, _ = _traffic(scenario, sets, rate)
    clips = getattr(sc.workload, "clip_to_max_model_len", False)  # else refused (400): the candidate fails its SLOs
    for limit in sorted(limits):
        if clips and (cut := sum(sp.prompt_tokens >= limit for sp in specs)):
            raise ConfigError("--grid", f"engine.max_model_len={limit} cuts {cut:,} of the traffic's {len(specs):,} "
                                        f"prompts to {limit - 1:,} tokens (workload.clip_to_max_model_len): every "
                                        f"candidate carries the traffic as sent; give values above its longest "
                                        f"prompt ({max(sp.prompt_tokens for sp in specs):,} tokens)")
        # and its outputs, which the context cuts where no max_tokens is sent (r169: priced as served in full)
        longest = max(sp.prompt_tokens + min(sp.output_tokens, sp.output_limit) for sp in specs)
        if cut := sum(sp.prompt_tokens < limit < sp.prompt_tokens + min(sp.output_tokens, sp.output_limit)
                      for sp in specs):
            raise ConfigError("--grid", f"engine.max_model_len={limit} cuts {cut:,} of the traffic's {len(specs):,} "
                                        f"outputs at the context: every candidate carries the traffic as sent; give "
                                        f"values of at least its longest request ({longest:,} tokens)")


def traffic_output_per_hour(scenario, sets: list[str], rate: float | None) -> float:
    """The output tokens per hour the traffic asks for: its requests' mean output at the target rate (a trace:
    its own output over its arrival span, at its replay speed), drawn once from the scenario's seed."""
    from servesim.simulator.config import max_model_len_given
    from servesim.simulator.model_arch import load_model

    sc, specs, timed = _traffic(scenario, sets, rate)
    if not specs or not timed:
        return 0.0
    # each request's output as the run serves it: cut by its max_tokens (r158: counted whole, the $/M 8x too low)
    # and by the context (r159: 5.4x), none where the API server refuses it
    from servesim.simulator.engine import max_tokens_sent
    from servesim.simulator.front_end import bad_request

    limit = max_model_len_given(sc) or load_model(sc.model).max_position_embeddings  # the scenario's, else the model's
    sent = max_tokens_sent(sc.workload, sc.engine)
    out_per_arrival = sum(0 if bad_request(sp, limit, **sent) else
                          min(sp.output_tokens, sp.output_limit, limit - sp.prompt_tokens) for sp in specs) / timed
    if rate is None:
        times = [sp.arrival_time for sp in specs[:timed]]
        span = max(times) - min(times)
        rate = (timed - 1) / span if span > 0 else 0.0  # the summary's offered_rate
    return rate * out_per_arrival * 3600


def _used(run, key: str, target: float) -> float:
    """How much of an SLO a run uses: a latency's share of its target; for a goodput share, the latency over its
    class's target of the request at that share's place (what the share of misses alone cannot say while none
    miss: every candidate then had all its headroom)."""
    if key == "goodput_fraction":
        return run.goodput_use(target)
    return run.summary[key] / target


def load_bands() -> dict:
    """Each cost-model kind's known error against real GPU serving runs (calibration/error_bands.py)."""
    from servesim.simulator.files import load_yaml

    text = resources.files("servesim.simulator.data").joinpath("cost-model-bands.yaml").read_text()
    return load_yaml(text, "cost-model-bands", "simulator/data/cost-model-bands.yaml")["bands"]


def _band_key(slo: str) -> str | None:
    """A summary SLO key (p99_ttft_ms) as its band's (ttft_p99): ITL by TPOT's, a percentile by the next measured
    one at or above it; None where no band says (a spread, a queue, a goodput share)."""
    parts = slo.split("_")
    if len(parts) != 3 or parts[2] != "ms" or parts[1] not in ("ttft", "tpot", "itl", "e2el"):
        return None
    stat, metric = parts[0], "tpot" if parts[1] == "itl" else parts[1]
    if stat == "median":
        stat = "p50"
    elif stat.startswith("p") and stat[1:].replace(".", "", 1).isdigit():
        q = float(stat[1:])
        stat = "p50" if q <= 50 else "p90" if q <= 90 else "p99"
    elif stat != "mean":
        return None
    return f"{metric}_{stat}"


def trusted(row: dict, slos: dict, bands: dict) -> dict:
    """A candidate's trust: in words, what its latencies rest on and how far that kind has been from real vLLM
    runs; and whether its SLOs still hold if the real server were as much slower than the simulation as the
    kind's worst measured case (meets_at_band_edge; None where no band applies)."""
    kind, mape = row.get("cost_model_kind"), row.get("cost_model_error")
    band = bands.get(kind) or {}
    said = ", ".join(f"{k.split('_')[0].upper()} p99 {band[k][0]:+.0%}..{band[k][1]:+.0%}"
                     for k in ("ttft_p99", "tpot_p99") if k in band)
    against = f"; against {len(band.get('runs', []))} real vLLM runs: {said}" if said else ""
    if kind == "roofline":
        text = "roofline: datasheet peaks" + (against or ", no measurement (error unknown)")
    elif kind == "kernel tables":
        text = "kernel tables (measured kernels, composed)" + against
    elif kind == "hand-set":
        text = "hand-set profile: fitted to no measurement (error unknown)"
    else:
        text = (f"measured profile, held-out {mape:.0%}" if mape is not None else "measured profile") + \
            " (not checked against real serving runs)"
    out = dict(row) | {"cost_model_trust": text if kind else None, "meets_at_band_edge": None}
    if row.get("status") != "meets" or not band:
        return out
    edge = []
    for key, target in slos.items():
        limits = band.get(_band_key(key) or "")
        value = row.get(key, row.get(f"slo_{key}"))
        if limits and value is not None and limits[0] > -1:
            edge.append(value / (1 + limits[0]) <= target)  # real = sim / (1 + error), at the least error
    out["meets_at_band_edge"] = all(edge) if edge else None
    return out


def recommend(scenario, sets: list[str], axes: dict[str, list], slos: dict, rate: float, out: str | Path,
              prices: dict, tolerance: float = 0.1, jobs: int = 1, progress: bool = True,
              tokens_per_hour: float | None = None, executor: str = "process",
              ray_address: str | None = None) -> "pd.DataFrame":
    """Every candidate evaluated (from OUT/candidates/ where a key matches), ranked: the cheapest meeting the
    SLOs first (at equal cost, the most headroom first), then those that meet them with no price, then the unmet
    and the pruned."""
    import pandas as pd

    from servesim.simulator.parallel import run_tasks

    from servesim.simulator.files import hold_folder

    out = Path(out)
    done_dir = out / "candidates"
    done_dir.mkdir(parents=True, exist_ok=True)
    hold_folder(out)  # one command writes a results folder at a time
    points = candidates(axes)
    rows: dict[int, dict] = {}
    todo = []
    for i, point in enumerate(points):
        try:
            key = _key(scenario, sets, point, slos, rate, tolerance)
        except ConfigError as exc:  # pruned before any key: nothing it depends on resolves
            rows[i] = dict(point) | {"gpu": point.get("hardware.gpu"), "status": "pruned", "reason": str(exc)}
            continue
        cached = done_dir / f"{key}.json"
        row = _cached(cached)
        if row is not None:  # the same configuration, reached by this search's point (r128: another axis's kept)
            rows[i] = dict(point) | row
        else:
            todo.append((i, point, cached))
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc="recommend", unit="candidate")

    def keep(done: tuple) -> None:
        i, cached, row = done
        rows[i] = row
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        record = json.loads(json.dumps(row | {AXES: list(points[i]), KEY: cached.stem}, default=str))
        tmp.write_text(json.dumps(record | {DIGEST: _digest(record)}))
        tmp.replace(cached)  # whole or not at all: a stopped run leaves what finished
        if bar:
            bar.update(1)

    try:  # locally in processes, or on Ray (simulator/parallel.py); Ctrl-C keeps what finished
        run_tasks(functools.partial(_evaluate_item, scenario, sets, slos, rate, tolerance), todo, keep,
                  jobs if len(todo) > 1 else 1, executor, ray_address)
    finally:
        if bar:
            bar.close()
    if tokens_per_hour is None:
        tokens_per_hour = traffic_output_per_hour(scenario, sets, rate)
    bands = load_bands()
    table = pd.DataFrame([trusted(priced(rows[i], prices, tokens_per_hour), slos, bands) for i in sorted(rows)])
    for key in axes:  # each candidate's values as given: a grid of 0 and null stays 0 and None, not 0.0 and NaN
        table[key] = pd.Series([rows[i].get(key) for i in sorted(rows)], index=table.index, dtype=object)
    for column in ("usd_per_hour", "usd_per_million_output_tokens", "price_source"):
        if column not in table:
            table[column] = None
    order = {"meets": 0, "unmet": 1, "pruned": 2}
    table["_rank"] = table["status"].map(order)
    cost = table.get("usd_per_million_output_tokens", pd.Series(index=table.index, dtype=float))
    # equal cost (the same GPUs, other settings): the one with more slack to the SLOs first
    slack = table.get("headroom", pd.Series(index=table.index, dtype=float))
    table = table.assign(_cost=cost.fillna(math.inf), _slack=-slack.fillna(-math.inf))
    table = table.sort_values(["_rank", "_cost", "_slack"], kind="stable")
    table = table.drop(columns=["_rank", "_cost", "_slack"]).reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    return table


AXES = "_axes"  # a candidate's record names the axes its row holds
KEY, DIGEST = "_key", "_sha256"  # and the candidate it is (its file's name), and a digest of the rest


def _digest(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _cached(path: Path) -> dict | None:
    """A finished candidate's row without the axis values of the search that evaluated it, or None to evaluate it
    again: missing, or not a row this code wrote (a truncated or edited file, or another candidate's moved here,
    is recomputed, not trusted: r149, two swapped records were each credited with the other's rate)."""
    try:
        row = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(row, dict) or row.get("status") not in ("meets", "unmet", "pruned"):
        return None
    digest = row.pop(DIGEST, None)
    if digest != _digest(row) or row.pop(KEY, None) != path.stem:
        return None
    axes = row.pop(AXES, None)  # the point that evaluated it: another search may reach it by other axes
    if not isinstance(axes, list):
        return None
    row = {k: v for k, v in row.items() if k not in axes}
    whole = row.get("status") != "meets" or (
        isinstance(row.get("gpu"), str) and all(isinstance(row.get(k), (int, float)) and not isinstance(row[k], bool)
                                                and math.isfinite(row[k]) and row[k] > 0
                                                for k in ("gpus", "replicas", "gpus_per_unit", "max_rate_per_replica")))
    return row if whole else None


def axes_from(named: dict[str, str | None], grids: list[str]) -> dict[str, list]:
    """The space: named axes given as comma lists (--gpu, --tp), then --grid KEY=V1,V2 axes."""
    from servesim.simulator.sweep import _values

    axes: dict[str, list] = {}
    for key, given in named.items():
        if given is None:
            continue
        if key == DISAGG:  # P:D read as text (YAML would read 1:2 as a base-60 number), spelt one way (off = none)
            axes[key] = [_disagg_text(v) for v in str(given).split(",")]
        else:
            axes[key] = _values(f"{key}={given}", NAMED_FLAGS.get(key, key))[1]
    for spec in grids:
        key, values = _values(spec, "--grid")
        if key in axes:  # a named flag gave it (--grid alone may give a named axis too)
            raise ConfigError("--grid", f"{key}: searched by {NAMED_FLAGS[key]}; give its values there"
                              if key in NAMED_FLAGS else f"{key}: given twice")
        axes[key] = values
    return axes


def with_rate(scenario, sets: list[str], rate: float | None) -> list[str]:
    """--rate is the traffic's rate: a --set of it too is refused; arrivals that need one to be checked (a gamma
    mapping without its rate) get it before they are checked, the others keep their sets as given."""
    from servesim.simulator.config import sets_give
    from servesim.simulator.search import LOAD, filled_in

    if rate is None:
        return sets
    if sets_give(sets, LOAD["rate"]):  # by itself or inside a mapping
        raise ConfigError("--set", f"{LOAD['rate']}: --rate gives the traffic; leave it out")
    return filled_in(scenario, sets, LOAD["rate"], rate)


def check_space(scenario, sets: list[str], axes: dict[str, list]) -> None:
    """The space's values as settings, checked before any search: a value no deployment could take (a typo, a GPU
    servesim does not know, a size of 0, one given twice) is the user's mistake, named in one line, not a
    candidate "pruned" among those that do not fit."""
    from servesim.simulator.config import load_scenario
    from servesim.simulator.hardware import builtin_gpu_names

    from servesim.simulator.vllm_command import unstartable

    flags = NAMED_FLAGS
    base = load_scenario(scenario, sets)  # the scenario and its --set values alone: their own errors name their fields
    from servesim.simulator.config import check_names

    check_names(base, tuple(axes))  # r147: a misspelt --set hardware.gpu was a candidate "pruned" (exit 1)
    if (why := unstartable(base.model_dump(mode="json"))) is not None:
        raise ConfigError("--set", f"{why}: recommend searches deployments vLLM can start")
    from servesim.simulator.config import sets_give

    for key, why in [("cluster.replicas", "the search sizes the fleet"),
                     *[("cluster.prefill_replicas", "--disagg gives each unit's prefill replicas")] * (DISAGG in axes),
                     *[(k, f"it is an axis of the space ({flags.get(k, '--grid')})") for k in axes]]:
        if sets_give(sets, key):  # by itself or inside a mapping
            raise ConfigError("--set", f"{key}: {why}; leave it out")
    if base.cluster.replicas != 1:  # r139: a scenario's replicas became each unit's: the fleet never fell below them
        raise ConfigError("cluster.replicas", f"{base.cluster.replicas} in the scenario: the search sizes the fleet "
                                              f"from one replica; leave it out")
    for key, values in axes.items():
        flag = flags.get(key, "--grid")
        if key in SET_BY_THE_SEARCH:
            raise ConfigError(flag, f"{key}: the search sets it (the fleet's replicas, for the traffic's load)")
        if key == "workload" or key.startswith("workload."):  # (r158: each candidate priced on the base traffic)
            raise ConfigError(flag, f"{key}: the traffic is what every candidate is sized and priced for, one "
                                    f"for all: recommend each workload on its own")
        seen = []
        for v in values:
            if v in seen:
                raise ConfigError(flag, f"{key}: {v!r} given twice (it would search the same candidate again)")
            seen.append(v)
            if key == "hardware.gpu" and v not in builtin_gpu_names():
                raise ConfigError(flag, f"unknown GPU {v!r}; built-in: {', '.join(builtin_gpu_names())}")
            try:
                one = load_scenario(scenario, sets + _sets({key: v}))
            except ConfigError as exc:
                raise ConfigError(flag, str(exc)) from None
            if (why := unstartable(one.model_dump(mode="json"))) is not None:
                raise ConfigError(flag, f"{why}: recommend searches deployments vLLM can start")


SET_BY_THE_SEARCH = ("cluster.replicas", "workload.arrival.rate", "workload.time_scale")


def target_load(scenario, sets: list[str], rate: float | None) -> tuple[float | None, str]:
    """The traffic to carry: a rate (given, or the scenario's arrival rate), or None for a trace replayed at its own
    workload.time_scale; and how to say it."""
    from servesim.simulator.config import load_scenario
    from servesim.simulator.search import MAX_RATE, MIN_RATE, refuse_client_cap

    refuse_client_cap(scenario, sets, "recommend sizes a fleet for")
    workload = load_scenario(scenario, sets).workload
    if getattr(workload, "type", None) == "trace":  # its traffic is its own, at its replay speed
        if rate is not None:
            raise ConfigError("--rate", "a trace's traffic is its own: --set workload.time_scale=2 carries it twice "
                                        "as fast")
        arrivals = {spec.arrival_time for spec in workload.source(0).initial()}
        if len(arrivals) == 1:  # a burst (vLLM's --request-rate inf): no replay speed changes it
            raise ConfigError("workload.path", f"every request of {workload.path} arrives at once (a burst, as "
                                               f"vLLM's --request-rate inf sends): it has no rate for a fleet to "
                                               f"carry; give a trace with arrival times, or --rate and a synthetic "
                                               f"workload")
        return None, f"{Path(workload.path).name} at time_scale {workload.time_scale:g}"
    if rate is None:
        rate = getattr(getattr(workload, "arrival", None), "rate", None)
        if rate is None:
            raise ConfigError("--rate", "the traffic to carry, in req/s: the scenario's arrivals have no rate")
    elif not MIN_RATE <= rate <= MAX_RATE:
        raise ConfigError("--rate", f"must be from {MIN_RATE:g} to {MAX_RATE:g} req/s (workload.arrival.rate's "
                                    f"bounds), got {rate:g}")
    return rate, f"{rate:g} {'sessions' if getattr(workload, 'type', None) == 'sessions' else 'req'}/s"


def vllm_commands(scenario, sets: list[str], table, top: int, axes: list[str]) -> list[dict]:
    """The `vllm serve` line of each of the best `top` candidates that meet the SLOs, at every axis the search
    walked (a whole section or the model too: they were dropped, and the line deployed the base scenario)."""
    from servesim.simulator.config import load
    from servesim.simulator.vllm_command import VLLM_VERSION, pd_kv_config, serve_command

    out = []
    for _, row in table[table["status"] == "meets"].head(top).iterrows():
        point = _sets({k: row[k] for k in axes})  # null included: a grid's None is vLLM's None, not the default
        line, notes = serve_command(load(scenario, sets + point).as_dict())  # what the line cannot say, too
        notes = [n for n in notes if not n.startswith("prefill/decode disaggregation")]  # said per role below
        prefill = int(row.get("prefill_replicas") or 0)
        if not prefill:
            out.append({"rank": int(row["rank"]), "replicas": int(row["replicas"]), "command": line, "notes": notes})
            continue
        # vLLM's disaggregated serving: each instance moves KV through a connector (NIXL), a proxy routes
        out += [{"rank": int(row["rank"]), "replicas": n, "role": role,
                 "command": f"{line} {pd_kv_config(VLLM_VERSION, role)}", "notes": notes}
                for role, n in (("prefill", prefill), ("decode", int(row["replicas"]) - prefill))]
    return out


FILES = ["recommend.csv", "recommend.json", "commands.txt", "candidates"]
COUNT_COLUMNS = ("rank", "gpus", "replicas", "prefill_replicas", "gpus_per_replica", "gpus_per_unit",
                 "replicas_by_capacity", "engine.tensor_parallel_size", "engine.data_parallel_size")


def _counts_whole(table: pd.DataFrame) -> pd.DataFrame:
    """The count columns as whole numbers, null where a pruned row has none (r152: recommend.json said 1.0 GPUs,
    pandas' floats beside the pruned rows' NaN)."""
    import pandas as pd

    out = table.copy()
    for col in COUNT_COLUMNS:
        if col in out and pd.api.types.is_numeric_dtype(out[col]) and not pd.api.types.is_bool_dtype(out[col]):
            values = out[col].dropna()
            if (values == values.round()).all():
                out[col] = out[col].astype("Int64")
    return out


def run(scenario, sets: list[str], axes: dict[str, list], slos: dict, rate: float | None, out: str | Path,
        prices: str | None = None, tolerance: float = 0.1, jobs: int = 1, top: int = 3,
        progress: bool = True, executor: str = "process",
        ray_address: str | None = None) -> tuple["pd.DataFrame", dict, list[str]]:
    """The whole recommendation, as `servesim recommend` and the API make it: the ranked table, the report
    (recommend.json's content) and the files written in `out`."""
    import pandas as pd

    from servesim.simulator.cli_output import plain
    from servesim.simulator.config import load_scenario
    from servesim.simulator.files import refuse_folder_over_inputs
    from servesim.simulator.parallel import check_executor
    from servesim.simulator.search import refuse_goodput_without_classes

    check_executor(executor, ray_address)
    sets = with_rate(scenario, sets, rate)
    check_space(scenario, sets, axes)
    refuse_goodput_without_classes(scenario, sets, slos, "--goodput ttft:MS tpot:MS, or --set workload.slo_classes=...")
    price_table = load_prices(prices)
    rate, load_text = target_load(scenario, sets, rate)
    refuse_folder_over_inputs(out, FILES + ["plot-recommend.png", "plot-recommend.svg"], "--out",
                              [p for p in (scenario, prices) if isinstance(p, (str, Path))])
    check_lengths_carried(scenario, sets, axes, rate)
    tokens_per_hour = traffic_output_per_hour(scenario, sets, rate)
    table = recommend(scenario, sets, axes, slos, rate, out, price_table, tolerance, jobs, progress, tokens_per_hour,
                      executor, ray_address)
    unpriced = sorted({str(g) for g in table.loc[(table["status"] == "meets") &
                                                 table.get("usd_per_hour", pd.Series(index=table.index)).isna(), "gpu"]})
    if unpriced:  # they meet the SLOs, but nothing ranks them by cost
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: no price for {', '.join(unpriced)} in {price_table['table']}: their rows "
                  f"meet the SLOs but are ranked after the priced ones; give prices with --prices"])
    out = Path(out)
    clear_earlier(out, FILES[:3], lambda name: name.startswith("plot-recommend."))  # none of a rerun's cut beside
    table.to_csv(out / "recommend.csv", index=False)
    commands = vllm_commands(scenario, sets, table, top, list(axes))
    (out / "commands.txt").write_text("".join(f"# rank {c['rank']}: {c['replicas']} x"
                                              f"{' ' + c['role'] if c.get('role') else ''}\n"
                                              + "".join(f"# note: {n}\n" for n in c["notes"]) + f"{c['command']}\n"
                                              for c in commands))
    workload = load_scenario(scenario, sets).workload
    classes = {k: v.model_dump() for k, v in (getattr(workload, "slo_classes", None) or {}).items()}
    report = plain({"rate": rate, "load": load_text, "slos": slos, "slo_classes": classes, "prices": price_table,
                    "output_tokens_per_hour": tokens_per_hour, "rows": _counts_whole(table),
                    "commands": commands})
    (out / "recommend.json").write_text(json.dumps(report, indent=1) + "\n")
    files = FILES[:3]
    add_written(out, files)
    priced = table.get("usd_per_million_output_tokens")
    if priced is not None and ((table["status"] == "meets") & priced.notna()).any():
        from servesim.simulator.plots import recommendation

        files += [p.name for p in recommendation(table, out / "plot-recommend", slos, load_text)]
    replace_written(out, files, lambda name: name.startswith("plot-recommend."))  # an earlier run's plot: not this
    return table, report, files
