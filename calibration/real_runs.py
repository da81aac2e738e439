"""A real serving run, whatever file it came in: the requests as they arrived and what each one measured.

Three formats, told apart by content (docs/calibration.md, "Real runs: formats"):

- **lifecycle records**: one JSON line per request with `input_toks`/`prompt_tokens`, `output_toks`/
  `output_tokens`, `queued_ts`, `scheduled_ts`, `first_token_ts`, `last_token_ts` (engine clock, s), as vLLM's
  request-state timestamps give them; a folder holding `vllm/requests.jsonl` (or `requests.jsonl`) and
  optionally `meta.json` with the engine arguments and `timeseries.csv` (running, waiting once a second).
- **`vllm bench serve --save-result --save-detailed`** JSON: `input_lens`, `output_lens`, `ttfts`, `itls`,
  `start_times` (s), optionally `errors`; failed requests are left out.
- **an engine step log**: one JSON line per engine step with its start `t` and end `t_end` (s) and either the
  batch shape (`num_seqs`, `prefill_tokens`, `prefill_attention_pairs`, `decode_seqs`,
  `decode_context_tokens`, as calibration/vllm_driver.py's scheduler writes it) or `requests`: a list of
  `{"new_tokens", "computed_tokens", "prompt_tokens"}`, one per scheduled request.

Per-request runs give `specs` (arrivals from the first one, lengths) and `requests` (per-request TTFT, TPOT,
E2E latency and, where recorded, queue time) in the simulator's own column names, so a real run and a
simulated one are compared by the same code; a step log gives `steps` (batch shape and time_ms).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from servesim.simulator.batch import SHAPE_FIELDS, shape_of
from servesim.simulator.config import KV_CACHE_DTYPES, QUANTIZED_FORMATS
from servesim.simulator.errors import JSON_ERRORS, ConfigError, json_problem, printable, unique_keys
from servesim.simulator.files import appended_results, present, where_looked
from servesim.simulator.metrics import latency_stats
from servesim.simulator.model_arch import HF_IDS
from servesim.workloads.settings import MAX_SECONDS
from servesim.workloads.spec import RequestSpec

SHAPE = SHAPE_FIELDS
LIFECYCLE_TIMES = ["queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts"]
LENGTH_ALIASES = {"prompt": ("input_toks", "prompt_tokens", "input_length"),
                  "output": ("output_toks", "output_tokens", "output_length")}
BENCH_ARRAYS = ["input_lens", "output_lens", "ttfts", "itls", "start_times"]
PER_REQUEST = ("lifecycle", "vllm-bench")  # the formats with per-request times (a step log has step times)
MAX_INT = 2 ** 40  # token counts beyond this are damage, not measurements
COPY_JITTER = 0.002  # a run whose latencies lie this close to another's (times one factor) is a copy of it; a
# repeat's differ by more (r136: one measured at 0.3% a request was refused), a copy jittered more passes as one
COPY_FIGURES = 6  # a request as measured: its latencies to 6 figures (a copy keeps them; a repeat's differ)
VLLM_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default, where a run does not record its own
# a bench result's latency against its ttft + sum(itls), which vLLM's client makes equal (only token chunks advance
# a request's end; 0.19 keeps no latencies): the clock read twice at a first token (microseconds apart) and the
# float sum of a thousand gaps err by far less than a millisecond (and 1e-6 of the latency, for hours-long
# streams), itself far below a latency cut short, or run on, by a token
LATENCY_SLACK_S = 1e-3


@dataclass
class RealRun:
    name: str
    path: Path
    kind: str  # lifecycle, vllm-bench or step-log
    specs: list[RequestSpec] = field(default_factory=list)
    requests: pd.DataFrame | None = None  # ttft, tpot, e2el, queue_time (s; NaN where not recorded), status
    itls: np.ndarray | None = None  # every gap between tokens (s), where the client recorded them
    steps: pd.DataFrame | None = None  # a step log: SHAPE columns, t, t_end, time_ms
    timeseries: pd.DataFrame | None = None  # t, running, waiting[, kv_cache_pct]
    sets: list[str] = field(default_factory=list)  # engine settings the run's own metadata records
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # records read but not taken at face value (said on reading)
    records: Path | None = None  # the file read: one run however it was named (its folder, vllm/, the file)

    @property
    def identity(self) -> str:
        return str((self.records or self.path).resolve())

    def measured_requests(self) -> set:
        """Each request as measured (time to first token and end-to-end latency to 6 significant figures, which a
        copy keeps and a repeat does not (r136: to 3, a repeat at 0.3% a request fell in the fitted run's buckets);
        not its lengths, which an edit changes (r135: each prompt one token longer passed), nor its arrival,
        counted from the run's first): a run whose requests these are is this run's records, however its file was
        edited, shifted, cut or reformatted; a repeat of its workload measures other latencies."""
        return set(self.measured_pairs())

    def measured_pairs(self) -> list:
        """measured_requests, one a request (a request measured twice alike counts twice)."""
        if self.requests is None:
            return []
        r = self.requests
        return list(zip(*(_figures(r[c], COPY_FIGURES) for c in ("ttft", "e2el"))))

    @property
    def latency_digest(self) -> str | None:
        """A digest of measured_requests: the same for any copy of the run's records however written (spacing,
        key order, line ends, names), kept in a fitted profile (fitted.run_latencies)."""
        if self.requests is None:
            return None
        return hashlib.sha256(repr(sorted(self.measured_requests())).encode()).hexdigest()

    def scaled_copy_of(self, other: "RealRun") -> float | None:
        """The factor this run's latencies are other's by, request by request in arrival order, where nine in ten
        requests' TTFT and E2E latency lie within 0.2% of it: a copy with its times scaled (r134: x1.006 passed)
        or jittered by a hair (r135), also with requests dropped (r154: one dropped passed), each paired with the
        other's request arriving at the same time. A repeat's latencies vary request by request by more (its TTFT
        alone by milliseconds). None: not a copy."""
        mine, theirs = self.requests, other.requests
        if mine is None or theirs is None or not len(mine) or not len(theirs):
            return None
        order = [np.argsort(r["arrival_time"].to_numpy(float), kind="stable") for r in (mine, theirs)]
        a, b = (r.iloc[o] for r, o in zip((mine, theirs), order))
        if len(a) != len(b):
            a, b = _paired_by_arrival(a, b)
            if a is None:
                return None
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.stack([a[c].to_numpy(float) / b[c].to_numpy(float) for c in ("ttft", "e2el")])
        valid = np.isfinite(ratios) & (ratios > 0)  # a TTFT of 0 has no ratio
        if not valid.any():
            return None
        factor = float(np.median(ratios[valid]))
        close = (np.abs(ratios / factor - 1) <= COPY_JITTER).all(axis=0)
        return factor if close.mean() >= 0.9 else None

    @property
    def content(self) -> str | None:
        """A digest of the records' bytes: a copy of a run under another name is the same run (None: no file)."""
        src = Path(self.records or self.path)
        return hashlib.sha256(src.read_bytes()).hexdigest() if src.is_file() else None

    def files(self) -> list[Path]:
        """What it was read from, for writers to leave alone: the records, and the meta.json and timeseries.csv
        a run folder may hold beside them."""
        src = Path(self.records or self.path)
        root = Path(self.path) if Path(self.path).is_dir() else src.parent
        return [src] + [root / sub / name for sub in ("vllm", ".") for name in ("meta.json", "timeseries.csv")]

    @property
    def has_requests(self) -> bool:
        return self.requests is not None

    def need_requests(self, hint: str = "") -> None:
        if not self.has_requests:
            raise ConfigError(str(self.path), f"a {self.kind} holds no per-request times; give lifecycle records or "
                                              f"a `vllm bench serve --save-detailed` result{hint}")

    def summary(self) -> dict:
        return request_summary(self.requests, self.itls)


def _paired_by_arrival(a: pd.DataFrame, b: pd.DataFrame) -> tuple:
    """Runs of different sizes, in arrival order: the smaller's requests beside the larger's arriving at the same
    time (to a microsecond), under the one shift of the clock (a copy cut before its first request counts from a
    later one) that pairs the most; requests arriving together paired in order. (None, None) where nine in ten of
    the smaller's find none: not one run's requests."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    s, big = (r["arrival_time"].to_numpy(float) for r in (small, large))
    where: dict = {}  # each arrival (in microseconds) of the larger run: its requests, in order
    for i, k in enumerate(np.round(big * 1e6).astype(np.int64).tolist()):
        where.setdefault(k, []).append(i)
    best = None
    for shift in sorted({big[k] - s[0] for k in range(min(20, len(big)))} |
                        {big[0] - s[k] for k in range(min(20, len(s)))}):
        keys = np.round((s + shift) * 1e6).astype(np.int64).tolist()
        used: dict = {}
        pairs = []
        for i, k in enumerate(keys):
            slots, n = where.get(k), used.get(k, 0)
            if slots and n < len(slots):
                pairs.append((i, slots[n]))
                used[k] = n + 1
        if best is None or len(pairs) > len(best):
            best = pairs
    if not best or len(best) < 0.9 * len(small):
        return None, None
    i, j = (list(x) for x in zip(*best))
    paired = small.iloc[i], large.iloc[j]
    return paired if small is a else paired[::-1]


def first_copy(runs: list[RealRun]) -> tuple[RealRun, str] | None:
    """The first run that is an earlier one again (the same file under another name, its bytes copied, or its
    requests' latencies however reordered, cut or scaled: r154, lines reversed were fitted twice), and that run's
    name: counted twice, it would be its own repeat, or weigh double in a fit or an error band."""
    ids, contents, seen = {}, {}, []
    for r in runs:
        digest = r.content
        earlier = ids.get(r.identity) or (contents.get(digest) if digest is not None else None) or next(
            (s.name for s in seen if r.scaled_copy_of(s) is not None), None)
        if earlier is not None:
            return r, earlier
        ids[r.identity] = r.name
        contents.setdefault(digest, r.name)
        seen.append(r)
    return None


def request_summary(requests: pd.DataFrame, itls: np.ndarray | None) -> dict:
    """Finished requests' statistics under the simulator's summary names (mean/median/p90/p99_X_ms,
    throughput over first arrival to last finish): one function for real and simulated runs, so both sides of a
    comparison are counted alike. Metrics a run lacks (NaN columns, no ITLs) are None."""
    req = requests[requests["status"] == "finished"] if "status" in requests else requests
    if "prefill" not in req and {"ttft", "queue_time"} <= set(req):  # a simulation's: first scheduled to first token
        req = req.assign(prefill=req["ttft"] - req["queue_time"])
    s: dict = {"completed": int(len(req))}
    duration = max(float((req["arrival_time"] + req["e2el"]).max() - req["arrival_time"].min()), 1e-12)
    s["request_throughput"] = len(req) / duration
    s["output_throughput"] = float(req["output_tokens"].sum()) / duration
    for key in ("ttft", "tpot", "e2el", "queue_time", "prefill"):
        latency_stats(key, req[key].dropna().to_numpy() if key in req else np.zeros(0), s)
    latency_stats("itl", itls if itls is not None else np.zeros(0), s)
    return s


def _fail(path, where: str, message: str):
    raise ConfigError(str(path), f"{where}{': ' if where else ''}{message}")


def _json_lines(path: Path) -> list[tuple[int, dict]]:
    try:
        text = path.read_text(encoding="utf-8-sig")  # an editor's BOM, as the CSV readers take it
    except (OSError, UnicodeDecodeError) as exc:
        _fail(path, "", f"cannot read: {exc}")
    rows = []
    for i, line in enumerate(text.split("\n"), 1):  # JSON strings may hold U+2028 raw, which splitlines breaks on
        if not line.strip():
            continue
        try:
            row = json.loads(line, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as exc:
            _fail(path, f"line {i}", f"not JSON ({exc.msg})")
        except JSON_ERRORS as exc:
            _fail(path, f"line {i}", f"not a record ({json_problem(exc)})")
        if not isinstance(row, dict):
            _fail(path, f"line {i}", "not a JSON object")
        rows.append((i, row))
    if not rows:
        _fail(path, "", "holds no records")
    return rows


def _number(path, where: str, row: dict, key: str, integer: bool = False, minimum: float | None = None) -> float:
    v = row.get(key)
    count = integer and minimum is not None and minimum >= 0  # a count is said as one (r165: "a finite number")
    what = "a non-negative integer" if count else "an integer" if integer else "a finite number"
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT:
        _fail(path, where, f"{key} is too large ({str(v)[:20]}...)")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        _fail(path, where, f"{key} must be {what}, got {v!r}" if key in row else f"missing field {key}")
    if integer and abs(v) > MAX_INT:
        _fail(path, where, f"{key} is too large ({v!r})")
    if integer and v != int(v) or count and v < 0:
        _fail(path, where, f"{key} must be {what}, got {v!r}")
    if minimum is not None and v < minimum:
        _fail(path, where, f"{key} must be >= {minimum:g}, got {v!r}")
    return float(v)


def _entry(path, data: dict, key: str, i: int, **checks) -> float:
    """Entry i of a bench result's per-request list, checked as _number checks a field and named as JSON indexes
    it (input_lens[3]), as `workload describe` names it (r165: "request 3" here was "request 4" there)."""
    name = f"{key}[{i}]"
    return _number(path, "", {name: data[key][i]}, name, **checks)


def _length(path, where: str, row: dict, what: str) -> int:
    """A record's length under any of its names; two names that disagree are refused, not one taken unsaid."""
    keys = [k for k in LENGTH_ALIASES[what] if k in row] or [LENGTH_ALIASES[what][0]]
    values = [int(_number(path, where, row, k, integer=True, minimum=1)) for k in keys]
    if len(set(values)) > 1:
        _fail(path, where, f"{' and '.join(f'{k} {v}' for k, v in zip(keys, values))} disagree: which is the "
                           f"{what} length?")
    return values[0]


def detect(path: str | Path) -> str:
    """Which format a path holds, from its content; one line naming what was expected otherwise."""
    path = Path(path)
    if path.is_dir():
        if (path / "vllm" / "requests.jsonl").is_file() or (path / "requests.jsonl").is_file():
            return "lifecycle"
        if (path / "requests.parquet").is_file():  # (r149: read as a real run's folder of lifecycle records)
            if (path / "summary.json").is_file():  # (r151: said to lack the summary it has)
                _fail(path, "", "a servesim results folder is a simulation, not a real run: give it last, after "
                                "the real run(s) it is compared with")
            _fail(path, "", "a servesim results folder without its summary.json (a simulation needs both "
                            "summary.json and requests.parquet)")
        _fail(path, "", "a folder without requests.jsonl (or vllm/requests.jsonl) of lifecycle records")
    if not path.is_file():
        _fail(path, "", "not a regular file (a FIFO, a device or a socket)" if path.exists()
              else f"no such file{where_looked(path)}")
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16).decode("utf-8-sig", errors="replace").lstrip()  # a BOM is no content
    except OSError as exc:
        _fail(path, "", f"cannot read: {exc.strerror or exc}")
    if head.startswith("{"):
        first = head.split("\n")[0]
        try:
            row = json.loads(first)
        except JSON_ERRORS:
            row = None  # one multi-line JSON document
        if isinstance(row, dict) and not {"ttfts", "input_lens"} <= set(row):
            if set(LIFECYCLE_TIMES) & set(row):  # the reader names any field missing
                return "lifecycle"
            if "t_end" in row or "t" in row and (set(SHAPE) & set(row) or "requests" in row):
                return "step-log"
        if '"ttfts"' in head or row is None or isinstance(row, dict) and {"backend", "completed"} <= set(row):
            return "vllm-bench"  # a result saved without --save-detailed too: its reader says what is missing
    _fail(path, "", "not a real-run format servesim reads: expected lifecycle records (JSON lines with "
                    "queued_ts, scheduled_ts, first_token_ts, last_token_ts), a `vllm bench serve --save-detailed` "
                    "result (JSON with ttfts, itls, input_lens, output_lens, start_times) or an engine step log "
                    "(JSON lines with t, t_end); see docs/calibration.md")


SLOWEST_TPOT_S = 2.0  # a median token slower than this is no served model's (a CPU runs a 70B at ~1 s a token)


def read_run(path: str | Path, name: str | None = None) -> RealRun:
    path = Path(path)
    kind = detect(path)
    run = {"lifecycle": _read_lifecycle, "vllm-bench": _read_bench, "step-log": _read_step_log}[kind](path)
    run.name = name or run.name
    run.records = run.records or path
    if run.requests is not None and (tpot := run.requests["tpot"].dropna()).size and tpot.median() > SLOWEST_TPOT_S:
        run.warnings.append(f"its median time per output token is {tpot.median():.3g} s, slower than any GPU serves "
                            f"(are its times in seconds, not milliseconds?)")  # (r154: ms read as s, unsaid)
    for w in run.warnings:
        print(printable(f"servesim: warning: {path}: {w}"), file=sys.stderr)
    return run


def _frame(specs: list[RequestSpec], **cols) -> pd.DataFrame:
    df = pd.DataFrame({"arrival_time": [s.arrival_time for s in specs],
                       "prompt_tokens": [s.prompt_tokens for s in specs],
                       "output_tokens": [s.output_tokens for s in specs]} | cols)
    df["status"] = "finished"
    return df


def _stamped_warning(count: int, most: int, how: str) -> str:
    return (f"{count:,} record(s) have several output tokens but {how} (up to {most:,} tokens in no time): their "
            f"TPOT is left out of the real statistics")


def _check_span(path: Path, start: np.ndarray, end: np.ndarray, where: list[str]) -> None:
    """A run's times must lie within what a simulation can hold (MAX_SECONDS): one record stamped 1e16 s away
    (a wrong unit, a damaged clock) was simulated at a float precision that wiped out every step, its request
    "finished" in 0 s. The record named is the one furthest from the rest."""
    if max(end.max(), start.max()) - start.min() > MAX_SECONDS:
        middle = float(np.median(start))
        i = int(np.argmax(np.maximum(np.abs(start - middle), np.abs(end - middle))))
        _fail(path, where[i], f"its times lie {max(abs(start[i] - middle), abs(end[i] - middle)):.3g} s from the "
                              f"run's other requests; a run spans at most {MAX_SECONDS:g} s (are they in seconds?)")


def _read_lifecycle(path: Path) -> RealRun:
    folder = None
    if path.is_dir():
        folder = path
        path = path / "vllm" / "requests.jsonl" if (path / "vllm" / "requests.jsonl").is_file() \
            else path / "requests.jsonl"
    recs, seen, lines, failed = [], {}, [], []
    for i, row in _json_lines(path):
        where = f"line {i}"
        rid = row.get("request_id")
        if rid is not None:  # a failed record's too (r167: a failure repeating a finished request's id passed)
            if not isinstance(rid, (str, int)) or isinstance(rid, bool):
                _fail(path, f"{where}, request_id", f"expected a string or an integer, got {rid!r:.40}")
            if str(rid) in seen:  # vLLM's ids are text: 7 and "7" are one request (r165: counted as two)
                _fail(path, f"{where}, request_id", f"{rid!r:.40} repeats line {seen[str(rid)]}'s: one record per "
                                                    f"request")
            seen[str(rid)] = i
        if row.get("error") or row.get("finish_reason") in FAILED_REASONS:  # (r154: read as finished)
            failed.append(str(row.get("error") or f"finish_reason {row['finish_reason']}"))
            continue
        lines.append(i)
        n_in, n_out = _length(path, where, row, "prompt"), _length(path, where, row, "output")
        t = [_number(path, where, row, k) for k in LIFECYCLE_TIMES]
        if not t[0] <= t[1] <= t[2] <= t[3]:
            _fail(path, where, "timestamps out of order (need queued_ts <= scheduled_ts <= first_token_ts <= "
                               "last_token_ts)")
        if n_out == 1 and t[3] > t[2]:  # one token is the first and the last
            _fail(path, where, f"one output token, yet last_token_ts is {t[3] - t[2]:.6g} s after first_token_ts")
        recs.append((n_in, n_out, *t))
    if not recs:
        _fail(path, "", "no finished request: every record says its request failed" if failed else "no records")
    a = np.array(recs, dtype=float)
    _check_span(path, a[:, 2], a[:, 5], [f"line {i}" for i in lines])
    if (a[:, 5] - a[:, 2]).max() <= 0:
        _fail(path, "", "every request's last token has its queued time: the timestamps carry no latency")
    a = a[np.argsort(a[:, 2], kind="stable")]  # by arrival at the engine
    n_in, n_out, queued, sched, first, last = a.T
    t0 = queued[0]
    specs = [RequestSpec(i, float(q - t0), int(p), int(o), max_tokens=int(o))
             for i, (p, o, q) in enumerate(zip(n_in, n_out, queued))]
    # several tokens with no time between the first and the last: the client stamped them together (one chunk),
    # which measures no time per output token: such a TPOT is unknown, not 0
    stamped = (n_out > 1) & (last == first)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where((n_out > 1) & ~stamped, (last - first) / np.maximum(n_out - 1, 1), np.nan)
    requests = _frame(specs, ttft=first - queued, tpot=tpot, e2el=last - queued, queue_time=sched - queued,
                      prefill=first - sched)
    run = RealRun(str(folder or path), folder or path, "lifecycle", specs, requests, records=path)
    if failed:
        run.warnings.append(failed_warning(len(failed), len(failed) + len(recs), failed[0]))
    if stamped.any():
        run.warnings.append(_stamped_warning(int(stamped.sum()), int(n_out[stamped].max()),
                                             "last_token_ts equal to first_token_ts"))
    if folder is None and present(path.parent / "meta.json"):  # <run>/vllm/requests.jsonl: its run's settings
        folder = path.parent
    if folder is not None:
        _read_folder_meta(run, folder)
        counted = run.meta.get("num_requests")
        if _positive_int(counted) and counted != len(recs) + len(failed):  # (r154: 250 of 300 read unsaid)
            run.warnings.append(f"its meta.json records {counted:,} requests, but the records hold "
                                f"{len(recs) + len(failed):,}: a cut or padded copy? Its statistics are of those "
                                f"held")
    return run


FAILED_REASONS = ("abort", "error")  # a record's finish_reason saying its request never finished


def failed_warning(failed: int, total: int, first: str) -> str:
    """Failed requests (a client's timeout, an abort) are in no metric, as vLLM's client leaves them out, and not
    simulated either, though they loaded the real server (r154: dropped unsaid)."""
    return (f"{failed:,} of its {total:,} requests failed ({first[:60]}): they are left out of its metrics and of "
            f"the requests simulated, though they loaded the real server")


def _read_folder_meta(run: RealRun, folder: Path) -> None:
    """meta.json's engine arguments as servesim settings, and timeseries.csv for the timeline."""
    for meta_path in (folder / "vllm" / "meta.json", folder / "meta.json"):
        if present(meta_path):  # (r150: a broken link or a folder there was taken as no meta.json: other settings)
            if not meta_path.is_file():
                _fail(meta_path, "", "not a regular file (a folder, a broken link, a FIFO): the run's settings "
                                     "cannot be read")
            run.meta = meta = _json_object(meta_path)
            run.sets = engine_sets(meta, meta_path)
            break
    for ts in (folder / "vllm" / "timeseries.csv", folder / "timeseries.csv"):
        if present(ts) and not ts.is_file():
            run.warnings.append(f"{ts} is not a regular file: no timeline plot")
            break
        if ts.is_file():
            try:  # the per-request comparison does not need the timeline: a damaged one is said and left out
                t = pd.read_csv(ts)
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
                run.warnings.append(f"{ts} is no table ({str(exc).splitlines()[0][:80] if str(exc) else ''}): "
                                    f"no timeline plot")
                break
            twice = sorted({m[1] for c in t.columns if (m := re.fullmatch(r"(.+)\.\d+", str(c))) and m[1] in t})
            if twice:  # pandas renamed the second (r150: running.1 was read as another column)
                run.warnings.append(f"{ts} gives column(s) {', '.join(twice)} twice: no timeline plot")
            elif {"t", "running", "waiting"} <= set(t.columns) and len(t):
                run.timeseries = _timeline(t)
                if run.timeseries is None:  # every row's time damaged: said, as an empty table is
                    run.warnings.append(f"{ts} has no row with a time (t) a run has: no timeline plot")
            else:
                run.warnings.append(f"{ts} holds no rows of t, running, waiting: no timeline plot")
            break


def _timeline(t: pd.DataFrame) -> pd.DataFrame | None:
    """timeseries.csv's numbers; a damaged cell (text, inf, a negative count, a time or count no run has) is a
    gap in the plot, not a crash: the per-request comparison does not need the timeline."""
    t = t.apply(pd.to_numeric, errors="coerce")
    for col in t.columns:
        v = t[col].to_numpy(dtype=float)
        with np.errstate(invalid="ignore"):
            ok = (np.abs(v) <= 1e11) if col == "t" else (v >= 0) & (v <= (100 if col == "kv_cache_pct" else
                                                                           MAX_INT))  # 1e11 s: past any epoch time
        t[col] = np.where(ok, v, np.nan)
    t = t.dropna(subset=["t"])
    return t if len(t) else None


# engine switches a run records, and where: vLLM's engine arguments, servesim's cache record, vLLM's resolved config
RECORDED_SWITCHES = {
    "enable_prefix_caching": (("kv_cache", "enable_prefix_caching"), ("engine_kwargs", "enable_prefix_caching"),
                              ("resolved_config", "cache_config", "enable_prefix_caching")),
    "enable_chunked_prefill": (("engine_kwargs", "enable_chunked_prefill"),
                               ("resolved_config", "scheduler_config", "enable_chunked_prefill")),
    "async_scheduling": (("engine_kwargs", "async_scheduling"), ("resolved_config", "scheduler_config", "async_scheduling")),
    "enforce_eager": (("engine_kwargs", "enforce_eager"), ("resolved_config", "model_config", "enforce_eager")),
}


# where vLLM's resolved config records each count (engine_kwargs gives only those the command line set)
RESOLVED_COUNTS = {"tensor_parallel_size": ("resolved_config", "parallel_config", "tensor_parallel_size"),
                   "data_parallel_size": ("resolved_config", "parallel_config", "data_parallel_size"),
                   "max_num_seqs": ("resolved_config", "scheduler_config", "max_num_seqs"),
                   "max_num_batched_tokens": ("resolved_config", "scheduler_config", "max_num_batched_tokens"),
                   "max_model_len": ("resolved_config", "model_config", "max_model_len")}


def _at(meta: dict, path: tuple[str, ...]):
    """meta.json's value at a path of keys; None where any step is missing or not an object."""
    for key in path:
        meta = meta.get(key) if isinstance(meta, dict) else None
    return meta


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_INT


# meta.json's values that become engine settings, checked where they are written (an error about them names
# meta.json's field, not the engine setting the user never set)
ENGINE_COUNTS = ("tensor_parallel_size", "data_parallel_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len")
_RECORDED_VALUES = [
    ("engine_kwargs", "kv_cache_dtype", lambda v: isinstance(v, str) and v in ("auto", *KV_CACHE_DTYPES),
     f"one of auto, {', '.join(KV_CACHE_DTYPES)}"),
    ("engine_kwargs", "quantization", lambda v: isinstance(v, str) and v in QUANTIZED_FORMATS,
     f"a format servesim models ({', '.join(QUANTIZED_FORMATS)}) or null"),
]
_COUNT = (_positive_int, "a positive integer")
_FRACTION = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1, "a fraction in (0, 1]")
# settings a run records in several places, the first place that records one saying it: every place is checked,
# and two that disagree are refused (r165: a later place was never read, true beside false passed)
RECORDED_SETTINGS = {
    **{key: ((("engine_kwargs", key), RESOLVED_COUNTS[key]), *_COUNT) for key in ENGINE_COUNTS},
    **{key: (paths, lambda v: isinstance(v, bool), "true or false", True) for key, paths in RECORDED_SWITCHES.items()},
    "block_size": ((("engine_kwargs", "block_size"), ("kv_cache", "block_size")), *_COUNT),
    "gpu_memory_utilization": ((("engine_kwargs", "gpu_memory_utilization"), ("kv_cache", "gpu_memory_utilization")),
                               *_FRACTION),
    # vLLM sizes the pool to num_gpu_blocks_override where given: the pool it had is that
    "num_gpu_blocks_override": ((("kv_cache", "num_gpu_blocks"), ("engine_kwargs", "num_gpu_blocks_override")),
                                *_COUNT),
}
# engine arguments read above or below, and those that change no step's time; any other is said not modelled
_READ_KWARGS = {*ENGINE_COUNTS, "enable_expert_parallel", "kv_cache_dtype", "block_size", "num_gpu_blocks_override",
                "gpu_memory_utilization", "quantization", "dtype", "model", *(
                    path[1] for paths in RECORDED_SWITCHES.values() for path in paths if path[0] == "engine_kwargs")}
