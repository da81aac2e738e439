"""Decode runs, servesim's fast path: several steps at once when nothing can change in between.

When the last step decoded every running request and admitted nobody, no request arrived or
finished since, and admission stays shut for a reason that decode steps cannot lift
(`max_num_seqs`, a full pool, a closed static batch), the next steps are certain to be the same
batch decoding one token each, up to the step the next arrival falls in (engine.py). They are
advanced at once, with the same float additions and the same block growth as step by step
(tests/test_determinism.py holds them equal).
"""

from __future__ import annotations

from servesim.simulator.request import Request

# Why admission last stopped with requests still waiting. Only these stay true
# while a batch of pure decodes runs on (no finish, no arrival).
STABLE_BLOCKS = frozenset({"max_num_seqs", "kv", "batching"})


def decode_run_limit(sched) -> int:
    """How many upcoming steps of `sched` are certain to be plain decode steps of the same batch: up to
    where the first request finishes or the free blocks would run out (arrivals bound it further, in the
    engine). 0: take a normal step."""
    running = sched.running
    if (sched.changed or not sched.last_step_decode_only or not running or sched.speculation is not None
            or len(running) > sched.s.max_num_batched_tokens
            or (len(sched.waiting) and sched.admission_blocked not in STABLE_BLOCKS)
            # vLLM 0.19 counts the blocked head's prefix-cache lookup at every step (and its hit may shrink as
            # decoders evict cached blocks): step by step
            or (len(sched.waiting) and sched.admission_blocked == "kv" and sched.s.counts_blocked_lookups
                and sched.kv.caches_prefixes)):
        return 0
    cohort, step, bs = sched.cohort, sched.step, sched.kv.block_size
    if cohort is not None and 0 < cohort.size < len(running):
        sched.settle()  # members beside other requests (not after a plain decode step): run them all the plain way
    if cohort is not None and cohort.size:  # every running request a member: their tokens now, unsynced
        k = cohort.tokens_left(step)
        need = lambda k: sum(max(0, -(-(r.num_tokens + step - r.joined_at + k - 1) // bs) - len(r.blocks))  # noqa: E731
                             for r in running)
    else:
        k = min(r.stop_len - r.num_tokens for r in running)
        need = lambda k: sum(max(0, -(-(r.num_tokens + k - 1) // bs) - len(r.blocks)) for r in running)  # noqa: E731
    if k < 2:
        return 0
    free = len(sched.kv.free_blocks)
    if need(k) > free:
        lo, hi = 0, k  # need(lo) fits, need(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if need(mid) <= free:
                lo = mid
            else:
                hi = mid
        k = lo
    return k if k >= 2 else 0


def apply_decode_run(sched, k: int, first_step: int, t_end: float) -> tuple[list[int], list[Request]]:
    """Advance every running request by k decode tokens, as k schedule() + update_from_output() calls
    would. Returns the blocks in use after each step's allocation, and the requests that finished at
    the last step."""
    kv, cohort = sched.kv, sched.cohort
    if cohort is not None and cohort.size:  # members: only those that take or fill a block, step by step
        used_after = []
        for step in range(first_step, first_step + k):
            for r in cohort.due(step)[0]:
                cohort.allocate(r, step)
            used_after.append(kv.num_used_blocks)
        finished = cohort.finishing(first_step + k - 1)
        if finished:
            sched.finish(finished, t_end)
        sched.step = first_step + k
        return used_after, finished
    bs = kv.block_size
    grown = [0] * k
    last = first_step + k - 1
    finished = []
    for r in sched.running:
        t0 = r.num_tokens
        held = len(r.blocks)
        need = -(-(t0 + k - 1) // bs) - held
        if need > 0:
            j = held * bs - t0 + 1  # 0-based step of the first new block
            for _ in range(need):
                grown[j] += 1
                j += bs
            kv.grow(r, need)
        r.num_tokens = t0 + k
        r.num_output_tokens += k
        r.num_computed_tokens = t0 + k - 1
        kv.register_computed(r)
        r.record_tokens(first_step, last)
        if r.num_tokens >= r.stop_len:
            finished.append(r)
    used_after = []
    used = kv.num_used_blocks - sum(grown)
    for g in grown:
        used += g
        used_after.append(used)
    if finished:
        sched.finish(finished, t_end)
    sched.step = first_step + k
    return used_after, finished
