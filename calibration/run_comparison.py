"""`servesim compare REAL... [SIM]`: a real serving run against its simulation, a user's own regression check.

The real run (calibration/real_runs.py: lifecycle records, `vllm bench serve --save-detailed` JSON) is
simulated with the same arrivals, lengths and settings, unless a servesim results folder is given to compare
with. Repeats of one workload (several REAL files) give the real runs' own spread: a cell passes when
|error| <= tolerance + that spread, so a check never asks the simulator to be steadier than the engine.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from servesim.calibration.real_runs import RealRun, attach_prefixes, check_lengths, read_run, request_summary
from servesim.simulator.errors import ConfigError
from servesim.simulator.files import clear_earlier, plot_file, replace_written

COMPARE_FILES = ("table.csv", "summary.json", "command.txt")  # and its plots

# prefill = TTFT - queue time: first scheduled to first token, the prompt's service time without the wait
METRICS = [("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL"), ("queue_time", "queue"),
           ("prefill", "prefill")]
STATS = [("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p99", "p99")]
RATES = [("request_throughput", "throughput (req/s)"), ("output_throughput", "output (tok/s)")]


def resolve_run(run: RealRun, scenario: str | None = None, sets: list[str] | None = None):
    """The real run's recorded settings, then the scenario, then the --sets; its requests must fit them."""
    from servesim.simulator.config import load, load_scenario_file, say_once

    run.need_requests()
    scenario_data = load_scenario_file(scenario) if scenario else {}  # read once: the checks below all look at it
    keys = [s.split("=", 1)[0].strip() for s in sets or []]  # as --set reads them (r175: `model = x` was missed)
    unmapped = run.meta.get("unmapped_model")
    if unmapped is not None and "model" not in keys and "model" not in scenario_data:
        raise ConfigError("model", f"{run.path} was served with {unmapped or 'an empty model name'}, which has no "
                                   f"built-in architecture: "
                                   f"give --set model=NAME (a built-in model or a config.json path)")
    recorded, warnings = _with_overrides(run, list(sets or []))
    if run.meta.get("release_note"):
        warnings.append(f"{run.path} {run.meta['release_note']}")
    if run.meta.get("unmodelled"):
        warnings.append(f"{run.path} records {', '.join(run.meta['unmodelled'])}: not modelled, simulated without")
    given = _dotted(scenario_data)
    warnings += [f"{run.path} records {item}, which replaces --scenario's {key}={given[key]!r}"
                 for item in recorded for key in [item.split("=", 1)[0]]
                 if key in given and yaml.safe_load(item.split("=", 1)[1]) != given[key]]
    try:
        rs = load(scenario, recorded + list(sets or []))
    except ConfigError as exc:  # a value the run's own record gave, refused: said as the run's (r169: as a setting)
        mine = {item.split("=", 1)[0] for item in recorded}
        if exc.field in mine and not any(s.split("=", 1)[0].strip() == exc.field for s in sets or []) \
                and exc.field not in given:
            raise ConfigError(str(run.path), f"records {exc.field}: {exc.message}") from None
        raise
    rs, rescaled = _pool_as_memory(run, scenario, recorded, list(sets or []), rs, keys + list(given))
    warnings += rescaled
    gpu_given = any(k == "hardware" or k.startswith("hardware.") for k in keys + list(given))
    if not gpu_given and not any(s.startswith("hardware.gpu=") for s in recorded):
        device = run.meta.get("unmapped_gpu")
        warnings.append(f"{run.path} " + (f"ran on {device}, which is no built-in GPU" if device else "records no GPU")
                        + f": simulating {rs.scenario.hardware.gpu or rs.hardware.name}; name the GPU with --set hardware.gpu=NAME")
    if not any(k == "model" or k.startswith("model.") for k in keys + [s.split("=", 1)[0] for s in recorded]) \
            and "model" not in scenario_data:  # r174: the default model was simulated, unsaid, beside the GPU's words
        warnings.append(f"{run.path} records no model: simulating {rs.arch.name}; name it with --set model=NAME")
    if not any(k == "engine" or k.startswith("engine.") for k in keys + [s.split("=", 1)[0] for s in recorded]) and \
            not any(k.startswith("engine.") for k in given):  # records alone (no meta.json): the server's unknown
        warnings.append(f"{run.path} records no engine settings (max_num_seqs, max_num_batched_tokens, ...; a "
                        f"meta.json beside the records gives them): simulating vLLM's defaults; give the server's with "
                        f"--set engine.max_num_seqs=N --set engine.max_num_batched_tokens=N")
    sim = rs.scenario.simulation
    window = [k for k in ("warmup_s", "warmup_requests", "cooldown_s", "cooldown_requests") if getattr(sim, k)]
    warnings += [f"simulation.{k} has no effect: a real run is compared request by request, every request of it"
                 for k in window]  # the simulation's summary would measure a window the real run's does not
    from servesim.simulator.inert_settings import WORKLOAD_READ_WITH_REQUESTS

    warnings += [f"--set {k} has no effect: the run's own requests are simulated (its arrivals and lengths)"
                 for k in dict.fromkeys(s.split("=", 1)[0].strip() for s in sets or [])  # (r151: unsaid)
                 if (k == "workload" or k.startswith("workload.")) and not k.startswith(WORKLOAD_READ_WITH_REQUESTS)]
    say_once(f"servesim: warning: {w}" for w in warnings)
    check_lengths(run, rs.max_model_len)
    return rs


