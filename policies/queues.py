"""Waiting-queue order and preemption victim: fcfs and priority as vLLM, plus sjf.

A queue policy decides two things that vLLM ties together: who is admitted next,
and whom to preempt when the pool runs dry.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from itertools import count
from typing import Callable, Literal, Protocol, runtime_checkable


@runtime_checkable
class RequestQueue(Protocol):
    """The waiting queue the scheduler holds (vLLM's `RequestQueue`): new arrivals are added, a preempted
    request is prepended (FCFS puts it back at the front; an ordered queue just re-inserts it)."""

    def add(self, req) -> None: ...
    def prepend(self, req) -> None: ...
    def peek(self): ...
    def pop(self): ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator: ...
    def unordered(self) -> Iterator: ...  # every request, in no particular order (cheap)


VictimRule = Callable[[list], object]  # the running list (admission order) -> the request to preempt


class FCFSQueue:
    """vLLM's FCFS deque: arrivals at the back, preempted requests back at the front."""

    def __init__(self):
        self._q = deque()

    def add(self, req) -> None:
        self._q.append(req)

    def prepend(self, req) -> None:
        self._q.appendleft(req)

    def peek(self):
        return self._q[0]

    def pop(self):
        return self._q.popleft()

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self):
        return iter(self._q)

    unordered = __iter__


class KeyedQueue:
    """A heap on key(req); a preempted request is pushed back like any other (vLLM's PRIORITY)."""

    def __init__(self, key: Callable):
        self._key = key
        self._heap: list = []
        self._seq = count()

    def add(self, req) -> None:
        heapq.heappush(self._heap, (self._key(req), next(self._seq), req))

    prepend = add

    def peek(self):
        return self._heap[0][2]

    def pop(self):
        return heapq.heappop(self._heap)[2]

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self):
        return (item[2] for item in sorted(self._heap))

    def unordered(self):
        return (item[2] for item in self._heap)


def last_admitted(running: list):
    """vLLM FCFS victim: the most recently admitted running request."""
    return running[-1]


def lowest_priority(running: list):
    """vLLM PRIORITY victim: the largest (priority, arrival at its engine); requests arriving together (a burst, which
    vLLM's API server still stamps one after another) the last sent."""
    return max(running, key=lambda r: (r.priority, r.engine_arrival, r.request_id))


def fewest_preemptions(running: list):
    """Essay 003's rule, `max(running, key=(preempt_count == 0, arrival))`: prefer a request never
    preempted, newest first (the last sent of a burst), so that no request is admitted and preempted again and
    again."""
    return max(running, key=lambda r: (r.num_preemptions == 0, r.engine_arrival, r.request_id))


VICTIMS: dict[str, VictimRule] = {"last_admitted": last_admitted, "lowest_priority": lowest_priority,
                                  "fewest_preemptions": fewest_preemptions}
VictimName = Literal[tuple(VICTIMS)]  # the scenario's `policies.preemption_victim`: the registry is the one list


class QueuePolicy:
    """A queue order and its victim rule: the two decisions vLLM's scheduling policy ties together."""

    def __init__(self, name: str, key: Callable | None, select_victim: VictimRule, victim_may_be_scheduled: bool):
        """key: the queue's order (None: FCFS, arrival order with preempted requests back at the front)."""
        self.name = name
        self.key = key
        self.select_victim = select_victim
        # vLLM gives back the budget of a victim scheduled earlier in the same step
        # (only possible when the victim is not the last admitted).
        self.victim_may_be_scheduled = victim_may_be_scheduled

    def make_queue(self) -> RequestQueue:
        return FCFSQueue() if self.key is None else KeyedQueue(self.key)

    def make_holding_queue(self) -> RequestQueue:
        """Where requests whose pulled KV has arrived wait (disaggregation): vLLM makes that queue with the same
        policy (0.19's skipped_waiting, 0.33's kv_holding_waiting), so in the policy's order; under FCFS in the
        order their pulls started, which the scheduler stamps as `seq` (r140: pull-completion order, and under
        priority arrival order: a high-priority request waited behind every low one pulled before it)."""
        return KeyedQueue(self.key or (lambda r: r.seq))


QUEUE_POLICIES: dict[str, Callable[[], QueuePolicy]] = {
    "fcfs": lambda: QueuePolicy("fcfs", None, last_admitted, False),
    "priority": lambda: QueuePolicy("priority", lambda r: (r.priority, r.engine_arrival, r.request_id),
                                    lowest_priority, True),
    # Shortest expected job first: prompt + max_tokens, all a scheduler knows in advance.
    "sjf": lambda: QueuePolicy("sjf", lambda r: (r.expected_job, r.engine_arrival, r.request_id), last_admitted,
                               False),
}
QueueName = Literal[tuple(QUEUE_POLICIES)]  # the scenario's `policies.queue`


def make_queue_policy(name: str, victim: str | None = None) -> QueuePolicy:
    """The queue order, with its own victim rule unless another is named."""
    policy = QUEUE_POLICIES[name]()
    if victim and VICTIMS[victim] is not policy.select_victim:
        policy.select_victim = VICTIMS[victim]
        policy.victim_may_be_scheduled = True  # any victim other than the last admitted may have run already
    return policy