_TIMELESS_KWARGS = {"seed", "served_model_name", "tokenizer", "tokenizer_mode", "trust_remote_code", "revision",
                    "download_dir", "load_format", "disable_log_stats", "disable_log_requests", "max_logprobs",
                    "enable_log_requests"}
_SAME_SPEED_DTYPES = (None, "auto", "bfloat16", "bf16", "float16", "fp16", "half")  # 2 bytes a value, as modelled


def _recorded(meta: dict, where, paths: tuple, ok, what: str, engine_decides: bool = False):
    """A setting's value where meta.json records it (None: nowhere; vLLM writes null for a default left as it is),
    each place checked for its type, and all places for agreement: which value did the run have otherwise?
    engine_decides: a switch vLLM may turn off itself (async scheduling under some drafters or executors, prefix
    caching or chunked prefill on some models, eager mode on some platforms): what it ran with (the resolved
    config, the cache's record) wins over the argument asked for."""
    found = []
    for path in paths:
        value = _at(meta, path)
        if value is not None and not ok(value):
            _fail(where, ".".join(path), f"must be {what}, got {value!r:.60}")
        if value is not None:
            found.append((".".join(path), value))
    ran = [(place, value) for place, value in found if not place.startswith("engine_kwargs.")]
    if engine_decides and ran:
        found = ran
    for place, value in found[1:]:
        if value != found[0][1]:
            _fail(where, found[0][0], f"{json.dumps(found[0][1])} contradicts {place} {json.dumps(value)}: which did "
                                      f"the run have?")
    return found[0][1] if found else None


