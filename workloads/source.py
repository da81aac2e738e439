"""Request sources: what the engine asks for requests, up front and when one finishes.

Open-loop workloads know every arrival time up front. Closed-loop clients and chat
sessions do not: the next request comes a think time after the previous one finished,
so the engine tells the source each finish (or rejection) and gets the follow-ups.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

from servesim.workloads.settings import MAX_SECONDS
from servesim.workloads.spec import RequestSpec


def follow_up_time(t: float, field: str) -> float:
    """A follow-up's arrival, within the seconds servesim simulates: past them the clock's resolution would
    swallow its latencies (a think time of 1e15 s gave later turns a TTFT of 0)."""
    if t > MAX_SECONDS:  # a NaN is left to the checks of a source's requests, which name it
        from servesim.simulator.errors import ConfigError

        raise ConfigError(field, f"a follow-up request would be sent at {t:.4g} s, past the {MAX_SECONDS:g} s servesim "
                                 f"simulates: shorten the think time")
    return t


class RequestSource:
    warnings: tuple[str, ...] = ()  # what the user should know about the requests (the CLI prints them)
    skipped: int = 0  # rows of a trace its reader left out (failed requests): describe counts them

    def initial(self) -> list[RequestSpec]:
        return []

    def on_finish(self, spec: RequestSpec, t: float, completed: bool, idle: bool = False) -> list[RequestSpec]:
        """Follow-up requests after `spec` finished (completed) or was rejected at time t; idle: nothing is in
        flight or due, so no later finish will come unless this call sends a request (after the last completion
        as after a rejection)."""
        return []

    def describe(self) -> str:
        return ""

    def planned(self) -> int | None:
        """How many requests it sends if every one completes (None: open-ended), so a cut run can say how many
        never arrived."""
        return None

    def traffic(self) -> tuple[list[RequestSpec], int] | None:
        """Every request it sends if each completes, and how many of them the arrival process times (a session's
        first turns: the others follow them), for sizing the traffic before any run; None: open-ended."""
        return None

    def release(self) -> None:
        """The front end has taken initial()'s requests: a source that holds them may let go (a long trace is then
        not held twice, nor after its requests ended)."""

    def held_back(self) -> int:
        """Of planned(), the requests it chose not to send (a session a rejected turn ended, clients that a duration
        or a stall stopped): said in its own warnings, not blamed on a cut."""
        return 0

    @property
    def kind(self) -> str:
        return type(self).__name__


class StaticSource(RequestSource):
    """Requests known up front (a synthetic workload's, a trace's): given to one simulation."""

    def __init__(self, specs: list[RequestSpec], label: str = "", warnings: tuple[str, ...] = ()):
        self.specs: list[RequestSpec] | None = specs
        self.count = len(specs)
        self.label = label
        self.warnings = warnings

    def initial(self) -> list[RequestSpec]:
        if self.specs is None:
            raise RuntimeError("this source's requests were handed to a simulation already: make another")
        return self.specs

    def release(self) -> None:
        self.specs = None

    def traffic(self) -> tuple[list[RequestSpec], int]:
        specs = self.initial()
        return specs, len(specs)

    def describe(self) -> str:
        return self.label or f"{self.count:,} requests"

    def planned(self) -> int:
        return self.count


class ConcurrencyLimit(RequestSource):
    """At most `limit` requests in flight, as `vllm bench serve --max-concurrency`: a request due while `limit`
    are in flight is sent when one ends (completed or refused), and its arrival is then, as vLLM's client starts
    a request's clock once it holds a slot. Wraps an open-loop source (its requests known up front)."""

    def __init__(self, inner: RequestSource, limit: int):
        self.inner, self.limit = inner, limit
        self.warnings = inner.warnings
        self.held: Iterator[RequestSpec] | None = None

    def initial(self) -> list[RequestSpec]:
        specs = self.inner.initial()
        if not getattr(specs, "in_arrival_order", False):
            specs = sorted(specs, key=lambda s: (s.arrival_time, s.request_id))
        self.held = iter(specs)
        return [s for _, s in zip(range(self.limit), self.held)]

    def release(self) -> None:
        self.inner.release()  # the held iterator keeps what is still to be sent

    def traffic(self) -> tuple[list[RequestSpec], int] | None:
        return self.inner.traffic()

    def on_finish(self, spec, t, completed, idle=False):
        nxt = next(self.held, None) if self.held is not None else None
        return [] if nxt is None else [replace(nxt, arrival_time=max(nxt.arrival_time, t))]

    def planned(self) -> int | None:
        return self.inner.planned()

    def describe(self) -> str:
        return f"{self.inner.describe()}, at most {self.limit:,} in flight"


