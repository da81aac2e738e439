"""`servesim search`: the highest arrival rate (max-rate) or the fewest replicas (replicas) that still meets
every SLO, by bisection, once per grid point (search_grid).

Latency grows with load but not smoothly at every seed, so a search keeps an invariant
rather than trusting monotonicity: `low` is a measured value that meets the SLOs and `high`
one that does not (for replicas, the other way round); it stops when they are within the tolerance.
"""

from __future__ import annotations

import math
import re

from servesim.simulator.errors import ConfigError
from servesim.workloads.settings import MAX_BLOCKS, MAX_RATE, MAX_REPLICAS, MIN_RATE

_SLO = re.compile(r"^(ttft|tpot|itl|e2el|queue_time)_(mean|median|p50|p90|p99)_ms$")


# SLOs a load meets by staying at or above them: vLLM's goodput, the share of requests meeting their class's
# per-request targets (workload.slo_classes)
AT_LEAST = ("goodput_fraction",)


def parse_slos(specs: list[str]) -> dict[str, float]:
    """ttft_p99_ms=500 -> {'p99_ttft_ms': 500.0}; a summary key (p99_ttft_ms=500) is taken as is;
    goodput_fraction=0.99: at least that share of the requests meets its SLO class's targets."""
    slos, typed = {}, {}  # typed: the spelling each was given in
    for spec in specs:
        key, _, value = spec.partition("=")
        given = key
        m = _SLO.match(key)
        if key in AT_LEAST:
            try:
                share = float(value)
            except ValueError:
                share = math.nan
            if not 0 < share <= 1:
                raise ConfigError("--slo", f"{spec!r}: the share of requests meeting their targets is a number in "
                                           f"(0, 1]")
        elif m:
            metric, stat = m.groups()
            key = f"{'median' if stat == 'p50' else stat}_{metric}_ms"
        elif not re.match(r"^(mean|median|p90|p99)_(ttft|tpot|itl|e2el|queue_time)_ms$", key):
            raise ConfigError("--slo", f"{spec!r}: use e.g. ttft_p99_ms=500, tpot_p90_ms=50 or goodput_fraction=0.99")
        try:
            target = float(value)
        except ValueError:
            raise ConfigError("--slo", f"{spec!r}: the target must be a number of ms") from None
        if not (math.isfinite(target) and target > 0):
            raise ConfigError("--slo", f"{spec!r}: the target must be a positive, finite number of ms")
        if key in slos:
            again = f"{given} is given twice" if typed[key] == given else f"{given} is {typed[key]}, given already"
            raise ConfigError("--slo", f"{spec!r}: {again}")
        slos[key], typed[key] = target, given
    if not slos:
        raise ConfigError("--slo", "give at least one SLO")
    return slos


RATE_DRIVEN = ("poisson", "gamma", "constant", "onoff")  # arrival processes whose times follow arrival.rate


def _arrival(scenario: str | None, sets: list[str]):
    """The scenario's arrival process (None for a trace), read without resolving the deployment; a cut is refused."""
    from servesim.simulator.config import load_scenario

    sc = load_scenario(scenario, sets)
    if sc.simulation.max_sim_time_s is not None:
        # the requests a cut leaves unfinished are in no latency: a load judged on the ones that finished passes
        raise ConfigError("simulation.max_sim_time_s", "a search judges each load by every request it sends, and a "
                                                       "cut run leaves some unfinished (in no latency): leave it out; "
                                                       "workload.num_requests bounds a run")
    return getattr(sc.workload, "arrival", None)


def meets(summary: dict, slos: dict) -> bool:
    """Every request served and every SLO met: a load at which the engine refuses requests (its queue limits, SLO
    shedding, prompts too long) does not carry that traffic, however fast it serves the rest."""
    return summary["completed"] > 0 and not summary.get("failed") and \
        all(summary.get(k) is not None and (summary[k] >= v if k in AT_LEAST else summary[k] <= v)
            for k, v in slos.items())


def filled_in(scenario: str | None, sets: list[str], setting: str, value: float) -> list[str]:
    """The sets to check the scenario with: as given, or with the searched setting filled in where only it is
    missing (a gamma arrival mapping without its rate, which the search gives); a scenario wrong otherwise keeps
    its sets, and its own error."""
    from servesim.simulator.config import load_scenario, override

    try:
        load_scenario(scenario, sets)
        return sets
    except ConfigError:
        filled = sets + [override(setting, value)]
        try:
            load_scenario(scenario, filled)
        except ConfigError:
            return sets
        return filled


def refuse_searched(sets: list[str], searched: str) -> None:
    """The setting a search varies, also given: it would be replaced at every run, silently."""
    from servesim.simulator.config import sets_give

    # by its key or inside a section's mapping (r151: the mapping's was taken); a trace's own time_scale in a
    # workload mapping is recommend's traffic, read before its search
    if searched in {s.split("=", 1)[0].strip() for s in sets} or searched != "workload.time_scale" and \
            sets_give(sets, searched):
        raise ConfigError("--set", f"{searched} is the setting the search varies; leave it out")


def failed_because(summary: dict, slos: dict) -> str:
    """Why a load fails, in a few words: its rejections, a metric no request defines, or the SLOs."""
    if summary.get("failed"):
        return f"{summary['failed']:,} of {summary['failed'] + summary['completed']:,} requests rejected"
    undefined = [k for k in slos if summary.get(k) is None]
    if undefined:
        return f"{', '.join(undefined)} undefined (no request has what it measures)"
    return "the SLOs fail"


