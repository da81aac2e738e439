"""The clock lands on the exact times it is given: the decode-run fast path relies on it (simulator/clock.py)."""

import math

import pytest
import simpy
from simpy.events import NORMAL

from servesim.simulator.clock import SimClock

NOW, WHEN = 0.09695999999999999, 0.9542400000000005  # met in a run: a decode run of several steps ends at WHEN


def test_some_times_are_no_relative_delay_away():
    """Why SimClock pushes absolute times: no float delay takes NOW to WHEN under SimPy's now + delay."""
    d = WHEN - NOW
    nearby = [d]
    for direction in (math.inf, -math.inf):
        x = d
        for _ in range(8):
            x = math.nextafter(x, direction)
            nearby.append(x)
    assert all(NOW + x != WHEN for x in nearby)


def test_events_fire_at_their_exact_times_urgent_first():
    env, fired = SimClock(), []

    def waiter(name, first, when, urgent):
        yield env.at(first)
        yield env.at(when, urgent)
        fired.append((name, env.now))

    env.process(waiter("normal", NOW, WHEN, False))
    env.process(waiter("urgent", NOW, WHEN, True))
    env.process(waiter("early", NOW, 0.25, False))
    env.run()
    assert fired == [("early", 0.25), ("urgent", WHEN), ("normal", WHEN)]


def test_simpys_queue_has_the_layout_the_clock_pushes():
    """(time, priority, event id, event): what Environment.schedule pushes in SimPy 4; a release that changes it
    fails here, not as wrong times."""
    env = simpy.Environment()
    ev = env.event()
    env.schedule(ev, NORMAL, 0.5)
    entry = env._queue[0]
    assert len(entry) == 4 and entry[0] == 0.5 and entry[1] == NORMAL and isinstance(entry[2], int) and entry[3] is ev


def test_the_past_is_refused():
    env = SimClock()
    env.run(until=2.0)
    with pytest.raises(ValueError, match="past"):
        env.at(1.0)