def engine_sets(meta: dict, where) -> list[str]:
    """A run's recorded engine arguments (vLLM's names) as servesim `--set`s."""
    for key in ("engine_kwargs", "kv_cache"):
        if key in meta and not isinstance(meta[key], dict):
            _fail(where, key, f"must be an object of settings, got {type(meta[key]).__name__}")
    kw, cache = meta.get("engine_kwargs") or {}, meta.get("kv_cache") or {}
    sets = []
    if kw.get("model") and meta.get("model") and str(kw["model"]) != str(meta["model"]):  # which one ran?
        _fail(where, "engine_kwargs.model", f"{kw['model']!r:.60} contradicts model {meta['model']!r:.60}")
    served = kw.get("model") or meta.get("model")
    if served is not None:
        if str(served) not in HF_IDS:
            meta["unmapped_model"] = str(served)  # resolve_run asks for --set model=... (never a silent default)
        else:
            sets.append(f"model={served}")  # the checkpoint's own (HF_ID_CHANGES), its built-in's name
    for section, key, ok, what in _RECORDED_VALUES:
        value = (cache if section == "kv_cache" else kw).get(key)
        if value is not None and not ok(value):
            _fail(where, f"{section}.{key}", f"must be {what}, got {value!r:.60}")
    auto_fit = kw.get("max_model_len") in (-1, "auto")  # vLLM's auto-fit to the pool (r167: refused as a count)
    read = {**meta, "engine_kwargs": {k: v for k, v in kw.items() if k != "max_model_len"}} if auto_fit else meta
    recorded = {key: _recorded(read, where, *spec) for key, spec in RECORDED_SETTINGS.items()}
    for key in ENGINE_COUNTS:  # the argument, else what vLLM resolved it to (r150: a resolved count was unread)
        if recorded[key] is not None:
            sets.append(f"engine.{key}={recorded[key]}")
    if auto_fit and recorded["max_model_len"] is None:  # fitted again to the pool, as vLLM fitted it
        sets.append("engine.max_model_len=auto")
    if kw.get("enable_expert_parallel") is not None:  # null: vLLM's default
        if not isinstance(kw["enable_expert_parallel"], bool):
            _fail(where, "engine_kwargs.enable_expert_parallel", f"must be true or false, got {kw['enable_expert_parallel']!r}")
        sets.append(f"engine.enable_expert_parallel={str(kw['enable_expert_parallel']).lower()}")
    if cache or kw:  # vLLM's argument, else servesim's cache record, else vLLM's default
        sets.append(f"engine.gpu_memory_utilization={recorded['gpu_memory_utilization'] or VLLM_GPU_MEMORY_UTILIZATION}")
    if kw.get("quantization") is not None:
        if served is not None and str(served) in HF_IDS:  # a named checkpoint: vLLM's checks of -q against it
            from servesim.simulator.model_arch import load_model
            from servesim.simulator.vllm_command import quantization_refusal

            why = quantization_refusal(str(served), load_model(HF_IDS[str(served)]), kw["quantization"])
            if why:
                _fail(where, "engine_kwargs.quantization", f"{kw['quantization']}: {why}; no run was served so")
        sets.append(f"engine.quantization={kw['quantization']}")
    unmodelled = [f"engine_kwargs.{k}={v!r:.40}" for k, v in kw.items()
                  if k not in _READ_KWARGS | _TIMELESS_KWARGS and v is not None]
    if kw.get("dtype") not in _SAME_SPEED_DTYPES:
        unmodelled.append(f"engine_kwargs.dtype={kw['dtype']!r:.40} (servesim runs the model's own 2-byte dtype)")
    if unmodelled:  # resolve_run says so: never dropped unsaid
        meta["unmodelled"] = unmodelled
    sets += [f"engine.{setting}={str(recorded[setting]).lower()}" for setting in RECORDED_SWITCHES
             if recorded[setting] is not None]
    for key in ("block_size", "num_gpu_blocks_override"):  # the pool the engine really had, in its blocks
        if recorded[key] is not None:
            sets.append(f"engine.{key}={recorded[key]}")
    if kw:  # null: left at vLLM's default, auto (r158: refused as 'None'); recorded so a --set replacing it is
        sets.append(f"engine.kv_cache_dtype={kw.get('kv_cache_dtype') or 'auto'}")  # said (r178: unsaid)
    if meta.get("vllm_version") is not None:  # its release's defaults fill what it did not record
        version = meta["vllm_version"]
        if not isinstance(version, str):
            _fail(where, "vllm_version", f"must be the release as text (\"0.19.0\"), got {version!r:.40}")
        release, note = release_for(version)
        sets.append(f"engine.vllm_defaults={release}")
        if note:
            meta["release_note"] = note
    if "hardware" in meta and not isinstance(meta["hardware"], dict):
        _fail(where, "hardware", f"must be an object, got {type(meta['hardware']).__name__}")
    device = (meta.get("hardware") or {}).get("device_name")
    if device is not None and not isinstance(device, str):
        _fail(where, "hardware.device_name", f"must be the GPU's name (text), got {device!r:.40}")
    if device:
        from servesim.simulator.hardware import gpu_for_device

        gpu = gpu_for_device(device)
        if gpu:
            sets.append(f"hardware.gpu={gpu}")
        else:
            meta["unmapped_gpu"] = device  # resolve_run says which GPU it simulates instead
    return sets


