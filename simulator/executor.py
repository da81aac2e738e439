"""How long a scheduled batch takes: the Executor seam, and StepTimer, the one owner of "batch -> seconds".

Simulations use ModelledExecutor (the cost model); measured replay plugs in an executor that
runs the batch as real forward passes and returns the wall time
(calibration/measured_executor.py), with the same scheduler and KV manager, so the two differ
only in step durations. StepTimer adds what a step costs beyond the forward pass.
"""

from __future__ import annotations

from servesim.simulator.batch import BatchShape
from servesim.simulator.cost_model import CostModel


class ModelledExecutor:
    # Durations depend only on the shape, so the engine may advance several decode
    # steps at once and get the same times as step by step.
    pure = True

    def __init__(self, cost_model: CostModel):
        self.cost_model = cost_model
        self.step_time_of_shape = cost_model.step_time

    def run(self, shape: BatchShape, scheduled=None) -> float:
        return self.step_time_of_shape(shape)


class StepTimer:
    """A step's end time: the forward pass (the executor), the KV blocks swapped over the host link
    this step, and the draft model's steps under speculative decoding, added in this order."""

    def __init__(self, executor, block_transfer_s: float, speculation=None):
        self.executor, self.block_transfer_s, self.speculation = executor, block_transfer_s, speculation
        self.pure = getattr(executor, "pure", False)  # times depend on the shape only: decode runs are exact

    def end(self, now: float, out) -> float:
        forward = self.executor.run(out.shape, out)
        t = now + forward + out.swapped_blocks * self.block_transfer_s
        return t + self.speculation.draft_time(out, forward) if self.speculation is not None else t

    def decode_step(self, shape: BatchShape) -> float:
        """One step of a decode run: no swaps, no drafts (runs are off under speculation)."""
        return self.executor.run(shape)
