"""Batching: when may waiting requests join the running batch.

continuous: every step (iteration-level scheduling, Orca/vLLM).
static: a batch of up to batch_size requests is formed only when the previous
batch has wholly finished; slots freed early stay idle until then. The batch is the requests
waiting when it opens (up to batch_size): they join over as many steps as the token budget
takes to admit them, and nothing arriving later joins it. Once a member leaves (finished or
preempted) the batch is what has joined: a member the KV pool or a seat cap kept out waits for
the next batch rather than taking the freed slot, which would be continuous batching.
"""

from __future__ import annotations

from typing import Callable, Literal, Protocol, runtime_checkable


@runtime_checkable
class BatchingGate(Protocol):
    """Asked by the scheduler once per step (open_admission), before each admission (may_admit), and told of
    each admission (joined)."""

    name: str
    batch_id: int  # the static batch a request joined; -1 under continuous batching
    counts_waiting: int  # how many waiting requests open_admission needs counted (the scheduler counts no more)

    def open_admission(self, num_running: int, num_waiting: int) -> None: ...
    def may_admit(self) -> bool: ...
    def joined(self) -> None: ...


class ContinuousBatching:
    name = "continuous"
    batch_id = -1
    counts_waiting = 0

    def __init__(self, batch_size: int | None = None):
        pass

    def open_admission(self, num_running: int, num_waiting: int) -> None:
        pass

    def may_admit(self) -> bool:
        return True

    def joined(self) -> None:
        pass


class StaticBatching:
    name = "static"

    def __init__(self, batch_size: int):
        self.batch_size = self.counts_waiting = batch_size
        self.batch_id = -1
        self._members = 0  # the batch being formed: the requests waiting when it opened, up to batch_size
        self._joined = 0

    def open_admission(self, num_running: int, num_waiting: int) -> None:
        """Called once per step before admission: a new batch opens only on an empty engine, and stays open until
        its members have joined (a step's token budget may admit only some of them: round 93 formed batches of
        9 where 16 were asked for and waiting)."""
        if num_running == 0 and num_waiting:
            self.batch_id += 1
            self._members, self._joined = min(self.batch_size, num_waiting), 0
        elif num_running == 0:  # no request to open one with (under async scheduling: none seen yet)
            self._members = self._joined
        elif num_running < self._joined:  # a member left: its slot stays idle, and so do those not yet taken
            self._members = self._joined

    def may_admit(self) -> bool:
        return self._joined < self._members

    def joined(self) -> None:
        self._joined += 1


BATCHING_POLICIES: dict[str, Callable[[int], BatchingGate]] = {"continuous": ContinuousBatching,
                                                                "static": StaticBatching}
BatchingName = Literal[tuple(BATCHING_POLICIES)]  # the scenario's `policies.batching`


def make_batching(name: str, batch_size: int) -> BatchingGate:
    return BATCHING_POLICIES[name](batch_size)
