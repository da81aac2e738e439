"""Batching: when may waiting requests join the running batch.

continuous: every step (iteration-level scheduling, Orca/vLLM).
static: a batch of up to batch_size requests is formed only when the previous
batch has wholly finished; slots freed early stay idle until then.
"""

from __future__ import annotations

from typing import Callable, Literal, Protocol, runtime_checkable


@runtime_checkable
class BatchingGate(Protocol):
    """Asked by the scheduler once per step (open_admission) and before each admission (may_admit)."""

    name: str
    batch_id: int  # the static batch a request joined; -1 under continuous batching

    def open_admission(self, num_running: int) -> None: ...
    def may_admit(self, num_admitted: int) -> bool: ...


class ContinuousBatching:
    name = "continuous"
    batch_id = -1

    def __init__(self, batch_size: int | None = None):
        pass

    def open_admission(self, num_running: int) -> None:
        pass

    def may_admit(self, num_admitted: int) -> bool:
        return True


class StaticBatching:
    name = "static"

    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self.batch_id = -1
        self._open = False

    def open_admission(self, num_running: int) -> None:
        """Called once per step before admission: a new batch forms only on an empty engine."""
        self._open = num_running == 0
        if self._open:
            self.batch_id += 1

    def may_admit(self, num_admitted: int) -> bool:
        return self._open and num_admitted < self.batch_size


BATCHING_POLICIES: dict[str, Callable[[int], BatchingGate]] = {"continuous": ContinuousBatching,
                                                                "static": StaticBatching}
BatchingName = Literal[tuple(BATCHING_POLICIES)]  # the scenario's `policies.batching`


def make_batching(name: str, batch_size: int) -> BatchingGate:
    return BATCHING_POLICIES[name](batch_size)