class ClosedLoopSource(RequestSource):
    """N clients; each sends its next request think_time after the previous one ends (after a rejection: after
    the next request that finishes, or when nothing is in flight its think time after the refusal).

    Requests come from `templates` in the order clients ask for them, so a run is
    deterministic. Stops at `limit` requests or when a follow-up would start at or
    after `duration_s`.
    """

    STALL_LIMIT = 10_000  # requests refused in a row, the last with nothing in flight: the clients stop (on_finish)

    def __init__(self, concurrency: int, think_time: Callable[[], float], templates: Iterator[RequestSpec],
                 limit: int | None, duration_s: float | None, ramp_up_s: float = 0.0):
        self.concurrency, self.think_time, self.templates = concurrency, think_time, templates
        self.limit, self.duration_s, self.issued = limit, duration_s, 0
        self.ramp_up_s = ramp_up_s  # client i sends its first request at i x ramp_up_s / concurrency
        self.parked = 0  # clients whose request was rejected, waiting for the next finish to try again
        self.refused = 0  # requests refused since the last one completed
        self.stopped = False  # a duration or a stall ended the clients before `limit`
        self.warnings: list[str] = []  # said after the run (a stall, below)

    def _next(self, t: float) -> list[RequestSpec]:
        if self.limit is not None and self.issued >= self.limit:
            return []
        if self.duration_s is not None and t >= self.duration_s:
            self.stopped = True
            return []
        spec = next(self.templates, None)
        if spec is None:
            return []
        self.issued += 1
        if self.issued == self.limit and self.duration_s is not None:  # (r151: the count ended the run unsaid)
            self.warnings.append(f"workload.num_requests: its {self.limit:,} requests were all sent by {t:,.1f} s, "
                                 f"before duration_s ({self.duration_s:g} s): the count ends a closed loop's "
                                 f"arrivals (raise num_requests to run for the duration)")
        return [replace(spec, request_id=self.issued - 1, arrival_time=follow_up_time(t, "workload.arrival.think_time_s"))]

    def initial(self) -> list[RequestSpec]:
        first = [s for i in range(self.concurrency) for s in self._next(i * self.ramp_up_s / self.concurrency)]
        if len(first) < self.concurrency and self.ramp_up_s:  # (r176: 2 of 10 clients ran, the header saying 10)
            why = "the requests ran out" if self.limit is not None and self.issued >= self.limit else \
                f"the others start at or after duration_s ({self.duration_s:g} s)"
            self.warnings.append(f"workload.arrival.ramp_up_s={self.ramp_up_s:g}: only {len(first):,} of the "
                                 f"{self.concurrency:,} clients started ({why}), over "
                                 f"{(len(first) - 1) * self.ramp_up_s / self.concurrency:g} s")
        return first

    def on_finish(self, spec, t, completed, idle=False):
        """A finished request's client sends its next one after its think time. A rejected one's client waits
        for the next finish: servesim has no network latency, so a retry at once would meet the same full queue
        at the same instant. With nothing in flight no finish will come, and the refusal was the request's own
        (a prompt over max_model_len, a predicted TTFT over its SLO on an idle engine): every waiting client then
        sends its next request, as `vllm bench serve`'s clients go on after an error. STALL_LIMIT such refusals
        in a row (every request refused) stop the clients, with a warning, rather than loop at one instant."""
        if completed:
            self.refused = 0
        else:
            self.refused += 1
            if not idle:
                self.parked += 1
                return []
            if self.refused >= self.STALL_LIMIT:
                self.warnings.append(
                    f"closed loop: {self.refused:,} requests in a row were refused, the last with nothing in flight "
                    f"(each rejected on its own: a prompt over max_model_len, a predicted TTFT over its SLO?); "
                    f"the clients stopped after {self.issued:,} requests")
                self.parked = 0
                self.stopped = True
                return []
        clients, self.parked = 1 + self.parked, 0
        return [s for _ in range(clients) for s in self._next(t + self.think_time())]

    def planned(self) -> int | None:
        return self.limit

    def held_back(self) -> int:
        return self.limit - self.issued if self.stopped and self.limit is not None else 0

    def describe(self) -> str:
        cap = f"{self.limit:,} requests" if self.limit is not None else f"{self.duration_s:g} s"
        ramp = f", starting over {self.ramp_up_s:g} s" if self.ramp_up_s else ""
        return f"closed loop: {self.concurrency} client{'s' * (self.concurrency != 1)}{ramp}, {cap}"