def release_for(version: str) -> tuple[str, str | None]:
    """The shipped release whose defaults a run served by vLLM `version` gets: the same minor release, else the
    newest one before it (the oldest where it predates all), and a note where that is not its own."""
    from servesim.simulator.vllm_command import VLLM_VERSIONS

    def minor(v: str):
        m = re.match(r"v?(\d+)\.(\d+)", v.strip())
        return (int(m[1]), int(m[2])) if m else None

    got = minor(version)
    shipped = sorted(VLLM_VERSIONS, key=minor)
    if got is None:
        return VLLM_VERSIONS[0], f"records vllm_version {version!r:.40}, which names no release: simulating " \
                                 f"vLLM {VLLM_VERSIONS[0]}'s defaults"
    same = [v for v in shipped if minor(v) == got]
    if same:
        return same[0], None
    before = [v for v in shipped if minor(v) < got]
    release = before[-1] if before else shipped[0]
    return release, f"records vLLM {version}, whose defaults servesim does not ship: simulating {release}'s " \
                    f"(releases: {', '.join(VLLM_VERSIONS)})"


def _json_object(path: Path) -> dict:
    text = ""
    try:
        text = path.read_text(encoding="utf-8-sig")
        data = json.loads(text, object_pairs_hook=unique_keys)
    except (OSError, UnicodeDecodeError, *JSON_ERRORS) as exc:
        if appended_results(text):
            _fail(path, "", f"holds {appended_results(text)} results, one a line, as `vllm bench serve "
                            f"--append-result` adds them: compare reads one run a file (give each line as a file "
                            f"of its own; repeats of one workload may all be given)")
        _fail(path, "", f"not a JSON document ({json_problem(exc)})")
    if not isinstance(data, dict):
        _fail(path, "", "not a JSON object")
    return data


