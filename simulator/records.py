"""What a run records as it goes: each replica's steps, and each request's row once it ends.

Both are typed columns (8 bytes a value, where a Python list holds a 24-32 byte object and a pointer), and a
request's row is written when it ends (finished, refused), after which its object and spec can go: a run's
memory grows with its steps and ended requests' rows, not with every request object it has served.
"""

from __future__ import annotations

from array import array

import numpy as np

from servesim.simulator.arrow_columns import IntLists
from servesim.simulator.batch import BatchShape
from servesim.simulator.request import FINISHED, Request

TIME_COLUMNS = ("start", "end")  # floats; the other step columns are counts
# counts that may pass 2^31 (a step's attention pairs, its decodes' context); the rest stay below it by the
# settings' bounds (tokens per step, blocks, requests, sequences) and take 4 bytes
WIDE_COLUMNS = ("prefill_attention_pairs", "decode_context_tokens")
TYPECODES = {"d": np.float64, "q": np.int64, "i": np.int32}  # an array's typecode, numpy's type for its buffer
STEP_COLUMNS = ["start", "end", "scheduled_tokens", "prefill_tokens", "decode_seqs", "num_running",
                "num_waiting", "kv_blocks_used", "num_preempted", "num_seqs", "prefill_attention_pairs",
                "decode_context_tokens", "swapped_blocks", "spec_drafts", "spec_accepted"]


class StepLog:
    """Typed columns (4 or 8 bytes a value, not a Python object's 32), appended once per step (or extended once per
    decode run)."""

    def __init__(self):
        self.cols: dict[str, array] = {c: array("d" if c in TIME_COLUMNS else "q" if c in WIDE_COLUMNS else "i")
                                       for c in STEP_COLUMNS}
        self._append = [self.cols[c].append for c in STEP_COLUMNS]
        # step -> accepted draft tokens past a request's stop (rare: a request's last step), which vLLM trims:
        # a step generated its token-steps plus spec_accepted less these
        self.discarded_tokens: dict[int, int] = {}
        # step -> (requests running, KV blocks in use) once the step's finished and handed-off requests have left:
        # what vLLM's scheduler stats report for it (taken after update_from_output); only steps someone left
        self.after: dict[int, tuple[int, int]] = {}

    def add_step(self, start: float, end: float, shape: BatchShape, running: int, waiting: int,
                 used_blocks: int, preempted: int, swapped_blocks: int = 0, drafts: int = 0, accepted: int = 0,
                 discarded: int = 0) -> None:
        if discarded:
            self.discarded_tokens[len(self)] = discarded
        a = self._append
        a[0](start); a[1](end); a[2](shape.prefill_tokens + shape.decode_seqs); a[3](shape.prefill_tokens)
        a[4](shape.decode_seqs); a[5](running); a[6](waiting); a[7](used_blocks); a[8](preempted)
        a[9](shape.num_seqs); a[10](shape.prefill_attention_pairs); a[11](shape.decode_context_tokens)
        a[12](swapped_blocks); a[13](drafts); a[14](accepted)

    def left(self, running: int, used_blocks: int) -> None:
        """Requests left the last step (finished or handed off): the state vLLM's stats report after it."""
        self.after[len(self) - 1] = (running, used_blocks)

    def add_decode_run(self, start: float, ends: list[float], batch: int, waiting: int, used_after: list[int],
                       context_tokens: int) -> None:
        k = len(ends)
        c = self.cols
        c["start"].append(start)
        c["start"].extend(ends[:-1])
        c["end"].extend(ends)
        c["scheduled_tokens"].extend([batch] * k)
        c["prefill_tokens"].extend([0] * k)
        c["decode_seqs"].extend([batch] * k)
        c["num_running"].extend([batch] * k)
        c["num_waiting"].extend([waiting] * k)
        c["kv_blocks_used"].extend(used_after[:k])
        c["num_preempted"].extend([0] * k)
        c["num_seqs"].extend([batch] * k)
        c["prefill_attention_pairs"].extend([0] * k)
        c["decode_context_tokens"].extend(range(context_tokens, context_tokens + batch * k, batch))
        c["swapped_blocks"].extend([0] * k)
        c["spec_drafts"].extend([0] * k)
        c["spec_accepted"].extend([0] * k)

    def __len__(self) -> int:
        return len(self.cols["end"])


