"""Paged KV cache: a pool of fixed-size blocks handed out on demand (vLLM's KVCacheManager)."""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice

from servesim.simulator.request import FINISHED

GONE = ("gone",)  # the key of a kept block whose content nobody can ask for again (PrefixCachingKVManager.free)


class KVBlockManager:
    """Block 0 is vLLM's null block and never handed out, so usable = num_gpu_blocks - 1.

    The free list is a stack whose top is the free-queue head: new blocks are popped from it and a freed
    request's blocks are pushed back tail first, so its first block is reused first. vLLM 0.33 reuses a freed
    request's last block first and 0.19 appends freed blocks at the queue's tail (PrefixCachingKVManager keeps
    those orders); without prefix caching a block's id carries nothing, so no result depends on the order.
    """

    caches_prefixes = False  # vLLM counts prefix-cache queries only with enable_prefix_caching
    # allocate_slots for a running request does nothing when its blocks hold the new slots and (caching) no
    # block fills: the scheduler may skip the call then (not with local layers, see hybrid_kv.py)
    plain_running_path = True

    def __init__(self, num_gpu_blocks: int, block_size: int, max_model_len: int, watermark: float = 0.0):
        if num_gpu_blocks < 2:
            raise ValueError("num_gpu_blocks must be >= 2 (block 0 is the null block)")
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.free_blocks = self._free_list(num_gpu_blocks)

    def _free_list(self, num_gpu_blocks: int):
        return list(range(num_gpu_blocks - 1, 0, -1))

    @property
    def num_usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    def blocks_to_admit(self, tokens: int) -> int:
        """The blocks a request of `tokens` needs at once to be admitted whole (scheduler_reserve_full_isl)."""
        return -(-min(tokens, self.max_model_len) // self.block_size)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    @property
    def num_used_blocks(self) -> int:
        return self.num_gpu_blocks - 1 - len(self.free_blocks)

    def usage(self) -> float:
        """vLLM's kv_cache_usage_perc, as a fraction."""
        return 1.0 - len(self.free_blocks) / (self.num_gpu_blocks - 1)

    def lookup(self, req) -> tuple[list[int], int]:
        """Prefix-cache hit for a request about to be admitted: (blocks, tokens). None without caching."""
        return [], 0

    def allocate_slots(self, req, num_new_tokens: int,
                       full_sequence_must_fit: bool = False, apply_watermark: bool = False,
                       hit_blocks: list[int] | None = None, num_lookahead_tokens: int = 0, skip_to: int = 0,
                       delay_cache_blocks: bool = False) -> bool:
        """Grow req's block table to hold its computed + new tokens, and the drafter's lookahead slots past them
        (vLLM's num_lookahead_tokens); False (nothing changed) if the pool can't. skip_to: the tokens a KV
        connector brings (vLLM's external computed tokens), which a local layer's window skips by (hybrid_kv.py);
        delay_cache_blocks: their blocks are not cached until the pull ends (vLLM's, for an async KV load)."""
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
            req.blocks.extend(self._pop(num_blocks))

    def _pop(self, n: int, skip=()) -> list[int]:
        """n blocks off the free stack's top, in the order vLLM's free queue hands them out (no block here is
        a prefix hit, so there is nothing to skip)."""
        free = self.free_blocks
        taken = free[-n:]
        del free[-n:]
        taken.reverse()
        return taken

    def _give_back(self, blocks: list[int]) -> None:
        """Blocks back on the free stack, the first of them on top."""
        self.free_blocks.extend(reversed(blocks))

    _release = _give_back  # blocks one request stops holding (nothing is shared without prefix caching)

    def register_computed(self, req) -> None:
        """After a decode run: register the blocks its tokens filled, as step by step would (no cache here)."""

    def register_full(self, req, full_blocks: int) -> None:
        """Register req's leading full_blocks blocks by content, as allocate_slots does (no cache here)."""

    def free(self, req) -> None:
        blocks = req.blocks
        blocks.reverse()
        self.free_blocks.extend(blocks)
        req.blocks = []

    def check_invariants(self, requests) -> None:
        """No block held twice, none lost: free + held = usable, all ids in range."""
        held = [b for r in requests for b in (*r.blocks, *r.local_blocks)]
        every = held + self.free_blocks
        assert len(every) == self.num_usable_blocks, (len(every), self.num_usable_blocks)
        assert len(set(every)) == len(every), "a block is held twice or both held and free"
        assert all(0 < b < self.num_gpu_blocks for b in every), "block id out of range"


class PrefixCachingKVManager(KVBlockManager):
    """vLLM's prefix caching (`enable_prefix_caching`): full blocks are registered by content when
    scheduled; a freed block keeps its content until evicted; admission reuses the longest cached
    prefix.

    Content keys come from the request's block-level prefix ids (workloads/spec.py): engine block i
    lies inside content block j = i * block_size // prefix_block_tokens, and since an id names its
    whole prefix, (id, offset) names the engine block's. Any other engine block size (16-token ids and
    128-token blocks, or 48-token blocks on Mooncake's 512-token ids) keys each block by the id holding its
    last token and that token's offset in it: vLLM hashes blocks of its own size. Blocks without content
    identity (no ids, or generated tokens) get keys unique to the request, so a preempted request still finds its own
    blocks again, as in vLLM. Free queue: an ordered dict whose first entry is vLLM's free-queue head
    (reused first); freed cached blocks go to the tail (least recently used evicted first), freed
    uncached ones to the head.

    Registration is deferred where nobody can see it: until a request is first freed, the blocks only it can
    name (keys unique to it) cannot be looked up (it does not look up while running) nor evicted (it holds
    them), so they are registered when it is freed, at once, as vLLM would have them by then. Blocks a
    workload names, and every block of a request freed before (its old keys may still be cached), are
    registered at the step they fill, as in vLLM. A finished request's own keys are never asked for
    again: its blocks only take vLLM's place for cached blocks in the free queue (GONE).
    """

    caches_prefixes = True

    empty_first = True  # 0.33's free order: blocks without content back at the queue's head (0.19: its tail)

    def __init__(self, num_gpu_blocks: int, block_size: int, max_model_len: int, watermark: float = 0.0):
        super().__init__(num_gpu_blocks, block_size, max_model_len, watermark)
        self.ref = [0] * num_gpu_blocks
        self.key_of: list = [None] * num_gpu_blocks
        self.cached: dict = {}  # content key -> block
        # content key -> the later blocks holding it, in the order they were named: vLLM's BlockHashToBlockMap keeps
        # every copy (two requests computing one prefix at once), and one evicted leaves the next found (r130)
        self.copies: dict = {}

    def _free_list(self, num_gpu_blocks: int):
        self.queue = FreeQueue(num_gpu_blocks)  # every block free, none built one by one
        return _QueueView(self.queue)

    def block_key(self, req, i: int):
        return self.block_keys(req, i, i + 1)[0]

    def block_keys(self, req, start: int, stop: int) -> list:
        """Content keys of engine blocks start..stop-1: (id, offset) tuples where the workload says
        what the tokens are, else negative ints unique to the request (no cross-request sharing)."""
        spec, bs = req.spec, self.block_size
        unit = spec.prefix_block_tokens
        ids = spec.prefix_ids
        base = -(req.request_id << 24) - 1
        shared = max(start, min(stop, self.shared_blocks(req)))
        if unit % bs == 0:  # whole engine blocks in each content block
            per = unit // bs
            keys = [(ids[i // per], i % per) for i in range(start, shared)]
        else:  # any other size (finer ids, or blocks across id boundaries): the id holding a block's last
            # token names everything before it, and the token's place in that id says how far it goes
            keys = [(ids[((i + 1) * bs - 1) // unit], (i + 1) * bs - ((i + 1) * bs - 1) // unit * unit)
                    for i in range(start, shared)]
        if self.hash_lookahead:  # what the token after each block is: the id holding it and its place, or this
            named = self.named_tokens(req)  # request's own token where no id names it
            keys = [(key, (ids[t // unit], t % unit) if t < named else req.request_id)
                    for key, t in zip(keys, range((start + 1) * bs, (shared + 1) * bs, bs))]
        return keys + list(range(base - shared, base - stop, -1))

    def shared_blocks(self, req) -> int:
        """The leading blocks whose content the workload names (ids), which other requests may share."""
        return self.named_tokens(req) // self.block_size

    @staticmethod
    def named_tokens(req) -> int:
        """The leading tokens whose content the workload names (ids)."""
        spec = req.spec
        ids, unit = spec.prefix_ids, spec.prefix_block_tokens
        if not (ids and unit):
            return 0
        # ids past the prompt run on over the output; fewer ids than prompt blocks name only what they cover. A
        # last id the prompt ends inside runs on over the answer up to its end: a chat's next turn resends both in
        # that block (r151: an engine block ending inside it, at block size 8 under 16-token ids, missed)
        blocks = -(-spec.prompt_tokens // unit)
        if len(ids) > blocks:
            return len(ids) * unit
        if len(ids) == blocks and spec.prompt_tokens % unit:
            return min(len(ids) * unit, spec.prompt_tokens + spec.output_tokens)
        return min(spec.prompt_tokens, len(ids) * unit)

    def exact_blocks(self, req) -> int:
        """The leading blocks registered at the step they fill; the rest wait until req is freed (class doc)."""
        return self.shared_blocks(req) if req.lazy_keys else 1 << 62

    drop_last_hit = False  # EAGLE-type drafts: vLLM computes a hit's last block again (speculative.eagle_block_drop)
    hash_lookahead = False  # 0.33's lookahead block hashes: a block's key names the token after it too

    def lookup(self, req) -> tuple[list[int], int]:
        """The longest run of cached leading blocks, capped so that one token is left to compute."""
        most = (req.num_tokens - 1) // self.block_size
        hits, cached = [], self.cached
        if most > 0 and self.block_key(req, 0) in cached:
            for k in self.block_keys(req, 0, most):
                b = cached.get(k)
                if b is None:
                    break
                hits.append(b)
        if self.drop_last_hit and hits:
            hits.pop()
        return hits, len(hits) * self.block_size

    def allocate_slots(self, req, num_new_tokens: int,
                       full_sequence_must_fit: bool = False, apply_watermark: bool = False,
                       hit_blocks: list[int] | None = None, num_lookahead_tokens: int = 0, skip_to: int = 0,
                       delay_cache_blocks: bool = False) -> bool:
        bs, queue, ref = self.block_size, self.queue, self.ref
        if not hit_blocks and not full_sequence_must_fit:  # the running requests' path, every step
            slots = req.num_computed_tokens + num_new_tokens + num_lookahead_tokens
            if slots > self.max_model_len:
                slots = self.max_model_len
            need = -(-slots // bs) - len(req.blocks)
            if need > 0:
                if need + (self.watermark_blocks if apply_watermark else 0) > len(queue):
                    return False
                self._take(req, need)
            upto = req.num_computed_tokens + num_new_tokens
            if upto > req.num_tokens:
                upto = req.num_tokens
            if upto // bs > req.num_hashed_blocks and not delay_cache_blocks:
                self._register(req, upto // bs)
            return True
        hit_blocks = hit_blocks or []
        revive = sum(1 for b in hit_blocks if ref[b] == 0)  # cached but free: touching takes them off the queue
        held = len(req.blocks) + len(hit_blocks)
        computed = req.num_computed_tokens + len(hit_blocks) * bs
        reserve = self.watermark_blocks if apply_watermark else 0
        if full_sequence_must_fit:
            full = -(-min(req.num_tokens, self.max_model_len) // bs) - held + revive
            if full + reserve > len(queue):
                return False
        slots = min(computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        need = max(0, -(-slots // bs) - held)
        if need + revive + reserve > len(queue):
            return False
        for b in hit_blocks:
            if ref[b] == 0:
                del queue[b]
            ref[b] += 1
        req.blocks.extend(hit_blocks)
        self._take(req, need)
        if not delay_cache_blocks:  # a pulled prompt's blocks are found once its KV is here (r159: hit meanwhile)
            self._register(req, min(computed + num_new_tokens, req.num_tokens) // bs)
        return True

    def _take(self, req, n: int) -> None:
        req.blocks.extend(self._pop(n))

    def _pop(self, n: int, skip=()) -> list[int]:
        """n blocks from the queue head (passing over those in `skip`); a block that still held cached content
        loses it."""
        queue, ref, key_of, cached, copies = self.queue, self.ref, self.key_of, self.cached, self.copies
        if skip:
            out = list(islice((b for b in queue if b not in skip), n))
            for b in out:
                del queue[b]
        elif n == 1:  # a decoder's next block: most calls
            out = [queue.popitem(last=False)[0]]
        else:
            out = [queue.popitem(last=False)[0] for _ in range(n)]
        for b in out:
            k = key_of[b]
            if k is not None:
                if cached.get(k) == b:
                    rest = copies.get(k)
                    if rest:  # the next copy is found from now on
                        cached[k] = rest.pop(0)
                        if not rest:
                            del copies[k]
                    else:
                        del cached[k]
                elif k in copies:  # a later copy
                    rest = copies[k]
                    rest.remove(b)
                    if not rest:
                        del copies[k]
                key_of[b] = None
            ref[b] = 1
        return out

    def _register(self, req, full_blocks: int) -> None:
        """Blocks are hashed when scheduled (vLLM), not when computed."""
        start = req.num_hashed_blocks
        if full_blocks <= start:
            return
        stop = min(full_blocks, max(start, self.shared_blocks(req))) if req.lazy_keys else full_blocks
        if stop > start:
            self._key(req, start, stop)
        req.num_hashed_blocks = full_blocks

    def _key(self, req, start: int, stop: int) -> None:
        """Blocks start..stop-1 of req by content."""
        self._name(req.blocks[start:stop], self.block_keys(req, start, stop))

    def _name(self, blocks, keys) -> None:
        """Blocks by their content keys: a block keeps its first key; a key is found at its first block, and its
        later copies are kept to be found once that one is evicted."""
        key_of, cached = self.key_of, self.cached
        for b, k in zip(blocks, keys):
            if key_of[b] is None:
                key_of[b] = k
                if k not in cached:
                    cached[k] = b
                else:
                    self.copies.setdefault(k, []).append(b)

    def grow(self, req, num_blocks: int) -> None:
        if num_blocks > 0:
            self._take(req, num_blocks)

    register_full = _register

    def register_computed(self, req) -> None:
        self._register(req, req.num_computed_tokens // self.block_size)

    def free(self, req) -> None:
        if req.lazy_keys:  # the registrations deferred until now (class doc)
            req.lazy_keys = False
            start = self.shared_blocks(req)
            if req.num_hashed_blocks > start:
                if req.status == FINISHED:  # only it could ask for these keys, and it never will: the blocks
                    # go to the queue's tail as cached blocks do (vLLM's order), with nothing to find or evict
                    key_of = self.key_of
                    for b in req.blocks[start:req.num_hashed_blocks]:
                        key_of[b] = GONE
                else:
                    self._key(req, start, req.num_hashed_blocks)
        self._release(req.blocks)
        req.blocks = []
        req.num_hashed_blocks = 0

    def _release(self, blocks: list[int]) -> None:
        """Blocks one request stops holding, its last first: those nobody holds go back to the queue, at its
        tail if they keep content (least recently used evicted first); in 0.33 those without it at its head,
        reused first (its last block first, as prepend_n places them), where 0.19 appends every block."""
        queue, ref, key_of = self.queue, self.ref, self.key_of
        empty = []
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                queue[b] = None
                if key_of[b] is None and self.empty_first:
                    empty.append(b)
        for b in reversed(empty):
            queue.move_to_end(b, last=False)

    def check_invariants(self, requests) -> None:
        """Ref counts equal the requests holding each block; free = ref 0; free + held = usable."""
        counts = [0] * self.num_gpu_blocks
        for r in requests:
            for b in (*r.blocks, *r.local_blocks):
                counts[b] += 1
        assert counts == self.ref, "a ref count differs from the requests holding the block"
        free = set(self.queue)
        assert free == {b for b in range(1, self.num_gpu_blocks) if counts[b] == 0}, "free queue != unreferenced"
        assert all(self.key_of[b] == k for k, b in self.cached.items()), "cache map and block keys disagree"
        assert all(k in self.cached and self.key_of[b] == k and b != self.cached[k] for k, bs in self.copies.items()
                   for b in bs), "a copy's key is not cached, or names another block"


class FreeQueue:
    """vLLM's free-block queue in the OrderedDict interface the manager uses, with the blocks never handed out
    kept as a range, not one entry each: a pool of millions of blocks (fp8 KV over 8 GPUs) cost a second to
    build per run, for blocks most runs never touch. Its order is `head`, then the untouched range lo..hi-1,
    then `tail`: the same order the one ordered dict of every block had."""

    __slots__ = ("head", "lo", "hi", "tail")

    def __init__(self, num_gpu_blocks: int):
        self.head: OrderedDict[int, None] = OrderedDict()
        self.lo, self.hi = 1, num_gpu_blocks  # block 0 is the null block
        self.tail: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self.head) + self.hi - self.lo + len(self.tail)

    def __iter__(self):
        yield from self.head
        yield from range(self.lo, self.hi)
        yield from self.tail

    def __contains__(self, b: int) -> bool:
        return b in self.head or self.lo <= b < self.hi or b in self.tail

    def __setitem__(self, b: int, _) -> None:
        """Inserted at the end (an ordered dict's new key)."""
        self.tail[b] = None

    def __delitem__(self, b: int) -> None:
        if b in self.head:
            del self.head[b]
        elif b in self.tail:
            del self.tail[b]
        elif self.lo <= b < self.hi:  # untouched blocks hold no content: taken from the range's front, but
            if b != self.lo:  # any is allowed: those before it keep their place, explicitly
                for before in range(self.lo, b):
                    self.head[before] = None
            self.lo = b + 1
        else:
            raise KeyError(b)

    def move_to_end(self, b: int, last: bool = True) -> None:
        del self[b]
        if last:
            self.tail[b] = None
        else:
            self.head[b] = None
            self.head.move_to_end(b, last=False)

    def popitem(self, last: bool = True) -> tuple[int, None]:
        if last:
            if self.tail:
                return self.tail.popitem()
            if self.lo < self.hi:
                self.hi -= 1
                return self.hi, None
            return self.head.popitem()
        if self.head:
            return self.head.popitem(last=False)
        if self.lo < self.hi:
            self.lo += 1
            return self.lo - 1, None
        return self.tail.popitem(last=False)


class _QueueView:
    """len() of the free queue, for code that only counts free blocks."""

    def __init__(self, queue):
        self._q = queue

    def __len__(self) -> int:
        return len(self._q)