def _bisect(passing, failing, at_passing: dict, run, slos: dict, mid, narrow, runs: int, max_runs: int):
    """Shrink the bracket while keeping a measured passing end and a measured failing end."""
    while not narrow(passing, failing) and runs < max_runs:
        m = mid(passing, failing)
        s = run(m)
        runs += 1
        if meets(s, slos):
            passing, at_passing = m, s
        else:
            failing = m
    return passing, failing, at_passing, runs


RESEARCHES = 6  # an answer is searched again at a longer run at most this often
MAX_DOUBLINGS = 10  # and reaches at most 1,024x the scenario's (the check at twice that) for a steady state
BURST_CHECK = 5000  # a load that never steadies is lengthened while its run holds at most this many requests
LOOSE_CHECK = 4 * BURST_CHECK  # an answer whose failing end held is searched again while its check held at most these
# A run measures a steady state when its arrivals span at least this many of its requests' p99 lifetimes (a
# session workload's: its sessions'): the batch fills over about a lifetime and empties over another at the end,
# and a short run's tail is that of a batch still filling. 800 requests of the default scenario at 24.6 req/s
# (2 lifetimes) and 1,600 (2.3) met TPOT p99 30 ms at 27.8 and 27.5; 3,200 (4.6) to 12,800 (15.6) ran 36-39
# (round 131; the README's search section).
STEADY_SPANS = 10


def steadiness(result) -> float:
    """How many p99 lifetimes the run's arrivals span (a request's lifetime is its end-to-end latency; a
    session's, from its first arrival to its last turn's end): below STEADY_SPANS the run is short of a steady
    state. inf where nothing finished (nothing to judge by; the SLOs fail)."""
    import numpy as np

    req = result.request_columns
    arrival, finish = np.asarray(req["arrival_time"], float), np.asarray(req["finish_time"], float)
    session = req["session_id"]
    if any(x is not None for x in session):
        first, last = {}, {}
        for sid, a, f in zip(session, arrival, finish):
            first[sid] = min(first.get(sid, a), a)
            last[sid] = max(last.get(sid, f), f) if f == f else last.get(sid, math.nan)
        arrival = np.array(list(first.values()))
        lifetime = np.array([last[k] for k in first]) - arrival
    else:
        lifetime = finish - arrival
    lifetime = lifetime[np.isfinite(lifetime)]
    if not lifetime.size or len(arrival) < 2:
        return math.inf
    return float(arrival.max() - arrival.min()) / max(float(np.quantile(lifetime, 0.99)), 1e-12)


def _doublings_to_steady(result) -> int:
    """0 for a run long enough for a steady state, else how often its length must double to be one."""
    spans = steadiness(result)
    return 0 if spans >= STEADY_SPANS else math.ceil(math.log2(STEADY_SPANS / max(spans, 1e-9)))


def _run_length(scenario: str | None, sets: list[str]) -> list[tuple[str, float]]:
    """What bounds the scenario's run: its request (or session) count (a trace's row limit) and/or its duration
    (doubled together). A whole trace has neither: it is as long as it is."""
    from servesim.simulator.config import load_scenario

    w = load_scenario(scenario, sets).workload
    return [(k, v) for k, v in (("workload.num_requests", getattr(w, "num_requests", None)),
                                ("workload.num_sessions", getattr(w, "num_sessions", None)),
                                ("workload.limit", getattr(w, "limit", None)),
                                ("workload.duration_s", getattr(w, "duration_s", None))) if v is not None]


# the setting a capacity search varies: an arrival process's rate, or how fast a trace is replayed
LOAD = {"rate": "workload.arrival.rate", "time_scale": "workload.time_scale"}


