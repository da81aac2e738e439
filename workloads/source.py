"""Request sources: what the engine asks for requests, up front and when one finishes.

Open-loop workloads know every arrival time up front. Closed-loop clients and chat
sessions do not: the next request comes a think time after the previous one finished,
so the engine tells the source each finish (or rejection) and gets the follow-ups.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

from servesim.workloads.spec import RequestSpec


class RequestSource:
    warnings: tuple[str, ...] = ()  # what the user should know about the requests (the CLI prints them)

    def initial(self) -> list[RequestSpec]:
        return []

    def on_finish(self, spec: RequestSpec, t: float, completed: bool) -> list[RequestSpec]:
        """Follow-up requests after `spec` finished (completed) or was rejected at time t."""
        return []

    def describe(self) -> str:
        return ""

    def planned(self) -> int | None:
        """How many requests it sends if every one completes (None: open-ended), so a cut run can say how many
        never arrived."""
        return None


class StaticSource(RequestSource):
    def __init__(self, specs: list[RequestSpec], label: str = "", warnings: tuple[str, ...] = ()):
        self.specs = specs
        self.label = label
        self.warnings = warnings

    def initial(self) -> list[RequestSpec]:
        return self.specs

    def describe(self) -> str:
        return self.label or f"{len(self.specs):,} requests"

    def planned(self) -> int:
        return len(self.specs)


class ClosedLoopSource(RequestSource):
    """N clients; each sends its next request think_time after the previous one ends (after a rejection: after
    the next request that finishes).

    Requests come from `templates` in the order clients ask for them, so a run is
    deterministic. Stops at `limit` requests or when a follow-up would start at or
    after `duration_s`.
    """

    def __init__(self, concurrency: int, think_time: Callable[[], float], templates: Iterator[RequestSpec],
                 limit: int | None, duration_s: float | None, ramp_up_s: float = 0.0):
        self.concurrency, self.think_time, self.templates = concurrency, think_time, templates
        self.limit, self.duration_s, self.issued = limit, duration_s, 0
        self.ramp_up_s = ramp_up_s  # client i sends its first request at i x ramp_up_s / concurrency
        self.parked = 0  # clients whose request was rejected, waiting for the next finish to try again

    def _next(self, t: float) -> list[RequestSpec]:
        if (self.limit is not None and self.issued >= self.limit) or \
                (self.duration_s is not None and t >= self.duration_s):
            return []
        spec = next(self.templates, None)
        if spec is None:
            return []
        self.issued += 1
        return [replace(spec, request_id=self.issued - 1, arrival_time=t)]

    def initial(self) -> list[RequestSpec]:
        return [s for i in range(self.concurrency) for s in self._next(i * self.ramp_up_s / self.concurrency)]

    def on_finish(self, spec, t, completed):
        """A finished request's client sends its next one after its think time. A rejected one's client waits
        for the next finish: servesim has no network latency, so a retry at once met the same full queue (or the
        same too-long prompt limit) at the same instant, forever. A finish is when room can appear."""
        if not completed:
            self.parked += 1
            return []
        clients, self.parked = 1 + self.parked, 0
        return [s for _ in range(clients) for s in self._next(t + self.think_time())]

    def planned(self) -> int | None:
        return self.limit

    def describe(self) -> str:
        cap = f"{self.limit:,} requests" if self.limit is not None else f"{self.duration_s:g} s"
        ramp = f", starting over {self.ramp_up_s:g} s" if self.ramp_up_s else ""
        return f"closed loop: {self.concurrency} clients{ramp}, {cap}"


class SessionSource(RequestSource):
    """Chat sessions: turn k + 1 is sent a think time after turn k ends; a rejected turn ends its session."""

    def __init__(self, first_turns: list[RequestSpec], next_turn: dict[int, tuple[RequestSpec, float]], label: str):
        self.first_turns, self.next_turn, self.label = first_turns, next_turn, label

    def initial(self) -> list[RequestSpec]:
        return self.first_turns

    def on_finish(self, spec, t, completed):
        follow = self.next_turn.get(spec.request_id)
        if follow is None or not completed:
            return []
        nxt, think = follow
        return [replace(nxt, arrival_time=t + think)]

    def describe(self) -> str:
        return self.label

    def planned(self) -> int:
        return len(self.first_turns) + len(self.next_turn)  # every turn, if none is rejected
