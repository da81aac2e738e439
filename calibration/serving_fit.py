"""Fit a profile to a user's own serving runs by simulation ("observe, then fit").

Per-request measurements (calibration/real_runs.py) do not show step times, but they constrain them: replay the
recorded arrivals and lengths with the engine's settings and the run's TTFT, TPOT, ITL, E2E and prefill
quantiles follow from the step times. So a handful of terms of the starting profile (the one `profile: auto`
picks: kernel tables plus the default overhead, or the roofline) are searched, by scipy's Nelder-Mead in log
space, to minimise the mean squared log error of those quantiles. Terms (TERMS):

- `memory_scale`, `compute_scale`, `fixed_scale`: multiply the kernel model's memory-bound part (weight read
  floor, KV reads), compute-bound part (GEMM time per token above the knee, prefill attention) and fixed part
  (per step, per sequence). A real server is slower or faster than kernels timed alone: clocks, power caps,
  fusion, another kernel library.
- any Overhead term (`gpu_per_layer_us`, `host_per_step_ms`, ...), absolute.

Held-out error is on data the fit did not see: the runs after the first when several are given (fit on the
others), else the later 30% of one run's requests (the fit scores only the earlier 70%).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from servesim.calibration.profile_io import tolerance_for
from servesim.calibration.real_runs import RealRun, first_copy, request_summary
from servesim.calibration.run_comparison import resolve_run, simulate_run
from servesim.simulator.config import collected_warnings, say_once
from servesim.simulator.errors import ConfigError

SCALES = {  # coefficient groups each scale multiplies (a roofline's efficiencies are divided)
    "memory_scale": {"linear": ["linear_floor_ms", "per_context_token_ms", "per_spilled_context_token_ms",
                                "per_decode_token_ms"], "roofline": ["memory_efficiency"]},
    "compute_scale": {"linear": ["per_token_ms", "per_attention_pair_ms", "per_prefill_token_ms"],
                      "roofline": ["compute_efficiency"]},
    "fixed_scale": {"linear": ["step_overhead_ms", "per_seq_ms"],
                    "roofline": ["step_overhead_ms", "allreduce_latency_us"]},
}
OVERHEAD_TERMS = ["gpu_per_layer_us", "gpu_per_token_per_layer_ns", "gpu_per_seq_us", "eager_per_layer_us",
                  "host_per_step_ms", "host_per_seq_us"]
TERMS = list(SCALES) + OVERHEAD_TERMS
DEFAULT_TERMS = ["memory_scale", "compute_scale", "gpu_per_layer_us"]
DEFAULT_MAX_EVALS = 60  # simulations the optimiser may run (calibrate fit --max-evals)
QUANTILES = ["median", "p90", "p99"]
FIT_METRICS = ["ttft", "tpot", "itl", "e2el", "prefill"]
MIN_REQUESTS = 50
TRAIN_FRACTION = 0.7  # one run: fit on the first 70% of its requests to arrive, report error on the rest
MIN_HELD_OUT = 10  # a later window of fewer requests is no error estimate


@dataclass
class ServingFit:
    profile: dict  # the fitted profile, ready to write
    terms: dict  # fitted value of each term
    start: dict  # its starting value
    train_error: float  # mean |relative error| of the quantiles the fit scored
    held_out: dict  # mape, p90_ape, max_ape, points, what
    evaluations: int
    wall_s: float
    held_out_results: list = None  # the held-out runs simulated with the fitted terms (RunResults)
    held_out_table: pd.DataFrame | None = None  # each held-out quantile: run, statistic, real, sim, error


def check_fittable(run: RealRun, window: bool = False) -> None:
    """Per-request data that cannot identify step-time terms is refused, with what it lacks."""
    run.need_requests(" (a step log is fitted directly: `servesim calibrate fit LOG --model ...`)")
    lens = {s.prompt_tokens for s in run.specs}
    if window and run.specs[-1].arrival_time <= 0:
        raise ConfigError(str(run.path), "every request arrives at once: no later window to hold out; give "
                                         "another run with --held-out")
    if window and len(run.specs) >= MIN_REQUESTS and (later := _window_sizes(run)[1]) < MIN_HELD_OUT:
        raise ConfigError(str(run.path), f"only {later} request(s) arrive after its first {TRAIN_FRACTION:.0%} "
                                         f"(they arrive together): too few to hold out; give another run with "
                                         f"--held-out")
    lack = [what for what, ok in (
        (f"at least {MIN_REQUESTS} requests (it has {len(run.specs)})", len(run.specs) >= MIN_REQUESTS),
        ("at least 3 different prompt lengths", len(lens) >= 3),
        ("requests with more than one output token (no TPOT)", run.requests["tpot"].notna().sum() >= 10)) if not ok]
    if lack:
        raise ConfigError(str(run.path), f"cannot identify the step-time terms: the run lacks {', '.join(lack)}")


def _quantiles(stats: dict) -> dict:
    return {f"{q}_{m}_ms": stats.get(f"{q}_{m}_ms") for m in FIT_METRICS for q in QUANTILES}


def _errors(real: dict, sim: dict) -> np.ndarray:
    """Relative error of every quantile both sides have."""
    out = [(sim[k] - v) / v for k, v in real.items() if v and sim.get(k) is not None and v > 0]
    return np.array(out, dtype=float)


def _coefficient(p: dict, c: str) -> float | None:
    """A starting profile's coefficient, a roofline's default where it leaves one out (None: a linear one's)."""
    from servesim.simulator.cost_model import RooflineCoefficients

    given = (p.get("coefficients") or {}).get(c)
    if given is None and p["cost_model"] == "roofline":
        return RooflineCoefficients().model_dump().get(c)
    return given


def _moves(term: str, p: dict, tp: int) -> bool:
    """Whether a scale changes a starting profile's step times: some coefficient of its group is there and not
    0 (all-reduce latency only under tensor parallelism)."""
    return any(_coefficient(p, c) and (c != "allreduce_latency_us" or tp > 1) for c in SCALES[term][p["cost_model"]])


def apply_terms(profile: dict, terms: dict, tp: int) -> dict:
    """The starting profile with the terms applied (scales multiply their coefficient groups, a roofline's
    defaults where it leaves them out; not the all-reduce latency at TP 1, which no step reads: r147, a roofline
    fitted at TP 1 was written with one, said to have no effect in every run of it)."""
    p = json.loads(json.dumps(profile))
    kind = p["cost_model"]
    for name, value in terms.items():
        if name in SCALES:
            for c in SCALES[name].get(kind, []):
                if (v := _coefficient(p, c)) is not None and (c != "allreduce_latency_us" or tp > 1):
                    p["coefficients"][c] = v / value if c.endswith("efficiency") else v * value
        else:
            p["overhead"] = (p.get("overhead") or {}) | {name: value}
    return p


def _window_cut(run: RealRun) -> float:
    """The arrival time that ends the first 70% of a run's requests to arrive, counted in requests: a cut at 70%
    of the arrival span held out one request of 300 behind an idle gap (r134)."""
    arrivals = np.sort([s.arrival_time for s in run.specs])
    return float(arrivals[max(1, round(len(arrivals) * TRAIN_FRACTION)) - 1])


def _window_sizes(run: RealRun) -> tuple[int, int]:
    """How many of the run's requests the fit scores and how many it holds out."""
    train = sum(s.arrival_time <= _window_cut(run) for s in run.specs)
    return train, len(run.specs) - train


def _window_stats(run: RealRun, requests, itls, part: str | None) -> dict:
    """Statistics of all requests, or of the first 70% to arrive ('train') or the rest ('test')."""
    if part is None:
        return request_summary(requests, itls)
    cut = _window_cut(run)
    mask = (requests["arrival_time"] <= cut) if part == "train" else (requests["arrival_time"] > cut)
    return request_summary(requests[mask.to_numpy()], None)


def _checked_inputs(train: list[RealRun], held_out: list[RealRun], terms: list[str], max_evals) -> list[str]:
    if any(not t.strip() for t in terms):
        raise ConfigError("--terms", f"an empty term name in {','.join(terms)!r}: give names separated by commas, "
                                     f"from {', '.join(TERMS)}")
    unknown = [t for t in terms if t not in TERMS]
    if unknown or not terms or len(set(terms)) != len(terms):
        raise ConfigError("--terms", f"unknown or repeated term(s) {', '.join(unknown) or terms}; known: "
                                     f"{', '.join(TERMS)}")
    if not (isinstance(max_evals, int) and max_evals >= 2 * len(terms) + 1):
        raise ConfigError("--max-evals", f"must be an integer >= {2 * len(terms) + 1} for {len(terms)} terms")
    for r in train + held_out:
        check_fittable(r, window=not held_out)
    if copy := first_copy(train):  # r134: one run under two names was fitted as two (its requests counted twice)
        raise ConfigError(str(copy[0].path), f"fitted twice (the same records as {copy[1]}): give each run once")
    same = {r.identity for r in train} & {r.identity for r in held_out}  # under any name of the run
    if same:
        raise ConfigError("--held-out", f"{', '.join(sorted(same))} is also fitted on: a held-out run must be unseen")
    fitted = [(r.name, r.measured_requests()) for r in train]
    seen = set().union(*(requests for _, requests in fitted))
    for r in held_out:  # a copy of fitted runs (edited, renumbered, cut, or the whole of several cut ones, r134):
        mine = r.measured_pairs()  # its error would be a training error
        shared = sum(p in seen for p in mine)
        if mine and shared * 2 > len(mine):
            names = [name for name, requests in fitted if requests.intersection(mine)]
            raise ConfigError("--held-out", f"{r.name}: {shared} of its {len(mine)} requests are "
                                            f"{', '.join(names)}'s as measured (TTFT and end-to-end latency), which "
                                            f"{'is' if len(names) == 1 else 'are'} fitted on: a held-out run must "
                                            f"be unseen")
        for t in train:
            if (factor := r.scaled_copy_of(t)) is not None:
                raise ConfigError("--held-out", f"{r.name}: its requests are {t.name}'s, which is fitted on, their "
                                                f"latencies within 0.2% of x {factor:.4g} each (a repeat's vary "
                                                f"request by request): a held-out run must be unseen")
    return terms


def _held_out_error(train: list[RealRun], held_out: list[RealRun], results: list,
                    counted: list[bool]) -> tuple[dict, pd.DataFrame]:
    """The fitted terms' error where the fit did not look: the held-out runs, else each run's later requests; over
    the `counted` runs (train + held_out) alone, the profile's own deployment's (the table holds every run)."""
    if held_out:
        test = [(r.name, _quantiles(r.summary()), _quantiles(request_summary(x.requests, x.itls)))
                for r, x in zip(held_out, results[len(train):])]
        what = "held-out run(s) " + ", ".join(r.name for r, c in zip(held_out, counted[len(train):]) if c)
        counted = counted[len(train):]
    else:
        test = [(r.name, _quantiles(_window_stats(r, r.requests, None, "test")),
                 _quantiles(_window_stats(r, x.requests, None, "test"))) for r, x in zip(train, results)]
        what = f"the last {1 - TRAIN_FRACTION:.0%} of each run's requests to arrive (the fit scored the first " \
               f"{TRAIN_FRACTION:.0%}: " + ", ".join(f"{_window_sizes(r)[1]} of {len(r.specs)}"
                                                     for r, c in zip(train, counted) if c) + " held out)"
        if not all(counted):
            what += " of " + ", ".join(r.name for r, c in zip(train, counted) if c)
    test_err = np.abs(np.concatenate([_errors(real, sim) for (_, real, sim), c in zip(test, counted) if c]))
    table = pd.DataFrame([{"run": name, "statistic": k, "real": v, "sim": sim[k], "error": (sim[k] - v) / v}
                          for name, real, sim in test for k, v in real.items()
                          if v and v > 0 and sim.get(k) is not None])
    held = {"mape": float(test_err.mean()), "p90_ape": float(np.percentile(test_err, 90)),
            "max_ape": float(test_err.max()), "points": int(test_err.size), "what": what}
    return held, table


def _describe_fit(fitted: dict, rs0, train: list[RealRun], held_out: list[RealRun], best: dict, start: dict,
                  evaluations: int, held: dict, train_err: np.ndarray, results: list) -> dict:
    """The fitted profile's record: where it came from, its error in and out of sample, the batches it saw."""
    steps = [x.steps for x in results[:len(train)]]  # the batches it was fitted on, not the held-out runs' (r135)
    shape = {"max_tokens": int(max(s["scheduled_tokens"].max() for s in steps)),
             "max_seqs": int(max(s["num_seqs"].max() for s in steps)),
             "max_decode_context_tokens": int(max(s["decode_context_tokens"].max() for s in steps))}
    versions = sorted({str(r.meta.get("vllm_version")) for r in train if r.meta.get("vllm_version")})
    fitted.update({
        "name": f"{rs0.profile.name}-fitted",
        "source": f"fitted by simulation to "
                  f"{sum(len(r.specs) if held_out else _window_sizes(r)[0] for r in train):,} requests "
                  f"{'' if held_out else f'(the first {TRAIN_FRACTION:.0%} of each run to arrive) '}of "
                  f"{', '.join(r.name for r in train)}: {', '.join(f'{k}={v:g}' for k, v in best.items())} "
                  f"on {rs0.cost_model_source or rs0.profile.name}",
        "model": rs0.arch.name, "dtype": rs0.arch.dtype, "gpu": rs0.scenario.hardware.gpu,
        "kv_cache_dtype": rs0.arch.kv_cache_dtype or rs0.arch.dtype,  # r178: a roofline start wrote none
        "tensor_parallel_size": rs0.scenario.engine.tensor_parallel_size,
        "engine_version": f"vLLM {', '.join(versions)}" if versions else None,
        "held_out_error": {k: (round(v, 5) if isinstance(v, float) else v) for k, v in held.items()}
        | {"train_mape": round(float(np.abs(train_err).mean()), 5), "train_points": int(train_err.size)},
        "tolerance": tolerance_for(held["p90_ape"]),
        "shape_range": shape,
        "fitted": {"method": "Nelder-Mead on simulated TTFT/TPOT/ITL/E2EL/prefill quantiles (p50, p90, p99)",
                   "terms": best, "start": start, "evaluations": evaluations,
                   "runs": [str(r.path) for r in train], "held_out_runs": [str(r.path) for r in held_out],
                   # what the runs' records hold (sha256): a run fitted on is known under any name or copy
                   "run_records": [d for r in train if (d := r.content) is not None],
                   "run_latencies": [d for r in train if (d := r.latency_digest) is not None]},
    })
    if not fitted.get("device") or fitted["device"] in ("from-scenario", "any"):
        fitted["device"] = getattr(rs0.hardware, "name", None) or rs0.scenario.hardware.gpu
    return {k: v for k, v in fitted.items() if v is not None}


def _deployment(rs) -> tuple:
    """What a profile is for: the GPU, the model, its TP size, and the formats its weights and KV cache run in
    (r154: an fp8 run's error was written as a bf16 profile's held-out error, a run that profile refuses)."""
    return (rs.scenario.hardware.gpu or rs.hardware.name, rs.arch.name, rs.scenario.engine.tensor_parallel_size,
            rs.arch.dtype, rs.arch.kv_cache_dtype or rs.arch.dtype)


def _deployment_text(rs_or_deployment) -> str:
    gpu, model, tp, dtype, kv = rs_or_deployment if isinstance(rs_or_deployment, tuple) else \
        _deployment(rs_or_deployment)
    return f"{model} ({dtype} weights, {kv} KV cache) on {gpu}, TP {tp}"


def _refuse_other_held_out(resolved: list, held_out: list[RealRun]) -> None:
    """A held-out run of a deployment none of the fitted runs is: its error is written as the profile's own held-out
    error, which it is not (r129: a Qwen3-32B TP 2 run's 21.6% recorded for a Llama-3.1-8B TP 1 profile)."""
    fitted = {_deployment(rs) for rs in resolved[:len(resolved) - len(held_out)]}
    for run, rs in zip(held_out, resolved[len(resolved) - len(held_out):]):
        if _deployment(rs) not in fitted:
            raise ConfigError("--held-out", f"{run.path} is another deployment ({_deployment_text(rs)}) than the "
                                            f"runs fitted ({'; '.join(_deployment_text(d) for d in sorted(fitted))}"
                                            f"): its error would be written as this profile's held-out error")


DEPLOYMENT_SETTINGS = {"hardware.gpu": "--gpu", "model": "--model", "engine.tensor_parallel_size": "--tp"}


def _refuse_relabelled(runs: list[RealRun], sets: list[str] | None) -> None:
    """A --set (or --gpu, --model, --tp) that contradicts the deployment a run records would fit that run's data
    into another deployment's profile (r150: an RTX 4090 run's error written as an RTX PRO 6000 profile's held-out
    error). It may name what a run does not record."""
    from servesim.simulator.model_arch import load_model

    given = dict(s.split("=", 1) for s in sets or [] if "=" in s)
    for run in runs:
        recorded = dict(s.split("=", 1) for s in run.sets)
        for key, flag in DEPLOYMENT_SETTINGS.items():
            if key not in recorded or key not in given or given[key].strip() == recorded[key]:
                continue
            try:
                same = load_model(given[key].strip()).name == load_model(recorded[key]).name if key == "model" \
                    else int(given[key]) == int(recorded[key]) if key.startswith("engine.") else False
            except (ConfigError, ValueError):
                same = False  # the --set's own check names a value that is none
            if not same:
                raise ConfigError(f"{flag} (--set {key})", f"{given[key].strip()} contradicts the {key}="
                                  f"{recorded[key]} that {run.path} records: a fit learns from runs of the "
                                  f"deployment it is for (give {flag} only for runs that record none)")


def _say_if_mixed(resolved: list) -> None:
    """Runs of several deployments share the fitted terms, but one profile is written: the first run's."""
    deployments = {_deployment(rs) for rs in resolved}
    if len(deployments) > 1:
        say_once([f"servesim: warning: the runs fitted are {len(deployments)} deployments (GPU, model, TP, weight and "
                  f"KV formats): the terms "
                  f"are fitted across them, and the profile written is {resolved[0].profile.name}'s (the first run's) "
                  f"with them, its errors over that deployment's runs alone"])


def fit_serving(train: list[RealRun], held_out: list[RealRun], scenario: str | None, sets: list[str] | None,
                terms: list[str] | None = None, max_evals: int = DEFAULT_MAX_EVALS, progress=None,
                transfer: bool = False) -> ServingFit:
    """Fit terms on `train` runs (scored on all their requests; with no held-out run, on the first 70% of
    each) and report the error on `held_out` runs (or the later 30%). transfer: the held-out runs may be other
    deployments (validate serving's leave-one-out predicts a run from the others'); else their error is the
    profile's own and they must be of a deployment fitted."""
    given_terms = bool(terms)
    terms = _checked_inputs(train, held_out, list(terms or DEFAULT_TERMS), max_evals)
    t_start = time.monotonic()
    # every run keeps its own starting profile (its GPU, model, TP); the terms are shared
    _refuse_relabelled(train + held_out, sets)
    resolved = [resolve_run(r, scenario, sets) for r in train + held_out]
    rs0 = resolved[0]
    _say_if_mixed(resolved[:len(train)])
    if not transfer:
        _refuse_other_held_out(resolved, held_out)
    # the profile written is the first run's deployment: its errors are that deployment's runs' (r147: a Qwen3-32B
    # TP 2 run's error pooled into a Llama-3.1-8B profile's held_out_error and tolerance); leave-one-out's transfer
    # error is every held-out run's
    counted = [transfer or _deployment(rs) == _deployment(rs0) for rs in resolved]
    if held_out and not any(counted[len(train):]):
        raise ConfigError("--held-out", f"no held-out run is of {_deployment_text(rs0)}, the deployment of the "
                                        f"profile written (the first run's): its held-out error would be another's")
    starts = [rs.profile.model_dump(mode="json") for rs in resolved]
    for p in starts:
        if p.get("overhead") is None and any(t in OVERHEAD_TERMS for t in terms):
            p["overhead"] = {}
    inert = [t for t in terms if t in SCALES and not any(
        _moves(t, p, rs.scenario.engine.tensor_parallel_size) for p, rs in zip(starts, resolved))]
    if inert:  # a scale of coefficients no starting profile has (or has at 0) moves nothing: the fit would
        # report it unapplied (r134: fixed_scale on a roofline whose step overhead is 0, at TP 1)
        kind = rs0.profile.cost_model
        what = f"{', '.join(inert)} multipl{'ies' if len(inert) == 1 else 'y'} coefficients profile " \
               f"{rs0.profile.name} does not have or has at 0 (" + "; ".join(
                   f"{t}: {', '.join(SCALES[t][kind])}" for t in inert) + ")"
        if given_terms:
            raise ConfigError("--terms", what)
        say_once([f"servesim: warning: {what}: left out of the fit"])
        terms = [t for t in terms if t not in inert]
        if not terms:
            raise ConfigError("--terms", f"{what}: nothing left to fit")
    start_profile = starts[0]
    start = {t: 1.0 if t in SCALES else float((start_profile.get("overhead") or {}).get(t, 0.0)) for t in terms}
    window = None if held_out else "train"
    reals = [_quantiles(_window_stats(r, r.requests, r.itls if window is None else None, window)) for r in train]
    # absolute terms start at their default, or a small positive value so that log space can move them
    x0 = np.log([v if v > 0 else (0.01 if t.endswith("_ms") else 1.0) for t, v in start.items()])
    evals = [0]
    cache: dict = {}

    def simulate_all(terms_now: dict, runs: list[RealRun]):
        return [simulate_run(r, scenario, list(sets or []) + [
            f"profile={json.dumps(apply_terms(p, terms_now, rs.scenario.engine.tensor_parallel_size))}"])[1]
            for r, p, rs in zip(runs, starts, resolved)]  # train first, as `starts` and `resolved` hold them

    def objective(x: np.ndarray) -> float:
        key = tuple(np.round(x, 6))
        if key in cache:
            return cache[key]
        evals[0] += 1
        now = dict(zip(terms, np.exp(x)))
        if any(v > 1 for p, rs in zip(starts, resolved) for c, v in apply_terms(
                p, now, rs.scenario.engine.tensor_parallel_size)["coefficients"].items() if c.endswith("efficiency")):
            cache[key] = 1e6  # past the datasheet's peak: no GPU runs so (r175: the RTX 4090 fit ended at 1.01)
            return 1e6
        try:
            with collected_warnings():  # a trial point's, dropped: the fitted profile's are said by its own runs
                results = simulate_all(now, train)  # (r172: a trial's efficiency past the peak was said as the fit's)
        except ConfigError:
            cache[key] = 1e6  # a term value the model refuses (zero-time steps): out of bounds
            return 1e6
        errs = np.concatenate([
            _errors(real, _quantiles(_window_stats(r, res.requests, res.itls if window is None else None, window)))
            for r, real, res in zip(train, reals, results)])
        val = float(np.mean(np.log1p(np.clip(errs, -0.99, None)) ** 2)) if errs.size else 1e6
        cache[key] = val
        if progress:
            progress(evals[0], now, val)
        return val

    simplex = [x0] + [x0 + np.eye(len(x0))[i] * 0.3 for i in range(len(x0))]  # +35% steps: terms move a lot
    res = minimize(objective, x0, method="Nelder-Mead",
                   options={"maxfev": max_evals, "xatol": 0.01, "fatol": 1e-5, "initial_simplex": np.array(simplex)})
    best = dict(zip(terms, (float(f"{v:.5g}") for v in np.exp(res.x))))
    fitted = apply_terms(start_profile, best, rs0.scenario.engine.tensor_parallel_size)

    # out-of-sample error, and the batches the fitted profile has seen
    results = simulate_all(best, train + held_out)
    train_err = np.concatenate([
        _errors(real, _quantiles(_window_stats(r, res_.requests, res_.itls if window is None else None, window)))
        for r, real, res_, c in zip(train, reals, results, counted) if c])
    held, table = _held_out_error(train, held_out, results, counted)
    fitted = _describe_fit(fitted, rs0, train, held_out, best, start, evals[0], held, train_err, results)
    return ServingFit(fitted, best, start, float(np.abs(train_err).mean()), held, evals[0],
                      round(time.monotonic() - t_start, 1), results[len(train):], table)

