"""Real request traces in, RequestSpec lists out (and our own JSONL to write them back).

Each reader only turns its file format into the same columns (arrival seconds, prompt and
output tokens, per-row extras); the options (window, time scale, sample, limit) and the
checks are shared. A bad row is a ConfigError whose field is the file and whose message
names the line and the column, so one bad row in 20,000 can be fixed from the CLI's
one-line error instead of a traceback.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import re
import warnings
from functools import partial
from pathlib import Path
from typing import Callable, Iterable, Iterator, NoReturn, NotRequired, Sequence, TypedDict

import numpy as np
import pandas as pd

from servesim.simulator.errors import JSON_ERRORS, ConfigError, json_problem, unique_keys
from servesim.simulator.files import appended_results, repeated_columns, where_looked
from servesim.workloads.settings import MAX_INT, MAX_SECONDS, MAX_TOKENS
from servesim.workloads.spec import RequestSpec, prefix_chain_problem

TRACE_FORMATS = ("azure", "mooncake", "vllm_timed_trace", "burstgpt", "timed_trace", "vllm_bench", "servesim",
                 "sharegpt_stats")
MOONCAKE_BLOCK_TOKENS = 512  # Mooncake's hash_ids: one id per 512 prompt tokens
# block sizes tried, in order, when a file's hash_ids do not say theirs: Mooncake's first, then vLLM's and others
HASH_BLOCK_CANDIDATES = (512, 16, 32, 64, 128, 256, 1024, 2048)

_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(RequestSpec))
_MISSING = object()


class LengthStats(TypedDict):
    p50: float
    p90: float
    p99: float
    mean: float
    max: int


class TraceInfo(TypedDict):
    rows: int
    duration_s: float | None  # None: a lengths-only file, no arrival times
    rate: float | None  # rows per second; None when all arrive at once or no times are recorded
    prompt: LengthStats | None
    output: LengthStats | None
    prefix_reuse: float | None  # None: no request carries prefix ids
    sessions: int | None  # None: no request carries a session id
    skipped: int  # rows the reader left out on purpose (e.g. BurstGPT's failed requests)
    skipped_rows: NotRequired[str]  # how many, and why: a replay says it (r159: dropped by run, config, write unsaid)
    content_ids: NotRequired[bool]  # the file names prompt blocks (hash_ids, prefix_ids), even if dropped
    format: NotRequired[str]
    path: NotRequired[str]
    recorded_priority: NotRequired[list[bool]]  # per request read: its row records a priority (a replay keeps it)
    note: NotRequired[str]  # how a file whose format was inferred was read, where the keys leave a doubt
    unordered: NotRequired[str]  # rows that arrive before the row above them: replayed in arrival order, said


@dataclasses.dataclass
class _Rows:
    """A file's requests as columns, before any option: one representation for every format."""

    arrival: np.ndarray | None  # seconds; None for lengths-only files
    prompt: np.ndarray
    output: np.ndarray
    extra: list[dict] | None = None  # per-row RequestSpec keyword arguments
    skipped: int = 0
    skipped_why: str = ""  # which rows were skipped, and why: said wherever the rows are read (r159)
    content_ids: bool = False  # some row names its prompt blocks (kept even when use_hash_ids drops them)
    note: str | None = None  # how an ambiguous file was read, said to the user
    unread: tuple[str, ...] = ()  # keys or columns the format's reader takes nothing from, said (r145)


# ---------------------------------------------------------------- errors

def _fail(path, where: str, problem: str) -> NoReturn:
    raise ConfigError(str(path), f"{where}: {problem}" if where else problem)


def _show(value) -> str:
    """repr, cut short: a message must stay one readable line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _not_count(value) -> str:
    return f"expected a non-negative integer, got {_show(value)}"


def _too_few(value, least: int, role: str) -> str:
    return f"expected at least {least} {role} token{'s' if least > 1 else ''}, got {value}"


def _too_many(value) -> str:
    return f"{_show(value)} tokens: at most {MAX_TOKENS:,} in one request"


def _not_seconds(value) -> str:
    return f"expected a non-negative number, got {_show(value)}"


# ---------------------------------------------------------------- CSV

def _longer_than_header(path: Path) -> tuple[str, str]:
    """The first row with more fields than the header (pandas took its first field as an index before)."""
    import csv

    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = csv.reader(f)
        width = len(next(rows))
        for line, row in enumerate(rows, 2):
            if len(row) > width:
                return f"line {line}", f"{len(row)} fields, but the header names {width}"
    return "", f"a row holds more fields than the header names ({width})"


class _Csv:
    """Vectorised column checks that report the earliest bad row, whichever column it is in."""

    def __init__(self, path: Path, needed: Sequence[str]):
        self.path = path
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            first, rest = f.readline(), f.read(1)
        if not first.strip() and (rest or first):  # r147: read as an empty file, or as a header naming no column
            _fail(path, "line 1", "blank: a CSV's first line is its header (the column names)")
        try:
            with warnings.catch_warnings():  # a row longer than the header: pandas drops its last fields, warning
                warnings.simplefilter("error", pd.errors.ParserWarning)
                df = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False, compression=None,
                                 skipinitialspace=True, encoding="utf-8-sig", index_col=False)  # plain text only
        except pd.errors.ParserWarning:
            _fail(path, *_longer_than_header(path))
        except pd.errors.EmptyDataError:
            _fail(path, "", "empty file: no requests")
        except pd.errors.ParserError as e:  # pandas counts lines 1-based, with the header and blank lines
            ragged = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e))
            if ragged:
                want, line, saw = ragged.groups()
                _fail(path, f"line {line}", f"expected {want} fields as in the header, saw {saw}")
            _fail(path, "", f"malformed CSV: {str(e).split('C error: ')[-1].strip()}")
        df.columns = [str(c).strip() for c in df.columns]
        for col in repeated_columns(path):  # pandas keeps the first copy and renames the others (col.1)
            _fail(path, f"line 1, column {col}", "appears twice in the header: which one is meant?")
        for col in needed:
            if col not in df.columns:
                _fail(path, f"line 1, column {col}", f"missing; found columns: {', '.join(df.columns)}")
        filled = ~(df == "").all(axis=1).to_numpy()  # blank lines are not rows, but still count as lines
        self.df = df[filled].reset_index(drop=True)
        starts, fields = _record_lines(path, len(df), quoted_or_blank=not filled.all())
        self.lines = starts[filled]  # each row's own line (r160: a quoted field's line break shifted them)
        # lines of empty fields (`,,`), not blank ones: skipped, and said (r159: unsaid)
        self.commas: list[int] = [int(n) for n in starts[~filled & (fields > 0)]]
        if self.df.empty:
            _fail(path, "", "no requests: the file has a header but no rows")
        self.first: tuple[int, str, str] | None = None

    def flag(self, bad: np.ndarray, col: str, problem: Callable[[int], str]) -> None:
        idx = np.flatnonzero(bad)
        if idx.size and (self.first is None or idx[0] < self.first[0]):
            self.first = (int(idx[0]), col, problem(int(idx[0])))

    def counts(self, col: str, least: int = 0, role: str = "") -> np.ndarray:
        raw = self.df[col]
        num = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
        bad = ~(np.isfinite(num) & (num >= 0) & (num == np.floor(num)))
        self.flag(bad, col, lambda i: _not_count(raw.iloc[i]))
        huge = ~bad & (num > MAX_TOKENS)  # refused before the cast, which would wrap it around
        self.flag(huge, col, lambda i: _too_many(raw.iloc[i]))
        num = np.where(bad | huge, 0, num).astype(np.int64)
        if least:
            self.flag(~bad & (num < least), col, lambda i: _too_few(num[i], least, role))
        return num

    def seconds(self, col: str) -> np.ndarray:
        raw = self.df[col]
        num = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
        self.flag(~(np.isfinite(num) & (num >= 0)), col, lambda i: _not_seconds(raw.iloc[i]))
        return num

    def datetimes(self, col: str) -> np.ndarray:
        """Seconds since the earliest timestamp (naive times are taken as UTC)."""
        raw = self.df[col]
        ts = pd.to_datetime(raw, format="ISO8601", errors="coerce", utc=True)
        bad = ts.isna().to_numpy()
        self.flag(bad, col, lambda i: f"cannot parse the timestamp {_show(raw.iloc[i])}")
        # naive and offset times mixed: the naive ones read as UTC, one row's +05:00 made a 5-hour gap (r128)
        aware = raw.astype(str).str.strip().str.contains(OFFSET_AT_END, regex=True).to_numpy()
        with_offset = int(aware.sum())
        if 0 < with_offset < len(aware):  # the odd ones out named: the rows unlike most
            most = with_offset * 2 > len(aware)
            others = with_offset if most else len(aware) - with_offset
            self.flag(~bad & (aware != most), col,
                      lambda i: f"the timestamp {_show(raw.iloc[i])} {'has' if aware[i] else 'lacks'} a UTC offset, "
                                f"where {others:,} of the {len(aware):,} rows {'have' if most else 'lack'} one: give "
                                f"every timestamp in one time zone")
        # a timestamp cut short (2023-11, 2023-11-16) beside whole ones read as midnight, the 1st (r159: 320 days)
        parts = raw.astype(str).str.extract(_TIMESTAMP_PARTS).notna().sum(axis=1).to_numpy() + 1
        most = int(parts[~bad].max()) if (~bad).any() else 0
        whole = int((parts[~bad] == most).sum())

        def lacks(i: int) -> str:
            gone = [name for level, name in ((2, "month"), (3, "day"), (4, "time of day")) if parts[i] < level <= most]
            return ", ".join(gone[:-1]) + (" and " if gone[1:] else "") + gone[-1]

        self.flag(~bad & (parts < most), col,
                  lambda i: f"the timestamp {_show(raw.iloc[i])} lacks the {lacks(i)} that {whole:,} of the "
                            f"{len(parts):,} rows give: it would be read as {ts.iloc[i]:%Y-%m-%d %H:%M} (a "
                            f"timestamp cut short?)")
        return (ts - ts.min()).dt.total_seconds().to_numpy()

    def skips(self, failed: int = 0, failed_why: str = "") -> dict:
        """_Rows' skipped and skipped_why: failed requests (a reader's own), rows of only commas."""
        why = [f"{failed:,} failed request{'s' if failed > 1 else ''} ({failed_why})"] if failed else []
        if n := len(self.commas):
            shown = ", ".join(map(str, self.commas[:3])) + (", ..." if n > 3 else "")
            why.append(f"{n:,} row{'s' if n > 1 else ''} of empty fields, only commas (line{'s' if n > 1 else ''} "
                       f"{shown})")
        return {"skipped": failed + n, "skipped_why": ", ".join(why)}

    def unread(self, read: Sequence[str]) -> tuple[str, ...]:
        """The columns no reader takes, said (r145); a header-less one: a trailing comma's (r150)."""
        return tuple("a column without a name (a comma ending each row?)" if str(c).startswith("Unnamed: ") else c
                     for c in self.df.columns if c not in read)

    def done(self) -> None:
        if self.first is not None:
            i, col, problem = self.first
            _fail(self.path, f"line {self.lines[i]}, column {col}", problem)