def max_rate(scenario: str | None, sets: list[str], slos: dict, low: float = 0.05, high: float | None = None,
             tolerance: float = 0.05, max_runs: int = 30, load: str = "rate", ceiling: float = MAX_RATE,
             _lengthened: bool = False) -> dict:
    """The highest arrival rate meeting the SLOs, at a run length where the answer holds: a queue that grows
    slowly passes a short run and fails a long one. The answer is searched again at twice the run length (from a
    bracket around it) until two lengths agree within twice the tolerance and one run at twice the length, long
    enough for a steady state (STEADY_SPANS), holds the answer (a shorter one: the search jumps to the length
    that is), at most RESEARCHES times and up to 2**MAX_DOUBLINGS times the scenario's length;
    `stable`, `answers` (each length's) and `run_sets` (the length the answer was found at) say where it stopped.
    load "time_scale": a trace's replay speed is searched instead (the answer a multiple of its recorded rate).
    `ceiling`: the doubling stops there (what a caller needs to know no further: recommend's multiple of its target).
    No failing load at the scenario's length: the top load held is run at longer lengths until one is steady, and
    the search starts again (`_lengthened`) at the first that fails it."""
    from servesim.simulator.config import override

    checked = filled_in(scenario, sets, LOAD[load], low)
    if tolerance >= 0.5 and not _lengthened:  # (r159: a check that could not fail, unsaid)
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: --tolerance {tolerance:g}: two run lengths' answers agree within twice it, "
                  f"so any two agree and the check that an answer holds at a longer run says nothing; give less "
                  f"than 0.5"])
    refuse_client_cap(scenario, checked, "a capacity search loads the server with")
    refuse_goodput_without_classes(scenario, checked, slos)
    lengths = _run_length(scenario, checked)
    r = _max_rate_at(scenario, sets, slos, low, high, tolerance, max_runs, load, ceiling) | {"run_sets": []}
    runs, answers = r["runs"], [r["max_rate"]]
    def at_length(doubling: int) -> list[str]:
        return sets + _length_sets(lengths, doubling)

    if r.get("held_up_to") is not None and lengths and not _is_trace(lengths) and not _lengthened:
        # no failing load at this run length: a load whose queue grows slowly (sessions outliving a short run) holds
        # at every rate there, so the top load held is run at longer lengths (twice, four times, then up to 4x
        # more at a time) until it fails, and is searched again there (r130: 1 H200 'carried' 4 sessions/s that
        # 1,200 sessions fail), or holds in a run long enough for a steady state, or at the longest length
        doubling, step, spans = 0, 1, 0.0
        while doubling < MAX_DOUBLINGS:
            doubling = min(doubling + step, MAX_DOUBLINGS)
            longer = at_length(doubling)
            check = _result_at(scenario, longer, r["held_up_to"], LOAD[load])
            runs += 1
            if not meets(check.summary, slos):
                again = max_rate(scenario, longer, slos, low, high, tolerance, max_runs, load, ceiling, True)
                return again | {"runs": runs + again["runs"], "run_sets": longer[len(sets):] + again["run_sets"]}
            step = min(_doublings_to_steady(check), 1 if doubling < 2 else 2)
            if not step:  # steady: the load holds
                break
            # never to be steady: its arrivals span no more lifetimes however long it runs (a rate so high they come
            # at once): longer is a bigger burst, run while it stays small (r159: 16x failed where 4x gave up; r160:
            # on to 1,024x, 200 requests became a 204,800-request run)
            if doubling >= 2 and steadiness(check) < 1.5 * spans and check.num_requests * 2**step > BURST_CHECK:
                r["reason"] += (f"; held too in runs of up to {check.num_requests:,} requests at that rate, which "
                                f"arrive almost at once and never reach a steady state")
                break
            spans = steadiness(check)

    unit = _unit(scenario, checked, load)
    next_seed = _other_seed(scenario, checked) if lengths and not _is_trace(lengths) else None
    # an answer two lengths agreed on that failed at twice the length, held short of a steady state there, or whose
    # failing end held there too
    refuted = unsteady = unconfirmed = trace_rows = None  # trace_rows: a trace's check's requests (warm-up too)
    doubling, step, tries, cap = 0, 1, 0, MAX_DOUBLINGS  # cap: a trace stops where it agreed
    while tries < RESEARCHES and doubling < cap:
        if r["max_rate"] is None or not lengths or r.get("reason"):  # nothing to check, or a bracket left wide
            break
        doubling, tries = min(doubling + step, cap), tries + 1
        longer = at_length(doubling)
        again = _rebracket(scenario, longer, slos, r["max_rate"], low, tolerance, max_runs, load)
        runs += again["runs"]
        previous, r, step = r["max_rate"], again | {"run_sets": longer[len(sets):]}, 1
        answers.append(r["max_rate"])
        if r["max_rate"] is not None and abs(r["max_rate"] - previous) <= 2 * tolerance * max(r["max_rate"], previous):
            # agreeing lengths can both be short of a queue that grows slowly: the answer must hold at twice the
            # length too (a fleet sized on 66.9 req/s where 44 holds, round 70), in a run long enough for a
            # steady state (round 131), else the doubling goes on. A trace's further rows are other requests (8,000
            # Azure rows hold a prompt past max_model_len 8192, refused at any load, round 71): its answer's own
            # run must be steady, or it is not stable (r132: 200 rows 'stably' carried 1.5x what 6,400 carry)
            trace = _is_trace(lengths)
            check = _result_at(scenario, at_length(doubling + (not trace)), r["max_rate"], LOAD[load])
            runs += 1
            if trace:
                cap, trace_rows = doubling, check.num_requests  # no longer run of this traffic to be had
            held, seed_said = meets(check.summary, slos), ""

            def holds_next_seed(rate: float) -> bool:  # at the check's length, the same traffic's other draws
                return meets(_result_at(scenario, at_length(doubling + 1) + [next_seed], rate, LOAD[load]).summary,
                             slos)

            if held and not trace and not _doublings_to_steady(check):
                # steady, and in a run of other draws too: near saturation one run's p99 is luck (r162: 5.64 req/s
                # held at 800 requests with the scenario's seed, missed TTFT by 50% from 1,600 on and at 800 with
                # seeds 1 and 2); a trace's arrivals and lengths are its rows, no draw
                runs, held = runs + 1, holds_next_seed(r["max_rate"])
                seed_said = "" if held else f" with {next_seed} (it held with the scenario's)"
            if held:
                step = _doublings_to_steady(check)
                if not step and not trace and r.get("fails_at") is not None:
                    # and its failing end fails there too, in one run of the two draws: under bursty arrivals the
                    # bracket's failing run can be the unlucky one (r163: gamma cv 4 answered 11.7 req/s "stably",
                    # its fails_at 12.3 passing at 2x and 4x and with seeds 1 and 2, where 14 holds)
                    runs, loose = runs + 1, meets(_result_at(scenario, at_length(doubling + 1), r["fails_at"],
                                                             LOAD[load]).summary, slos)
                    if loose:
                        runs, loose = runs + 1, holds_next_seed(r["fails_at"])
                    if loose:
                        step, unconfirmed = 1, (r["max_rate"], r["fails_at"], _length_text(lengths, 2**(doubling + 1)))
                        if check.num_requests > LOOSE_CHECK:  # searched again only while runs stay this short (r164:
                            break  # a 100-request gamma cv 4 search ran past 5 minutes, to 100,000-request runs)
                        continue
                if not step:
                    return r | {"runs": runs, "stable": True, "answers": answers,
                                "run_length": _length_text(lengths, 2**doubling, trace_rows),
                                "checked_at": _length_text(lengths, 2**(doubling + (not trace)), trace_rows)}
                unsteady = (r["max_rate"], _length_text(lengths, 2**(doubling + (not trace))), steadiness(check),
                            check.num_requests)
            else:
                refuted, step = (r["max_rate"], _length_text(lengths, 2**(doubling + (not trace))) + seed_said), 1
    out = r | {"runs": runs, "answers": answers, "run_length": _length_text(lengths, 2**doubling, trace_rows)}
    if refuted and out.get("max_rate") == refuted[0] and not r.get("reason"):
        out["stable"] = False
        out["reason"] = (f"not stable: {refuted[0]:.4g} {unit}, where the last two run lengths agreed, fails at "
                         f"{refuted[1]}; a longer run finds a lower answer")
        return out
    if unconfirmed and out.get("max_rate") == unconfirmed[0] and not r.get("reason"):
        out["stable"] = False
        out["reason"] = (f"not stable: {unconfirmed[1]:.4g} {unit}, the load above the answer {unconfirmed[0]:.4g}, "
                         f"holds at {unconfirmed[2]} with the scenario's seed and the next; a longer run finds a "
                         f"higher answer")
        return out
    if unsteady and out.get("max_rate") == unsteady[0] and not r.get("reason"):
        out["stable"] = False
        rows = dict(lengths).get("workload.limit")
        whole = rows is not None and unsteady[3] < rows * 2**doubling  # the file ran out before the limit (r164)
        longest = f"the trace holds only these {unsteady[3]:,} rows: a longer trace" if whole else \
            "a trace's further rows are other requests: give it a larger workload.limit" if _is_trace(lengths) \
            else f"at most {2**MAX_DOUBLINGS}x the scenario's length is searched: set a longer run"
        held_at = f"all {unsteady[3]:,} rows" if whole else unsteady[1]
        out["reason"] = (f"not steady: {unsteady[0]:.4g} {unit} held at {held_at}, whose arrivals span "
                         f"{unsteady[2]:.2g} p99 lifetimes where a steady state needs {STEADY_SPANS} ({longest})")
        return out
    out["stable"] = None if len(answers) == 1 else False  # one length only: not checked (no answer, or no length)
    if out["stable"] is False and not r.get("reason"):
        out["reason"] = (f"not stable: the answer moved ({' -> '.join(f'{a:.4g}' if a else 'none' for a in answers)} "
                         f"{unit}) as the run doubled to {out['run_length']}; a longer run may move it further")
    return out


