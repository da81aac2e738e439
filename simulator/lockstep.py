"""Expert-parallel data-parallel ranks step together (vLLM's DP coordinator with EP)."""

from __future__ import annotations

import math

from servesim.simulator.clock import SimClock


class LockstepGroup:
    """Data-parallel ranks of an expert-parallel deployment step together (vLLM): every MoE layer's dispatch
    and combine waits for all of them, an idle rank running a dummy batch. So the busy ranks start each step
    at once and all end when the slowest does; a rank that wakes in the middle of a step joins the next."""

    def __init__(self, env: SimClock):
        self.env = env
        self.end = -math.inf  # when the step in flight ends
        self.ended = None  # ... and the event that fires then
        self._latest = -math.inf  # the step being formed now: its ranks' latest end, and its start signal
        self._formed = None

    def busy(self) -> bool:
        return self.env.now < self.end

    def step(self, end: float):
        """Join the step forming now with this rank's own end; resumes every rank of it at the latest end,
        which it returns."""
        env = self.env
        if self._formed is None:  # the first rank at this instant: close the step once every rank has joined
            self._latest, self._formed = end, env.event()
            env.timeout(0).callbacks.append(self._close)
        elif end > self._latest:
            self._latest = end
        formed = self._formed
        yield formed
        yield self.ended
        return self.end

    def _close(self, _) -> None:
        self.end = self._latest
        self.ended = self.env.at(self.end)
        formed, self._formed = self._formed, None
        formed.succeed()
