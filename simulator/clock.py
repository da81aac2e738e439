"""A SimPy environment that can fire an event at an exact absolute time.

servesim's times are sums of step durations. SimPy's relative timeouts compute
now + (t - now), which can round to a float other than t; the engine advances
several decode steps at once and must land on the very same times as step by
step, so it schedules at absolute times. Relies on SimPy 4's event queue layout.
"""

from __future__ import annotations

from heapq import heappush

import simpy
from simpy.events import NORMAL, URGENT


class SimClock(simpy.Environment):
    def at(self, when: float, urgent: bool = False) -> simpy.Event:
        """An event that fires at `when`. Urgent ones (arrivals) go before others at the same time."""
        if when < self._now:
            raise ValueError(f"cannot schedule in the past ({when} < {self._now})")
        ev = simpy.Event(self)
        ev._ok = True
        ev._value = None
        heappush(self._queue, (when, URGENT if urgent else NORMAL, next(self._eid), ev))
        return ev