def _read_bench(path: Path) -> RealRun:
    data = _json_object(path)
    missing = [k for k in BENCH_ARRAYS if not isinstance(data.get(k), list)]
    if missing:
        hint = " (rerun `vllm bench serve` with --save-result --save-detailed)" if "ttfts" in missing else \
            " (vLLM releases before start_times was added cannot give arrival times)" if missing == ["start_times"] else ""
        _fail(path, "", f"missing per-request array(s) {', '.join(missing)}{hint}")
    n = len(data["ttfts"])
    bad = [k for k in BENCH_ARRAYS if len(data[k]) != n]
    if bad:
        _fail(path, "", f"{', '.join(bad)} hold(s) a different number of requests than ttfts ({n})")
    errors = data.get("errors", [""] * n)
    if not isinstance(errors, list) or len(errors) != n:
        _fail(path, "errors", f"must be a list with one entry per request ({n})")
    for i, error in enumerate(errors):  # vLLM writes each request's error as text, "" where it succeeded (r165: null,
        if not isinstance(error, str):  # 0 and {} were read as successes, 1 was blamed on `failed`)
            _fail(path, "", f"errors[{i}] must be text (the request's error, \"\" where it succeeded), got "
                            f"{error!r:.40}")
    latencies = data.get("latencies")  # 0.33 keeps them: a first token after the request ended contradicts itself
    for key in ("latencies", "queue_times"):  # (r182: queue_times' entries were never read)
        if data.get(key) is not None and (not isinstance(data[key], list) or len(data[key]) != n):
            _fail(path, key, f"must be a list with one entry per request ({n})")
    # vLLM 0.19's chat client (no latencies kept) times the server's opening role chunk as the first token: its
    # first gap is the first content token's, ~0 after it
    role_chunk = data.get("backend") == "openai-chat" and latencies is None
    rows, failed_rows = [], []
    for i in range(n):  # every request's fields, failed or not (r165: a failed one's were never read)
        n_in = int(_entry(path, data, "input_lens", i, integer=True, minimum=1))
        n_out = int(_entry(path, data, "output_lens", i, integer=True, minimum=0))
        ttft = _entry(path, data, "ttfts", i, minimum=0)
        start = _entry(path, data, "start_times", i)
        latency = None if latencies is None else _entry(path, {"latencies": latencies}, "latencies", i, minimum=0)
        if data.get("queue_times") is not None:  # 0.33's client queue times: a wrong one is named as any field
            _entry(path, data, "queue_times", i, minimum=0)
        itl = data["itls"][i]
        if not isinstance(itl, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                and math.isfinite(x) and x >= 0 for x in itl):
            _fail(path, "", f"itls[{i}] must be a list of non-negative finite numbers")
        # vLLM's client records a failed request's error as the reply's reason, which may be empty (`response.reason
        # or ""`): a request without output and without a first token failed too (r163: refused as output_lens 0)
        failed = bool(errors[i]) or n_out == 0 and ttft == 0
        failed_rows.append(failed)
        if failed:  # left out of every metric, as vLLM leaves it; one that failed mid-stream keeps its first token
            if n_out:  # and gaps, but vLLM's calculate_metrics counts its output as 0
                _fail(path, "", f"output_lens[{i}] must be 0 for a failed request (errors[{i}] {errors[i]!r:.40}; "
                                f"vLLM counts no output for one), got {n_out}")
            if not errors[i] and itl:  # such a failure streamed nothing: gaps between tokens contradict it (r164)
                _fail(path, "", f"itls[{i}] holds gaps between tokens, but output_lens[{i}] and ttfts[{i}] are 0 with "
                                f"no error: the record contradicts itself")
            continue
        if n_out < 1:  # a first token timed, no error, yet no output
            _entry(path, data, "output_lens", i, integer=True, minimum=1)
        if latency is not None:  # round 127: a TTFT past the request's own latency was taken
            if ttft > latency + 1e-6:
                _fail(path, "", f"ttfts[{i}] {ttft:g} s is after the request's own latency (latencies[{i}] "
                                f"{latency:g} s)")
            streamed = ttft + sum(itl)  # the last token's time: the stream ends with it or after (r165: before passed)
            if abs(streamed - latency) > LATENCY_SLACK_S + 1e-6 * latency:  # (r167: 10 s after it passed too)
                _fail(path, "", f"latencies[{i}] {latency:g} s ends {'before' if streamed > latency else 'after'} the "
                                f"request's last token, at ttfts[{i}] + sum(itls[{i}]) = {streamed:g} s: vLLM's client "
                                f"ends a request at its last token (only token chunks advance its end)")
        if role_chunk and itl:  # 0.19's chat client: the role chunk was its first token (r129), however many
            ttft, itl = ttft + itl[0], itl[1:]  # tokens its chunks held (r139: only one a chunk was seen)
        if len(itl) > n_out - 1:  # one gap per streamed chunk after the first; a chunk holds at least one token
            _fail(path, "", f"itls[{i}] holds {len(itl)} gaps for output_lens[{i}] {n_out} token(s): at most one gap "
                            f"per token after the first")
        rows.append((start, n_in, n_out, ttft, itl, f"start_times[{i}]", latency))
    if not rows:
        _fail(path, "", "no successful requests (every entry of errors is set)" if n else "no requests in the file")
    _check_concurrency(path, data, rows)
    cut = _check_bench_totals(path, data, rows, n,
                              raw_ttfts=[float(data["ttfts"][i]) for i in range(n) if not failed_rows[i]])
    rows.sort(key=lambda r: r[0])
    _check_span(path, np.array([r[0] for r in rows]), np.array([r[0] + r[3] + sum(r[4]) for r in rows]),
                [r[5] for r in rows])
    t0 = rows[0][0]
    specs = [RequestSpec(i, r[0] - t0, r[1], r[2], max_tokens=r[2]) for i, r in enumerate(rows)]
    streamed = np.array([r[3] + sum(r[4]) for r in rows])  # the last token's time
    # vLLM's client takes E2EL (and TPOT from it) as the request's latency, to its stream's end, where it keeps
    # them (r134: the last token's time was taken, a few ms short of the figures vLLM printed)
    e2el = np.array([r[6] if r[6] is not None else streamed[i] for i, r in enumerate(rows)])
    ttft = np.array([r[3] for r in rows])
    n_out = np.array([r[2] for r in rows])
    stamped = (n_out > 1) & (streamed == ttft)  # every token in the first chunk: no time per output token measured
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where((n_out > 1) & ~stamped, (e2el - ttft) / np.maximum(n_out - 1, 1), np.nan)
    requests = _frame(specs, ttft=ttft, tpot=tpot, e2el=e2el, queue_time=np.nan, prefill=np.nan)
    itls = np.array([x for r in rows for x in r[4]], dtype=float)
    meta = {k: data[k] for k in ("date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate",
                                  "burstiness", "max_concurrency") if k in data}
    run = RealRun(str(path), path, "vllm-bench", specs, requests, itls, meta=meta)
    if cut:
        run.warnings.append(cut)
    if failed := [errors[i] or "no output and no error text" for i in range(n) if failed_rows[i]]:
        run.warnings.append(failed_warning(len(failed), n, str(failed[0])))
    if stamped.any():
        run.warnings.append(_stamped_warning(int(stamped.sum()), int(n_out[stamped].max()), "no itls after the first "
                                                                                            "token"))
    if data.get("model_id") is not None:
        if str(data["model_id"]) in HF_IDS:
            run.sets = [f"model={data['model_id']}"]
        else:
            run.meta["unmapped_model"] = str(data["model_id"])
    return run