class SessionSource(RequestSource):
    """Chat sessions: turn k + 1 is sent a think time after turn k ends; a rejected turn ends its session."""

    def __init__(self, first_turns: list[RequestSpec], next_turn: dict[int, tuple[RequestSpec, float]], label: str,
                 turns: list[int]):
        self.first_turns, self.next_turn, self.label, self.turns = first_turns, next_turn, label, turns
        self.ended: dict[int, int] = {}  # session -> its turns never sent, after a rejected turn

    @property
    def warnings(self) -> tuple[str, ...]:
        if not self.ended:
            return ()
        return (f"{sum(self.ended.values()):,} later turn(s) of {len(self.ended):,} session(s) were never sent: "
                f"a rejected turn ends its session (those turns are in no other metric than the summary's "
                f"turns_never_sent)",)

    def initial(self) -> list[RequestSpec]:
        return self.first_turns

    def traffic(self) -> tuple[list[RequestSpec], int]:
        return self.first_turns + [spec for spec, _ in self.next_turn.values()], len(self.first_turns)

    def held_back(self) -> int:
        return sum(self.ended.values())

    def on_finish(self, spec, t, completed, idle=False):
        if not completed:
            if (lost := self.turns[spec.session_id] - spec.turn - 1) > 0:
                self.ended[spec.session_id] = lost
            return []
        follow = self.next_turn.get(spec.request_id)
        if follow is None:
            return []
        nxt, think = follow
        return [replace(nxt, arrival_time=follow_up_time(t + think, "workload.think_time_s"))]

    def describe(self) -> str:
        return self.label

    def planned(self) -> int:
        return sum(self.turns)  # every turn, if none is rejected (those after a too-long one are never built)


def _takes_idle(source, kind: str) -> bool:
    """Whether a source's on_finish takes `idle` (RequestSource's does; r146: one of (spec, t, completed) was a
    TypeError mid-run), or one line naming it when it takes neither form."""
    import inspect

    from servesim.simulator.errors import ConfigError

    if not callable(source.on_finish):  # r149: a TypeError mid-run, after the first finish
        raise ConfigError("requests", f"{kind}'s on_finish must be a method taking (spec, t, completed[, idle]), got "
                                      f"{source.on_finish!r:.60}")
    try:
        sig = inspect.signature(source.on_finish)
    except (TypeError, ValueError):  # a builtin or C callable: called as RequestSource's
        return True
    for takes, args, kwargs in ((True, (None, 0.0, True), {"idle": False}), (False, (None, 0.0, True), {})):
        try:
            sig.bind(*args, **kwargs)
            return takes
        except TypeError:
            continue
    raise ConfigError("requests", f"{kind}'s on_finish must take (spec, t, completed[, idle]), got on_finish{sig}")