def _rebracket(scenario, sets: list[str], slos: dict, near: float, low: float, tolerance: float,
               max_runs: int, load: str = "rate") -> dict:
    """The search at another run length, started from a bracket around the answer at the last one."""
    lo, hi = max(low, near * (1 - 4 * tolerance)), near * (1 + 4 * tolerance)
    r = _max_rate_at(scenario, sets, slos, lo, hi, tolerance, max_runs, load)
    bottom_fails = "already at" in (r.get("reason") or "")  # (its fails_at the bracket's bottom)
    if r["max_rate"] is not None or (r.get("fails_at") is not None and not bottom_fails):
        return r
    runs = r["runs"]
    if bottom_fails and lo > low:  # the bracket's bottom fails too: look below it
        r = _max_rate_at(scenario, sets, slos, low, lo, tolerance, max_runs, load)
    elif "hold at --high" in (r.get("reason") or ""):  # its top passes: grow from there
        r = _max_rate_at(scenario, sets, slos, hi, None, tolerance, max_runs, load)
    return r | {"runs": runs + r["runs"]}


def _unit(scenario: str | None, sets: list[str], load: str) -> str:
    """What the searched load is counted in: requests, or sessions (a session workload's arrival.rate starts
    sessions), per second; or a multiple of a trace's recorded rate."""
    from servesim.simulator.config import load_scenario

    if load != "rate":
        return "x the recorded rate"
    try:
        return "sessions/s" if load_scenario(scenario, sets).workload.type == "sessions" else "req/s"
    except ConfigError:  # the search's own checks say what is wrong
        return "req/s"


def _runs_longer(arrival) -> bool:
    """Whether more requests are the same traffic run longer: not for a burst (all at once) or a curve that does
    not repeat (later requests arrive at the rates past its end)."""
    return arrival is None or not (arrival.process == "burst" or arrival.process == "curve" and not arrival.period_s)


