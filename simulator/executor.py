"""The Executor seam: how long a scheduled batch takes.

Every simulation uses ModelledExecutor (the cost model). A measured executor, which
runs the batch as real forward passes and returns the wall time, plugs in here later
with the same scheduler and KV manager, so the two differ only in step durations.
"""

from __future__ import annotations

from simulator.batch import BatchShape
from simulator.cost_model import CostModel


class ModelledExecutor:
    # Durations depend only on the shape, so the engine may advance several decode
    # steps at once and get the same times as step by step.
    pure = True

    def __init__(self, cost_model: CostModel):
        self.cost_model = cost_model
        self.step_time_of_shape = cost_model.step_time

    def run(self, shape: BatchShape, scheduled=None) -> float:
        return self.step_time_of_shape(shape)