def _dotted(data: dict, prefix: str = "") -> dict:
    """A scenario mapping as {"engine.max_num_seqs": 64, ...}, to compare with a run's recorded --sets."""
    out = {}
    for k, v in data.items():
        if isinstance(v, dict) and v:
            out |= _dotted(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def _same(a, b) -> bool:
    """Two setting values alike as the settings take them: 2048.0 is 2048 (r176: said to replace it)."""
    return a == b and type(a) is not bool and type(b) is not bool or a is b


def _pool_as_memory(run: RealRun, scenario: str | None, recorded: list[str], sets: list[str], rs, given: list[str]):
    """A recorded pool of KV blocks is memory: beside the same weights, a --set KV format of other bytes a token
    (engine.kv_cache_dtype=fp8) holds its bytes, not its blocks (r178: 2,588 bf16 blocks stayed 2,588 in fp8)."""
    from servesim.simulator.config import load

    key = "engine.num_gpu_blocks_override"
    if not any(s.startswith(key + "=") for s in run.sets) or key in given:
        return rs, []
    try:
        before = load(scenario, list(run.sets))
    except ConfigError:
        return rs, []  # the record alone does not load: nothing to keep
    old, new = before.kv_layout.page_bytes_per_token, rs.kv_layout.page_bytes_per_token
    if old == new or before.weight_bytes_per_gpu() != rs.weight_bytes_per_gpu():
        return rs, []  # the same format, or other weights: the pool beside them is not the recorded one's memory
    blocks = rs.scenario.engine.num_gpu_blocks_override
    kept = max(blocks * old // new, 1)
    rs = load(scenario, [f"{key}={kept}" if s.startswith(key + "=") else s for s in recorded] + sets)
    return rs, [f"the recorded pool ({blocks:,} blocks of {old:,} bytes a token) is simulated as {kept:,} blocks of "
                f"{new:,} bytes a token, the same memory"]


def _count(text: str | None) -> int | None:
    """A --set value read as --set reads it, if it is a whole number >= 1 (8, 8.0); else None (the --set's own
    check names a bad one)."""
    from servesim.simulator.config import set_value

    v = set_value(text) if text is not None else None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else None


def _with_overrides(run: RealRun, sets: list[str]) -> tuple[list[str], list[str]]:
    """The run's recorded settings under the user's --sets, and a warning for each recorded value a --set replaces.
    A recorded pool of KV blocks is memory: under another --set engine.block_size it is kept as the same tokens."""
    from servesim.simulator.config import set_value

    given = {k.strip(): v for k, v in (s.split("=", 1) for s in sets if "=" in s)}  # keys as --set reads them
    recorded = dict(s.split("=", 1) for s in run.sets)
    warnings = [f"--set {k}={given[k].strip()} replaces the {k}={v} that {run.path} records"  # as values, not
                for k, v in recorded.items() if k in given and not _same(set_value(given[k]), set_value(v))]  # text
    for g, text in given.items():  # a mapping's keys too (r159: hardware={gpu: h100-sxm} ran an RTX 4090's run unsaid)
        mapping = set_value(text)
        inner = _dotted(mapping, f"{g}.") if isinstance(mapping, dict) else {}
        warnings += [f"--set {g}=... gives {k}={inner[k]}, replacing the {k}={v} that {run.path} records"
                     for k, v in recorded.items() if k in inner and inner[k] != set_value(v)]
    warnings += [f"--set {g}={given[g]} edits the {k}={v} that {run.path} records"  # model.name=... reads another
                 for k, v in recorded.items() for g in given if g.startswith(k + ".")]
    for i, g in enumerate(given):  # a whole section given: the recorded keys it leaves out would be gone (r158: a
        mapping = set_value(given[g])  # 0.19 run ran with 0.33's scheduler, unsaid)
        kept = set(mapping) if isinstance(mapping, dict) else set()
        inside = [f"{k}={v}" for k, v in recorded.items() if k.startswith(g + ".")
                  and k[len(g) + 1:].split(".")[0] not in kept and not any(later == k or k.startswith(later + ".")
                                                                           for later in list(given)[i + 1:])]
        if inside:  # refused, not said: what the run would then derive fails elsewhere, naming another setting
            raise ConfigError("--set", f"{g}=... would replace the whole {g} section, dropping the "
                                       f"{', '.join(inside)} that {run.path} records: --set each key instead "
                                       f"(--set {g}.KEY=VALUE)")
    blocks, size = (_count(recorded.get(k, d)) for k, d in (("engine.num_gpu_blocks_override", None),
                                                             ("engine.block_size", "16")))
    new_size = _count(given.get("engine.block_size"))  # as --set reads it: 8.0 is 8 (r177)
    if blocks and size and new_size and new_size != size and "engine.num_gpu_blocks_override" not in given:
        kept = blocks * size // new_size
        if kept:
            recorded["engine.num_gpu_blocks_override"] = str(kept)
            warnings.append(f"the recorded pool ({blocks:,} blocks of {size} tokens) is simulated as "
                            f"{kept:,} blocks of {new_size}")
    return [f"{k}={v}" for k, v in recorded.items()], warnings


def simulate_run(run: RealRun, scenario: str | None = None, sets: list[str] | None = None):
    """The real run's arrivals and lengths, simulated under resolve_run's settings (request_summary derives
    prefill, TTFT - queue time, as the real runs record it)."""
    rs = resolve_run(run, scenario, sets)
    return rs, simulate_resolved(rs, run)


def simulate_resolved(rs, run: RealRun):
    """The real run's requests under settings resolve_run gave."""
    from servesim.simulator.engine import simulate

    if rs.scenario.simulation.max_sim_time_s is not None:  # compare, validate serving and the serving fit
        raise ConfigError("simulation.max_sim_time_s", "a real run is compared request by request, and a cut leaves "
                                                       "some unfinished (in no latency): leave it out")
    return simulate(rs, run.specs)


def comparison_table(reals: list[dict], sim: dict) -> pd.DataFrame:
    """One row per statistic: the real value (median over repeats), the repeats' spread, the simulated value,
    the relative error. Statistics the real data does not record (ITL from lifecycle records) are left out."""
    rows = []
    keys = [(f"{stat}_{m}_ms", f"{name} {label} (ms)") for m, name in METRICS for stat, label in STATS] + RATES
    for key, label in keys:
        vals = np.array([np.nan if r.get(key) is None else r[key] for r in reals], dtype=float)
        if np.isnan(vals).any():
            continue  # not recorded by the real run (ITL in lifecycle records)
        if sim.get(key) is None or not np.isfinite(sim[key]):  # the simulation lacks what the real run has: a miss
            rows.append({"metric": label, "real": float(np.median(vals)), "real_spread": None, "sim": np.nan,
                         "error": np.nan})
            continue
        med = float(np.median(vals))
        spread = float(np.ptp(vals) / med) if len(vals) > 1 and med else None
        s = float(sim[key])
        rows.append({"metric": label, "real": med, "real_spread": spread, "sim": s,  # 0 against 0 is a match
                     "error": (s - med) / med if med else (0.0 if s == 0 else np.inf)})
    return pd.DataFrame(rows)


RESOLUTION_MS = 1.0  # a latency statistic below this in the real run is about 0: its relative error says nothing


def mean_abs_error(table: pd.DataFrame, column: str = "error") -> float | None:
    """The mean |relative error| over the statistics, leaving out latencies the real run measured as about 0 (a
    queue time of 0.004 ms against a simulated 26 ms is an error of 5,900x, which alone would be the mean)."""
    errors = table.loc[judged(table), column].abs()
    return float(errors.mean()) if errors.notna().any() else None


def judged(table: pd.DataFrame) -> pd.Series:
    """The statistics a relative error says something of: not a latency the real run measured below 1 ms."""
    return ~(table["metric"].str.endswith("(ms)") & (table["real"].abs() < RESOLUTION_MS))


def failures(table: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """Statistics beyond the tolerance (and the real runs' own spread); a latency the real run measured below 1 ms
    is judged to that resolution instead, a miss only where the simulation's is 1 ms or more away (r154: a queue
    p50 of 0.004 ms failed against 0.01 ms, at any tolerance; against 18 ms it is a miss)."""
    allowed = tolerance + table["real_spread"].fillna(0.0)
    relative = judged(table)
    missed = ~(table["error"].abs() <= allowed)
    coarse = ~((table["sim"] - table["real"]).abs() < RESOLUTION_MS)
    return table[(relative & missed) | (~relative & coarse)]


SIM_COLUMNS = ["status", "arrival_time", "prompt_tokens", "output_tokens", "ttft", "tpot", "e2el", "queue_time"]


def _say_sim_in_sample(path: Path, profile, run: RealRun) -> None:
    """A SIM simulated with a profile fitted to the run compared: its verdict is in sample, as with --profile
    (r169: said only there)."""
    from servesim.calibration.serving_fidelity import fitted_on
    from servesim.simulator.config import say_once
    from servesim.simulator.cost_model import Profile

    if not isinstance(profile, dict) or not profile.get("fitted"):
        return
    try:
        how = fitted_on(Profile(**profile), run)
    except (ConfigError, ValueError, TypeError):  # a record that is no profile: nothing to say of it
        return
    if how:
        say_once([f"servesim: warning: {path} was simulated with profile {profile.get('name')}, which {how}: this "
                  f"comparison is in sample (validate serving --leave-one-out scores runs a fit did not see)"])


def _sim_from_dir(path: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame | None]:
    try:
        summary = json.loads((path / "summary.json").read_text())
        requests = pd.read_parquet(path / "requests.parquet")
        steps = pd.read_parquet(path / "steps.parquet") if (path / "steps.parquet").is_file() else None
    except Exception as exc:  # pyarrow raises its own kinds for a damaged file
        raise ConfigError(str(path), f"not a servesim results folder (summary.json, requests.parquet): "
                                     f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    missing = [c for c in SIM_COLUMNS if c not in requests.columns]
    if not isinstance(summary, dict) or missing or not len(requests):
        raise ConfigError(str(path), f"not a servesim results folder: summary.json must be an object and "
                                     f"requests.parquet hold requests with {', '.join(missing or SIM_COLUMNS)}")
    _check_sim_values(path, requests)
    said = summary.get("cost_model_warnings", [])
    if not isinstance(said, list) or not all(isinstance(w, str) for w in said):  # (r149: an internal error)
        raise ConfigError(str(path), "summary.json: cost_model_warnings must be a list of texts: a damaged results "
                                     "folder")
    if steps is not None and summary.get("num_steps") != len(steps):  # (r149: another run's steps were read)
        raise ConfigError(str(path), f"steps.parquet holds {len(steps):,} steps where summary.json counts "
                                     f"{summary.get('num_steps')!r:.20}: a damaged results folder")
    statuses = requests["status"].value_counts()
    others = [str(k) for k in statuses.index if k not in ("finished", "rejected")]
    told = {k: summary.get(k) for k in ("completed", "failed")}
    held = {"completed": int(statuses.get("finished", 0)), "failed": int(statuses.get("rejected", 0))}
    if others and not (isinstance(summary.get("unfinished"), int) and summary["unfinished"] > 0) or \
            not others and told != held:  # the run's table was edited: a request would be dropped or miscounted
        raise ConfigError(str(path), f"requests.parquet holds {', '.join(f'{n:,} {k}' for k, n in statuses.items())} "
                                     f"request(s), where summary.json counts {told['completed']} completed and "
                                     f"{told['failed']} failed: a damaged results folder")
    read = ["start", "end", "num_running", "num_waiting", "kv_usage"]
    if steps is not None and not set(read) <= set(steps.columns):
        steps = None  # the timeline is left out
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    for col in read + ["replica"] if steps is not None else []:  # (r149: text was an internal error, deep inside)
        if col in steps and (not is_numeric_dtype(steps[col]) or is_bool_dtype(steps[col])):
            raise ConfigError(str(path), f"steps.parquet: {col} must be numbers: a damaged results folder")
    unfinished = summary.get("unfinished")
    if isinstance(unfinished, int) and unfinished > 0:  # their lengths are what they reached, their latencies none
        raise ConfigError(str(path), f"a cut simulation (simulation.max_sim_time_s) left {unfinished:,} request(s) "
                                     f"unfinished: a comparison needs every request finished; simulate without the cut")
    return summary, requests, steps


def _check_sim_values(path: Path, requests: pd.DataFrame) -> None:
    """A damaged table is no simulation to judge by: times finite and >= 0 (a finished request's latencies; a
    TPOT may be missing where one token was made), counts >= 0 (the real side's records are held to the same)."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    done = requests["status"] == "finished"
    for column in ("arrival_time", "prompt_tokens", "output_tokens", "ttft", "e2el", "queue_time", "tpot"):
        if not is_numeric_dtype(requests[column]) or is_bool_dtype(requests[column]):  # (r149: text read as
            raise ConfigError(str(path), f"requests.parquet: {column} must be numbers")  # numbers, then a TypeError)
        values = (requests[column] if column in ("arrival_time", "prompt_tokens", "output_tokens")
                  else requests.loc[done, column]).to_numpy(float)
        bad = ~(np.isfinite(values) & (values >= 0))
        if column == "tpot":
            bad &= ~np.isnan(values)
        if column.endswith("_tokens"):  # a count (r150: 12.7 tokens were truncated to 12 unsaid)
            bad |= np.isfinite(values) & (values != np.floor(values))
        if bad.any():
            raise ConfigError(str(path), f"requests.parquet: {column} must be finite and >= 0 (for each finished "
                                         f"request){', whole numbers' if column.endswith('_tokens') else ''}, got "
                                         f"{values[bad][0]:g} in {int(bad.sum()):,} row(s): a damaged results folder")
    f = requests.loc[done]  # a request's queue before its first token, its first token before its last (r149)
    for early, late in (("queue_time", "ttft"), ("ttft", "e2el")):
        off = (f[early] > f[late] + 1e-9).to_numpy()
        if off.any():
            raise ConfigError(str(path), f"requests.parquet: {early} after {late} in {int(off.sum()):,} finished "
                                         f"request(s): a damaged results folder")
    _check_sim_derived(path, f)


SIM_TIMES = {"queue_time": "first_scheduled_time", "ttft": "first_token_time", "e2el": "finish_time"}


def _check_sim_derived(path: Path, f: pd.DataFrame) -> None:
    """A finished request's latencies as simulator/metrics.py derives them: its time column less its arrival, TPOT
    from those (r165: e2el x10 was compared, 1,045,671 ms beside the summary's 104,567). A float's rounding is
    allowed for (a microsecond, and 1e-9 of the time), not an edit; a table without the times is not checked."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    arrival = f["arrival_time"].to_numpy(float)
    for column, time in SIM_TIMES.items():
        if time not in f:
            continue
        if not is_numeric_dtype(f[time]) or is_bool_dtype(f[time]):
            raise ConfigError(str(path), f"requests.parquet: {time} must be numbers: a damaged results folder")
        stamp = f[time].to_numpy(float)
        _say_derived(path, column, f"{time} - arrival_time", f[column].to_numpy(float), stamp - arrival, stamp)
    out = f["output_tokens"].to_numpy(float)
    many = out > 1
    e2el, ttft = (f[c].to_numpy(float)[many] for c in ("e2el", "ttft"))
    _say_derived(path, "tpot", "(e2el - ttft) / (output_tokens - 1)", f["tpot"].to_numpy(float)[many],
                 (e2el - ttft) / (out[many] - 1), e2el)


def _say_derived(path: Path, column: str, how: str, got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> None:
    off = ~(np.abs(got - want) <= 1e-6 + 1e-9 * np.abs(scale))  # NaN: off too
    if off.any():
        i = int(off.argmax())
        raise ConfigError(str(path), f"requests.parquet: {column} is not {how} in {int(off.sum()):,} finished "
                                     f"request(s) ({got[i]:.6g} s where the times give {want[i]:.6g} s): a damaged "
                                     f"results folder")


def _lengths_said(lengths: list) -> str:
    """A few (prompt, output) pairs, as a message names them."""
    return ", ".join(f"({p:,}, {o:,})" for p, o in lengths[:3]) + (f" and {len(lengths) - 3:,} more"
                                                                   if len(lengths) > 3 else "")


def _check_given_sim(path: Path, requests: pd.DataFrame, run: RealRun) -> None:
    """A given simulation must be of the run's arrivals (else refused, as other lengths are); another model or GPU
    than the run records, where its config.yaml says, is warned of: the verdict would compare two deployments."""
    from servesim.simulator.config import load_scenario_file, say_once

    real = sorted((s.arrival_time, s.prompt_tokens, s.output_tokens) for s in run.specs)
    sim = sorted(zip(requests["arrival_time"].to_numpy(float).tolist(), requests["prompt_tokens"].astype(int).tolist(),
                     requests["output_tokens"].astype(int).tolist()))
    real_t, sim_t = (np.array([t for t, _, _ in x]) for x in (real, sim))
    real_t, sim_t = real_t - real_t[0], sim_t - sim_t[0]
    tol = 1e-3 + 1e-6 * np.abs(real_t)
    off = np.abs(real_t - sim_t) > tol
    if off.any():
        i = int(off.argmax())
        raise ConfigError("SIM", f"{path} simulated other arrival times than {run.path}: its request {i + 1} (in "
                                   f"arrival order) arrives at {sim_t[i]:.3f} s, the run's at {real_t[i]:.3f} s "
                                   f"(from the first); simulate the run's own arrivals (compare without SIM does)")
    sim = list(sim)  # each arrival with its own request's lengths (r134: the lengths re-paired to other arrivals
    for i, (_, p, o) in enumerate(real):  # passed, each list checked apart): requests arriving within the
        if sim[i][1:] != (p, o):  # tolerance may come in either order
            j = i + 1  # the simulation's arrivals are the run's, sorted: a swap lies within the tolerance
            while j < len(sim) and sim_t[j] - real_t[i] <= tol[i] and sim[j][1:] != (p, o):
                j += 1
            if j == len(sim) or sim[j][1:] != (p, o) or sim_t[j] - real_t[i] > tol[i]:
                raise ConfigError("SIM", f"{path} simulated other requests at the run's arrival times: its request "
                                           f"{i + 1} (in arrival order, at {sim_t[i]:.3f} s) has {sim[i][1]:,} prompt "
                                           f"and {sim[i][2]:,} output tokens, the run's {p:,} and {o:,}; simulate the "
                                           f"run's own requests (compare without SIM does)")
            sim[i], sim[j] = sim[j], sim[i]
            sim_t[i], sim_t[j] = sim_t[j], sim_t[i]
    try:
        data = load_scenario_file(path / "config.yaml") if (path / "config.yaml").is_file() else {}
        unread = "" if data else "has an empty config.yaml" if (path / "config.yaml").is_file() else \
            "has no config.yaml"
    except ConfigError as exc:
        data, unread = {}, f"has a config.yaml servesim cannot read ({exc.message[:80]})"
    if unread:  # nothing to check against: said, not passed as checked (r178: a SIM of max_num_seqs 4, unsaid)
        say_once([f"servesim: warning: {path} {unread}: its settings (model, GPU, engine) were not checked "
                  f"against what {run.path} records"])
    _say_sim_in_sample(path, data.get("profile"), run)
    from servesim.simulator.model_arch import HF_IDS

    def simulated(key: str):  # the setting in the simulation's config.yaml (a model by its name), else None
        node = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        node = node.get("name") if key == "model" and isinstance(node, dict) else node
        return str(node).lower() if isinstance(node, bool) else node

    recorded = dict(s.split("=", 1) for s in run.sets)  # every engine setting the run records (r134: a SIM at
    recorded.setdefault("hardware.gpu", None)  # TP 2 and max_num_seqs 16 of a TP 1, 128 run said nothing)
    said = [(k, v, recorded[k]) for k in recorded if (v := simulated(k)) is not None and recorded[k] is not None
            and str(v) not in (recorded[k], HF_IDS.get(recorded[k]))]
    say_once([f"servesim: warning: {path} simulated {k}={v}, but {run.path} records {k}={r}: the verdict compares "
              f"two deployments" for k, v, r in said])


def _finite_or_none(x) -> float | None:
    """JSON has no NaN or infinity: an error that is none (no simulated value) or infinite (a real 0) is null."""
    return float(x) if x is not None and np.isfinite(x) else None


def is_results_dir(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "summary.json").is_file() and (p / "requests.parquet").is_file()


def sim_timeseries(steps: pd.DataFrame, seconds: np.ndarray) -> pd.DataFrame:
    """Engine state as vLLM's once-a-second logger sees it: each engine's last step that started before each tick
    (none running once that step has ended: an idle engine, as `plot --kind timeline` draws it), and over engines
    (data-parallel ranks, replicas) the running and waiting summed and the KV usage averaged, as its aggregated
    logger does; an engine yet to step counts as idle, a tick before any step is NaN."""
    columns = (("running", "num_running", False), ("waiting", "num_waiting", False), ("kv_cache_pct", "kv_usage", True))
    totals = {col: np.zeros(len(seconds)) for col, _, _ in columns}
    stepped = np.zeros(len(seconds), dtype=bool)
    engines = [mine for _, mine in steps.groupby("replica", sort=True)] if "replica" in steps else [steps]
    for mine in engines:
        idx = np.searchsorted(mine["start"].to_numpy(), seconds, side="right") - 1
        ok = idx >= 0
        stepped |= ok
        busy = ok.copy()
        busy[ok] = mine["end"].to_numpy()[idx[ok]] >= seconds[ok]
        for col, src, _ in columns:
            where = busy if col == "running" else ok
            totals[col][where] += mine[src].to_numpy()[idx[where]]
    out = pd.DataFrame({"t": seconds})
    for col, _, mean in columns:
        vals = totals[col] * 100.0 / max(len(engines), 1) if mean else totals[col]
        out[col] = np.where(stepped, vals, np.nan)
    return out


MAX_EXTRA_TICKS = 100_000  # a simulation draining far past the real run is drawn this many ticks on at most


def ticks_through(seconds: np.ndarray, end: float) -> np.ndarray:
    """The real run's logger ticks, continued at its spacing to the simulation's last step: a simulation that
    drains later is drawn to its end, not cut where the real run's log ends."""
    last = seconds.max(initial=-np.inf)
    gap = float(np.median(np.diff(np.sort(seconds)))) if len(seconds) > 1 else 1.0
    if not (np.isfinite(last) and end > last and gap > 0):
        return seconds
    more = min(int((end - last) / gap) + 1, MAX_EXTRA_TICKS)
    return np.concatenate([seconds, last + gap * np.arange(1, more + 1)])


def panels(path: Path, title: str, plots: list[tuple[str, str, list[tuple[str, np.ndarray, np.ndarray]]]],
           ylabel: str | None = None) -> Path:
    """One figure of side-by-side panels, each (title, x label, [(legend, x, y), ...]), saved to path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servesim.simulator.plots import plain

    fig, axes = plt.subplots(1, len(plots), figsize=(4.6 * len(plots), 3.8))
    for ax, (name, xlabel, lines) in zip(np.atleast_1d(axes), plots):
        for label, x, y in lines:
            ax.plot(x, y, label=label)
        ax.set_xlabel(xlabel)
        if ylabel:
            ax.set_ylabel(ylabel)
        ax.set_title(plain(name))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(figure_title(title, len(plots)))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def figure_title(title: str, panel_count: int) -> str:
    """A title wrapped to the width of panel_count panels (about 9 characters an inch): a run named by a long path
    ran past both edges (r162); a word longer than a line is broken too."""
    from servesim.simulator.plots import plain

    return textwrap.fill(plain(title), width=int(9 * 4.6 * panel_count), break_long_words=True)


def _cdf(label: str, values) -> tuple[str, np.ndarray, np.ndarray]:
    x = np.sort(np.asarray(values, dtype=float)[~np.isnan(np.asarray(values, dtype=float))] * 1000)
    return label, x, np.arange(1, x.size + 1) / max(x.size, 1)


def plot_comparison(run: RealRun, sim_requests: pd.DataFrame, sim_itls: np.ndarray | None,
                    steps: pd.DataFrame | None, out: Path, stem: str) -> list[Path]:
    """CDFs of every per-request metric the real run has, and the engine state over time where it was logged."""
    done = sim_requests[sim_requests["status"] == "finished"]
    done = done.assign(prefill=done["ttft"] - done["queue_time"])  # as the real runs record it
    cdfs = []
    for col, name in METRICS:
        if col == "itl":
            if run.itls is not None and sim_itls is not None:
                cdfs.append((name, f"{name} (ms)", [_cdf("real", run.itls), _cdf("servesim", sim_itls)]))
        elif run.requests[col].notna().any():
            cdfs.append((name, f"{name} (ms)", [_cdf("real", run.requests[col]), _cdf("servesim", done[col])]))
    paths = [panels(out / f"cdf-{stem}.png", f"{run.name}: per-request CDFs", cdfs, ylabel="fraction")]
    if run.timeseries is not None and steps is not None and len(steps):
        ts = run.timeseries
        sim = sim_timeseries(steps, ticks_through(ts["t"].to_numpy(float), float(steps["end"].max())))
        cols = [c for c in ("running", "waiting", "kv_cache_pct") if c in ts.columns and ts[c].notna().any()
                and not (c == "kv_cache_pct" and (ts[c] == 0).all())]  # a logger that never filled KV usage in
        if not cols:  # a timeline with no value left to draw: the per-request comparison stands without it
            print(f"servesim: warning: {run.name}: timeseries.csv holds no running, waiting or KV value: no "
                  f"timeline plot", file=sys.stderr)
            return paths
        paths.append(panels(out / f"timeline-{stem}.png", f"{run.name}: engine state once a second",
                            [(c.replace("_pct", " (%)"), "time (s)", [("real", ts["t"], ts[c]),
                                                                       ("servesim", sim["t"], sim[c])])
                             for c in cols]))
    return paths


REPEAT_SPAN = 0.1  # open-loop repeats of one workload send it over arrival spans within 10% of each other


def _check_repeats(real_paths: list[str], runs: list) -> None:
    """Several runs are repeats of one deployment and one workload, each given once; their differences are spread."""
    first = runs[0]
    seen, contents = set(), {}
    for p, r in zip(real_paths, runs):  # one run given twice (under any of its names) would be its own repeat
        if r.identity in seen:
            raise ConfigError(str(p), "given twice (the same records under another name): give each repeat once")
        seen.add(r.identity)
    device = lambda r: (r.meta.get("hardware") or {}).get("device_name") if isinstance(r.meta.get("hardware"), dict) else None  # noqa: E731
    for r in runs[1:]:  # repeats of one deployment: the same recorded settings and GPU
        mine, theirs = ({x for x in run.sets if not x.startswith("engine.num_gpu_blocks_override=")}
                        for run in (first, r))  # the pool the profiler found varies a little between repeats
        if mine != theirs or device(r) != device(first):
            theirs = sorted(mine ^ theirs) or [f"GPU {device(r)} against {device(first)}"]
            shown = ", ".join(theirs[:6]) + (f" and {len(theirs) - 6} more" if len(theirs) > 6 else "")
            raise ConfigError(str(r.path), f"not a repeat of {first.path}: it records other settings "
                                           f"({shown}); its differences would count as spread")
    span = lambda r: max(s.arrival_time for s in r.specs) - min(s.arrival_time for s in r.specs)  # noqa: E731
    for r in runs[1:]:  # repeats of one workload: the same requests, sent at the same rate
        if [(s.prompt_tokens, s.output_tokens) for s in r.specs] != \
                [(s.prompt_tokens, s.output_tokens) for s in first.specs]:
            raise ConfigError(str(r.path), f"not a repeat of {first.path}: its requests differ (count, prompt or "
                                           f"output lengths); compare one workload's repeats at a time")
        for key in ("request_rate", "max_concurrency", "burstiness"):  # the client's settings, where recorded
            if key in r.meta and key in first.meta and str(r.meta[key]) != str(first.meta[key]):
                raise ConfigError(str(r.path), f"not a repeat of {first.path}: its client sent it at {key} "
                                               f"{r.meta[key]}, the first run's {first.meta[key]} (another workload)")
        closed = any(str(x.meta.get("max_concurrency")) not in ("None", "0") for x in (r, first))
        burst = any(str(x.meta.get("request_rate")).lower() == "inf" for x in (r, first))  # r136: the span of
        # a burst is its client's launch jitter
        if not (closed or burst) and abs(span(r) - span(first)) > REPEAT_SPAN * max(span(first), 1.0):  # r134: 4x
            # slower was a "repeat"; a closed loop's span is its server's speed (r135: refused real repeats)
            raise ConfigError(str(r.path), f"not a repeat of {first.path}: its requests arrive over {span(r):.1f} s, "
                                           f"the first run's over {span(first):.1f} s (another request rate is "
                                           f"another workload; repeats differ by their clients' jitter)")
    for p, r in zip(real_paths, runs):  # a copy of a run is no repeat either: its spread would be 0
        if (digest := r.content) is not None:
            if digest in contents:
                raise ConfigError(str(p), f"holds the same records, byte for byte, as {contents[digest]}: a copy of "
                                          f"one run is no repeat; give each measured run once")
            contents[digest] = p


def _say_prefixes_unread(workload, scenario: str | None) -> None:
    """A scenario's shared prefixes are not in a result file, and compare simulates the run's own requests: said,
    with the way to give them (r150: servesim's own prefix_repetition run compared +89% TTFT against itself)."""
    from servesim.simulator.config import say_once

    if getattr(workload, "shared_prefix", None) is not None or getattr(workload, "type", None) == "sessions":
        say_once([f"servesim: warning: the {workload.type} workload's shared prefixes (--scenario {scenario}) have no "
                  f"effect: a run's records hold none, and its own requests are simulated; give --trace FILE (the "
                  f"trace it replayed, or `servesim workload write {scenario} --out FILE.jsonl`) to simulate them"])


def compare_runs(real_paths: list[str], sim_dir: str | None, scenario: str | None, sets: list[str] | None,
                 tolerance: float, out: str | Path, command: list[str] | None = None,
                 trace: str | None = None, hash_block_tokens: int | None = None) -> tuple[pd.DataFrame, dict]:
    from servesim.calibration.validate import make_out_dir, write_command
    from servesim.simulator.files import refuse_link

    if not (tolerance > 0 and np.isfinite(tolerance)):
        raise ConfigError("--tolerance", f"must be a positive fraction (0.1 = 10%), got {tolerance}")
    runs = [read_run(p) for p in real_paths]
    for r in runs:
        r.need_requests()
    if trace:  # the trace the run replayed: its shared-prefix blocks, which a result file does not record
        from servesim.workloads.traces import read_trace

        sent = read_trace(trace, hash_block_tokens=hash_block_tokens)
        runs = [attach_prefixes(r, sent) for r in runs]
    _check_repeats(real_paths, runs)
    first = runs[0]
    # results never among what is compared: not beside a run's records either (its vllm/ folder)
    read = [f for r in runs for f in r.files() if f.exists()]
    rs = None if sim_dir else resolve_run(first, scenario, sets)  # the model or profile files it reads are inputs
    if rs is not None and not trace:
        _say_prefixes_unread(rs.scenario.workload, scenario)
    if rs is not None:  # a profile fitted to a run compared: said, as validate serving refuses it (r168: a PASS)
        from servesim.calibration.serving_fidelity import fitted_on
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: profile {rs.profile.name} {how}: this comparison is in sample (validate "
                  f"serving --leave-one-out scores runs a fit did not see)" for how in (fitted_on(rs.profile, r)
                                                                                        for r in runs) if how])
    out = make_out_dir(out, [*real_paths, *read, sim_dir, scenario, trace, *(rs.input_files() if rs else [])])
    source = None
    if sim_dir:
        summary, sim_requests, steps = _sim_from_dir(Path(sim_dir))
        from servesim.simulator.metrics import itls_from_tables

        try:
            sim_itls = itls_from_tables(sim_requests, steps)  # as the run had them (real runs' ITLs are compared)
        except (ValueError, TypeError, KeyError, IndexError) as exc:  # a table edited or cut since the run (r149:
            # a replica of floats or text, token runs of None, steps without `end`: internal errors)
            what = str(exc) if isinstance(exc, ValueError) else f"its tables do not read ({type(exc).__name__}: {exc})"
            raise ConfigError(str(sim_dir), f"{what}: a damaged results folder") from None
        rejected = int((sim_requests["status"] == "rejected").sum())
        if rejected:  # its rejected requests have no output: named, not read as another workload
            raise ConfigError("SIM", f"{sim_dir} rejected {rejected:,} of its {len(sim_requests):,} requests: "
                                       f"compare matches requests by their lengths and a rejected one has no latency "
                                       f"to match (a simulation without rejections is compared; without SIM, compare "
                                       f"simulates the run from its own record)")
        real_lengths = sorted((s.prompt_tokens, s.output_tokens) for s in first.specs)
        sim_lengths = sorted(zip(sim_requests["prompt_tokens"].astype(int).tolist(),
                                 sim_requests["output_tokens"].astype(int).tolist()))
        if real_lengths != sim_lengths:  # another workload's simulation would be compared as if it were this one
            if len(sim_lengths) != len(real_lengths):
                raise ConfigError("SIM", f"{sim_dir} simulated {len(sim_lengths):,} requests, not the "
                                         f"{len(real_lengths):,} of {real_paths[0]}")
            sim_only, real_only = sorted(set(sim_lengths) - set(real_lengths)), \
                sorted(set(real_lengths) - set(sim_lengths))
            raise ConfigError("SIM", f"{sim_dir} simulated other (prompt, output) lengths than {real_paths[0]}: "
                                     f"{_lengths_said(sim_only or sim_lengths)} where the run has "
                                     f"{_lengths_said(real_only or real_lengths)}")
        _check_given_sim(Path(sim_dir), sim_requests, first)
        source = summary.get("cost_model_source")
    else:
        refuse_link(out / "sim", "--out")  # a folder of servesim's own naming: never written through a link
        result = simulate_resolved(rs, first)
        clear_earlier(out, COMPARE_FILES, plot_file)  # no earlier comparison's table beside this simulation
        result.write(out / "sim")
        summary, sim_requests, steps, sim_itls = result.summary, result.requests, result.steps, result.itls
        source = rs.cost_model_source
    table = comparison_table([r.summary() for r in runs], request_summary(sim_requests, sim_itls))
    if sim_itls is None and table["metric"].str.startswith("ITL").any():  # a folder without its step table
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: {sim_dir} has no steps.parquet to time its tokens by: the ITL rows are left "
                  f"out (compare without the folder to judge them)"])
        table = table[~table["metric"].str.startswith("ITL")].reset_index(drop=True)
    elif not table["metric"].str.startswith("ITL").any():  # (r159: left out unsaid)
        from servesim.simulator.config import say_once

        say_once([f"servesim: note: {first.path} records each request's first and last token times, not each "
                  f"token's: the table has no ITL rows"])
    bad = failures(table, tolerance)
    table["pass"] = ~table.index.isin(bad.index)
    rejected = int(summary.get("failed") or 0)
    if rejected:  # every real request was served: a simulation refusing some fails, whatever its statistics
        row = {"metric": "requests rejected", "real": 0.0, "real_spread": None, "sim": float(rejected),
               "error": np.nan, "pass": False}
        table = pd.concat([table, pd.DataFrame([row])], ignore_index=True)
        bad = pd.concat([bad, pd.DataFrame([row])[bad.columns.intersection(row.keys())]], ignore_index=True)
    clear_earlier(out, COMPARE_FILES, plot_file)
    table.to_csv(out / "table.csv", index=False)
    plots = plot_comparison(first, sim_requests, sim_itls, steps, out, "comparison")
    report = {"real": [str(r.path) for r in runs], "format": first.kind, "requests": len(first.specs),
              "simulation": str(sim_dir) if sim_dir else str(out / "sim"), "cost_model_source": source,
              "cost_model_warnings": summary.get("cost_model_warnings", []), "tolerance": tolerance,
              "passed": bool(bad.empty), "failed_metrics": bad["metric"].tolist(),
              "mean_abs_error": _finite_or_none(mean_abs_error(table)), "plots": [p.name for p in plots]}
    (out / "summary.json").write_text(json.dumps(report, indent=2) + "\n")
    write_command(out, command)
    replace_written(out, [*COMPARE_FILES, *(p.name for p in plots)], plot_file)
    return table, report
