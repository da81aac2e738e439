"""A SimPy environment that can fire an event at an exact absolute time.

servesim's times are sums of step durations. SimPy's relative timeouts compute
now + (t - now), which can round to a float other than t; the engine advances
several decode steps at once and must land on the very same times as step by
step, so it schedules at absolute times. SimPy's public API cannot: every event
goes in at now + delay, and some times are no float now + delay at all (from
now = 0.09695999999999999, no delay gives 0.9542400000000005: now sits half an
ulp off t's grid and ties round to even). So this pushes onto SimPy 4's event
queue itself; tests/test_clock.py checks that queue's layout, and simpy<5 is pinned.
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
