"""vLLM's hybrid KV cache manager: models with local-attention layers in one block pool.

vLLM groups layers of one kind into KV cache groups of `group_layers` layers each (the rarer kind's count;
the last group padded), so every group's page, block_size tokens of its layers, is one block of the pool. A
request holds, per group, a block for each block_size of its tokens, except that a local group drops the
blocks wholly before its window (SlidingWindowManager, ChunkedLocalAttentionManager). Prefix caching keys the
full-attention group's blocks as for any model; the local groups' blocks are taken fresh (their count per
request is vLLM's; that requests on one shared prefix would share cached copies of its window is not modelled,
so their usage together is higher than vLLM's).
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.simulator.capacity import cdiv
from servesim.simulator.errors import ConfigError
from servesim.simulator.kv_cache import KVBlockManager, PrefixCachingKVManager
from servesim.simulator.local_attention import LocalAttention, local_attention


@dataclass(frozen=True)
class KVLayout:
    """How one GPU's KV pool is cut into blocks for a model: page bytes per token and the groups per block of
    tokens. A model without local layers, or with the hybrid manager off, is one group of all its layers."""

    layer_bytes_per_token: int
    group_layers: int
    local_groups: int = 0
    local: LocalAttention | None = None
    note: str | None = None  # what the layout gives up against vLLM's, for a warning

    @property
    def page_bytes_per_token(self) -> int:
        """One block's bytes per token it holds: what the pool is divided by."""
        return self.group_layers * self.layer_bytes_per_token

    def blocks_for(self, tokens: int, computed: int, block_size: int) -> int:
        """Blocks a request holds for `tokens` slots once `computed` tokens are cached."""
        full = cdiv(tokens, block_size)
        if not self.local_groups:
            return full
        return full + self.local_groups * max(0, full - self.local.skipped_tokens(computed) // block_size)

    def local_blocks_cap(self, max_model_len: int, in_flight_tokens: int, block_size: int) -> int:
        """vLLM's max_admission_blocks_per_request: the most blocks one local group holds for a request, its
        window (or chunk) plus the tokens of the steps in flight, at most max_model_len; a sliding window adds a
        block, as it may not start at a block's edge, even where the length bounds it (SlidingWindowSpec); a
        chunk starts at one (ChunkedLocalAttentionSpec). Sizes the pool and, in 0.33, caps admission."""
        w = self.local.window
        if self.local.chunked:
            return cdiv(min(w + in_flight_tokens, max_model_len), block_size)
        return cdiv(min(w - 1 + in_flight_tokens, max_model_len), block_size) + 1

    def max_blocks(self, max_model_len: int, in_flight_tokens: int, block_size: int) -> int:
        """The most one request can hold: vLLM's start-up check that one max-length request fits."""
        full = cdiv(max_model_len, block_size)
        if not self.local_groups:
            return full
        return full + self.local_groups * self.local_blocks_cap(max_model_len, in_flight_tokens, block_size)


def kv_layout(arch, tensor_parallel_size: int = 1, disable_hybrid: bool | None = None) -> KVLayout:
    """vLLM's KV cache groups for `arch` on one GPU of the TP group. disable_hybrid (engine.
    disable_hybrid_kv_cache_manager) keeps every layer whole; None is vLLM's default: the hybrid manager on,
    chunked local attention included (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 1; what turns
    it off, an EAGLE drafter or 0.19's KV connector, is decided by the caller)."""
    layers = arch.num_hidden_layers
    per_layer = arch.kv_bytes_per_token_per_gpu(tensor_parallel_size) // layers
    local = local_attention(arch)
    if local is None or disable_hybrid:
        return KVLayout(per_layer, layers)
    n_local, n_full = local.local_layers, layers - local.local_layers
    if n_full == 0:  # vLLM's sliding-window manager alone (Mistral-7B-v0.1): not modelled, so bounded above
        return KVLayout(per_layer, layers, note=f"servesim: warning: {arch.name} slides a {local.window}-token window "
                                                f"on every layer; its KV is counted for the whole context (vLLM frees "
                                                f"blocks behind the window: beyond it, servesim holds more than vLLM)")
    if n_full > n_local:
        raise ConfigError("engine.disable_hybrid_kv_cache_manager",
                          f"{arch.name}: {n_full} full-attention layers outnumber {n_local} local ones, a hybrid KV "
                          f"layout servesim does not model; set engine.disable_hybrid_kv_cache_manager: true (capacity: "
                          f"--disable-hybrid-kv-cache-manager; every layer keeps its whole context, more memory than "
                          f"vLLM's local layers hold)")
    group = n_full
    return KVLayout(per_layer, group, cdiv(n_local, group), local)


class LocalGroups:
    """Mixin over a block manager: the local groups' blocks come from the same pool as the full group's and
    go back to it as the window moves on. req.blocks stays the full-attention group's."""

    layout: KVLayout
    in_flight_tokens: int  # the budgets of the steps in flight: with the window, bounds a local group's blocks
    plain_running_path = False  # every step may free blocks the window left behind

    def allocate_slots(self, req, num_new_tokens: int,
                       full_sequence_must_fit: bool = False, apply_watermark: bool = False,
                       hit_blocks: list[int] | None = None) -> bool:
        bs, lay = self.block_size, self.layout
        groups = lay.local_groups
        hits = len(hit_blocks) if hit_blocks else 0
        revive = sum(1 for b in hit_blocks if self.ref[b] == 0) if hits else 0  # cached hits still on the free queue
        computed = req.num_computed_tokens + hits * bs
        first = lay.local.skipped_tokens(computed) // bs  # token blocks the local layers no longer need
        held = len(req.local_blocks) // groups
        if held and first > req.local_first:  # vLLM's remove_skipped_blocks
            drop = min(held, first - req.local_first) * groups
            self._give_back(req.local_blocks[:drop])
            del req.local_blocks[:drop]
            held -= drop // groups
        if not held:
            req.local_first = first
        else:
            req.local_first = max(req.local_first, first)
        reserve = self.watermark_blocks if apply_watermark else 0
        if full_sequence_must_fit:  # every group must fit the prompt: the local ones as much as they will hold
            full = super().blocks_to_admit(req.num_tokens)
            whole = max(0, full - len(req.blocks) - hits) + groups * max(0, self._local_to_admit(full) - held)
            if whole + revive + reserve > self.num_free_blocks:
                return False
        slots = min(computed + num_new_tokens, self.max_model_len)
        local_need = groups * max(0, cdiv(slots, bs) - req.local_first - held)
        if not local_need:
            return super().allocate_slots(req, num_new_tokens, full_sequence_must_fit,
                                          apply_watermark, hit_blocks)
        full_need = max(0, cdiv(slots, bs) - len(req.blocks) - hits)
        if local_need + full_need + revive + reserve > self.num_free_blocks:
            return False
        taken = self._pop(local_need, set(hit_blocks) if hits else ())  # never evict a hit it is about to reuse
        if not super().allocate_slots(req, num_new_tokens, full_sequence_must_fit,
                                      apply_watermark, hit_blocks):
            self._give_back(taken)
            return False
        req.local_blocks.extend(taken)
        return True

    def _local_to_admit(self, full: int) -> int:
        """One local group's blocks for a request of `full` full-attention blocks, as vLLM's cap bounds them."""
        return min(full, self.layout.local_blocks_cap(self.max_model_len, self.in_flight_tokens, self.block_size))

    def blocks_to_admit(self, tokens: int) -> int:
        """Its full-attention blocks, and each local group's as far as vLLM's bound holds them."""
        full = super().blocks_to_admit(tokens)
        return full + self.layout.local_groups * self._local_to_admit(full)

    def free(self, req) -> None:
        self._give_back(req.local_blocks)
        req.local_blocks = []
        super().free(req)

    def grow(self, req, num_blocks: int) -> None:
        raise AssertionError("decode runs are off for hybrid models (their local blocks move every step)")


class HybridKVBlockManager(LocalGroups, KVBlockManager):
    def __init__(self, layout: KVLayout, in_flight_tokens: int, *args):
        super().__init__(*args)
        self.layout, self.in_flight_tokens = layout, in_flight_tokens


class HybridPrefixCachingKVManager(LocalGroups, PrefixCachingKVManager):
    def __init__(self, layout: KVLayout, in_flight_tokens: int, *args):
        super().__init__(*args)
        self.layout, self.in_flight_tokens = layout, in_flight_tokens


def make_kv_manager(layout: KVLayout, prefix_caching: bool, in_flight_tokens: int, *args):
    """The block manager for a layout: vLLM's, with the local groups when the model has them."""
    if layout.local_groups:
        return (HybridPrefixCachingKVManager if prefix_caching else HybridKVBlockManager)(layout, in_flight_tokens, *args)
    return (PrefixCachingKVManager if prefix_caching else KVBlockManager)(*args)