# a request's row: (column, how it is read off the request); counts, times (NaN where none), then the rest
INT_FIELDS = {
    "request_id": lambda r: r.request_id, "replica": lambda r: r.replica, "prompt_tokens": lambda r: r.prompt_tokens,
    "output_tokens": lambda r: r.num_output_tokens, "priority": lambda r: r.priority,
    "prefill_replica": lambda r: -1 if r.prefill_replica is None else r.prefill_replica,
    "pulled_tokens": lambda r: r.pulled_tokens,
    "turn": lambda r: r.spec.turn, "num_preemptions": lambda r: r.num_preemptions,
    "cached_tokens": lambda r: r.cached_tokens, "prefix_queries": lambda r: r.prefix_queries,
    "prefix_hits": lambda r: r.prefix_hits, "recomputed_tokens": lambda r: r.recomputed_tokens,
    "num_swaps": lambda r: r.num_swaps, "batch_id": lambda r: r.batch_id,
}
NAN = float("nan")
FLOAT_FIELDS = {
    "arrival_time": lambda r: r.arrival_time,
    "first_scheduled_time": lambda r: NAN if r.first_scheduled_time is None else r.first_scheduled_time,
    "first_token_time": lambda r: NAN if r.first_token_time is None else r.first_token_time,
    "finish_time": lambda r: NAN if r.finish_time is None else r.finish_time,
    "time_preempted": lambda r: r.time_preempted,
}
OBJECT_FIELDS = {  # text, or None
    "status": lambda r: r.status.value, "slo_class": lambda r: r.spec.slo_class,  # .value: one shared text
    "session_id": lambda r: r.spec.session_id,
    "finish_reason": lambda r: r.finish_reason if r.status == FINISHED else r.reject_reason,
}
# the requests table's column order
REQUEST_COLUMNS = ["request_id", "replica", "status", "arrival_time", "first_scheduled_time", "first_token_time",
                   "finish_time", "prompt_tokens", "output_tokens", "priority", "slo_class", "prefill_replica",
                   "session_id", "turn", "num_preemptions", "cached_tokens", "prefix_queries", "prefix_hits",
                   "recomputed_tokens", "num_swaps", "time_preempted", "token_runs", "prefill_token_runs",
                   "pulled_tokens", "finish_reason", "batch_id"]


class RequestLog:
    """Every request's row, in arrival order: written when the request ends, or at the end of the run for those
    still in flight (a cut run's). keep_requests: also keep every Request object, for inspection."""

    def __init__(self, keep_requests: bool = False):
        self.live: dict[Request, int] = {}  # arrived and not ended: its arrival index
        self.arrivals = 0
        self.order = array("q")
        self.ints = {c: array("q") for c in INT_FIELDS}
        self.floats = {c: array("d") for c in FLOAT_FIELDS}
        self.objects: dict[str, list] = {c: [] for c in OBJECT_FIELDS}
        self.runs = {c: (array("q"), array("q")) for c in ("token_runs", "prefill_token_runs")}  # values, lengths
        self.requests: list[Request] | None = [] if keep_requests else None

    def arrived(self, req: Request) -> None:
        self.live[req] = self.arrivals
        self.arrivals += 1
        if self.requests is not None:
            self.requests.append(req)

    def ended(self, req: Request) -> None:
        """req has its final state: its row is written and the log lets go of it."""
        self._write(req, self.live.pop(req))

    def _write(self, req: Request, index: int) -> None:
        self.order.append(index)
        for c, get in INT_FIELDS.items():
            self.ints[c].append(get(req))
        for c, get in FLOAT_FIELDS.items():
            self.floats[c].append(get(req))
        for c, get in OBJECT_FIELDS.items():
            self.objects[c].append(get(req))
        for c, runs in (("token_runs", req.token_runs), ("prefill_token_runs", req.prefill_runs)):
            values, lengths = self.runs[c]
            values.extend(runs)
            lengths.append(len(runs))

    def __len__(self) -> int:
        return self.arrivals

    def columns(self) -> dict:
        """Every request's row in arrival order (those still in flight as they stand), as numpy arrays, lists of
        text or None, and IntLists (token_runs, prefill_token_runs). Once: the log gives its columns away."""
        for req, index in sorted(self.live.items(), key=lambda item: item[1]):
            self._write(req, index)
        self.live.clear()
        order = np.argsort(np.frombuffer(self.order, dtype=np.int64), kind="stable")
        cols: dict = {}
        for c in REQUEST_COLUMNS:  # each typed column let go of once copied in order: one more copy at a time
            if c in self.ints:
                cols[c] = np.frombuffer(self.ints.pop(c), dtype=np.int64)[order]
            elif c in self.floats:
                cols[c] = np.frombuffer(self.floats.pop(c), dtype=float)[order]
            elif c in self.objects:
                values = self.objects.pop(c)
                cols[c] = [values[i] for i in order]
            else:
                values, lengths = self.runs.pop(c)
                cols[c] = IntLists.from_lengths(np.frombuffer(values, dtype=np.int64),
                                                np.frombuffer(lengths, dtype=np.int64)).take(order)
        return cols