def _check_concurrency(path: Path, data: dict, rows: list) -> None:
    """A closed loop's limit against the run's own times. vLLM's client (0.19 and 0.33 alike) stamps a request's
    start_times after taking one of max_concurrency slots and frees it after the stream's end, so the successful
    requests in flight at once (start to latencies, else to the last token: shorter, never more at once) are at
    most max_concurrency (r165: 100 in flight at a recorded 4 passed). null or 0: no limit."""
    if data.get("max_concurrency") is None:
        return
    limit = int(_number(path, "", data, "max_concurrency", integer=True, minimum=0))
    if not limit:
        return
    start = np.array([r[0] for r in rows])
    end = np.array([r[0] + (r[6] if r[6] is not None else r[3] + sum(r[4])) for r in rows]) - LATENCY_SLACK_S
    in_flight = np.searchsorted(np.sort(start), start, side="right") - np.searchsorted(np.sort(end), start,
                                                                                       side="right")
    if in_flight.max() > limit:
        over = np.flatnonzero(in_flight > limit)
        i = int(over[np.argmin(start[over])])  # the first request past the limit
        _fail(path, "max_concurrency", f"{limit}, but {int(in_flight[i]):,} requests are in flight at once when "
                                       f"{rows[i][5]} starts (each from its start_times to its end): vLLM's client "
                                       f"sends at most max_concurrency at a time: the file contradicts itself")


