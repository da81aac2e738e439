"""The front end: requests reach the engines through it (vLLM's API server and, with replicas, its router).

It walks the workload's up-front requests in arrival order, makes the follow-ups a finish
brings (closed-loop clients, chat turns), and delivers later arrivals at a replica (a prompt's KV
from a prefill replica). `next_time` bounds decode runs: a run must stop where step-by-step
simulation would see something arrive.
"""

from __future__ import annotations

import heapq
import math
from functools import partial
from typing import Callable, NamedTuple

from servesim.simulator.clock import SimClock
from servesim.simulator.records import RequestLog
from servesim.simulator.request import REJECTED, Request
from servesim.workloads.source import RequestSource
from servesim.workloads.spec import RequestSpec


def bad_request(spec: RequestSpec, max_model_len: int, past_context: str, sends_output_len: bool,
                min_tokens: int | None = None) -> str | None:
    """The API server's 400, or None: a prompt leaving no room for one output token, a max_tokens that does not
    fit (past_context "refuse"; "lower" stops it at max_model_len and refuses only one past it), or one, as sent or
    lowered (none sent: the room the context leaves), below the request's min_tokens (SamplingParams' check)."""
    if spec.prompt_tokens >= max_model_len:
        return "prompt_too_long"
    sent = spec.max_tokens if spec.max_tokens is not None else spec.output_tokens if sends_output_len else 0
    too_large = spec.prompt_tokens + sent > max_model_len if past_context == "refuse" else sent > max_model_len
    if too_large:
        return "max_tokens_too_large"
    room = max_model_len - spec.prompt_tokens
    if min_tokens and min(sent or room, room) < min_tokens:
        return "min_tokens_above_max_tokens"
    return None


class Route(NamedTuple):
    """Where a request goes, in two stages: its deployment (the router in front of vLLM's API servers, which sees
    every request), then the engine within it (vLLM's DP balancer, which sees only what the API server admits)."""
    deployment: Callable  # request -> the deployment's first engine
    rank: Callable  # (request, that first engine) -> the engine it runs on


class FrontEnd:
    """vLLM's API server in front of the engines: receives each request at its arrival time, refuses what an
    engine would answer 400 or 503, routes the rest, and knows when the next one comes.

    The source's up-front requests are walked by one process; follow-ups (closed-loop
    clients, the next turn of a chat) are scheduled one event each when they are made.
    """

    def __init__(self, env: SimClock, source: RequestSource, max_model_len: int, route, keep_requests: bool = False,
                 release_source: bool = False, past_context: str = "refuse", sends_output_len: bool = False,
                 min_tokens: int | None = None, without_max_tokens=None):
        """keep_requests: keep every Request object (`requests`), for inspection; otherwise each is let go of once
        its row is written (`log`). release_source: the source is this run's own, and may let go of its requests
        (a source given by the caller may be given to another run). past_context: how the API server checks the
        max_tokens a request sends against max_model_len ("refuse": past it with the prompt, 400; "lower": only
        above it alone, else lowered to fit). A request sends its own max_tokens, and with sends_output_len one
        without any sends its output length (vllm bench serve's client), and each its min_tokens, if any.
        without_max_tokens: called with the
        first request that sends no max_tokens (a policy that reads it in advance says so)."""
        self.env = env
        self.route = route  # request -> its deployment's first replica; (request, that) -> the replica it goes to
        self.source = source
        initial = source.initial()
        # a list is sorted into arrival order (a copy it lets go of as it goes); a sequence that makes each request
        # when asked (a synthetic workload's) is in that order already, and is walked as it is
        self.specs = initial if getattr(initial, "in_arrival_order", False) else \
            sorted(initial, key=lambda s: (s.arrival_time, s.request_id))
        if release_source:
            source.release()  # the front end holds them now, and lets go of each as it arrives
        self.max_model_len = max_model_len
        self.past_context = past_context
        self.sends_output_len = sends_output_len
        self.min_tokens = min_tokens
        self._without_max_tokens = without_max_tokens
        self._initial = len(self.specs)
        self._static_next = self.specs[0].arrival_time if self._initial else math.inf
        self._pending: list[float] = []  # arrival times of scheduled follow-ups (a heap)
        self.log = RequestLog(keep_requests)
        self._arrived = 0  # of specs
        self.in_flight = 0  # requests arrived and neither finished nor refused

    @property
    def requests(self) -> list[Request]:
        """Every request that arrived (only with keep_requests)."""
        if self.log.requests is None:
            raise RuntimeError("the front end keeps its requests only when built with keep_requests=True")
        return self.log.requests

    @property
    def next_time(self) -> float:
        return min(self._static_next, self._pending[0]) if self._pending else self._static_next

    def run(self):
        specs, n = self.specs, len(self.specs)
        held = isinstance(specs, list)  # a list holds its requests: each let go of as it arrives
        spec = specs[0] if n else None
        for i in range(n):
            yield self.env.at(spec.arrival_time, urgent=True)
            following = specs[i + 1] if i + 1 < n else None
            self._static_next = following.arrival_time if following is not None else math.inf
            if held:
                specs[i] = None  # the request holds it from here
            self._arrived = i + 1
            self._arrive(spec)
            spec = following
        self.specs = ()  # every request arrived: a drawn sequence's columns go (tens of MB at a million)

    def arrivals_left(self) -> bool:
        """Something was still to arrive (a request, a follow-up, a prompt's KV): only a cut leaves that."""
        return self._arrived < self._initial or bool(self._pending)

    def _arrive(self, spec: RequestSpec) -> None:
        req = Request(spec, self.max_model_len, self.sends_output_len, self.min_tokens or 0)
        if self._without_max_tokens and spec.max_tokens is None:
            self._without_max_tokens(spec)
            self._without_max_tokens = None  # said once
        self.log.arrived(req)
        self.in_flight += 1
        replica = self.route.deployment(req)  # its deployment's first engine (a refused request's replica)
        req.replica = replica.index
        # vLLM's API server answers 400 (no room for one output token) or 503 (its queue limits) before its DP
        # balancer picks an engine; servesim's shedding judges the engine picked
        reason = bad_request(spec, self.max_model_len, self.past_context, self.sends_output_len, self.min_tokens) or \
            replica.queue_limit_error()
        if not reason:
            replica = self.route.rank(req, replica)
            req.replica = replica.index
            reason = replica.shedding_error(req)
        if reason:
            req.status = REJECTED
            req.reject_reason = reason
            self.finished(req, spec.arrival_time, completed=False)
            return
        replica.add_request(req)

    def _follow_up(self, spec: RequestSpec, _event) -> None:
        heapq.heappop(self._pending)
        self._arrive(spec)

    def deliver_at(self, t: float, fn) -> None:
        """Something that arrives later at a replica (a prompt's KV from a prefill replica): it bounds
        decode runs like an arrival."""
        heapq.heappush(self._pending, t)

        def done(_event):
            heapq.heappop(self._pending)
            fn()
        self.env.at(t, urgent=True).callbacks.append(done)

    def finished(self, req: Request, t: float, completed: bool = True) -> None:
        """req ended at t (completed, or refused): its row is written; its follow-ups, if any, are scheduled."""
        self.log.ended(req)
        self.in_flight -= 1
        # after a completion too: a source that sends its next wave once all is done never sent it (r160)
        idle = not self.in_flight and not self._pending and self._static_next == math.inf
        for spec in self.source.on_finish(req.spec, t, completed, idle):
            heapq.heappush(self._pending, spec.arrival_time)
            self.env.at(spec.arrival_time, urgent=True).callbacks.append(partial(self._follow_up, spec))