def _record_lines(path: Path, rows: int, quoted_or_blank: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each data row's first line, and its count of fields (0: a blank line), as the csv module reads the file: a
    quoted field may hold a line break, so a row is not always one line (only read so where it may not be)."""
    if not quoted_or_blank:
        with open(path, "rb") as f:
            quoted_or_blank = b'"' in f.read()
    if quoted_or_blank:
        import csv

        starts, fields = [], []
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
            reader = csv.reader(f)
            next(reader, None)  # the header
            line = reader.line_num
            for record in reader:
                starts.append(line + 1)
                fields.append(len(record))
                line = reader.line_num
        if len(starts) == rows:  # as pandas read them (else pandas' own reading stands: one line a row)
            return np.array(starts), np.array(fields)
    return np.arange(rows) + 2, np.ones(rows, dtype=int)


# a timestamp's parts after its year: month, day, a time of day (2023, 2023-11, 20231116, 2023-11-16T10:00)
_TIMESTAMP_PARTS = r"^\s*\d{4}([-/]?\d{1,2})?([-/]?\d{1,2})?([T\s]+\d)?"
OFFSET_AT_END = r"\d:\d\d(?::\d\d(?:\.\d+)?)?\s*(?:Z|[+-]\d\d(?::?\d\d)?)$"  # a time of day, then its UTC offset


_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_HASH_ID_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")


def _read_azure(path: Path) -> _Rows:
    csv = _Csv(path, _AZURE_COLUMNS)
    arrival = csv.datetimes("TIMESTAMP")
    prompt = csv.counts("ContextTokens", 1, "prompt")
    output = csv.counts("GeneratedTokens", 1, "output")
    csv.done()
    return _Rows(arrival, prompt, output, unread=csv.unread(_AZURE_COLUMNS), **csv.skips())


_BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens", "Total tokens")


def _read_burstgpt(path: Path) -> _Rows:
    """Zero response tokens marks a failed request in BurstGPT: left out, but counted. Its Model and Log Type are
    not read: every row is replayed (said, r151: ChatGPT's and GPT-4's traffic mixed unsaid)."""
    csv = _Csv(path, _BURSTGPT_COLUMNS[:3])
    arrival = csv.seconds("Timestamp")
    prompt = csv.counts("Request tokens")
    output = csv.counts("Response tokens")
    ok = output > 0
    csv.flag(ok & (prompt < 1), "Request tokens", lambda i: _too_few(0, 1, "prompt"))
    df = csv.df
    if "Total tokens" in df:  # the sum of the two, where given: else the row is not what it says
        total = pd.to_numeric(df["Total tokens"], errors="coerce").to_numpy(float)
        csv.flag(total != prompt + output, "Total tokens",
                 lambda i: f"{df['Total tokens'].iloc[i]!r:.20} is not Request tokens + Response tokens "
                           f"({prompt[i] + output[i]})")
    csv.done()
    if not ok.any():
        _fail(path, "", f"no requests: all {len(ok)} rows are failed requests (0 response tokens)")
    return _Rows(arrival[ok], prompt[ok], output[ok], unread=csv.unread(_BURSTGPT_COLUMNS),
                 **csv.skips(int((~ok).sum()), "0 Response tokens"))


_LENGTH_STATS_COLUMNS = ("num_prefill_tokens", "num_decode_tokens", "num_total_tokens", "pd_ratio")


def _read_length_stats(path: Path) -> _Rows:
    csv = _Csv(path, _LENGTH_STATS_COLUMNS[:2])
    prompt = csv.counts("num_prefill_tokens", 1, "prompt")
    output = csv.counts("num_decode_tokens", 1, "output")
    df = csv.df  # the derived columns, where given, must agree with the two lengths: else the row is not what it says
    if "num_total_tokens" in df:
        total = pd.to_numeric(df["num_total_tokens"], errors="coerce").to_numpy(float)
        csv.flag(total != prompt + output, "num_total_tokens",
                 lambda i: f"{df['num_total_tokens'].iloc[i]!r:.20} is not num_prefill_tokens + num_decode_tokens "
                           f"({prompt[i] + output[i]})")
    if "pd_ratio" in df:
        ratio = pd.to_numeric(df["pd_ratio"], errors="coerce").to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            off = ~(np.abs(ratio - prompt / output) <= 1e-6 * (np.abs(ratio) + 1))
        csv.flag(off, "pd_ratio", lambda i: f"{df['pd_ratio'].iloc[i]!r:.20} is not num_prefill_tokens / "
                                            f"num_decode_tokens ({prompt[i] / max(output[i], 1):g})")
    csv.done()
    # its other columns said, as Azure's are (r159)
    return _Rows(None, prompt, output, unread=csv.unread(_LENGTH_STATS_COLUMNS), **csv.skips())


# ---------------------------------------------------------------- JSON

class _Obj:
    """One JSON object and where it came from, so every check can say where it failed."""

    def __init__(self, path: Path, where: str, obj, key_prefix: str = ""):
        self.path, self.where, self.obj, self.prefix = path, where, obj, key_prefix
        if not isinstance(obj, dict):
            _fail(path, self.at(key_prefix.rstrip(".")), f"expected a JSON object, got {type(obj).__name__} {_show(obj)}")

    def at(self, key: str) -> str:
        return ", ".join(filter(None, [self.where, f"key {key}" if key else ""]))

    def fail(self, key: str, problem: str) -> NoReturn:
        _fail(self.path, self.at(self.prefix + key), problem)

    def get(self, key: str, default=_MISSING):
        if key in self.obj:
            return self.obj[key]
        if default is _MISSING:
            self.fail(key, f"missing; found keys: {', '.join(map(str, self.obj)) or 'none'}")
        return default

    def integer(self, key: str, default=_MISSING, *, least: int | None = 0, role: str = ""):
        v = self.get(key, default)
        if v is None and default is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or (least is not None and v < 0):
            self.fail(key, _not_count(v) if least is not None else f"expected an integer, got {_show(v)}")
        if least and v < least:
            self.fail(key, _too_few(v, least, role))
        if abs(v) > (MAX_TOKENS if role else MAX_INT):
            self.fail(key, _too_many(v) if role else f"{_show(v)}: at most {MAX_INT:,} in size")
        return v

    def seconds(self, key: str, per_second: int = 1) -> float:
        v = self.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            self.fail(key, _not_seconds(v))
        return v / per_second

    def prefix_ids(self, key: str, prompt: int, block: int, exact: bool, output: int = 0, counted: bool = True
                   ) -> tuple[int, ...]:
        """Ids must cover the prompt block by block (the last block partial): at most, or exactly. output: ids may
        run on over that many output tokens (a servesim file's, as the API's RequestSpec allows: r159)."""
        ids = self.get(key, [])
        if not isinstance(ids, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in ids):
            self.fail(key, f"expected a list of integers, got {_show(ids)}")
        if any(abs(x) > MAX_INT for x in ids):  # as the API's RequestSpec takes them (exact in JSON and parquet)
            self.fail(key, f"ids at most {MAX_INT:,} in size, got {_show(max(ids, key=abs))}")
        blocks = -(-(prompt + output) // block) if block > 0 else 0
        if ids and counted and (len(ids) > blocks or (exact and len(ids) != blocks)):
            if output:
                self.fail(key, f"expected at most {blocks} ids (one per {block}-token block of the {prompt} prompt "
                               f"and {output} output tokens), got {len(ids)}")
            if not exact and block == 1:  # blocks of a size the file resolves later: only the bound is known (r157)
                self.fail(key, f"expected at most {blocks} ids (one per block of the {prompt} prompt tokens, a "
                               f"block at least 1 token), got {len(ids)}")
            self.fail(key, f"expected {'' if exact else 'at most '}{blocks} ids (one per {block}-token block "
                           f"of {prompt} prompt tokens), got {len(ids)}")
        return tuple(ids)


class _Entry(_Obj):
    """Entry i of a bench result's per-request lists, named as JSON indexes it (input_lens[3]) and in `compare`'s
    words (r165: "request 4, key input_lens: expected" here was "request 3: input_lens must be" there)."""

    def __init__(self, path: Path, index: int, obj: dict):
        super().__init__(path, "", obj)
        self.index = index

    def fail(self, key: str, problem: str) -> NoReturn:
        _fail(self.path, "", f"{key}[{self.index}] {problem.replace('expected ', 'must be ', 1)}")


def _json_lines(path: Path) -> Iterator[_Obj]:
    with path.open(encoding="utf-8-sig") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line.rstrip("\n"), object_pairs_hook=unique_keys)  # the error's column: this line's
            except json.JSONDecodeError as e:
                _fail(path, f"line {n}, column {e.colno}", f"invalid JSON: {e.msg}")
            except JSON_ERRORS as e:
                _fail(path, f"line {n}", f"not a request record: {json_problem(e)}")
            yield _Obj(path, f"line {n}", obj)


def _collect(path: Path, objs: Iterable[_Obj], rows_of: Callable[[_Obj], Iterable[tuple]]) -> _Rows:
    """Columns from objects, each giving (arrival, prompt, output, extra-kwargs or None) rows."""
    arrival, prompt, output, extra = [], [], [], []
    for obj in objs:
        for a, p, o, x in rows_of(obj):
            arrival.append(a)
            prompt.append(p)
            output.append(o)
            extra.append(x or {})
    if not prompt:
        _fail(path, "", "no requests in the file")
    return _Rows(np.array(arrival, dtype=float), np.array(prompt, dtype=np.int64),
                 np.array(output, dtype=np.int64), extra if any(extra) else None)


def _chained(obj: _Obj, key: str, ids, chains: dict, block: int = 0):
    """The row's ids, each at the place (after the id, of the block size) the file first gave it
    (prefix_chain_problem). block 0: one size for the whole file, resolved after reading. chains None: the ids
    are dropped, and not checked."""
    if ids and chains is not None and (problem := prefix_chain_problem(ids, chains, block)):
        obj.fail(key, problem)
    return ids


def _read_hash_id_rows(path: Path, check_ids: bool = True) -> _Rows:
    """A Mooncake or vLLM timed-trace file, and the keys of its records no reader takes. check_ids: false where the
    ids are dropped (use_hash_ids: false, a lengths file): their chains and counts go unchecked (r159)."""
    unread: set = set()
    rows = _collect(path, _json_lines(path), partial(_hash_id_rows, chains={} if check_ids else None, unread=unread))
    rows.unread = tuple(sorted(unread))
    return rows


def _hash_id_rows(obj: _Obj, chains: dict | None, unread: set):
    """Mooncake's and vLLM's timed-trace rows: the same keys, timestamps as written (ms for Mooncake, seconds for
    vLLM's --timed-trace-sec-multiplier 1: _read divides once it knows which); the ids' block size is resolved
    over the file."""
    unread.update(k for k in obj.obj if k not in _HASH_ID_KEYS)
    prompt = obj.integer("input_length", least=1, role="prompt")
    ids = _chained(obj, "hash_ids", obj.prefix_ids("hash_ids", prompt, 1, exact=False, counted=chains is not None),
                   chains)
    yield (obj.seconds("timestamp"), prompt,
           obj.integer("output_length", least=1, role="output"),
           {"prefix_ids": ids, "prefix_block_tokens": 0, "_where": obj.where} if ids else None)


def _hash_misfit(rows: _Rows, b: int):
    """The first (row, its extra) whose hash_ids count does not fit blocks of b tokens, or None."""
    return next(((i, x) for i, x in enumerate(rows.extra or ()) if x and x.get("prefix_ids")
                 and len(x["prefix_ids"]) != -(-int(rows.prompt[i]) // b)), None)


def _resolve_hash_blocks(path: Path, rows: _Rows, block: int | None, use_ids: bool,
                         first: int = MOONCAKE_BLOCK_TOKENS, describing: bool = False) -> _Rows:
    """hash_ids name one block each, all of one size: the given one, else the first candidate that every row's
    id count fits exactly (ceil(prompt / size) ids). The format's own size (`first`) is tried first."""
    if not rows.extra or not use_ids:
        return rows
    hashed = [(i, x) for i, x in enumerate(rows.extra) if x]
    misfit = partial(_hash_misfit, rows)

    def fail(b: int, row, also: str = "") -> None:
        i, x = row
        p = int(rows.prompt[i])
        _fail(path, f"{x['_where']}, key hash_ids", f"expected {-(-p // b)} ids (one per {b}-token block of {p} "
                                                    f"prompt tokens), got {len(x['prefix_ids'])}{also}")

    if block is None:
        block = next((b for b in (first, *HASH_BLOCK_CANDIDATES) if misfit(b) is None), None)
        if block is None and describing:  # described by id, their size unknown (prefix_block_tokens 0)
            tried = ", ".join(str(b) for b in dict.fromkeys((first, *HASH_BLOCK_CANDIDATES)))
            rows.note = (f"{path}: its hash_ids fit no block size tried ({tried}), so their size is not known "
                         f"(prefix reuse is counted by id); to check them, describe a scenario replaying the file "
                         f"with workload.hash_block_tokens")
            for _, x in hashed:
                x.pop("_where")
            return rows
        if block is None:
            fail(first, misfit(first),
                 f"; no other block size ({', '.join(str(b) for b in HASH_BLOCK_CANDIDATES if b != first)}) "
                 f"fits every row either: "
                 f"set hash_block_tokens")
    elif (row := misfit(block)) is not None:
        fail(block, row)
    for _, x in hashed:
        x.pop("_where")
        x["prefix_block_tokens"] = block
    return rows


_TIMED_TRACE_KEYS = ("timestamp", "queries")
_QUERY_KEYS = ("prompt_length", "response_length")


def _read_timed_trace(path: Path) -> _Rows:
    """vLLM's multi-query timed trace, and the keys of its rows and queries no reader takes (r159: unsaid)."""
    unread: set = set()
    rows = _collect(path, _json_lines(path), partial(_timed_trace_rows, unread=unread))
    rows.unread = tuple(sorted(unread))
    return rows


def _timed_trace_rows(obj: _Obj, unread: set):
    unread.update(k for k in obj.obj if k not in _TIMED_TRACE_KEYS)
    t = obj.seconds("timestamp", per_second=1000)
    queries = obj.get("queries")
    if not isinstance(queries, list) or not queries:  # (r170: an empty one dropped its line's timestamp unsaid)
        obj.fail("queries", f"expected a list of one or more objects, got {_show(queries)}")
    for k, q in enumerate(queries):
        q = _Obj(obj.path, obj.where, q, key_prefix=f"queries[{k}].")
        unread.update(f"queries[].{key}" for key in q.obj if key not in _QUERY_KEYS)
        yield (t, q.integer("prompt_length", least=1, role="prompt"),
               q.integer("response_length", least=1, role="output"), None)


def _servesim_rows(obj: _Obj, seen: dict, chains: dict | None):
    """seen: the file's request ids so far, and where; a repeated one is two records of one request."""
    for key in obj.obj:
        if key not in _SPEC_FIELDS:
            obj.fail(key, f"unknown; a RequestSpec has {', '.join(_SPEC_FIELDS)}")
    rid = obj.integer("request_id", None, least=0)  # checked, then kept (every row gives one) or renumbered
    if rid is not None:
        if rid in seen:
            obj.fail("request_id", f"{rid} was given on {seen[rid]} too: one request per id")
        seen[rid] = obj.where
    prompt = obj.integer("prompt_tokens", least=1, role="prompt")
    slo = obj.get("slo_class", None)
    if slo is not None and not (isinstance(slo, str) and slo.strip() and slo.isprintable() and len(slo) <= 100):
        obj.fail("slo_class", f"expected a class name (printable text of 1 to 100 characters) or null, got {_show(slo)}")
    block = obj.integer("prefix_block_tokens", 0)
    if not isinstance(obj.get("prefix_ids", []), list):  # named before the block size it would need (r149)
        obj.fail("prefix_ids", f"expected a list of integers, got {_show(obj.get('prefix_ids'))}")
    if obj.get("prefix_ids", []) and not block:
        obj.fail("prefix_block_tokens", "must be > 0 when prefix_ids are given")
    if block and not obj.get("prefix_ids", []):
        obj.fail("prefix_block_tokens", f"{block} names the tokens of each prefix id, but the row has no prefix_ids")
    if block > MAX_TOKENS:
        obj.fail("prefix_block_tokens", f"at most {MAX_TOKENS:,} tokens, got {block:,}")
    output = obj.integer("output_tokens", least=1, role="output")  # the ids may cover it too, as the API's may
    ids = _chained(obj, "prefix_ids", obj.prefix_ids("prefix_ids", prompt, block, exact=False, output=output,
                                                     counted=chains is not None), chains, block)
    session, turn = obj.integer("session_id", None, least=None), obj.integer("turn", 0)
    if session is not None and "turn" in obj.obj:  # numbered turns are one row each, in time order (r170, r171)
        if ("turn", session, turn) in seen:
            obj.fail("turn", f"session {session}'s turn {turn} was given on {seen['turn', session, turn]} too: one "
                             f"request per turn")
        seen["turn", session, turn] = obj.where
        at, turns = obj.seconds("arrival_time"), seen.setdefault(("turns", session), [])
        # a later turn follows the earlier one's answer: strictly after it (r172: two at one instant ran at once);
        # the turns so far are in order, so the neighbours alone are checked (r173: every one was, n^2)
        k = bisect.bisect(turns, (turn,))
        for t, a in turns[max(k - 1, 0):k + 1]:
            if t < turn and a >= at or t > turn and a <= at:
                obj.fail("turn", f"session {session}'s turn {turn} arrives at {at:g} s, "
                                 f"{'not after' if t < turn else 'not before'} its turn {t} (at {a:g} s): a "
                                 f"session's turns arrive in their order, each after the one before")
        turns.insert(k, (turn, at))
    yield (obj.seconds("arrival_time"), prompt, output,
           {"max_tokens": obj.integer("max_tokens", None, least=1, role="output"),
            "priority": obj.integer("priority", None, least=None), "slo_class": slo,  # None: not recorded
            "session_id": session, "turn": turn, "prefix_ids": ids, "prefix_block_tokens": block, "request_id": rid})


def _read_vllm_bench(path: Path) -> _Rows:
    """Request i is entry i of every per-request list; failed ones (an `errors` entry) are counted, not replayed."""
    text = ""
    try:
        text = path.read_text(encoding="utf-8-sig")
        doc = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as e:
        if count := appended_results(text):  # r129: said as broken JSON
            _fail(path, "", f"holds {count} results, one a line, as `vllm bench serve --append-result` adds them: "
                            f"a trace replays one run (give each line as a file of its own)")
        _fail(path, f"line {e.lineno}, column {e.colno}", f"invalid JSON: {e.msg}")
    except JSON_ERRORS as e:
        _fail(path, "", f"not a vLLM bench result: {json_problem(e)}")
    top = _Obj(path, "", doc)
    for key, value in (doc.items() if isinstance(doc, dict) else ()):  # vLLM writes every figure finite (r181)
        if isinstance(value, float) and not math.isfinite(value):
            top.fail(key, f"must be a finite number, got {value}")
    if "start_times" not in doc:
        top.fail("start_times", "missing: a result without per-request start times cannot be replayed "
                                "(save it with --save-detailed from a vLLM that records start_times); "
                                f"found keys: {', '.join(map(str, doc))}")
    keys = ("start_times", "input_lens", "output_lens")
    lists = {k: top.get(k) for k in keys} | ({"errors": doc["errors"]} if doc.get("errors") else {})
    sizes = [len(v) for v in lists.values() if isinstance(v, list)]
    # the count most lists agree on (r143: a short start_times was blamed on input_lens), start_times' on a tie
    n = max(sizes, key=lambda m: (sizes.count(m), m == sizes[0])) if sizes else None
    lists.setdefault("errors", [""] * (n or 0))
    for k, v in lists.items():
        if not isinstance(v, list) or len(v) != n:
            top.fail(k, f"expected a list with one entry per request{'' if n is None else f' ({n})'}, got {_show(v)}")
    errors = lists["errors"]
    objs = [_Entry(path, i, {k: lists[k][i] for k in keys}) for i in range(len(errors)) if not errors[i]]
    if errors and not objs:
        top.fail("errors", f"no requests: all {len(errors)} failed (each has an error), none can be replayed")
    rows = _collect(path, objs, lambda o: [(o.seconds("start_times"), o.integer("input_lens", least=1, role="prompt"),
                                            o.integer("output_lens", least=1, role="output"), None)])
    rows.arrival -= rows.arrival.min()
    rows.skipped = len(errors) - len(objs)
    rows.skipped_why = f"{rows.skipped:,} failed request{'s' if rows.skipped > 1 else ''} (an entry in errors)"
    return rows


_READERS: dict[str, Callable[[Path], _Rows]] = {
    "azure": _read_azure,
    "mooncake": _read_hash_id_rows,
    "vllm_timed_trace": _read_hash_id_rows,
    "burstgpt": _read_burstgpt,
    "timed_trace": _read_timed_trace,
    "vllm_bench": _read_vllm_bench,
    "servesim": lambda p, check_ids=True: _collect(p, _json_lines(p), partial(_servesim_rows, seen={},
                                                                                  chains={} if check_ids else None)),
    "sharegpt_stats": _read_length_stats,
}

_JSON_KEYS = (("input_lens", "vllm_bench"), ("queries", "timed_trace"), ("input_length", "mooncake"),
              ("prompt_tokens", "servesim"), ("backend", "vllm_bench"))  # a result without --save-detailed: said
_CSV_COLUMNS = (("ContextTokens", "azure"), ("Request tokens", "burstgpt"), ("num_prefill_tokens", "sharegpt_stats"))


# ---------------------------------------------------------------- public API

_COMPRESSED = ((b"\x1f\x8b", "a gzip", "gunzip"), (re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), "a bzip2", "bunzip2"),
               (b"\xfd7zXZ\x00", "an xz", "unxz"),
               (b"\x28\xb5\x2f\xfd", "a zstd", "unzstd"), (b"PK\x03\x04", "a zip", "unzip"),
               (b"\x04\x22\x4d\x18", "an lz4", "unlz4"))


def existing(path) -> Path:
    """A trace path that is a plain file, or one line naming it. A compressed one is refused whatever the format:
    pandas decompressed a CSV named .gz when the format was given, and skipped the header's checks (r159)."""
    path = Path(path)
    if not path.exists():
        _fail(path, "", f"no such file{where_looked(path)}")
    if not path.is_file():
        _fail(path, "", "not a file")
    try:
        with path.open("rb") as f:
            head = f.read(10)
    except OSError:  # (a reader opening it names why)
        head = b""
    for magic, kind, tool in _COMPRESSED:  # bzip2's by its block magic too (r160: a column BZhash was one)
        if head.startswith(magic) if isinstance(magic, bytes) else magic.match(head):
            _fail(path, "", f"{kind}-compressed file, not a trace: traces are read as plain text (CSV or JSON "
                            f"lines); decompress it first ({tool})")
    return path


def infer_format(path) -> str:
    """The format from the extension and the first line, so users rarely need to name it."""
    path = existing(path)
    with path.open("rb") as f:
        head = f.read(4096)
    if head.startswith(b"PAR1") or b"\x00" in head:  # its bytes would be quoted as the "first line"
        what = "a parquet file" if head.startswith(b"PAR1") else "a binary file"
        _fail(path, "", f"{what}, not a trace: traces are text, CSV or JSON lines (docs: Workloads)")
    with path.open(encoding="utf-8-sig", errors="replace") as f:
        first = next((line.strip() for line in f if line.strip()), "")
    if not first:
        _fail(path, "", "empty file: no requests")
    is_json = path.suffix.lower() in (".json", ".jsonl") or first.startswith(("{", "["))
    spread = False  # one JSON document over several lines
    if is_json:
        try:
            doc = json.loads(first)
        except JSON_ERRORS:  # a pretty-printed single object (vllm bench results)
            try:
                doc = json.loads(path.read_text(encoding="utf-8-sig"))
                spread = True
            except json.JSONDecodeError as exc:  # (r150: a truncated result file was "no object on its first line")
                _fail(path, f"line {exc.lineno}, column {exc.colno}", f"invalid JSON ({exc.msg}): neither JSON lines "
                                                                      f"nor one document (a file cut short?)")
            except (*JSON_ERRORS, UnicodeDecodeError):
                doc = None
        found = next((fmt for key, fmt in _JSON_KEYS if isinstance(doc, dict) and key in doc), None)
        if spread and found not in (None, "vllm_bench"):  # a JSON-lines format's object spread over lines
            _fail(path, "line 1", "no JSON object on its first line: a trace is JSON lines, one request's object a "
                                  "line (this one's is spread over several)")
    else:
        header = {c.strip().strip('"') for c in first.split(",")}
        found = next((fmt for col, fmt in _CSV_COLUMNS if col in header), None)
    if found is None and is_json and _conversations(doc):
        _fail(path, "", "a ShareGPT conversations file: its turns are text, and servesim counts tokens without a "
                        "tokenizer; give its lengths instead (a sharegpt_stats CSV: num_prefill_tokens, "
                        "num_decode_tokens, one row per request)")
    if found is None and is_json and (not first.startswith("{") or first in ("{", "{}")):  # a list, a spread object
        _fail(path, "line 1", "no JSON object on its first line: a trace is JSON lines, one request's object a line "
                              "(or one vllm bench result document)")
    if found is None and re.fullmatch(r"[A-Za-z_]\w*:(\s.*)?", first):  # r138: a scenario named otherwise
        _fail(path, "line 1", f"{_show(first)} opens a YAML mapping, not a trace: name a scenario .yaml or .yml")
    if found is None:
        _fail(path, "line 1", f"cannot tell the trace format from {_show(first)}; "
                              f"give it explicitly, one of {', '.join(TRACE_FORMATS)}")
    return found


def _conversations(doc) -> bool:
    """ShareGPT's JSON: a list of {"conversations": [{"from": ..., "value": text}, ...]} (or one such object)."""
    first = doc[0] if isinstance(doc, list) and doc else doc
    return isinstance(first, dict) and isinstance(first.get("conversations"), list)


def check_format(fmt: str, field: str = "format") -> None:
    """A trace format servesim reads, or one line naming `field` (the workload's `format`, describe's --format)."""
    if fmt not in TRACE_FORMATS:
        raise ConfigError(field, f"unknown trace format {fmt!r}; expected one of {', '.join(TRACE_FORMATS)}")


def _read(path, fmt: str | None, hash_block_tokens: int | None = None, use_hash_ids: bool = True,
          describing: bool = False) -> tuple[Path, str, _Rows]:
    """describing: hash_ids whose block size no candidate fits are described (counted by id), not refused: describe
    cannot set hash_block_tokens (r159)."""
    path = existing(path)
    inferred = fmt is None
    if inferred:
        fmt = infer_format(path)
    check_format(fmt)
    try:
        rows = _READERS[fmt](path, check_ids=use_hash_ids) if fmt in _ID_FORMATS else _READERS[fmt](path)
    except UnicodeDecodeError as e:
        _fail(path, "", f"not UTF-8 text (byte {e.start}: {e.reason})")
    rows.content_ids = bool(rows.extra) and any(x.get("prefix_ids") for x in rows.extra)
    if fmt in HASH_ID_FORMATS:
        rows = _resolve_hash_blocks(path, rows, hash_block_tokens, use_hash_ids, HASH_ID_FORMATS[fmt], describing)
    if inferred and fmt == "mooncake":
        fmt, note = _mooncake_or_vllm(path, rows, hash_block_tokens)  # (after the ids' own note, if any)
        rows.note = f"{note}; {rows.note.removeprefix(f'{path}: ')}" if note and rows.note else note or rows.note
    if fmt == "mooncake":
        rows.arrival = rows.arrival / 1000  # Mooncake's milliseconds
    if rows.content_ids and not use_hash_ids:  # no prefix sharing, in any format that names blocks
        for x in rows.extra:
            for key in ("prefix_ids", "prefix_block_tokens", "_where"):
                x.pop(key, None)
    return path, fmt, rows


# the formats whose rows carry hash_ids -> the block size each names by default
HASH_ID_FORMATS = {"mooncake": MOONCAKE_BLOCK_TOKENS, "vllm_timed_trace": 16}  # vLLM's --timed-trace-chunk-hash-size
_ID_FORMATS = (*HASH_ID_FORMATS, "servesim")  # whose readers check content ids, unless they are dropped


def _mooncake_or_vllm(path: Path, rows: _Rows, given: int | None) -> tuple[str, str | None]:
    """Mooncake's keys are vLLM's timed trace's, in another unit (ms against seconds). Ids of blocks other than
    Mooncake's 512 tokens (as vLLM's writer and servesim's make them) say vLLM's: its seconds are taken, whether
    or not the ids are then used (use_hash_ids). Without ids nothing tells them apart: read as Mooncake, and
    said. given: hash_block_tokens, when the user named the block size."""
    # Mooncake writes whole milliseconds: fractions of one are a vLLM trace's seconds, likely (said, r159)
    fractions = bool((rows.arrival != np.floor(rows.arrival)).any())
    also = "; its timestamps have fractions of a millisecond, which Mooncake's do not: likely seconds" \
        if fractions else ""
    if not any(x and x.get("prefix_ids") for x in rows.extra or ()):
        return "mooncake", (f"{path}: read as a Mooncake trace (timestamps in milliseconds); a vLLM timed trace "
                            f"counts seconds{also}: give format: vllm_timed_trace")
    if given and _hash_misfit(rows, given) is not None:  # a size the ids do not fit, taken when they go unused
        given = None  # (use_hash_ids: false), told the unit: r145, a vLLM trace replayed 1000x fast as Mooncake's
    block = given or next((b for b in HASH_BLOCK_CANDIDATES if _hash_misfit(rows, b) is None), None)
    if block is None:  # ids no size tried fits: both writers give ceil(prompt / size) ids, so no tell (r160: read
        # in seconds, 1,000x slow, for ids that said nothing of the unit)
        return "mooncake", (f"{path}: read as a Mooncake trace (timestamps in milliseconds); its hash_ids fit no "
                            f"block size tried, so they tell neither format, and a vLLM timed trace counts "
                            f"seconds{also}: give format: vllm_timed_trace (and hash_block_tokens)")
    if block != MOONCAKE_BLOCK_TOKENS:
        return "vllm_timed_trace", (f"{path}: read as vLLM's timed trace (timestamps in seconds; its hash_ids name "
                                    f"{block}-token blocks, not Mooncake's 512); give format: mooncake for "
                                    f"milliseconds")
    # ids that fit 512 and another size: no tell (r159: 128-token ones, vLLM's --timed-trace-chunk-hash-size,
    # were read as milliseconds unsaid, only 16 was looked for)
    others = [] if given else [b for b in HASH_BLOCK_CANDIDATES
                               if b != MOONCAKE_BLOCK_TOKENS and _hash_misfit(rows, b) is None]
    if others:
        first = "vLLM's 16-token blocks" if others[0] == 16 else f"{others[0]}-token blocks"
        more = f" (and blocks of {', '.join(map(str, others[1:]))} tokens)" if others[1:] else ""
        return "mooncake", (f"{path}: read as a Mooncake trace (timestamps in milliseconds, 512-token hash blocks); "
                            f"its hash_ids fit {first} too{more}, as vLLM's --timed-trace-chunk-hash-size makes "
                            f"them, and a vLLM timed trace counts seconds{also}: give format: vllm_timed_trace (and "
                            f"hash_block_tokens)")
    if fractions and not given:
        return "mooncake", (f"{path}: read as a Mooncake trace (timestamps in milliseconds){also}: give format: "
                            f"vllm_timed_trace")
    return "mooncake", None


def _check_options(time_scale, start_s, duration_s, sample, limit) -> None:
    def bad(ok: bool, name: str, want: str, value) -> None:
        if not ok:
            raise ConfigError(name, f"must be {want}, got {_show(value)}")

    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    bad(number(time_scale) and time_scale > 0, "time_scale", "a number > 0", time_scale)
    bad(number(start_s) and start_s >= 0, "start_s", "a number >= 0", start_s)
    bad(duration_s is None or (number(duration_s) and duration_s > 0), "duration_s", "a number > 0", duration_s)
    bad(sample is None or (number(sample) and 0 < sample <= 1), "sample", "a fraction in (0, 1]", sample)
    bad(limit is None or (isinstance(limit, (int, np.integer)) and not isinstance(limit, bool) and limit >= 1),
        "limit", "an integer >= 1", limit)


def read_trace_with_info(path, fmt: str | None = None, *, time_scale: float = 1.0, start_s: float = 0.0,
                         duration_s: float | None = None, sample: float | None = None, limit: int | None = None,
                         seed: int = 0, first_id: int = 0, hash_block_tokens: int | None = None,
                         use_hash_ids: bool = True) -> tuple[list[RequestSpec], TraceInfo]:
    """read_trace, plus describe_trace of the result and what the reader skipped (never silently)."""
    _check_options(time_scale, start_s, duration_s, sample, limit)
    if hash_block_tokens is not None and (isinstance(hash_block_tokens, bool) or not isinstance(hash_block_tokens, int)
                                          or hash_block_tokens < 1):
        raise ConfigError("hash_block_tokens", f"must be an integer >= 1, got {_show(hash_block_tokens)}")
    path, fmt, rows = _read(path, fmt, hash_block_tokens, use_hash_ids)
    return _trace_of_rows(path, fmt, rows, time_scale, start_s, duration_s, sample, limit, seed, first_id)


def _trace_of_rows(path: Path, fmt: str, rows: _Rows, time_scale: float = 1.0, start_s: float = 0.0,
                   duration_s: float | None = None, sample: float | None = None, limit: int | None = None,
                   seed: int = 0, first_id: int = 0) -> tuple[list[RequestSpec], TraceInfo]:
    if rows.arrival is None:
        _fail(path, "", f"{fmt} files hold prompt/output lengths but no arrival times; combine them with an "
                        "arrival process (a synthetic workload's `lengths`, or read_lengths())")
    order = np.argsort(rows.arrival, kind="stable")
    t = rows.arrival[order]
    keep = (t >= start_s) & (t < start_s + duration_s if duration_s is not None else True)
    if not keep.any():
        window = f"at or after {start_s:g} s" if duration_s is None else f"in [{start_s:g}, {start_s + duration_s:g}) s"
        raise ConfigError("start_s", f"no request of {path} arrives {window}; its arrivals span {t[0]:g}..{t[-1]:g} s")
    order, own = order[keep], t[keep] - start_s
    if sample is not None:
        kept = np.random.default_rng(seed).random(len(order)) < sample
        if not kept.any():
            raise ConfigError("sample", f"{sample:g} keeps none of the {len(order):,} requests of {path}")
        order, own = order[kept], own[kept]
    order, own = order[:limit], own[:limit]
    with np.errstate(over="ignore"):  # a time_scale of 1e-320 overflows: refused below by name, not warned (r159)
        t = own / time_scale
    if not (np.isfinite(t).all() and t[-1] <= MAX_SECONDS):  # beyond it, float seconds lose the microseconds
        if not np.isfinite(own).all() or own[-1] > MAX_SECONDS:  # the file's own times, unscaled
            late = (f"; its first kept arrival is at {own[0]:.17g} s of its clock: start_s={own[0] + start_s:.17g} "
                    f"replays from there") if own[0] > MAX_SECONDS / 2 and own[-1] - own[0] <= MAX_SECONDS else ""
            _fail(path, "", f"its arrivals kept reach {own[-1]:.3g} s of its clock (from start_s), and at most "
                            f"{MAX_SECONDS:g} s can be simulated (a timestamp in another unit, or a damaged "
                            f"row?){late}")  # r177: "span" said of a clock not starting at 0
        reach = f"{t[-1]:.3g} s" if np.isfinite(t[-1]) else "past any finite time"
        raise ConfigError("time_scale", f"{path}'s arrivals kept, scaled by 1/{time_scale:g}, reach {reach}: "
                                        f"at most {MAX_SECONDS:g} s can be simulated")
    no_extra: dict = {}
    kept = order.tolist()
    if first_id + len(kept) - 1 > MAX_INT:  # the ids must stay exact in JSON, pandas and parquet
        raise ConfigError("first_id", f"{first_id:,}: the last of {len(kept):,} request ids would pass {MAX_INT:,}")
    # which rows record a priority (only servesim's own format can): a replay keeps it, draws only the others'
    recorded = [rows.extra[i].get("priority") is not None for i in kept] if rows.extra else [False] * len(kept)
    # servesim's own rows keep the ids they give (a run's workload.jsonl replays as that run), all or none
    own = [rows.extra[i].get("request_id") for i in kept] if rows.extra and first_id == 0 else []
    ids = own if own and all(x is not None and 0 <= x <= MAX_INT for x in own) else \
        [first_id + k for k in range(len(kept))]
    specs = [RequestSpec(ids[k], a, p, o, **(_with_priority(rows.extra[i]) if rows.extra else no_extra))
             for k, (i, a, p, o) in enumerate(zip(kept, t.tolist(), rows.prompt[order].tolist(),
                                                  rows.output[order].tolist()))]
    info = describe_trace(specs, skipped=rows.skipped)
    info.update(content_ids=rows.content_ids, format=fmt, path=str(path), recorded_priority=recorded)
    if rows.note:
        info["note"] = rows.note
    if back := int((np.diff(rows.arrival) < 0).sum()):  # (r170: a limit took the earliest rows, not the first, unsaid)
        first = int(np.argmax(np.diff(rows.arrival) < 0)) + 1
        info["unordered"] = (f"{path}: {back:,} of its rows arrive before the row above them (the first: row "
                             f"{first + 1:,} of those read): replayed in arrival order, which start_s, duration_s and "
                             f"limit count in")
    if rows.skipped:
        info["skipped_rows"] = _skipped_rows(path, rows)
    if rows.unread:  # a misspelt key, or a priority or class the user expects replayed (r145: dropped unsaid)
        info["unread"] = _unread(path, fmt, rows)
    return specs, info


def _unread(path: Path, fmt: str, rows: _Rows) -> str:
    read = {"azure": _AZURE_COLUMNS, "burstgpt": _BURSTGPT_COLUMNS, "sharegpt_stats": _LENGTH_STATS_COLUMNS,
            "timed_trace": (*_TIMED_TRACE_KEYS, *(f"queries[].{k}" for k in _QUERY_KEYS))}.get(fmt, _HASH_ID_KEYS)
    if rows.arrival is None:  # a lengths file: drawn from, not replayed
        return f"{path}: {', '.join(rows.unread)} not read ({fmt} records give {', '.join(read)})"
    replayed = f"every row but the {rows.skipped:,} skipped" if rows.skipped else "every row"  # (r159: not all)
    return (f"{path}: {', '.join(rows.unread)} not read ({fmt} records give {', '.join(read)}; {replayed} is "
            f"replayed; a priority, SLO class or session replays from servesim's JSONL, as `servesim workload "
            f"write` writes it)")


def _skipped_rows(path: Path, rows: _Rows) -> str:
    return f"{path}: {rows.skipped:,} of its {rows.skipped + len(rows.prompt):,} rows skipped: {rows.skipped_why}"


def _with_priority(extra: dict) -> dict:
    """A row's fields for its RequestSpec (its id aside): priority 0 (vLLM's default) where the row records none."""
    extra = {k: v for k, v in extra.items() if k != "request_id"}
    return extra if extra.get("priority", 0) is not None else {**extra, "priority": 0}


def read_trace(path, fmt: str | None = None, *, time_scale: float = 1.0, start_s: float = 0.0,
               duration_s: float | None = None, sample: float | None = None, limit: int | None = None,
               seed: int = 0, first_id: int = 0, hash_block_tokens: int | None = None,
               use_hash_ids: bool = True) -> list[RequestSpec]:
    """A trace file as RequestSpecs sorted by arrival, ids first_id, first_id + 1, ... (servesim's own file keeps
    the ids its rows give, when every row gives one and first_id is 0: a run's workload.jsonl replays as that run)

    Options apply in order: window [start_s, start_s + duration_s) of the file's times (an Azure CSV's counted
    from its earliest timestamp, the others' as recorded), shifted so start_s is 0; time_scale (multiplies the rate: 2
    halves every gap); sample (keep each request with this probability, seeded); limit (the first N). hash_ids
    (Mooncake and vLLM timed traces) name blocks of hash_block_tokens tokens, inferred from the file when None;
    use_hash_ids=False drops every content id (hash_ids, or a servesim file's prefix_ids): no prefix is shared.
    """
    return read_trace_with_info(path, fmt, time_scale=time_scale, start_s=start_s, duration_s=duration_s,
                                sample=sample, limit=limit, seed=seed, first_id=first_id,
                                hash_block_tokens=hash_block_tokens, use_hash_ids=use_hash_ids)[0]


def describe_file(path, fmt: str | None = None) -> TraceInfo:
    """describe_trace of a file as recorded. A lengths-only file (no arrival times) has its rows and length
    percentiles; its duration and rate are None, as it is replayed only beneath an arrival process."""
    path, fmt, rows = _read(path, fmt, describing=True)
    if rows.arrival is not None:
        info = _trace_of_rows(path, fmt, rows)[1]
        info.pop("recorded_priority")  # the replay's business, not the file's description
        return info
    info: TraceInfo = {"rows": len(rows.prompt), "duration_s": None, "rate": None,
                       "prompt": _stats(rows.prompt.tolist()), "output": _stats(rows.output.tolist()),
                       "prefix_reuse": None, "sessions": None, "skipped": rows.skipped, "content_ids": False,
                       "format": fmt, "path": str(path)}
    if rows.skipped:
        info["skipped_rows"] = _skipped_rows(path, rows)
    if rows.unread:
        info["unread"] = _unread(path, fmt, rows)
    return info


def read_lengths(path, fmt: str | None = None) -> np.ndarray:
    """[prompt, output] pairs, shape (n, 2): what a lengths-only file offers, from any format."""
    _, _, rows = _read(path, fmt, use_hash_ids=False)  # lengths only: the ids are not read, nor checked (r159)
    return np.column_stack([rows.prompt, rows.output]).astype(np.int64)


def write_jsonl(specs: Iterable[RequestSpec], path) -> Path:
    """The servesim format: every field by name; json writes floats by repr, so they read back exact.

    read_trace renumbers ids and sorts by arrival, so the round trip is == for a stream
    already in that order with ids 0, 1, ... (what read_trace and the generators produce).
    """
    import stat

    from servesim.simulator.files import write_together

    def write(target: Path) -> None:
        with target.open("w", encoding="utf-8") as f:
            for s in specs:
                row = {name: getattr(s, name) for name in _SPEC_FIELDS}
                row["prefix_ids"] = list(s.prefix_ids)
                f.write(json.dumps(row, allow_nan=False, default=lambda o: o.item()) + "\n")

    path = Path(path)
    try:  # a file, or nothing yet, is replaced whole: cut (Ctrl-C, a full disk), the earlier file stays, not a
        # shorter one that reads as a whole trace (r154); a device or a FIFO is written as it is
        whole = stat.S_ISREG(path.stat().st_mode)
    except FileNotFoundError:
        whole = True
    if whole:
        write_together(path.parent, {path.name: write})
    else:
        write(path)
    return path


def _stats(values: list[int]) -> LengthStats | None:
    if not values:
        return None
    p50, p90, p99 = np.percentile(values, [50, 90, 99]).tolist()
    return {"p50": p50, "p90": p90, "p99": p99, "mean": float(np.mean(values)), "max": int(max(values))}


def _prefix_reuse(specs: list[RequestSpec], block_tokens: int | None) -> float | None:
    """With block_tokens: the share of prompt tokens an unbounded prefix cache of that block
    size would hit (whole blocks of the already-seen leading prefix, as vLLM caches)."""
    if not any(s.prefix_ids for s in specs):
        return None
    seen: set[int] = set()
    hit = total = 0
    for s in sorted(specs, key=lambda s: (s.arrival_time, s.request_id)):
        if block_tokens is None:  # the prompt's blocks: ids past them name the answer's (r178: counted)
            prompt = s.prefix_ids[:-(-s.prompt_tokens // s.prefix_block_tokens)] if s.prefix_block_tokens else \
                s.prefix_ids
            hit += sum(i in seen for i in prompt)
            total += len(prompt)
        else:
            lead = next((j for j, i in enumerate(s.prefix_ids) if i not in seen), len(s.prefix_ids))
            hit += min(lead * s.prefix_block_tokens, s.prompt_tokens) // block_tokens * block_tokens
            total += s.prompt_tokens
        seen.update(s.prefix_ids)
    return hit / total if total else 0.0


def describe_trace(specs: Sequence[RequestSpec], *, block_tokens: int | None = None, skipped: int = 0) -> TraceInfo:
    """The numbers to sanity-check a trace against its paper before simulating it."""
    if block_tokens is not None and (isinstance(block_tokens, bool) or not isinstance(block_tokens, int)
                                     or block_tokens < 1):
        raise ConfigError("block_tokens", f"must be an integer >= 1, got {_show(block_tokens)}")
    specs = list(specs)
    arrivals = [s.arrival_time for s in specs]
    duration = float(max(arrivals) - min(arrivals)) if specs else 0.0
    sessions = {s.session_id for s in specs if s.session_id is not None}
    return {
        "rows": len(specs),
        "duration_s": duration,
        "rate": (len(specs) - 1) / duration if duration > 0 else None,  # arrivals per second: n - 1 gaps in the span
        "prompt": _stats([s.prompt_tokens for s in specs]),
        "output": _stats([min(s.output_tokens, s.output_limit) for s in specs]),  # a max_tokens below it cuts it
        "prefix_reuse": _prefix_reuse(specs, block_tokens),
        "sessions": len(sessions) if sessions else None,
        "skipped": skipped,
    }


def write_timed_trace(specs: Iterable[RequestSpec], path, chunk_tokens: int = 16) -> Path:
    """vLLM's timed-trace JSONL (`vllm bench serve --dataset-name timed_trace`): timestamp, input_length,
    output_length, hash_ids. vLLM makes each id's tokens from the id alone, so every block needs one: shared
    blocks keep the ids servesim gave them (at chunk_tokens per id), a request's own blocks get ids no other
    request uses. The reader takes the file back (hash_block_tokens = chunk_tokens)."""
    specs = list(specs)
    used = [i for s in specs for i in s.prefix_ids]
    fresh = iter(range(max(used, default=-1) + 1, 1 << 62))
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for s in specs:
            if s.prefix_ids and s.prefix_block_tokens != chunk_tokens:
                raise ConfigError("workload", f"request {s.request_id}: content ids of {s.prefix_block_tokens} "
                                              f"tokens cannot be written at {chunk_tokens} tokens a hash id")
            blocks = -(-s.prompt_tokens // chunk_tokens)
            ids = list(s.prefix_ids[:blocks]) + [next(fresh) for _ in range(blocks - len(s.prefix_ids[:blocks]))]
            f.write(json.dumps({"timestamp": s.arrival_time, "input_length": s.prompt_tokens,
                                "output_length": s.output_tokens, "hash_ids": ids}) + "\n")
    return path
