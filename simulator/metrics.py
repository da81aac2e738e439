"""Per-step and per-request records, and the run summary with `vllm bench serve` field names.

Definitions follow vLLM (v1/metrics/stats.py, benchmarks/serve.py): TTFT = first token
- arrival; ITL = gaps between consecutive tokens of a request; TPOT = (e2el - ttft) /
(output - 1) for outputs longer than one token; preemption time stays inside all of them.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

from servesim.simulator.arrow_columns import IntLists, write_parquet
from servesim.simulator.batch import SHAPE_FIELDS, BatchShape
from servesim.simulator.cost_model import extrapolation_warnings
from servesim.simulator.files import record_written, written_before
from servesim.simulator.records import STEP_COLUMNS, TYPECODES, RequestLog, StepLog
from servesim.simulator.request import FINISHED, REJECTED

if TYPE_CHECKING:
    import pandas as pd

def step_shapes(steps: pd.DataFrame) -> list[BatchShape]:
    """The cost model's input for each logged step."""
    cols = steps[SHAPE_FIELDS]
    return [BatchShape(*map(int, row)) for row in cols.itertuples(index=False)]


def latency_stats(prefix: str, values_s: np.ndarray, out: dict, percentiles=(90, 99),
                  weights: np.ndarray | None = None) -> None:
    """mean/median/std/pN of a latency in seconds, as `vllm bench serve` names them (ms). weights: how many
    times each value occurs (the ITLs, kept as distinct step gaps and their counts rather than one per token)."""
    ms = np.asarray(values_s, dtype=float) * 1000.0
    keys = ["mean", "median", "std"] + [f"p{p}" for p in percentiles]
    if ms.size == 0 or (weights is not None and not weights.sum()):
        out.update({f"{k}_{prefix}_ms": None for k in keys})
        return
    if weights is None:
        out[f"mean_{prefix}_ms"] = float(np.mean(ms))
        out[f"median_{prefix}_ms"] = float(np.median(ms))
        out[f"std_{prefix}_ms"] = float(np.std(ms))
        for p in percentiles:
            out[f"p{p}_{prefix}_ms"] = float(np.percentile(ms, p))
        return
    order = np.argsort(ms, kind="stable")
    ms = ms[order]
    weights = weights[order]  # sorted copies, one at a time (a million-request run has millions of distinct gaps)
    del order
    n = int(weights.sum())
    mean = float(np.dot(ms, weights) / n)
    out[f"mean_{prefix}_ms"] = mean
    out[f"std_{prefix}_ms"] = float(np.sqrt(np.dot(weights, (ms - mean) ** 2) / n))
    ends = np.cumsum(weights, out=weights)  # value i fills places ends[i - 1] .. ends[i] - 1 of the sorted expansion

    def at(q: float) -> float:  # numpy's default (linear) percentile of the expansion
        h = q * (n - 1)
        lo = int(np.floor(h))
        a, b = ms[np.searchsorted(ends, lo, side="right")], ms[np.searchsorted(ends, min(lo + 1, n - 1), side="right")]
        t = h - lo
        return float(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)
    out[f"median_{prefix}_ms"] = at(0.5)
    for p in percentiles:
        out[f"p{p}_{prefix}_ms"] = at(p / 100)


def measured_requests(sim, arrival_time: np.ndarray) -> np.ndarray | None:
    """The requests the summary measures: all (None), or those left after the warm-up and cool-down, by arrival
    time (the first warmup_s and last cooldown_s seconds of arrivals) and by count (the first and last N)."""
    if not sim.measures_a_window:
        return None
    from servesim.simulator.errors import ConfigError

    n = len(arrival_time)
    keep = np.ones(n, dtype=bool)
    if n:
        order = np.argsort(arrival_time, kind="stable")
        keep[order[:sim.warmup_requests]] = False
        if sim.cooldown_requests:
            keep[order[max(n - sim.cooldown_requests, 0):]] = False
        keep &= arrival_time >= arrival_time.min() + sim.warmup_s
        keep &= arrival_time <= arrival_time.max() - sim.cooldown_s
    if not keep.any():
        by_count = sim.warmup_requests + sim.cooldown_requests >= n
        raise ConfigError(_window_field(sim, by_count), f"the warm-up and cool-down ({_window_text(sim)}) leave none "
                                                        f"of the run's {n:,} requests measured (arrivals over "
                                                        f"{float(np.ptp(arrival_time)) if n else 0:g} s): shorten "
                                                        f"them or run longer")
    return keep


def _window_field(sim, by_count: bool) -> str:
    """The setting to name when the window leaves nothing: a count that alone does, else a time."""
    names = ("warmup_requests", "cooldown_requests") if by_count else ("warmup_s", "cooldown_s")
    return "simulation." + next((k for k in names if getattr(sim, k)), names[0])


def _window_text(sim) -> str:
    return ", ".join(f"{k} {getattr(sim, k):g}" for k in ("warmup_s", "cooldown_s", "warmup_requests",
                                                          "cooldown_requests") if getattr(sim, k))


