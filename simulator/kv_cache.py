"""Paged KV cache: a pool of fixed-size blocks handed out on demand (vLLM's KVCacheManager)."""

from __future__ import annotations


class KVBlockManager:
    """Block 0 is vLLM's null block and never handed out, so usable = num_gpu_blocks - 1.

    The free list is a stack whose top is vLLM's free-queue head: new blocks are
    popped from it and a freed request's blocks are pushed back tail first, so its
    first block is reused first, as in vLLM.
    """

    def __init__(self, num_gpu_blocks: int, block_size: int, max_model_len: int, watermark: float = 0.0):
        if num_gpu_blocks < 2:
            raise ValueError("num_gpu_blocks must be >= 2 (block 0 is the null block)")
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.free_blocks: list[int] = list(range(num_gpu_blocks - 1, 0, -1))

    @property
    def num_usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    @property
    def num_used_blocks(self) -> int:
        return self.num_gpu_blocks - 1 - len(self.free_blocks)

    def usage(self) -> float:
        """vLLM's kv_cache_usage_perc, as a fraction."""
        return 1.0 - len(self.free_blocks) / (self.num_gpu_blocks - 1)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def allocate_slots(self, req, num_new_tokens: int, num_lookahead_tokens: int = 0,
                       full_sequence_must_fit: bool = False, apply_watermark: bool = False) -> bool:
        """Grow req's block table to hold its computed + new tokens; False (nothing changed) if the pool can't."""
        bs = self.block_size
        held = len(req.blocks)
        free = self.free_blocks
        reserve = self.watermark_blocks if apply_watermark else 0
        if full_sequence_must_fit:
            full = -(-min(req.num_tokens, self.max_model_len) // bs) - held
            if full + reserve > len(free):
                return False
        slots = req.num_computed_tokens + num_new_tokens + num_lookahead_tokens
        if slots > self.max_model_len:
            slots = self.max_model_len
        need = -(-slots // bs) - held
        if need <= 0:
            return True
        if need + reserve > len(free):
            return False
        taken = free[-need:]
        del free[-need:]
        taken.reverse()
        req.blocks.extend(taken)
        return True

    def grow(self, req, num_blocks: int) -> None:
        """Hand req num_blocks more blocks; the caller has checked they are free."""
        if num_blocks > 0:
            free = self.free_blocks
            taken = free[-num_blocks:]
            del free[-num_blocks:]
            taken.reverse()
            req.blocks.extend(taken)

    def free(self, req) -> None:
        blocks = req.blocks
        blocks.reverse()
        self.free_blocks.extend(blocks)
        req.blocks = []

    def check_invariants(self, requests) -> None:
        """No block held twice, none lost: free + held = usable, all ids in range."""
        held = [b for r in requests for b in r.blocks]
        every = held + self.free_blocks
        assert len(every) == self.num_usable_blocks, (len(every), self.num_usable_blocks)
        assert len(set(every)) == len(every), "a block is held twice or both held and free"
        assert all(0 < b < self.num_gpu_blocks for b in every), "block id out of range"
