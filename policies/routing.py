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
    def waiting(self) -> int: ...  # requests waiting to be scheduled (preempted ones included)
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


class VllmDataParallel:
    """vLLM's balancer over a deployment's DP ranks (DPLBAsyncMPClient.get_core_engine_for_request): the lowest
    score in a scan from a start rank, the first of equal scores. 0.33: the unfinished requests, plus
    6 x waiting x (KV usage - 0.5) above half full (a queue on a KV-bound rank drains slowly), and the scan's start
    moves one rank on after every request, so ties rotate; 0.19: 4 x waiting + running, scanned from rank 0. The
    coordinator's 100 ms-old counts are read exact here."""

    name = "vllm_dp"

    def __init__(self, n: int, seed: int = 0, vllm_0_19: bool = False):
        self.n, self.vllm_0_19, self.start = n, vllm_0_19, 0

    def score(self, load) -> float:
        if self.vllm_0_19:
            return 3 * load.waiting + load.unfinished
        return load.unfinished + (6.0 * load.waiting * max(0.0, load.kv_usage - 0.5) if load.waiting else 0.0)

    def choose(self, req, loads) -> int:
        order = [(self.start + i) % self.n for i in range(self.n)]
        pick = min(order, key=lambda i: self.score(loads[i]))  # min keeps the first of equal scores
        if not self.vllm_0_19:
            self.start = (self.start + 1) % self.n
        return pick


class Deployment:
    """One vLLM instance's DP ranks as a router across instances sees them: their load summed (KV usage
    averaged), the best of their prefix hits and predictions; vLLM's own balancer then picks the rank."""

    def __init__(self, ranks: Sequence[ReplicaLoad]):
        self.ranks = ranks

    @property
    def unfinished(self) -> int:
        return sum(r.unfinished for r in self.ranks)

    @property
    def waiting(self) -> int:
        return sum(r.waiting for r in self.ranks)

    @property
    def kv_usage(self) -> float:
        return sum(r.kv_usage for r in self.ranks) / len(self.ranks)

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.ranks[0].prefill_tokens_per_s

    def cached_prefix_tokens(self, req) -> int:
        return max(r.cached_prefix_tokens(req) for r in self.ranks)

    def predicted_queue_wait(self, req) -> float:
        return min(r.predicted_queue_wait(req) for r in self.ranks)

    def predicted_tpot(self) -> float:
        return min(r.predicted_tpot() for r in self.ranks)


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


ROUTERS: dict[str, type] = {r.name: r for r in (RoundRobin, RandomRouter, LeastOutstanding, VllmDataParallel, LeastKV,
                                                PrefixAffinity, PredictedCompletion)}
RouterName = Literal[tuple(ROUTERS)]  # the scenario's `cluster.router`


def make_router(name: str, n: int, seed: int = 0, vllm_0_19: bool = False) -> Router:
    """vllm_0_19: the release whose balancer vllm_dp is."""
    return VllmDataParallel(n, seed, vllm_0_19) if name == VllmDataParallel.name else ROUTERS[name](n, seed)