class CheckedSource(RequestSource):
    """A caller's source (the Python API's `requests=`), its requests checked as they come, as a list's are
    (checked_specs): in range, ids unique over the run, a follow-up not sent before the finish that made it, a class
    among the scenario's `classes` when it has some."""

    def __init__(self, inner: RequestSource, classes=None):
        self.inner, self.classes = inner, classes
        self.seen: set[int] = set()
        self.chains: dict = {}  # content ids' places so far (prefix_chain_problem)
        self._takes_idle: bool | None = None

    def _checked(self, specs, now: float | None = None) -> list[RequestSpec]:
        from servesim.simulator.errors import ConfigError
        from servesim.workloads.spec import checked_specs

        try:  # a bare RequestSpec or a number is the likely slip: named, not a TypeError mid-run
            if not isinstance(specs, (list, tuple)):  # r149: a dict's keys, a set, a Series were taken, and an
                raise TypeError  # endless generator hung in list()
            specs = list(specs)
        except TypeError:
            raise ConfigError("requests", f"{self.kind}'s initial() and on_finish() must return lists of RequestSpec, "
                                          f"got {type(specs).__name__}") from None
        if not specs:  # a finish that sends nothing
            return []
        out = checked_specs(specs, f"{self.kind} request", self.chains, self.classes)
        for s in out:
            if s.request_id in self.seen:
                raise ConfigError(f"{self.kind} request.request_id", f"{s.request_id} was given to an earlier request")
            if now is not None and s.arrival_time < now:
                raise ConfigError(f"{self.kind} request.arrival_time", f"{s.arrival_time!r} is before the finish at "
                                                                       f"{now!r} that made it (a negative think time?)")
            self.seen.add(s.request_id)
        # (r150: a cut run's warning left out the unsent) a StaticSource's own planned() counts its list alone, so
        # a subclass adding follow-ups without a planned() of its own may send more (held_back says the same)
        planned = None if type(self.inner).planned is StaticSource.planned else self.planned()
        if planned is not None and len(self.seen) > planned:
            raise ConfigError("requests.planned()", f"{self.kind}.planned() is {planned}, but it has sent "
                                                    f"{len(self.seen)} requests: planned() counts every request it "
                                                    f"sends if each completes")
        return out

    def initial(self) -> list[RequestSpec]:
        from servesim.simulator.errors import ConfigError

        first = self._checked(self.inner.initial())
        _ = self.warnings  # checked before the run, not lost after it
        self._takes_idle = _takes_idle(self.inner, self.kind)  # and how on_finish is called (r149: mid-run)
        if not first:  # nothing would ever happen (an empty list is refused the same way)
            raise ConfigError("requests", f"{self.kind}'s initial() gave no request: a run needs at least one")
        return first

    def on_finish(self, spec, t, completed, idle=False):
        if self._takes_idle is None:  # a source written before `idle` (or with it keyword-only): called as it reads
            self._takes_idle = _takes_idle(self.inner, self.kind)
        said = self.inner.on_finish(spec, t, completed, idle=idle) if self._takes_idle else \
            self.inner.on_finish(spec, t, completed)
        return self._checked(said, t)

    def describe(self) -> str:
        return self.inner.describe()

    def planned(self):
        n = self.inner.planned()
        return None if n is None else self._count(n, "planned")

    def held_back(self) -> int:
        from servesim.simulator.errors import ConfigError

        n, planned = self._count(self.inner.held_back(), "held_back"), self.planned()
        if planned is not None and n > planned:  # of planned() (a StaticSource's follow-ups may send more: not held)
            raise ConfigError("requests.held_back()", f"{self.kind}.held_back() is {n}, more than its planned() "
                                                      f"{planned}")
        return n

    def _count(self, n, method: str) -> int:
        """A caller's count, checked as the API checks its count arguments: read after the run too, where a str
        would be a TypeError."""
        from servesim.api_args import KINDS
        from servesim.simulator.errors import ConfigError

        ok, what = KINDS["count"]
        if not ok(n):
            raise ConfigError(f"requests.{method}()", f"{self.kind}.{method}() must return {what}"
                                                      f"{' or None' if method == 'planned' else ''}, got {n!r}")
        return int(n)

    @property
    def warnings(self):
        from servesim.simulator.errors import ConfigError

        said = getattr(self.inner, "warnings", ()) or ()  # (r143: None was a TypeError after the whole run)
        said = (said,) if isinstance(said, str) else said  # one warning given bare is one line, not a letter each
        if not isinstance(said, (list, tuple)) or not all(isinstance(w, str) for w in said):
            raise ConfigError("requests", f"{self.kind}'s warnings must be text or a list of texts, got {said!r:.80}")
        return tuple(said)

    @property
    def kind(self) -> str:
        return type(self.inner).__name__