def check_window(sim, planned: int | None) -> None:
    """Before a run: warm-up and cool-down counts that leave none of the planned requests (the times are known
    only once the requests arrive)."""
    from servesim.simulator.errors import ConfigError

    if planned is not None and sim.warmup_requests + sim.cooldown_requests >= planned:
        raise ConfigError(_window_field(sim, True), f"the warm-up and cool-down ({_window_text(sim)}) leave none of "
                                                    f"the run's {planned:,} requests measured: shorten them or run "
                                                    f"longer")


def concurrent_per_second(starts: np.ndarray, e2els: np.ndarray) -> int:
    """`vllm bench serve`'s max_concurrent_requests: each request counts in every whole second (from the first
    start) that its span [start, start + latency] touches; the most in one second. Up to one more than were ever
    in flight at once, as vLLM's is."""
    if not len(starts):
        return 0
    t0 = float(starts.min())
    first = np.floor(starts - t0).astype(np.int64)
    last = np.floor(starts + e2els - t0).astype(np.int64)
    # +1 where a span starts, -1 after it ends, summed at the seconds where something changes (a run's seconds
    # can number in the millions with two requests in them)
    seconds, at = np.unique(np.concatenate([first, last + 1]), return_inverse=True)
    change = np.bincount(at, weights=np.concatenate([np.ones(len(first)), -np.ones(len(last))]),
                         minlength=len(seconds))
    return int(np.rint(np.cumsum(change).max()))


