"""Steady decoders, servesim's fast path inside a step: a step costs what changes in it, not the batch.

Most running requests only add one token per step. Once its prefill is done a request joins the
cohort: its counters stay as they were at the step it joined, and its true state follows from the
step index (tokens = tokens at joining + steps since), so a step advances every member at once
through running sums. A member is touched only at the step where it next needs a KV block or fills
one the prefix cache must register then (allocated in running order with the others; a block only it
can name is registered later, kv_cache.py), and leaves, synced, at the step its last token comes. A step that is not certain to give every member its one token (the token
budget or the KV pool would run short: vLLM would starve or preempt someone) dissolves the cohort
and runs the plain way. Results equal step by step: tests/test_determinism.py and tests/test_golden.py.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left

from servesim.simulator.request import Request


class DecodeCohort:
    def __init__(self, kv):
        self.kv = kv
        self.block_size = kv.block_size
        self.registers_blocks = kv.caches_prefixes  # prefix caching: blocks that fill are registered
        self.members: dict[int, Request] = {}  # running-order key (Request.seq) -> request
        self.base = 0  # sum over members of (tokens when joining - step joined): tokens at step j = base + size * j
        self._keys: list[int] = []  # the members' keys, sorted when _sorted
        self._sorted = True
        self._events: list = []  # heap of (step, key, step joined, request): must be scheduled explicitly then
        self._finishes: list = []  # heap of (step, key, step joined, request): its last token comes at that step
        self.scheduled_step: int | None = None  # a step scheduled with the cohort whose tokens are not in yet

    @property
    def size(self) -> int:
        return len(self.members)

    def context_tokens(self, step: int) -> int:
        """The members' tokens at the start of `step` (their decode context in it)."""
        return self.base + len(self.members) * step

    def join(self, r: Request, step: int) -> None:
        """r decodes from `step` on (its prefill is done: num_computed_tokens == num_tokens - 1)."""
        t = r.num_tokens
        r.joined_at = step
        self.members[r.seq] = r
        self.base += t - step
        self._keys.append(r.seq)
        self._sorted = False
        heapq.heappush(self._finishes, (step + r.stop_len - t - 1, r.seq, step, r))
        self._next_event(r, step, t)

    def _next_event(self, r: Request, step: int, t: int) -> None:
        """Schedule the first step from `step` (where member r has t tokens) at which it needs one more KV
        block or fills one that prefix caching registers, unless it finishes first."""
        bs = self.block_size
        due = len(r.blocks) * bs + 1  # the token count at which it needs one more block
        if self.registers_blocks and (r.num_hashed_blocks + 1) * bs < due and \
                r.num_hashed_blocks < self.kv.exact_blocks(r):
            due = (r.num_hashed_blocks + 1) * bs  # a block fills that is registered at once
        due = step + due - t if due > t else step
        if due < r.joined_at + r.stop_len - r.num_tokens:  # its last step (counters as when it joined)
            heapq.heappush(self._events, (due, r.seq, r.joined_at, r))

    def leave(self, r: Request, step: int) -> None:
        """Take r out, its counters brought to the start of `step`."""
        joined, t = r.joined_at, r.num_tokens
        del self.members[r.seq]
        if not self._sorted:
            self._keys.sort()
            self._sorted = True
        del self._keys[bisect_left(self._keys, r.seq)]
        self.base -= t - joined
        self._sync(r, step)

    def _member(self, entry: tuple) -> bool:
        """A heap entry (step, key, step joined, request) still of a member: not of one that left since."""
        return entry[3].joined_at == entry[2] and self.members.get(entry[1]) is entry[3]

    def _sync(self, r: Request, step: int, computed: int = 0) -> None:
        """r's counters brought to the start of `step` (computed: 1 if `step` was scheduled already), and the
        blocks its scheduled tokens filled counted registered (those not registered at once wait, kv_cache.py)."""
        k = step - r.joined_at
        r.num_tokens += k
        r.num_output_tokens += k
        r.num_computed_tokens = r.num_tokens - 1 + computed
        if k:
            r.record_tokens(r.joined_at, step - 1)
        r.joined_at = -1
        if self.registers_blocks:
            self.kv.register_full(r, r.num_computed_tokens // self.block_size)

    def due(self, step: int) -> tuple[list[Request], int]:
        """Members that need a block or fill one at `step`, in running order, and the blocks they take."""
        ev, due, bs, blocks = self._events, [], self.block_size, 0
        while ev and ev[0][0] <= step:
            entry = heapq.heappop(ev)
            if self._member(entry):
                r = entry[3]
                due.append(r)
                if r.num_tokens + step - r.joined_at > len(r.blocks) * bs:
                    blocks += 1
        return due, blocks

    def allocate(self, r: Request, step: int) -> None:
        """vLLM's allocate_slots for member r's one token at `step`: a block when its tokens outgrow its blocks,
        the registration of one its tokens fill (the caller has counted the free blocks)."""
        t = r.num_tokens + step - r.joined_at
        bs, kv = self.block_size, self.kv
        if t > len(r.blocks) * bs:
            kv.grow(r, 1)
        if self.registers_blocks and t // bs > r.num_hashed_blocks:
            kv.register_full(r, t // bs)
        self._next_event(r, step + 1, t + 1)

    def finishing(self, step: int) -> list[Request]:
        """Members whose last token came at `step`, synced to after it, in running order."""
        fin, done = self._finishes, []
        while fin and fin[0][0] <= step:
            entry = heapq.heappop(fin)
            if self._member(entry):
                self.leave(entry[3], step + 1)
                done.append(entry[3])
        return done

    def tokens_left(self, step: int) -> int | None:
        """The fewest tokens any member still has to make, counted at the start of `step` (None: no member)."""
        fin = self._finishes
        while fin and not self._member(fin[0]):
            heapq.heappop(fin)  # an entry of a request that left
        return fin[0][0] - step + 1 if fin else None

    def before(self, key: int) -> int:
        """Members ahead of the running request with this key."""
        if not self._sorted:
            self._keys.sort()
            self._sorted = True
        return bisect_left(self._keys, key)

    def dissolve(self, step: int) -> None:
        """Every member leaves, synced to the start of `step` (plus the scheduled token, if `step` was)."""
        computed = 1 if self.scheduled_step == step else 0
        for r in self.members.values():
            self._sync(r, step, computed)
        self.members.clear()
        self._keys.clear()
        self._events.clear()
        self._finishes.clear()
        self._sorted = True
        self.base = 0
        self.scheduled_step = None
