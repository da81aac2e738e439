"""Routers: which replica a new request goes to. Each sees only the replicas' load numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class ReplicaLoad(Protocol):
    """All a router may read of a replica (simulator/engine.py's Replica provides it): load, not internals."""

    @property
    def unfinished(self) -> int: ...  # running + waiting requests
    @property
    def kv_usage(self) -> float: ...  # share of the KV pool in use
    @property
    def prefill_tokens_per_s(self) -> float: ...  # the profile's prefill rate
    def cached_prefix_tokens(self, req) -> int: ...  # prompt tokens its prefix cache holds for req
    def predicted_queue_wait(self, req) -> float: ...  # seconds before req would be scheduled
    def predicted_tpot(self) -> float: ...  # seconds per output token at its current batch


class Router(Protocol):
    name: str

    def choose(self, req, loads: Sequence[ReplicaLoad]) -> int: ...


class RoundRobin:
    name = "round_robin"

    def __init__(self, n: int, seed: int = 0):
        self.n, self.next = n, 0

    def choose(self, req, loads) -> int:
        i = self.next
        self.next = (i + 1) % self.n
        return i


class RandomRouter:
    name = "random"

    def __init__(self, n: int, seed: int = 0):
        self.n, self.rng = n, np.random.default_rng(seed + 7)

    def choose(self, req, loads) -> int:
        return int(self.rng.integers(self.n))


class LeastOutstanding:
    """Fewest unfinished requests (running + waiting); ties to the lowest index."""

    name = "least_outstanding"

    def __init__(self, n: int, seed: int = 0):
        self.n = n

    def choose(self, req, loads) -> int:
        return min(range(self.n), key=lambda i: loads[i].unfinished)


class LeastKV:
    """Lowest KV-cache usage; ties to fewer unfinished requests."""

    name = "least_kv"

    def __init__(self, n: int, seed: int = 0):
        self.n = n

    def choose(self, req, loads) -> int:
        return min(range(self.n), key=lambda i: (loads[i].kv_usage, loads[i].unfinished))


class PrefixAffinity:
    """The replica holding the longest cached prefix of the request; ties to fewer unfinished requests."""

    name = "prefix_affinity"

    def __init__(self, n: int, seed: int = 0):
        self.n = n

    def choose(self, req, loads) -> int:
        return min(range(self.n), key=lambda i: (-loads[i].cached_prefix_tokens(req), loads[i].unfinished))


class PredictedCompletion:
    """Essay 003: the replica minimising T_queue + (prompt - cached prefix) / prefill rate + expected
    output x TPOT. It prefers a cache hit while queues are comparable and leaves it once a replica
    saturates."""

    name = "predicted_completion"

    def __init__(self, n: int, seed: int = 0):
        self.n = n

    def choose(self, req, loads) -> int:
        def cost(i):
            r = loads[i]
            cached = r.cached_prefix_tokens(req)
            return (r.predicted_queue_wait(req) + (req.prompt_tokens - cached) / r.prefill_tokens_per_s
                    + req.spec.output_limit * r.predicted_tpot())
        return min(range(self.n), key=cost)


ROUTERS: dict[str, type] = {r.name: r for r in (RoundRobin, RandomRouter, LeastOutstanding, LeastKV, PrefixAffinity,
                                                PredictedCompletion)}
RouterName = Literal[tuple(ROUTERS)]  # the scenario's `cluster.router`


def make_router(name: str, n: int, seed: int = 0) -> Router:
    return ROUTERS[name](n, seed)