def token_steps(runs: IntLists, step_offset: np.ndarray, lo: int = 0, hi: int | None = None):
    """Rows lo..hi of requests' runs of step indices, expanded into their tokens: (request row, step in the run's
    steps) arrays; step_offset: where each request's replica's steps begin."""
    hi = len(runs) if hi is None else min(hi, len(runs))
    b = runs.bounds
    seg = runs.values[b[lo]:b[hi]]
    if not len(seg):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = np.repeat(np.arange(lo, hi), np.diff(b[lo:hi + 1]) // 2)
    starts, stops = seg[0::2] + step_offset[rows], seg[1::2] + step_offset[rows]
    lengths = stops - starts + 1
    first = np.cumsum(lengths) - lengths
    pos = np.arange(lengths.sum()) - np.repeat(first, lengths) + np.repeat(starts, lengths)
    return np.repeat(rows, lengths), pos


class TokenTimes:
    """Every token's time, from each request's runs of steps and the steps' end times, expanded a block of
    requests at a time: one token costs tens of bytes expanded, and a run has millions of them. The summary
    needs the inter-token latencies only as a distribution: a gap inside a run is a step's gap to the step
    before (counted per step), the rest are few (counted one by one)."""

    BLOCK = 1 << 18  # tokens expanded at once (whole requests: at least one), some 20 MiB of arrays

    def __init__(self, runs: IntLists, offsets: np.ndarray, ends: np.ndarray, finished: np.ndarray,
                 prefill_runs: IntLists | None = None, prefill_offsets: np.ndarray | None = None):
        self.runs, self.offsets, self.ends, self.finished = runs, offsets, ends, finished
        # disaggregation: the prefill replicas' tokens, which the client never sees (for the engines' own counts)
        self.prefill_runs, self.prefill_offsets = prefill_runs, prefill_offsets

    def _row_blocks(self):
        """(lo, hi): rows of whole requests holding about BLOCK tokens together."""
        runs = self.runs
        pairs = np.zeros(len(runs.values) // 2 + 1, dtype=np.int64)
        np.cumsum(runs.values[1::2] - runs.values[0::2] + 1, out=pairs[1:])
        tokens = pairs[runs.bounds // 2]  # tokens of rows before each row
        lo = 0
        while lo < len(self.runs):
            hi = max(int(np.searchsorted(tokens, tokens[lo] + self.BLOCK, side="right")) - 1, lo + 1)
            yield lo, hi
            lo = hi

    def _blocks(self):
        """(rows, steps, times) of a block of requests' tokens, each request's in time order."""
        for lo, hi in self._row_blocks():
            rows, pos = token_steps(self.runs, self.offsets, lo, hi)
            yield rows, pos, self.ends[pos]

    def _gaps(self):
        """Per block: (request of each gap, step after and before it, the gap in seconds)."""
        for rows, pos, times in self._blocks():
            same = rows[1:] == rows[:-1]
            yield rows[1:][same], pos[1:][same], pos[:-1][same], np.diff(times)[same]

    def itls(self, unfinished: bool = False, only: np.ndarray | None = None) -> np.ndarray:
        """Finished requests' gaps between consecutive tokens (s), request by request: tokens x 8 bytes; with
        `unfinished`, a cut run's requests still running too (vLLM's engine observes every output); `only`: of
        these requests (a mask: a warm-up or cool-down's measured ones)."""
        keep = np.ones(len(self.finished), dtype=bool) if unfinished else np.asarray(self.finished, dtype=bool)
        if only is not None:
            keep = keep & only
        parts = [gap[keep[row]] for row, _, _, gap in self._gaps()]
        return np.concatenate(parts) if parts else np.zeros(0)

    def per_request(self):
        """(request row, its tokens' times in order) for every request with a token, in row order: what a
        client sees of each request (vLLM bench's per-request ITL lists)."""
        for rows, _, times in self._blocks():
            if not len(rows):
                continue
            cuts = np.flatnonzero(rows[1:] != rows[:-1]) + 1
            for part_rows, part in zip(np.split(rows, cuts), np.split(times, cuts)):
                yield int(part_rows[0]), part

    def distribution(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each request's longest gap (NaN without two tokens), and the finished requests' gaps as
        (distinct values, counts): the step gaps inside runs, then each gap across a break one by one."""
        ends = self.ends
        longest = np.full(len(self.runs), np.nan)
        per_step = np.zeros(len(ends), dtype=np.int32)  # a step's gap counts each request that decoded in it
        breaks = []
        for row, after, before, gap in self._gaps():
            np.fmax.at(longest, row, gap)
            done = self.finished[row]
            after, before, gap = after[done], before[done], gap[done]
            inside = after == before + 1  # ends[after] - ends[after - 1]: the step's gap, the same float
            counted = after[inside]
            if counted.size:  # over the block's span of steps, not all of them: no array of every step per block
                first = int(counted.min())
                span = np.bincount(counted - first)
                per_step[first:first + len(span)] += span
            breaks.append(gap[~inside])
        used = per_step > 0  # steps whose gap some token had (never the first: a gap has a step before)
        values = np.concatenate([np.diff(ends)[used[1:]], *breaks])  # ends[i] - ends[i - 1] of each used step i
        counts = np.concatenate([per_step[used].astype(np.int64), *(np.ones(len(b), dtype=np.int64) for b in breaks)])
        return longest, values, counts


RUN_FILES = ("config.yaml", "summary.json", "requests.parquet", "steps.parquet", "latency.png", "workload.jsonl")


# what a run writes only when asked (--plot, --prometheus, the vllm command): an earlier run's, left beside a new
# run's summary, would contradict it
OPTIONAL_RUN_FILES = ("latency.png", "metrics.prom", "prometheus.parquet", "vllm_command.json")

TEXT_COLUMNS = ("status", "slo_class", "finish_reason")  # the request columns of text (None where none)


class Computed:
    """A column computed from others a slice at a time, when read (a file's row group, a summary's sum): a run of
    millions of steps need not hold it. `[:]` gives the whole column."""

    def __init__(self, length: int, rows):
        self.length, self.rows = length, rows  # rows(lo, hi) -> that slice of the column

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, rows: slice) -> np.ndarray:
        lo, hi, step = rows.indices(self.length)
        if step != 1:
            raise IndexError("a computed column is read by contiguous slices")
        return self.rows(lo, hi)


def itls_from_tables(requests, steps) -> np.ndarray | None:
    """A written run's inter-token latencies (s), from requests.parquet's token runs and steps.parquet's step ends:
    what RunResult.itls gave before the run was written (compare reads a results folder so). None where a table
    lacks what they need."""
    need = {"token_runs", "replica", "status"}
    if steps is None or not need <= set(requests.columns) or not {"end", "replica"} <= set(steps.columns):
        return None
    step_replica = steps["replica"].to_numpy()
    if len(step_replica) and (step_replica.min() < 0 or (np.diff(step_replica) < 0).any()):
        raise ValueError("steps.parquet: its steps must be grouped by replica in order, as a run writes them")
    ends = steps["end"].to_numpy(float)
    if not np.isfinite(ends).all() or ((np.diff(ends) < 0) & (np.diff(step_replica) == 0)).any():
        raise ValueError("steps.parquet: each replica's step ends must be finite and in time order, as a run "
                         "writes them")
    engines = int(max(requests["replica"].max(), step_replica.max(initial=-1))) + 1
    counts = np.bincount(step_replica, minlength=engines)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    finished = (requests["status"] == FINISHED).to_numpy()
    lists, where = IntLists.from_lists(requests["token_runs"].tolist()), requests["replica"].to_numpy()
    if problem := _token_runs_problem(lists, where, counts):
        raise ValueError(f"requests.parquet: token_runs {problem}")
    return TokenTimes(lists, offsets[np.maximum(where, 0)], ends, finished).itls()


def _token_runs_problem(runs: IntLists, replica: np.ndarray, steps_of: np.ndarray) -> str | None:
    """Why a written run's token runs cannot be its steps' (a table edited or cut since: an index past its
    replica's steps read another request's times, or none), else None."""
    lengths = np.diff(runs.bounds)
    if (lengths % 2).any():
        return "must hold (first, last) step pairs"
    rows = np.repeat(np.arange(len(runs)), lengths // 2)
    first, last = runs.values[0::2], runs.values[1::2]
    held = np.where(replica[rows] >= 0, steps_of[np.clip(replica[rows], 0, len(steps_of) - 1)], 0)
    bad = (first < 0) | (last < first) | (last >= held)
    if bad.any():
        i = int(np.argmax(bad))
        return (f"names steps {first[i]}..{last[i]} of replica {replica[rows[i]]}, which steps.parquet holds "
                f"{held[i]:,} of")
    return None


def _step_columns(logs: list[StepLog], usable_blocks: list[int]) -> dict:
    """Every replica's steps, one after the other, as numpy columns: floats for times, counts as the log holds them
    (int32 where the settings keep them below 2^31; `RunResult.steps` and the file hold int64); the replica, the
    duration and the KV usage are computed from them when read."""
    def column(c: str) -> np.ndarray:  # one replica's is read in place (its log is done), several are joined
        parts = [np.frombuffer(log.cols[c], dtype=TYPECODES[log.cols[c].typecode]) for log in logs]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    cols = {c: column(c) for c in STEP_COLUMNS}
    n = len(cols["end"])
    starts = np.cumsum([0] + [len(log) for log in logs])  # each replica's first step

    def replica(lo: int, hi: int) -> np.ndarray:
        return (np.searchsorted(starts, np.arange(lo, hi), side="right") - 1).astype(np.int32)
    usable = np.asarray(usable_blocks, dtype=np.int64)
    cols["replica"] = Computed(n, replica)
    cols["duration"] = Computed(n, lambda lo, hi: cols["end"][lo:hi] - cols["start"][lo:hi])
    cols["kv_usage"] = Computed(n, lambda lo, hi: cols["kv_blocks_used"][lo:hi] / usable[replica(lo, hi)])
    return cols


def _request_columns(log: RequestLog, disaggregated: bool) -> dict:
    """The log's rows with the latencies vLLM's benchmark reports; prefill_token_runs and pulled_tokens only when
    disaggregated."""
    cols = log.columns()
    if not disaggregated:
        del cols["prefill_token_runs"], cols["pulled_tokens"]
    cols["queue_time"] = cols["first_scheduled_time"] - cols["arrival_time"]
    cols["ttft"] = cols["first_token_time"] - cols["arrival_time"]
    cols["e2el"] = cols["finish_time"] - cols["arrival_time"]
    out = cols["output_tokens"]
    cols["tpot"] = np.where(out > 1, (cols["e2el"] - cols["ttft"]) / np.maximum(out - 1, 1), np.nan)
    return cols


def _class_targets(cols: dict, slos: dict):
    """(a class's requests, their latencies in ms, the target) for every target each SLO class sets (vLLM: TPOT
    of a one-token answer counts as 0)."""
    tpot = np.nan_to_num(cols["tpot"], nan=0.0)
    classes = np.array(cols["slo_class"], dtype=object)
    for name, slo in slos.items():
        mine = classes == name
        for key, values in (("ttft_ms", cols["ttft"]), ("tpot_ms", tpot), ("e2el_ms", cols["e2el"])):
            if slo.get(key) is not None:
                yield mine, values * 1000, slo[key]


def _meets_slo(cols: dict, finished: np.ndarray, slos: dict) -> np.ndarray:
    """A request is good when it finished and meets every target its class sets. Requests without a class have
    no targets: good when finished."""
    good = finished.copy()
    for mine, ms, target in _class_targets(cols, slos):
        good &= ~mine | (ms <= target)
    return good


def slo_ratios(cols: dict, finished: np.ndarray, slos: dict) -> np.ndarray:
    """Each request's worst latency over its class's target (no class, or no target: 0; not finished: inf): at
    most 1 where _meets_slo calls it good, but for rounding at the edge."""
    ratio = np.where(finished, 0.0, np.inf)
    for mine, ms, target in _class_targets(cols, slos):
        mine = mine & finished
        ratio[mine] = np.maximum(ratio[mine], ms[mine] / target)
    return ratio


def _spec_decode(summary: dict, engines: list[dict | None]) -> dict:
    """vLLM's speculative-decoding figures beyond the token counts (vllm bench serve's, from the engines' counters):
    drafts proposed, tokens gained per draft (acceptance length) and each draft position's acceptance rate."""
    engines = [e for e in engines if e]
    drafts = sum(e["num_drafts"] for e in engines)
    if not drafts:
        return {}
    positions = np.sum([e["accepted_per_position"] for e in engines], axis=0)
    return {"spec_decode_num_drafts": drafts,
            "spec_decode_acceptance_length": 1 + summary["spec_decode_accepted_tokens"] / drafts,
            "spec_decode_per_position_acceptance_rates": [float(v) / drafts for v in positions]}


def _equal(a, b) -> bool:
    """Whether an edited config is still the run's: a value that cannot be compared (a numpy array) is an edit."""
    try:
        return bool(a == b)
    except Exception:  # numpy's ValueError (an array's truth), or any object's own __eq__
        return False


@dataclass
class RunResult:
    """A run's records as columns, with the tables (`requests`, `steps`) built as pandas frames on first use:
    a run that only writes its files never imports pandas."""

    config: dict
    request_columns: dict
    step_columns: dict
    tokens: TokenTimes
    summary: dict = field(default_factory=dict)
    given_requests: list | None = None  # requests given to simulate() rather than the scenario's workload
    inputs: list = field(default_factory=list)  # the files the run read: write() never replaces one
    cut: bool = False  # simulation.max_sim_time_s ended the run with events still to come
    unrepeatable: str | None = None  # a RequestSource given to simulate() that makes its requests as the run goes
    warnings: list = field(default_factory=list)  # what the run said once it ended (engine.run_warnings)
    speculation: list = field(default_factory=list)  # per engine, its spec-decode counters (speculation.counters)
    discarded_tokens: dict = field(default_factory=dict)  # step (all replicas' order) -> accepted tokens trimmed
    # step (all replicas' order) -> (running, KV usage) once its finished requests left, where any did (StepLog.after)
    step_after: dict = field(default_factory=dict)
    measured: np.ndarray | None = None  # the requests a warm-up or cool-down window leaves measured (None: all)
    _itls: np.ndarray | None = None
    _itl_distribution: tuple | None = None
    _requests: object = None
    _steps: object = None
    _summary_text: str | None = None  # summary.json as the run measured it: write() writes this, not later edits
    _config_as_run: dict | None = None  # config.yaml as the run was simulated: the same, for `config` (r130)

    def __getstate__(self) -> dict:
        """Pickled (to another process, a cache) with its computed columns as arrays: they read the run's own
        columns through closures, which pickle cannot carry."""
        state = dict(self.__dict__)
        for name in ("request_columns", "step_columns"):
            state[name] = {c: v[:] if isinstance(v, Computed) else v for c, v in state[name].items()}
        return state

    @property
    def itl_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Every finished request's ITLs as (distinct values, counts), computed again when asked for (a run of
        millions of steps does not keep them). The summary's ITL figures read these, but under a warm-up or
        cool-down window (simulation.warmup_s, ...) only the measured requests' gaps (`measured`) (r160)."""
        if self._itl_distribution is None:
            self._itl_distribution = self.tokens.distribution()[1:]
        return self._itl_distribution

    @property
    def itls(self) -> np.ndarray:
        """Every finished request's inter-token gaps (s), request by request, built on first use."""
        if self._itls is None:
            self._itls = self.tokens.itls()
        return self._itls

    @property
    def requests(self) -> "pd.DataFrame":
        """One row per request (pandas), built on first use."""
        if self._requests is None:
            import pandas as pd

            self._requests = pd.DataFrame({c: v.tolist() if isinstance(v, IntLists) else v
                                           for c, v in self.request_columns.items()})
        return self._requests

    @property
    def steps(self) -> "pd.DataFrame":
        """One row per scheduler step of every replica (pandas), built on first use."""
        if self._steps is None:
            import pandas as pd

            whole = {c: v[:] for c, v in self.step_columns.items()}
            self._steps = pd.DataFrame({c: v.astype(np.int64) if v.dtype == np.int32 else v  # counts: int64
                                        for c, v in whole.items()})
        return self._steps

    @property
    def num_requests(self) -> int:
        return len(self.request_columns["request_id"])

    def in_flight(self) -> int:
        """Requests arrived but neither finished nor rejected (a cut's), over the whole run: the summary's
        `unfinished` counts only the measured ones when a warm-up or cool-down is left out."""
        return sum(s not in (FINISHED, REJECTED) for s in self.request_columns["status"])

    def goodput_use(self, share: float) -> float | None:
        """How much of its class's targets the request at the goodput share's place uses (its worst latency over
        the target): at most 1 exactly where that share of the ended requests meets them, smaller the more room
        the load leaves (recommend's headroom under a goodput SLO: the share of misses alone is 0 while none
        miss, whatever the room). None without SLO classes or ended requests."""
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            from servesim.simulator.errors import ConfigError

            raise ConfigError("share", f"a share of the ended requests, in (0, 1], got {share!r}")
        slos = self.config["workload"].get("slo_classes")
        if not slos:
            return None
        cols = self.request_columns
        finished = np.fromiter((s == FINISHED for s in cols["status"]), dtype=bool, count=self.num_requests)
        ended = finished | np.fromiter((s == REJECTED for s in cols["status"]), dtype=bool, count=len(finished))
        if self.measured is not None:
            ended &= self.measured
        ratios = np.sort(slo_ratios(cols, finished, slos)[ended])
        if not len(ratios):
            return None
        k = math.ceil(share * len(ratios))  # the fewest good requests whose share, as the summary divides it, is met
        while k > 1 and (k - 1) / len(ratios) >= share:
            k -= 1
        while k < len(ratios) and k / len(ratios) < share:
            k += 1
        return float(ratios[max(k, 1) - 1])

    @classmethod
    def collect(cls, rs, requests: RequestLog, logs: list[StepLog], usable_blocks: list[int],
                sim_end: float, speculation: list[dict | None] | None = None,
                turns_never_sent: int | None = None, arrivals_left: bool = False) -> "RunResult":
        """turns_never_sent: a session workload's turns after a rejected one (its session ended), in no other count:
        a summary key, as shedding that ends sessions leaves them out of goodput_fraction's requests (r128).
        arrivals_left: a cut (max_sim_time_s) came before every request arrived, so the rates run to it."""
        steps = _step_columns(logs, usable_blocks)
        offsets = np.cumsum([0] + [len(log) for log in logs])
        ends = steps["end"]
        req = _request_columns(requests, bool(rs.scenario.cluster.prefill_replicas))
        finished = np.array([s == FINISHED for s in req["status"]], dtype=bool)
        prefill = req.get("prefill_token_runs")
        pre = None
        if prefill is not None and prefill.bounds[-1]:  # disaggregation: a prefill replica's discarded tokens
            pre = offsets[np.maximum(req["prefill_replica"], 0)]
        tokens = TokenTimes(req["token_runs"], offsets[req["replica"]], ends, finished,
                            prefill if pre is not None else None, pre)
        req["max_itl"], itl_values, itl_counts = tokens.distribution()
        measured = measured_requests(rs.scenario.simulation, req["arrival_time"])
        if measured is not None:  # the steady state's gaps: those of the measured requests only
            _, itl_values, itl_counts = TokenTimes(req["token_runs"], offsets[req["replica"]], ends,
                                                   finished & measured).distribution()
        slos = getattr(rs.scenario.workload, "slo_classes", None)
        if slos:
            req["good"] = _meets_slo(req, finished, {k: v.model_dump() for k, v in slos.items()})
        result = cls(rs.as_dict(), req, steps, tokens)
        result._config_as_run = copy.deepcopy(result.config)  # a notebook edits `config` to make the next scenario
        result.measured = measured
        result.inputs = rs.input_files()
        result.speculation = speculation or []
        result.discarded_tokens = {int(offsets[i]) + step: n for i, log in enumerate(logs)
                                   for step, n in log.discarded_tokens.items()}
        result.step_after = {int(offsets[i]) + step: (running, used / usable_blocks[i]) for i, log in enumerate(logs)
                             for step, (running, used) in log.after.items()}
        c, dp = rs.scenario.cluster, rs.scenario.engine.data_parallel_size
        prefill_only = c.prefill_replicas  # the first replicas, when disaggregated
        # the DP ranks no API server reaches (cluster.dp_ranks_reached): idle by design, not imbalance (r163)
        unreached = [d * dp + r for d in range(c.replicas) for r in range(c.dp_ranks_reached or dp, dp)] \
            if not prefill_only and dp > 1 else []
        result.summary = result._summarize(finished, sim_end, len(logs), prefill_only, (itl_values, itl_counts),
                                           measured, unreached, arrivals_left)
        del itl_values, itl_counts
        result.summary |= _spec_decode(result.summary, result.speculation)
        result.summary["cost_model_source"] = rs.cost_model_source  # which profile, and how it was chosen
        largest = {"max_tokens": steps["scheduled_tokens"].max(), "max_seqs": steps["num_seqs"].max(),
                   "max_decode_context_tokens": steps["decode_context_tokens"].max()} if len(ends) else {}
        result.summary["cost_model_warnings"] = extrapolation_warnings(rs.profile, largest)
        if turns_never_sent is not None:
            result.summary["turns_never_sent"] = turns_never_sent
        result._summary_text = json.dumps(result.summary, indent=2) + "\n"
        return result

    def _summarize(self, finished: np.ndarray, sim_end: float, replicas: int = 1, prefill_only: int = 0,
                   itl: tuple | None = None, measured: np.ndarray | None = None, unreached: list[int] = (),
                   arrivals_left: bool = False) -> dict:
        """vLLM's benchmark figures plus servesim's; with several replicas, busy_fraction is the mean
        replica's, and completions count the replicas where requests finish: not the first `prefill_only`
        ones, which hand every request on; their imbalance leaves out the `unreached` DP ranks, too. With
        `measured` (a warm-up or cool-down left out), every request figure is over the measured requests; step
        figures stay the run's."""
        req, steps = self.request_columns, self.step_columns
        rejected = np.fromiter((s == REJECTED for s in req["status"]), dtype=bool, count=len(finished))
        done_at = req["finish_time"][finished]  # every completion, measured or not: the service rate's
        if measured is not None:
            finished, rejected = finished & measured, rejected & measured
        scope = measured if measured is not None else np.ones(len(finished), dtype=bool)
        n = int(scope.sum())
        ended = finished | rejected
        arrivals = req["arrival_time"][scope]
        start = float(arrivals.min()) if n else 0.0
        completed = int(finished.sum())
        unfinished = n - completed - int(rejected.sum())
        # until every request has its answer, as vLLM's client waits for them all: a completion, or a refusal
        # (answered when it arrives); a run cut short (max_sim_time_s) ran until the cut: its rates are over that,
        # with requests in flight or still to arrive (r177: those never arrived were not counted a cut)
        end = max(float(req["finish_time"][finished].max()), float(req["arrival_time"][rejected].max(initial=0.0))) \
            if completed and not unfinished and not arrivals_left else sim_end
        duration = max(end - start, 1e-12)
        s: dict = {
            "duration": duration,
            "completed": completed,
            "failed": int(rejected.sum()),
            "unfinished": unfinished,
            "total_input_tokens": int(req["prompt_tokens"][finished].sum()),
            "total_output_tokens": int(req["output_tokens"][finished].sum()),
        }
        s["request_throughput"] = s["completed"] / duration  # the achieved rate
        span = float(arrivals.max() - arrivals.min()) if n > 1 else 0.0
        # over the measured requests' arrival window: arrivals per second, and completions (of any request) per
        # second in it; a system that keeps up completes as fast as requests come (None: all at one instant)
        s["offered_rate"] = (n - 1) / span if span > 0 else None
        s["achieved_rate"] = float(((done_at >= start) & (done_at <= start + span)).sum()) / span if span > 0 else None
        s["measured_requests"] = n
        s["output_throughput"] = s["total_output_tokens"] / duration
        s["total_token_throughput"] = (s["total_input_tokens"] + s["total_output_tokens"]) / duration
        tpot = req["tpot"][finished]
        latency_stats("ttft", req["ttft"][finished], s)
        latency_stats("tpot", tpot[~np.isnan(tpot)], s)
        values, counts = itl if itl is not None else self.itl_distribution
        latency_stats("itl", values, s, weights=counts)
        latency_stats("e2el", req["e2el"][finished], s)
        latency_stats("queue_time", req["queue_time"][finished], s)
        s["max_itl_ms"] = float(values.max() * 1000) if values.size else None
        queries, hits = int(req["prefix_queries"][scope].sum()), int(req["prefix_hits"][scope].sum())  # tokens
        s["prefix_cache_queries"], s["prefix_cache_hits"] = queries, hits
        s["prefix_cache_hit_rate"] = hits / queries if queries else 0.0
        preemptions = req["num_preemptions"][scope]
        s["num_preemptions"] = int(preemptions.sum())
        s["preempted_requests"] = int((preemptions > 0).sum())
        s["max_preemptions_per_request"] = int(preemptions.max()) if n else 0
        # over the requests the engine took (finished, or left unfinished by a cut): a rejected one never ran (r170:
        # 128 shed requests were counted as never preempted)
        took = req["num_preemptions"][scope & ~rejected]
        s["preemptions_per_request"] = {str(k): int(v) for k, v in zip(*np.unique(took, return_counts=True))}
        s["recomputed_tokens"] = int(req["recomputed_tokens"][scope].sum())
        s["num_swaps"] = int(req["num_swaps"][scope].sum())
        s["swapped_blocks"] = int(steps["swapped_blocks"].sum())  # out and back in
        s["time_preempted_s"] = float(req["time_preempted"][scope].sum())
        drafts = int(steps["spec_drafts"].sum())
        if drafts:  # speculative decoding, in vLLM's terms
            s["spec_decode_draft_tokens"] = drafts
            s["spec_decode_accepted_tokens"] = int(steps["spec_accepted"].sum())
            s["spec_decode_acceptance_rate"] = s["spec_decode_accepted_tokens"] / drafts
        num_steps = len(steps["end"])
        s["num_steps"] = num_steps
        step_s, kv = steps["duration"][:], steps["kv_usage"][:]  # computed for the summary, let go of after
        busy = float(step_s.sum())
        s["kv_cache_usage_peak"] = float(kv.max()) if num_steps else 0.0
        s["kv_cache_usage_mean"] = float((kv * step_s).sum() / busy) if busy else 0.0
        s["mean_batch_size"] = float((steps["num_running"] * step_s).sum() / busy) if busy else 0.0
        del step_s, kv
        s["max_running_requests"] = int(steps["num_running"].max()) if num_steps else 0  # in the engine at once
        # vLLM bench's figure: finished requests whose span touches a second, at its peak (clients in flight)
        s["max_concurrent_requests"] = concurrent_per_second(req["arrival_time"][finished], req["e2el"][finished])
        # the whole run's busy time over the whole run's span (a warm-up's steps are in it), not the measured one's
        span = duration if measured is None else max(sim_end - float(req["arrival_time"].min()), 1e-12)
        s["busy_fraction"] = min(1.0, busy / (replicas * span))  # a sum of step times may round past the span
        s["replicas"] = replicas
        if replicas - prefill_only > 1:  # load imbalance: the busiest replica's completions over the mean
            every = np.bincount(req["replica"][finished], minlength=replicas)
            per = every[prefill_only:replicas]
            s["replica_completed"] = {str(k): int(v) for k, v in enumerate(per, start=prefill_only)}
            taking = np.delete(every, list(unreached))[prefill_only:] if unreached else per
            s["load_imbalance"] = float(taking.max() / taking.mean()) if taking.sum() else 1.0
        if "good" in req:  # vLLM's goodput: completed requests meeting every SLO of their class, per second
            good = req["good"] & scope
            s["request_goodput"] = float(good.sum()) / duration
            # of the requests that ended: a rejection fails its SLOs, a request a cut left unfinished is in neither
            s["goodput_fraction"] = float(good[ended].mean()) if ended.any() else None  # none ended: no share
            # per class, in name order; requests without one last, as "nan" (pandas' key for them)
            names = np.array(["\uffff" if c is None else c for c in req["slo_class"]], dtype=object)
            s["slo_classes"] = {}
            for c in sorted(set(names[scope])):
                mine = (names == c) & scope
                s["slo_classes"]["nan" if c == "\uffff" else str(c)] = {
                    "requests": int(mine.sum()), "completed": int((mine & finished).sum()), "good": int(good[mine].sum()),
                    "goodput_fraction": float(good[mine & ended].mean()) if (mine & ended).any() else None}
        s["useful_work_fraction"] = None
        batch = req["batch_id"][finished]
        if (batch >= 0).any():  # static batching: sum(l_i) / (n * max l_i) over the batches, numbered per replica
            static = batch >= 0
            keys = np.stack([req["replica"][finished][static], batch[static]])
            _, group = np.unique(keys, axis=1, return_inverse=True)
            tokens = req["output_tokens"][finished][static]
            size, total = np.bincount(group), np.bincount(group, weights=tokens)
            longest = np.zeros(len(size), dtype=np.int64)
            np.maximum.at(longest, group, tokens)
            s["useful_work_fraction"] = float(int(total.sum()) / int((size * longest).sum()))
        return s

    def _repeatable_config(self, out: Path) -> dict:
        """The config that repeats this run: requests given to simulate() (a real run's, the API's) are written
        beside it as servesim JSONL and replace the scenario's workload, which did not make them."""
        config = self.config
        if self._config_as_run is not None and not _equal(config, self._config_as_run):
            from servesim.simulator.config import say_once

            say_once(["servesim: warning: RunResult.config was edited after the run: config.yaml holds the settings "
                      "the run was simulated with, as the tables beside it do"])
            config = self._config_as_run
        if self.given_requests is None:
            if self.unrepeatable:
                from servesim.simulator.config import say_once

                say_once([f"servesim: warning: config.yaml holds the scenario's workload, not the {self.unrepeatable} "
                          f"given to simulate(), whose requests no file holds: it does not repeat this run"])
            return config
        from servesim.workloads.traces import write_jsonl

        path = write_jsonl(sorted(self.given_requests, key=lambda r: (r.arrival_time, r.request_id)),
                           out / "workload.jsonl").resolve()  # absolute, as every path a config records: any folder
        classes = {k: v for k, v in config["workload"].items() if k == "slo_classes"}
        return config | {"workload": {"type": "trace", "path": str(path), "format": "servesim"} | classes}

    def write(self, out_dir: str | Path | None = None, *extra, field: str = "out_dir",
              caller_writes_optional: tuple = (), **unknown) -> Path:
        """Everything `servesim run --out` writes but the picture; an error names `field` (the CLI's --out). An
        earlier run's optional files (its Prometheus ones, its plot, `caller_writes_optional`: those `servesim run`
        writes again, and the vLLM result file) go as the four files replace the earlier run's, so no cut leaves
        them beside this run's (r155); those not written again are said (by the caller where it writes some)."""
        from servesim.simulator.files import dump_yaml

        import os

        from servesim.simulator.errors import ConfigError

        if unknown:  # the API's words for a name it does not take (r152: a TypeError)
            raise ConfigError("write", f"takes no argument {', '.join(map(repr, unknown))} (it takes out_dir; "
                                       f"`servesim run --prometheus` writes the Prometheus files)")
        if extra:  # (r160: write(folder, "a", "b") was a TypeError)
            raise ConfigError("write", f"takes one argument, out_dir (the folder), got {1 + len(extra)}")
        if out_dir is None:  # (r160: write() was a TypeError)
            raise ConfigError(field, "missing: the folder to write the run into")

        from servesim.simulator.files import path_problem

        if (problem := path_problem(out_dir)) is not None:  # r130: "" wrote into the working folder
            raise ConfigError(field, problem)
        out = Path(out_dir)
        from servesim.simulator.files import refuse_folder_over_inputs

        refuse_folder_over_inputs(out, RUN_FILES, field, self.inputs)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file in the way, a name too long: the CLI's --out says the same
            raise ConfigError(field, f"cannot write a results folder at {out}: {exc.strerror or exc}") from None
        stale = out / "workload.jsonl"  # an earlier run's requests, which this run's config.yaml does not name
        earlier_run = "workload.jsonl" in written_before(out)
        if self.given_requests is not None and stale.exists() and not earlier_run:  # a file of the user's, maybe read
            raise ConfigError(field, f"{out} holds a workload.jsonl no run wrote, which this run's requests would "
                                     f"replace: write elsewhere")
        if self.given_requests is None and (stale.is_file() or stale.is_symlink()) and earlier_run:
            stale.unlink()
            from servesim.simulator.config import say_once

            say_once([f"servesim: note: removed workload.jsonl: an earlier run's in {out}, which this run did not "
                      f"write"])
        try:  # r149: an edit of numpy values (not JSON) was a TypeError, config.yaml already written
            summary = json.dumps(self.summary, indent=2) + "\n"
        except (TypeError, ValueError):
            summary = None
        config = dump_yaml(self._repeatable_config(out))
        if self._summary_text is not None and summary != self._summary_text:  # the tables beside it are the run's
            from servesim.simulator.config import say_once

            say_once([f"servesim: warning: RunResult.summary was edited after the run: {out / 'summary.json'} "
                      f"holds what the run measured, as its tables beside it do"])  # each folder's (r155: once)
            summary = self._summary_text
        if summary is None:  # a summary made by hand, not by a run, holding what JSON cannot
            raise ConfigError("summary", "RunResult.summary holds values JSON cannot write")
        from servesim.simulator.files import present, write_together

        earlier = written_before(out)
        optional = tuple(caller_writes_optional) or OPTIONAL_RUN_FILES
        gone = [n for n in optional if n in earlier and present(out / n)]  # an earlier run's (r152: left, unlisted)
        write_together(out, {"config.yaml": lambda p: p.write_text(config),
                             "summary.json": lambda p: p.write_text(summary),
                             "requests.parquet": lambda p: write_parquet(self.request_columns, p, TEXT_COLUMNS),
                             "steps.parquet": lambda p: write_parquet(self.step_columns, p)}, remove=gone)
        if gone and not caller_writes_optional:
            from servesim.simulator.config import say_once
            from servesim.simulator.files import removed_note

            say_once([removed_note(out, gone)])
        others = [n for n in earlier if n not in RUN_FILES and n not in OPTIONAL_RUN_FILES and n not in gone]
        record_written(out, ["config.yaml", "summary.json", "requests.parquet", "steps.parquet"] + others  # a sweep's
                       + (["workload.jsonl"] if self.given_requests is not None else []))
        return out
