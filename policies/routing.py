"""Routers: which replica a new request goes to. Each sees only the replicas' load numbers."""

from __future__ import annotations

import numpy as np


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


ROUTERS = {r.name: r for r in (RoundRobin, RandomRouter, LeastOutstanding)}


def make_router(name: str, n: int, seed: int = 0):
    return ROUTERS[name](n, seed)