def _check_bench_totals(path: Path, data: dict, rows: list, n: int, raw_ttfts: list[float]) -> str | None:
    """The file's own totals against its per-request arrays (vLLM writes both from one run): counts that add up to
    another number of requests are a cut or padded copy, said as the lifecycle reader says it; counts that add up
    but split otherwise, or a token total or mean TTFT that differs, mean an array was edited or rescaled (r162:
    ttfts in ms, output_lens doubled: taken). A total of the wrong type is refused as any field (r163)."""
    for key, value in data.items():  # vLLM's client writes every figure finite (r181: a NaN duration passed)
        if isinstance(value, float) and not math.isfinite(value):
            _number(path, "", data, key)  # refused, named as any figure is
    counts = {"completed": True, "failed": True, "total_input_tokens": True, "total_output_tokens": True,
              "mean_ttft_ms": False}
    for key, integer in counts.items():
        if key in data:
            _number(path, "", data, key, integer=integer, minimum=0)
    completed, failed = (int(data[k]) if k in data else None for k in ("completed", "failed"))
    recorded = None if completed is None else completed + failed if failed is not None else completed
    if recorded is not None and recorded != (n if failed is not None else len(rows)):  # another number of requests
        return (f"its completed records {completed:,} requests{f' and failed {failed:,}' if failed is not None else ''}"
                f", but the arrays hold {len(rows):,} successful and {n - len(rows):,} failed ones: a cut or padded "
                f"copy? Its statistics are of those held")
    if failed is not None and failed != n - len(rows):  # as many requests, split otherwise
        _fail(path, "failed", f"{failed:,}, but the arrays hold {n - len(rows):,} failed requests (an error text, or "
                              f"no output and no first token): the file contradicts itself")
    held = {"total_input_tokens": sum(r[1] for r in rows), "total_output_tokens": sum(r[2] for r in rows),
            "mean_ttft_ms": 1000 * sum(raw_ttfts) / len(raw_ttfts)}
    for key, value in held.items():
        total = float(data[key]) if key in data else None
        if total is not None and not math.isclose(total, value, rel_tol=1e-3, abs_tol=1e-3):
            _fail(path, key, f"{total:,.6g}, but the per-request arrays give {value:,.6g}: the file contradicts "
                             f"itself (an array rescaled or edited: ttfts and itls are seconds)")
    return None