def _length_sets(lengths: list[tuple[str, float]], doubling: int) -> list[str]:
    """The --set texts of the scenario's run length doubled `doubling` times (a duration stays a float)."""
    from servesim.simulator.config import override

    return [override(k, v * 2**doubling if k.endswith("_s") else int(v * 2**doubling)) for k, v in lengths]


def _is_trace(lengths: list[tuple[str, float]]) -> bool:
    """A trace's run is bounded by its row limit: further rows are other requests, not the same traffic longer."""
    return any(k == "workload.limit" for k, _ in lengths)


def _length_text(lengths: list[tuple[str, float]], factor: int, rows: int | None = None) -> str:
    """The run length as set; a trace whose file ran out before its row limit (the run's `rows` requests fewer,
    a warm-up's too: r166, its summary counts only those measured): all its rows (r165: "limit=400" said of a
    60-row file)."""
    if rows is not None and [k for k, _ in lengths] == ["workload.limit"] and rows < lengths[0][1] * factor:
        return f"all {rows:,} rows"
    return " and ".join(f"{k.split('.')[-1]}={v * factor:g}" for k, v in lengths)


def _other_seed(scenario: str | None, sets: list[str]) -> str:
    """The --set of the next seed: the same traffic's other draws, for a check that holds by more than luck."""
    from servesim.simulator.config import load_scenario, override

    from servesim.workloads.settings import MAX_INT

    seed = load_scenario(scenario, sets).seed  # a seed numpy's legacy seeding takes (below 2**32) stays one, and a
    # larger one below the settings' bound (r163: 2**32 - 1 ran on to 2**32, refused; r165: 2**53 to 2**53 + 1)
    return override("seed", (seed + 1) % (2**32 if seed < 2**32 else MAX_INT + 1))


def _result_at(scenario: str | None, sets: list[str], rate: float, setting: str = LOAD["rate"]):
    from servesim.simulator.config import load, override
    from servesim.simulator.engine import simulate

    try:
        return simulate(load(scenario, sets + [override(setting, rate)]))  # the rate reported, to the last bit
    except ConfigError as exc:
        if exc.field in ("simulation.warmup_s", "simulation.cooldown_s"):  # a window in seconds leaves none of
            # the requests once the search sends them faster (r176: said without the rate that did it; r177: not a
            # window in requests, which leaves none at any rate)
            raise ConfigError(exc.field, f"{exc.message}, at the searched {setting}={rate:g}; a window given in "
                                         f"requests (warmup_requests, cooldown_requests) keeps its share at every "
                                         f"rate") from None
        raise


def _summary_at(scenario: str | None, sets: list[str], rate: float, setting: str = LOAD["rate"]) -> dict:
    return _result_at(scenario, sets, rate, setting).summary


def _max_rate_at(scenario: str | None, sets: list[str], slos: dict, low: float = 0.05, high: float | None = None,
                 tolerance: float = 0.05, max_runs: int = 30, load: str = "rate", ceiling: float = MAX_RATE) -> dict:
    """max_rate at the scenario's own run length: grow, then bisect, the rate (or a trace's replay speed)."""
    setting = LOAD[load]
    unit = _unit(scenario, filled_in(scenario, sets, setting, low), load)
    refuse_searched(sets, setting)

    def run(rate: float) -> dict:
        return _summary_at(scenario, sets, rate, setting)

    if high is not None and high <= low:
        raise ConfigError("--high", f"{high:g} must be above --low ({low:g}): the bracket is [low, high]")
    if not 0 < tolerance < 1:
        raise ConfigError("--tolerance", f"must be a fraction strictly between 0 and 1, got {tolerance:g}")
    for flag, value in (("--low", low), ("--high", high)):
        if value is not None and not MIN_RATE <= value <= MAX_RATE:
            raise ConfigError(flag, f"must be from {MIN_RATE:g} to {MAX_RATE:g} req/s (workload.arrival.rate's "
                                    f"bounds), got {value:g}")
    arrival = _arrival(scenario, filled_in(scenario, sets, setting, low))
    if load == "time_scale":
        if arrival is not None:
            raise ConfigError("workload.type", "a replay speed is a trace's: these arrivals follow arrival.rate")
    elif arrival is None:
        raise ConfigError("workload.type", "a trace's arrival times are recorded and search max-rate varies "
                                           "workload.arrival.rate: sweep workload.time_scale (2 replays it twice as "
                                           "fast) to load a trace harder")
    elif arrival.process not in RATE_DRIVEN:
        raise ConfigError("workload.arrival", "search max-rate varies arrival.rate: use poisson, gamma, constant or onoff")
    elif arrival.ramp_up_strategy is not None:
        raise ConfigError("workload.arrival.ramp_up_strategy", "a ramp sets its own rates: arrival.rate, which the "
                                                               "search varies, has no effect")
    runs = 0
    at_low = run(low)
    runs += 1
    if not meets(at_low, slos):
        return {"max_rate": None, "fails_at": low, "runs": runs, "summary": at_low,  # (r166: fails_at left empty)
                "reason": f"{failed_because(at_low, slos)} already at {low:g} {unit}"}
    if high is None:  # grow until the SLOs fail
        top = min(ceiling, MAX_RATE)
        high = min(low * 2, top)
        while runs < max_runs and low < top:
            s = run(high)
            runs += 1
            if not meets(s, slos):
                break
            low, at_low, high = high, s, min(high * 2, top)
        else:
            # not a maximum: where the doubling stopped (the run's requests arrive almost at once there)
            stop = f"the {max_runs}-run limit of a search at one run length stopped the doubling" if low < top else \
                f"the largest rate workload.arrival.rate takes" if top == MAX_RATE else "the search's ceiling"
            return {"max_rate": None, "reason": f"no failing rate found: the SLOs held up to {low:.6g} {unit}, "
                                                f"{stop}", "runs": runs, "summary": at_low, "held_up_to": low}
    else:  # the bracket's top must be measured to fail, not assumed to
        at_high = run(high)
        runs += 1
        if meets(at_high, slos):
            more = "raise it" if high < MAX_RATE else f"the largest rate workload.arrival.rate takes: no failing rate"
            return {"max_rate": None, "reason": f"the SLOs hold at --high ({high:g} {unit}): {more}", "runs": runs,
                    "summary": at_high, "held_up_to": high}  # what is known: at least this (plots draw it so)
    narrow = lambda a, b: (b - a) / b <= tolerance  # noqa: E731
    # halves the ratio where the bracket spans orders of magnitude (r151: 24 of 30 runs halved down from --high 1e9)
    mid = lambda a, b: math.sqrt(a * b) if a > 0 and b > 100 * a else (a + b) / 2  # noqa: E731
    low, high, at_low, runs = _bisect(low, high, at_low, run, slos, mid, narrow, runs, max_runs)
    return {"max_rate": low, "fails_at": high, "runs": runs, "summary": at_low} | (
        {} if narrow(low, high) else {"reason": f"stopped after {runs} runs at one run length (its limit), the "
                                                f"bracket wider than --tolerance"})


