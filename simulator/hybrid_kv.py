"""vLLM's hybrid KV cache manager: models with local-attention layers in one block pool.

vLLM groups layers of one kind into KV cache groups of `group_layers` layers each (the rarer kind's count, or
the commoner's where it is under 1.5 times that; the last group padded), so every group's page, block_size tokens
of its layers, is one block of the pool. A
request holds, per group, a block for each block_size of its tokens, except that a local group drops the
blocks wholly before its window (SlidingWindowManager, ChunkedLocalAttentionManager). With prefix caching every
group keys its blocks by content and requests share them (HybridPrefixCachingKVManager).
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
        kind = "attends in {}-token chunks" if local.chunked else "slides a {}-token window"
        return KVLayout(per_layer, layers, note=f"servesim: warning: {arch.name} {kind.format(local.window)} on every "
                                                f"layer; its KV is counted for the whole context (vLLM frees blocks "
                                                f"behind the window: beyond it, servesim holds more than vLLM)")
    # vLLM's group size: the rarer kind's count, or the commoner's where that is under 1.5 times it (one group
    # of each kind, the rarer padded: 12 sliding + 13 full pads to 13 + 13; r148: servesim took 12, three groups)
    rare, common = min(n_full, n_local), max(n_full, n_local)
    group = common if common < 1.5 * rare else rare
    if cdiv(n_full, group) > 1:
        raise ConfigError("engine.disable_hybrid_kv_cache_manager",
                          f"{arch.name}: {n_full} full-attention layers make {cdiv(n_full, group)} groups of {group} "
                          f"beside {n_local} local ones, a hybrid KV layout servesim does not model; set "
                          f"engine.disable_hybrid_kv_cache_manager: true (capacity: --disable-hybrid-kv-cache-manager; "
                          f"every layer keeps its whole context, more memory than vLLM's local layers hold)")
    return KVLayout(per_layer, group, cdiv(n_local, group), local)


LOCAL = "local"  # a local group's block key: (LOCAL, group, the key its token block has in the full group)


class LocalGroups:
    """Mixin over a block manager: the local groups' blocks come from the same pool as the full group's and
    go back to it as the window moves on. req.blocks stays the full-attention group's; req.local_blocks holds
    the local groups' blocks of token blocks local_first onwards, one per group for each."""

    layout: KVLayout
    frees_processed = False  # 0.33 with async scheduling: a window's blocks go on the tokens processed
    step = 0  # the step being planned (the scheduler sets it)
    in_flight_tokens: int  # the budgets of the steps in flight: with the window, bounds a local group's blocks
    plain_running_path = False  # every step may free blocks the window left behind
    # 0.33 caps what admission asks of a local group at its window (max_admission_blocks_per_request); 0.19 asks for
    # the whole prompt in every group, so a prompt whose groups do not fit together never starts (vLLM #39734)
    admission_cap = True
    _local_hit: tuple = (None, [])  # the last lookup's request and its local groups' hit blocks (prefix caching)

    def allocate_slots(self, req, num_new_tokens: int,
                       full_sequence_must_fit: bool = False, apply_watermark: bool = False,
                       hit_blocks: list[int] | None = None, num_lookahead_tokens: int = 0, skip_to: int = 0,
                       delay_cache_blocks: bool = False) -> bool:
        bs, lay = self.block_size, self.layout
        groups = lay.local_groups
        req.lazy_keys = False  # a window's blocks are keyed as they fill, as the full group's (class doc below)
        hits = len(hit_blocks) if hit_blocks else 0
        local_hits = self._local_hit[1] if hits and self._local_hit[0] is req else []
        revive = sum(1 for b in (*hit_blocks, *local_hits) if self.ref[b] == 0) if hits else 0  # hits still free
        computed = req.num_computed_tokens + hits * bs
        # token blocks the local layers no longer need: past a pulled prompt's too, as vLLM skips by the connector's
        # external tokens (r153: a decode replica held a window's blocks for the whole prompt while it pulled);
        # 0.33 under async scheduling by the tokens processed, not those of the step still in flight (r155: freed a
        # step early, a 6,000-token gpt-oss prompt's peak 502 blocks where vLLM holds 630)
        lag = req.flight_tokens if self.frees_processed and req.flight_step == self.step - 1 else 0
        first = lay.local.skipped_tokens(max(computed - lag, skip_to)) // bs
        held = len(req.local_blocks) // groups
        if held and first > req.local_first:  # vLLM's remove_skipped_blocks
            drop = min(held, first - req.local_first) * groups
            self._release(req.local_blocks[:drop])
            del req.local_blocks[:drop]
            held -= drop // groups
        if not held:
            req.local_first = first
        else:
            req.local_first = max(req.local_first, first)
        held += len(local_hits) // groups  # the hit's blocks inside the window: token blocks first..hits-1
        reserve = self.watermark_blocks if apply_watermark else 0
        if full_sequence_must_fit:  # every group must fit the prompt: the local ones as much as they will hold,
            # beyond the blocks the request has or skips (vLLM's get_num_blocks_to_allocate under its cap)
            full = super().blocks_to_admit(req.num_tokens)
            whole = max(0, full - len(req.blocks) - hits) + \
                groups * max(0, self._local_to_admit(full) - req.local_first - held)
            if whole + revive + reserve > self.num_free_blocks:
                return False
        slots = min(computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        local_need = groups * max(0, cdiv(slots, bs) - req.local_first - held)
        if not (local_need or local_hits):
            return super().allocate_slots(req, num_new_tokens, full_sequence_must_fit,
                                          apply_watermark, hit_blocks, num_lookahead_tokens,
                                          delay_cache_blocks=delay_cache_blocks)
        full_need = max(0, cdiv(slots, bs) - len(req.blocks) - hits)
        if local_need + full_need + revive + reserve > self.num_free_blocks:
            return False
        if local_hits:
            self._touch(local_hits)
        taken = self._pop(local_need, set(hit_blocks) if hits else ())  # never evict a hit it is about to reuse
        added = len(local_hits) + len(taken)
        req.local_blocks.extend(local_hits)
        req.local_blocks.extend(taken)  # before the full group's call, which keys both (_key)
        if not super().allocate_slots(req, num_new_tokens, full_sequence_must_fit,
                                      apply_watermark, hit_blocks, num_lookahead_tokens,
                                      delay_cache_blocks=delay_cache_blocks):
            self._release(req.local_blocks[-added:])
            del req.local_blocks[-added:]
            return False
        return True

    def _local_to_admit(self, full: int) -> int:
        """One local group's blocks for a request of `full` full-attention blocks, as vLLM's cap bounds them (0.33;
        0.19: all of them)."""
        if not self.admission_cap:
            return full
        return min(full, self.layout.local_blocks_cap(self.max_model_len, self.in_flight_tokens, self.block_size))

    def blocks_to_admit(self, tokens: int) -> int:
        """Its full-attention blocks, and each local group's as far as vLLM's bound holds them."""
        full = super().blocks_to_admit(tokens)
        return full + self.layout.local_groups * self._local_to_admit(full)

    def free(self, req) -> None:
        self._release(req.local_blocks)
        req.local_blocks = []
        super().free(req)

    def grow(self, req, num_blocks: int) -> None:
        raise AssertionError("decode runs are off for hybrid models (their local blocks move every step)")


class HybridKVBlockManager(LocalGroups, KVBlockManager):
    def __init__(self, layout: KVLayout, in_flight_tokens: int, *args):
        super().__init__(*args)
        self.layout, self.in_flight_tokens = layout, in_flight_tokens


class HybridPrefixCachingKVManager(LocalGroups, PrefixCachingKVManager):
    """Prefix caching across the groups, as vLLM's HybridKVCacheCoordinator does it: each local group keys its
    blocks by the token block's content (and the group), and a hit is the full group's longest, cut back to
    what the local groups hold of it. A sliding window needs the blocks of the window before the hit cached
    (SlidingWindowManager), a chunk the blocks of its current chunk up to the hit (ChunkedLocalAttentionManager);
    the blocks before them are not needed. Hit blocks are shared and ref-counted; a block the window leaves
    behind goes back to the queue keeping its content.

    Every block is keyed as it fills (no deferred keys), as a window's blocks leave before the request ends.
    0.33 keeps a sliding window's blocks cached only where a later request can resume
    (`window_retention`, vLLM's prefix_cache_retention_interval, 0 by default): the window before the prompt's
    last token, and before a shared prefix's end once a request found it in the full group but not in the
    window (shared_prefix_boundary); that request computes the prefix again and keeps its window for the next.
    A positive interval also keeps the window before every multiple of it; None (and 0.19) keeps every block."""

    window_retention: int | None = None  # None: every window block keyed (0.19, or vLLM's None); else 0.33's
    eagle_margin = False  # 0.33: the window's lookup looks one block past an EAGLE-type hit before dropping one

    def __init__(self, layout: KVLayout, in_flight_tokens: int, *args):
        super().__init__(*args)
        self.layout, self.in_flight_tokens = layout, in_flight_tokens

    def lookup(self, req) -> tuple[list[int], int]:
        hits, _ = super().lookup(req)
        full = len(hits)
        if not full:
            self._local_hit = (req, [])
            req.prefix_junction = 0
            return hits, 0
        bs, lay = self.block_size, self.layout
        groups, cached = lay.local_groups, self.cached
        eagle = self.drop_last_hit
        most = min(full + 1, req.num_tokens // bs) if eagle and self.eagle_margin else full
        keys = self.block_keys(req, 0, most)

        def held(i: int) -> bool:  # every local group holds token block i
            return all((LOCAL, g, keys[i]) in cached for g in range(groups))

        if lay.local.chunked:  # the current chunk's blocks up to the hit; those before it are not read (no EAGLE
            # margin here: vLLM turns the hybrid manager off beside EAGLE drafts, config._hybrid_off)
            start = full * bs // lay.local.window * lay.local.window // bs
            end = start
            while end < full and held(end):
                end += 1
        else:  # the window before the hit, searched from the right; from block 0 a shorter run counts
            need = cdiv(lay.local.window - 1, bs) + eagle
            start = end = run = 0
            for i in range(most - 1, -1, -1):
                if not held(i):
                    run = 0
                    continue
                run += 1
                if run >= need:  # a block found ends the search: a 1-token window needs none before it
                    start, end = i, i + run
                    break
            else:
                end = run
            if eagle and end:
                end -= 1
        first = max(start, lay.local.skipped_tokens(end * bs) // bs)
        self._local_hit = (req, [cached[(LOCAL, g, keys[i])] for i in range(first, end) for g in range(groups)])
        req.prefix_junction = full if end < full and self.window_retention is not None else 0
        del hits[end:]
        return hits, end * bs

    def _touch(self, blocks: list[int]) -> None:
        """Hit blocks taken by one more request: off the free queue if nobody held them (vLLM's touch)."""
        queue, ref = self.queue, self.ref
        for b in blocks:
            if ref[b] == 0:
                del queue[b]
            ref[b] += 1

    def _key(self, req, start: int, stop: int) -> None:
        """The full group's blocks start..stop-1 by content, and the local groups' of those token blocks they
        hold and keep cached."""
        keys = self.block_keys(req, start, stop)
        self._name(req.blocks[start:stop], keys)
        groups, lo = self.layout.local_groups, req.local_first
        kept = self._kept(req)
        for i in range(max(start, lo), min(stop, lo + len(req.local_blocks) // groups)):
            if kept is None or kept(i):
                at = (i - lo) * groups
                self._name(req.local_blocks[at:at + groups], [(LOCAL, g, keys[i - start]) for g in range(groups)])

    def _kept(self, req):
        """Which token blocks' window blocks 0.33 keeps cached (vLLM's reachable_block_mask): None for all."""
        interval, lay = self.window_retention, self.layout
        if interval is None or lay.local.chunked:
            return None
        bs, eagle = self.block_size, int(self.drop_last_hit)
        need = cdiv(lay.local.window - 1, bs) + eagle
        per = interval // bs
        if per and need >= per:  # the periodic windows cover every block
            return None
        prompt = req.spec.prompt_tokens
        if eagle:  # the resent prompt's hit and a longer one's, each a block lower for the peek
            bounds = {max((prompt - 1) // bs * bs - bs, 0), max(prompt // bs * bs - bs, 0)}
        else:
            bounds = {prompt - 1}
        if req.prefix_junction:
            bounds.add(req.prefix_junction * bs)
            if eagle:
                bounds.add(req.prefix_junction * bs - bs)
        ends = [b // bs + eagle for b in bounds]
        return lambda i: any(e - need <= i < e for e in ends) or \
            bool(per) and i >= eagle and (i - eagle) % per >= per - need


def make_kv_manager(layout: KVLayout, prefix_caching: bool, in_flight_tokens: int, *args):
    """The block manager for a layout: vLLM's, with the local groups when the model has them."""
    if layout.local_groups:
        return (HybridPrefixCachingKVManager if prefix_caching else HybridKVBlockManager)(layout, in_flight_tokens, *args)
    return (PrefixCachingKVManager if prefix_caching else KVBlockManager)(*args)