def _read_step_log(path: Path) -> RealRun:
    recs = []
    for i, row in _json_lines(path):
        where = f"line {i}"
        t, t_end = _number(path, where, row, "t"), _number(path, where, row, "t_end")
        if t_end < t:
            _fail(path, where, f"t_end ({t_end}) before t ({t})")
        if "requests" in row:
            shape = _shape_of_requests(path, where, row["requests"])
        else:
            shape = {k: int(_number(path, where, row, k, integer=True, minimum=0)) for k in SHAPE}
            if shape["decode_seqs"] > shape["num_seqs"] or shape["num_seqs"] < 1:
                _fail(path, where, "num_seqs must be >= 1 and >= decode_seqs")
        recs.append({"t": t, "t_end": t_end} | shape
                    | {k: row[k] for k in ("running", "waiting", "preempted") if isinstance(row.get(k), int)})
    steps = pd.DataFrame(recs)
    if (np.diff(steps["t"].to_numpy()) < 0).any():
        i = int(np.argmax(np.diff(steps["t"].to_numpy()) < 0)) + 1
        _fail(path, f"record {i + 1}", "t earlier than the step before it (steps must be in the order they ran)")
    # one engine runs one step at a time: a step starting before the last one ended is another engine's (a DP
    # engine's log, or logs appended), whose steps were timed as the gaps between them (r129: every step half)
    overlap = steps["t"].to_numpy()[1:] < steps["t_end"].to_numpy()[:-1] - 1e-6
    if overlap.any():
        i = int(np.argmax(overlap)) + 1
        _fail(path, f"record {i + 1}", f"t ({steps['t'].iloc[i]:g}) before the step before it ended (t_end "
                                       f"{steps['t_end'].iloc[i - 1]:g}): steps overlap, which one engine's do not "
                                       f"(a log of several engines, or logs appended? give one engine's)")
    return RealRun(str(path), path, "step-log", steps=step_times(steps))


def _shape_of_requests(path, where: str, reqs) -> dict:
    """Per-request records of one step -> its batch shape. A request past its prompt decodes."""
    if not isinstance(reqs, list) or not reqs:
        _fail(path, where, "requests must be a non-empty list of {new_tokens, computed_tokens, prompt_tokens}")
    chunks = []
    for j, r in enumerate(reqs):
        w = f"{where}, requests[{j}]"
        if not isinstance(r, dict):
            _fail(path, w, "not a JSON object")
        n = int(_number(path, w, r, "new_tokens", integer=True, minimum=1))
        c = int(_number(path, w, r, "computed_tokens", integer=True, minimum=0))
        p = int(_number(path, w, r, "prompt_tokens", integer=True, minimum=1))
        chunks.append((n, c, c >= p and n == 1))
    return shape_of(chunks)._asdict()


def step_times(rows: pd.DataFrame, busy_gap_s: float = 0.005) -> pd.DataFrame:
    """Each step's time: start to the next step's start while the engine stays busy (host overhead included),
    else its own run plus the typical gap between busy steps."""
    rows = rows.sort_values("t", kind="stable").reset_index(drop=True)
    gap = rows["t"].shift(-1) - rows["t_end"]
    busy = gap < busy_gap_s
    overhead = float(gap[busy].median()) if busy.any() else 0.0
    rows["time_ms"] = np.where(busy, rows["t"].shift(-1) - rows["t"], rows["t_end"] - rows["t"] + overhead) * 1000
    return rows


def check_lengths(run: RealRun, max_model_len: int) -> None:
    """A request the engine's settings could not have served means the settings are not the run's."""
    for s in run.specs:
        if s.prompt_tokens + s.output_tokens > max_model_len:
            _fail(run.path, f"request {s.request_id}", f"prompt {s.prompt_tokens} + output {s.output_tokens} tokens "
                                                       f"exceed engine.max_model_len {max_model_len}: give the "
                                                       f"settings the run was served with")


def attach_prefixes(run: RealRun, specs: list[RequestSpec]) -> RealRun:
    """The bench result has no token content; the trace it replayed has: the i-th request sent (vLLM sends in
    trace order) gets the i-th spec's shared-prefix ids, after checking the lengths agree."""
    if len(run.specs) != len(specs):
        raise ConfigError(str(run.path), f"{len(run.specs)} successful requests, the trace had {len(specs)}")
    if not any(s.prefix_ids for s in specs):
        return run  # nothing shared; a closed loop's send order need not follow the trace's
    out = []
    for r, s in zip(run.specs, specs):
        if (r.prompt_tokens, r.output_tokens) != (s.prompt_tokens, s.output_tokens):
            raise ConfigError(str(run.path), f"request {r.request_id}: lengths {r.prompt_tokens}/{r.output_tokens} "
                                             f"differ from the trace's {s.prompt_tokens}/{s.output_tokens}")
        out.append(dataclasses.replace(r, prefix_ids=s.prefix_ids, prefix_block_tokens=s.prefix_block_tokens))
    run.specs = out
    return run


def _figures(times, digits: int) -> list[float]:
    """Times to `digits` significant figures: equal for a copy, however written; unequal for a repeat's latencies
    (a copy scaled or jittered by a hair is RealRun.scaled_copy_of's)."""
    return [float(f"{t:.{digits}g}") for t in times]