def min_replicas(scenario: str | None, sets: list[str], slos: dict, rate: float | None = None,
                 most: int = 256) -> dict:
    """The fewest replicas meeting every SLO, at a run length where the answer holds: a fleet that a short run
    finds enough can queue without bound (3 replicas at 60 req/s, each past its steady capacity, met a TPOT SLO
    over 150 requests and missed it over 300, round 72; 4 held over 600 and missed over 1,200, round 73). The
    count found must hold at twice and four times the run length it was found at (as max-rate's two agreeing
    lengths and its check at twice the later), the later run long enough for a steady state (else longer), else
    it is searched again where it failed, at most RESEARCHES times and up to 2**MAX_DOUBLINGS times the
    scenario's length; `stable` and `run_length` say where it stopped (a trace: not checked)."""
    from servesim.simulator.config import load, override
    from servesim.simulator.engine import simulate
    from servesim.simulator.inert_settings import varying

    refuse_searched(sets, "cluster.replicas")
    refuse_client_cap(scenario, sets, "search replicas sizes a fleet for")
    refuse_goodput_without_classes(scenario, sets, slos)
    refuse_rate_given_twice(sets, rate)
    if rate is not None and not MIN_RATE <= rate <= MAX_RATE:  # said as the flag, as max-rate's bracket is
        raise ConfigError("--rate", f"must be from {MIN_RATE:g} to {MAX_RATE:g} req/s (workload.arrival.rate's "
                                    f"bounds), got {rate:g}")
    extra = [f"workload.arrival.rate={rate:g}"] if rate is not None else []
    arrival = _arrival(scenario, sets)
    if rate is not None:
        if arrival is None or arrival.process not in RATE_DRIVEN or arrival.ramp_up_strategy is not None:
            raise ConfigError("--rate", "the scenario's arrivals do not follow arrival.rate (a trace, a closed loop, "
                                        "a burst, a curve or a ramp): leave --rate out")
    lengths = _run_length(scenario, sets + extra)

    def runner(doubling: int, whole: bool = False):
        length = _length_sets(lengths, doubling)

        def run(n: int):
            with varying("cluster.replicas"):
                result = simulate(load(scenario, sets + extra + length + [f"cluster.replicas={n}"]))
            return result if whole else result.summary
        return run

    with varying("cluster.replicas"):
        one = load(scenario, sets + extra + ["cluster.replicas=1"])
    e, c = one.scenario.engine, one.scenario.cluster
    pooled = (MAX_BLOCKS // one.num_gpu_blocks - c.prefill_replicas) // e.data_parallel_size  # KV pools one run holds
    engines = (MAX_REPLICAS - c.prefill_replicas) // e.data_parallel_size  # and engines (r147)
    held = min(pooled, engines)
    why = [] if held >= most else [f"the most one run holds at {one.num_gpu_blocks:,} KV blocks each; a larger "
                                   f"engine.block_size holds more" if pooled < engines else
                                   f"the most one run holds: {MAX_REPLICAS:,} engines in all"]
    if c.prefill_replicas:  # r147: a prefill replica short of the load was blamed on the block count
        why.append(f"only the decode replicas are searched: cluster.prefill_replicas={c.prefill_replicas} stays, "
                   f"and may be what falls short")
    why = f" ({'; '.join(why)})" if why else ""
    most = max(1, min(most, held))
    r = _fewest(runner(0), slos, most, why)
    runs, answers, found_at, holds, doubling, step, tries = r["runs"], [r["replicas"]], 0, 0, 0, 1, 0
    if r["replicas"] is None or not lengths or _is_trace(lengths) or not _runs_longer(arrival):
        # nothing to check, or a trace; or arrivals whose count is the traffic, not its length (r132: a burst of
        # 200 that 2 replicas carry, doubled to 12,800, asked for 92)
        return r | {"stable": None, "run_length": _length_text(lengths, 1)}
    unsteady = None
    # as max-rate: the count holds at two longer lengths, the later one long enough for a steady state
    while holds < 2 and doubling < MAX_DOUBLINGS and tries < RESEARCHES:
        doubling, step = min(doubling + step, MAX_DOUBLINGS), 1
        check = runner(doubling, whole=True)(r["replicas"])
        runs += 1
        if meets(check.summary, slos):
            holds += 1
            if holds == 2 and (step := _doublings_to_steady(check)):  # held, short of a steady state: longer
                if unsteady and steadiness(check) < 1.5 * unsteady[1]:
                    # its arrivals span no more lifetimes in a longer run: a queue that grows without bound, which
                    # SLOs blind to the wait (TPOT alone) pass (r170: on to 204,800 requests, answering 1 unsaid)
                    return r | {"replicas": None, "runs": runs, "stable": False,
                                "run_length": _length_text(lengths, 2**doubling),
                                "reason": f"{r['replicas']} replica(s) met the SLOs but their queue grows: a run of "
                                          f"{_length_text(lengths, 2**doubling)} spans {steadiness(check):.2g} p99 "
                                          f"lifetimes, one of {unsteady[0]} spanned {unsteady[1]:.2g} (a steady "
                                          f"state's grow with the run), and the SLOs given do not bound the "
                                          f"wait: give a TTFT or E2EL target (--slo ttft_p99_ms=...)" +
                                          (f" (cluster.prefill_replicas={c.prefill_replicas} stays: it may be what "
                                           f"falls short)" if c.prefill_replicas else "")}
                holds, unsteady = 1, (_length_text(lengths, 2**doubling), steadiness(check))
            continue
        r = _fewest(runner(doubling), slos, most, why, low=r["replicas"], at_low=check.summary)
        runs, tries = runs + r["runs"], tries + 1
        answers.append(r["replicas"])
        found_at, holds, unsteady = doubling, 0, None
        if r["replicas"] is None:
            break
    out = r | {"runs": runs, "run_length": _length_text(lengths, 2**found_at)}
    if holds == 2:
        return out | {"stable": True, "checked_at": _length_text(lengths, 2**doubling)}
    if unsteady and not r.get("reason"):
        return out | {"stable": False, "reason": f"not steady: {r['replicas']} held at {unsteady[0]}, whose arrivals "
                                                 f"span {unsteady[1]:.2g} p99 lifetimes where a steady state needs "
                                                 f"{STEADY_SPANS} (at most {2**MAX_DOUBLINGS}x the scenario's length "
                                                 f"is run): set a longer run"}
    grew = " -> ".join(str(a) if a else "none" for a in answers)
    return out | {"stable": False, "reason": r.get("reason") or f"not stable: the fewest replicas grew ({grew}) as "
                                                                f"the run doubled to {_length_text(lengths, 2**doubling)}"
                                                                f"; a longer run may need more"}


def _fewest(run, slos: dict, most: int, why: str, low: int = 0, at_low: dict | None = None) -> dict:
    """The fewest replicas meeting every SLO at one run length: doubling to a passing count, then bisection,
    keeping a measured failing count below a measured passing one. low: a count known to fail (at_low, its
    summary), 0 for none."""
    runs = 0
    if not low:
        at_low, low = run(1), 1
        runs += 1
        if meets(at_low, slos):
            return {"replicas": 1, "runs": runs, "summary": at_low}
    while True:
        if low >= most:
            return {"replicas": None, "fails_with": low, "runs": runs, "summary": at_low,  # (r166: left empty)
                    "reason": f"not met with {most} replica{'s' if most > 1 else ''}{why}: "
                              f"{failed_because(at_low, slos)}"}
        n = min(low * 2, most)
        s = run(n)
        runs += 1
        if meets(s, slos):
            break
        low, at_low = n, s
    high, low, at_high, runs = _bisect(n, low, s, run, slos, lambda a, b: (a + b) // 2,
                                       lambda a, b: a - b <= 1, runs, 10**9)
    return {"replicas": high, "fails_with": low, "runs": runs, "summary": at_high}


# kind -> (answer column, the bracket's other end, the CLI's table file, the setting the search varies)
ANSWERS = {"max-rate": ("max_rate", "fails_at", "max_rate.csv", "workload.arrival.rate"),
           "replicas": ("replicas", "fails_with", "replicas.csv", "cluster.replicas")}


def unconfirmed(answer: str, reasons: list[str], points: int) -> list[str]:
    """The warning for answers a search found but could not confirm (`reason` beside them: "not stable: ..."),
    as the CLI and the API say it (r160: the API's max_rate said nothing)."""
    if not reasons:
        return []
    return [f"servesim: warning: the {answer.replace('_', ' ')} at {len(reasons)} of {points} point(s) is not "
            f"confirmed: {reasons[0]}{' (and others: column `reason`)' if len(reasons) > 1 else ''}"]


def grid_points(kind: str, sets: list[str], grids: list[str] | None) -> list[dict]:
    """The settings of each search a grid asks for ([{}] without one); a seed is a point's only if an axis."""
    from servesim.simulator.sweep import expand

    seeded = any(g.split("=", 1)[0].strip() == "seed" for g in grids or [])
    points = expand(grids, [], 1, searched=ANSWERS[kind][3], fixed=sets) if grids else [{}]
    return [p if seeded else {k: v for k, v in p.items() if k != "seed"} for p in points]


def grid_inputs(kind: str, scenario, sets: list[str], grids: list[str] | None) -> list[str]:
    """The files the searches read (each point's scenario, trace, lengths, model or profile file), as a sweep's."""
    from servesim.simulator.sweep import check_points

    from servesim.simulator.config import override

    # the arrival rate filled in where only it is missing, as the search fills it (r132: a gamma arrival without
    # its rate was refused with --out, searched without); per point, as an axis may be that arrival (r157)
    points = []
    for point in grid_points(kind, sets, grids):
        point_sets = sets + [override(k, v) for k, v in point.items()]
        filled = filled_in(scenario, point_sets, LOAD["rate"], 1.0) is not point_sets
        points.append(point | {LOAD["rate"]: 1.0} if filled else point)
    return check_points(scenario, sets, points)


def refuse_rate_given_twice(sets: list[str], rate: float | None) -> None:
    """--rate beside a --set (or grid) arrival rate: one would replace the other silently."""
    from servesim.simulator.config import sets_give

    if rate is not None and sets_give(sets, "workload.arrival.rate"):
        raise ConfigError("--set", "workload.arrival.rate: --rate gives the traffic; leave one out")


def refuse_client_cap(scenario, sets: list[str], searches: str) -> None:
    """A client's concurrency cap (workload.max_concurrency) holds requests back, so the rate sent falls to what the
    server returns and no rate is a load: refused before any run (r128: search replicas found 1 replica carrying
    300 req/s, where 2.8 were sent)."""
    from servesim.simulator.config import load_scenario

    if getattr(load_scenario(scenario, sets).workload, "max_concurrency", None) is not None:
        raise ConfigError("workload.max_concurrency", f"a client's concurrency cap makes the load the server's own: "
                                                      f"{searches} open-loop traffic (a rate, or a trace's times); "
                                                      f"leave it out")


def refuse_goodput_without_classes(scenario, sets: list[str], slos: dict,
                                   how: str = "--set workload.slo_classes=...") -> None:
    """goodput_fraction is the share of requests meeting their SLO class: a workload without classes defines it
    for no load, so every search would fail at its first run; refused before any."""
    from servesim.simulator.config import load_scenario

    if "goodput_fraction" not in slos:
        return
    classes = getattr(load_scenario(scenario, sets).workload, "slo_classes", None)
    if not classes:
        raise ConfigError("--slo", f"goodput_fraction is the share of requests meeting their SLO class: give the "
                                   f"classes ({how})")
    if not any(c.ttft_ms or c.tpot_ms or c.e2el_ms for c in classes.values()):  # every request would be good
        raise ConfigError("--slo", "goodput_fraction: no SLO class has a target (ttft_ms, tpot_ms or e2el_ms), so "
                                   "every completed request would count as good at any load")


def search_grid(kind: str, scenario, sets: list[str], slo_specs: list[str], grids: list[str] | None = None,
                **options):
    """One search per point of the grids (`--grid key=v1,v2`): a table of one row each, with the answer, its
    bracket, the runs it took, why it stopped short (`reason`) and the SLO metrics at the answer."""
    from servesim.simulator.config import load_scenario, override

    from servesim.simulator.sweep import as_taken, counts_kept, table_cells  # a mapping or list as its JSON text

    answer, below, _, searched = ANSWERS[kind]
    search = max_rate if kind == "max-rate" else min_replicas
    slos = parse_slos(slo_specs)
    points = grid_points(kind, sets, grids)
    for point in points:  # what every search would fail on, before any runs
        point_sets = sets + [override(k, v) for k, v in point.items()]
        refuse_goodput_without_classes(scenario, point_sets, slos)
        try:  # a whole float for an integer setting, tabled as the int it runs as (as a sweep's)
            point.update(as_taken(load_scenario(scenario, filled_in(scenario, point_sets, LOAD["rate"], 1.0)), point))
        except ConfigError:
            pass  # the point's search says it
        if kind == "replicas":
            refuse_rate_given_twice(sets, options.get("rate"))
            try:
                refuse_rate_given_twice([override(k, v) for k, v in point.items()], options.get("rate"))
            except ConfigError as exc:  # an axis gives it (r160: blamed a --set never given)
                raise ConfigError("--grid", exc.message) from None
    rows = []
    for point in points:
        try:
            r = search(scenario, sets + [override(k, v) for k, v in point.items()], slos, **options)
        except ConfigError as exc:
            if len(points) == 1:  # the search itself: its error, as a run's
                raise
            r = {answer: None, "runs": 0, "reason": f"not searched: {exc}", "summary": {}}  # as a sweep's failed point
        s = r["summary"]
        rows.append(table_cells(point) | {answer: r[answer], below: r.get(below), "runs": r["runs"],
                                          "reason": r.get("reason")}
                    | {"stable": r.get("stable"), "run_length": r.get("run_length")}
                    | ({"held_up_to": r.get("held_up_to")} if kind == "max-rate" else {})
                    | {k: s.get(k) for k in slos} | {"request_throughput": s.get("request_throughput")})
    # a count beside an empty cell stays whole (replicas' fails_with 4, not 4.0); the grid's values as given
    return counts_kept(rows, {k for p in points for k in p})
