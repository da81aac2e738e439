"""How a preempted request gives up its KV: vLLM V1 recomputes (forgets its computed tokens);
servesim adds swap (keep them in host memory while there is room, copied back before it runs
again) and auto (whichever costs less for this victim: the transfer out and back, or its
prefill again). `policies.preemption_mode`; the victim itself is the queue policy's choice.
"""

from __future__ import annotations

from typing import Literal

from servesim.simulator.request import PREEMPTED, Request

PreemptionMode = Literal["recompute", "swap", "auto"]  # the scenario's `policies.preemption_mode`


class Preemption:
    def __init__(self, mode: PreemptionMode = "recompute", swap_space_blocks: int = 0, swap_cost=None, recompute_cost=None):
        """swap_cost(blocks) and recompute_cost(tokens), in seconds, let `auto` choose."""
        self.mode, self.swap_space_blocks = mode, swap_space_blocks
        self._swap_cost, self._recompute_cost = swap_cost, recompute_cost
        self.swap_used = 0  # host blocks holding swapped-out KV
        self.no_room: list[int] = []  # the blocks of each victim that would swap but found the host space full

    def give_up(self, r: Request, kv, now: float) -> int:
        """Free the victim's blocks; returns the blocks swapped out (0: it recomputes)."""
        blocks = len(r.blocks) + len(r.local_blocks)
        mode = self.mode
        if mode == "auto":
            mode = "swap" if self._swap_cost(2 * blocks) < self._recompute_cost(r.num_computed_tokens) else "recompute"
        swap = mode == "swap" and r.num_computed_tokens > 0 and self.swap_used + blocks <= self.swap_space_blocks
        if mode == "swap" and r.num_computed_tokens > 0 and not swap:
            self.no_room.append(blocks)
        kv.free(r)
        r.status = PREEMPTED
        r.num_preemptions += 1
        r.preempted_at = now
        if swap:
            r.swapped_blocks = blocks
            r.num_swaps += 1
            self.swap_used += blocks
            return blocks
        if r.recompute_end > r.num_computed_tokens:  # preempted again before its recompute ended: the rest
            r.recomputed_tokens -= r.recompute_end - r.num_computed_tokens  # never ran (counted when it does)
        r.recompute_end = max(r.recompute_end, r.num_computed_tokens)  # all it ever computed, lost: computed
        # again when it returns
        r.num_computed_tokens = 0
        return 0

    def swap_in(self, r: Request) -> int:
        """Copy a swapped-out request's KV back before it runs; returns the blocks copied."""
        blocks, r.swapped_blocks = r.swapped_blocks, 0
        self.swap_used -= blocks
        return blocks
