"""vLLM V1's schedule() step, as a mechanism; the decisions in it come from policies/.

Follows ../shared/docs/vllm-v1-scheduler.md section 1 (token budget, running first,
then waiting; head-of-line blocking; recompute preemption). The queue policy picks
the admission order and the victim, the batching policy gates admission.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

from simulator.batch import BatchShape
from simulator.kv_cache import KVBlockManager
from simulator.local_attention import LocalAttention
from simulator.request import FINISHED, PREEMPTED, RUNNING, Request


@dataclass(frozen=True)
class SchedulerSettings:
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    scheduler_reserve_full_isl: bool = True
    reserve: str = "prompt"  # admission reservation (policies.admission)
    reserve_quantile: float = 0.9
    long_prompt_tokens: int | None = None
    max_long_prefills: int | None = None
    preemption_mode: str = "recompute"
    swap_space_blocks: int = 0
    num_speculative_tokens: int = 0  # k drafts verified per decode, 0: no speculation
    speculation_adaptive: bool = False  # lower k as the batch grows, to 0 past the profile's knee
    speculation_knee_tokens: int = 0  # tokens per step the device processes for the price of one
    prefill_only: bool = False  # disaggregation: hand each request off after its first token
    local_attention: LocalAttention | None = None  # the model's sliding-window or chunked layers, if any


@dataclass
class SchedulerOutput:
    reqs: list = field(default_factory=list)
    tokens: list = field(default_factory=list)
    preempted: list = field(default_factory=list)
    shape: BatchShape | None = None
    num_running: int = 0  # after scheduling
    num_waiting: int = 0
    swapped_blocks: int = 0  # KV blocks copied out to host memory or back in this step
    spec_k: int = 0  # drafts per decode this step
    spec_seqs: int = 0  # decodes that verified drafts
    spec_drafts: int = 0
    spec_accepted: int = 0
    handed_off: list = field(default_factory=list)  # prefill-only: requests whose decode moves elsewhere


# Why admission last stopped with requests still waiting. Only these stay true
# while a batch of pure decodes runs on (no finish, no arrival): see decode_run_limit.
_STABLE_BLOCKS = frozenset({"max_num_seqs", "kv", "batching"})


class Scheduler:
    def __init__(self, settings: SchedulerSettings, kv: KVBlockManager, queue_policy, batching,
                 swap_cost=None, recompute_cost=None, accept=None):
        """swap_cost(blocks) and recompute_cost(tokens), in seconds, let `auto` preemption choose;
        accept(k) draws how many of k drafts the target model accepts (speculative decoding)."""
        self.s = settings
        self.kv = kv
        self.queue_policy = queue_policy
        self.batching = batching
        self.running: list[Request] = []
        self.waiting = queue_policy.make_queue()
        self.admission_blocked: str | None = None
        self._last_decode_only = False  # the previous step scheduled every running request for one decode token
        self._changed = True  # an arrival or a finish since the previous schedule()
        self.queued_prompt_tokens = 0  # prompts of requests without a first token (vLLM's queued tokens)
        self._outputs: dict = {}  # finished output lengths per SLO class, sorted (admission reservation)
        self.swap_used = 0  # host blocks holding swapped-out KV
        self.recent_admissions: deque = deque(maxlen=64)  # first-admission times, for queue-wait predictions
        self._swap_cost, self._recompute_cost, self._accept = swap_cost, recompute_cost, accept
        self._now = 0.0

    # -- inputs -------------------------------------------------------------
    def add_request(self, req: Request) -> None:
        self.waiting.add(req)
        if req.first_token_time is None:
            self.queued_prompt_tokens += req.prompt_tokens
        self._changed = True

    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    # -- one step -----------------------------------------------------------
    def schedule(self, now: float) -> SchedulerOutput:
        self._now = now
        s, kv, running, waiting = self.s, self.kv, self.running, self.waiting
        budget = s.max_num_batched_tokens
        max_len = s.max_model_len
        thr = s.long_prefill_token_threshold if len(running) + len(waiting) > 1 else 0
        out = SchedulerOutput()
        reqs, toks, preempted = out.reqs, out.tokens, out.preempted
        allocate = kv.allocate_slots
        select_victim = self.queue_policy.select_victim
        give_back = self.queue_policy.victim_may_be_scheduled

        k = s.num_speculative_tokens
        if k and s.speculation_adaptive:  # speculate only with compute to spare: under the knee
            k = max(0, min(k, s.speculation_knee_tokens // max(1, len(running)) - 1))
        out.spec_k = k
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            c = r.num_computed_tokens
            n = r.num_tokens - c
            if k and n == 1:  # a decode verifies k drafts in the same pass
                n += k
            if 0 < thr < n:
                n = thr
            if n > budget:
                n = budget
            if n > max_len - c - 1:
                n = max_len - c - 1
            if n <= 0:
                i += 1
                continue
            scheduled = True
            while not allocate(r, n):
                victim = select_victim(running)
                vi = running.index(victim) if give_back else len(running) - 1
                del running[vi]
                if give_back and vi < i:  # already scheduled this step: return its tokens
                    j = reqs.index(victim)
                    budget += toks[j]
                    del reqs[j], toks[j]
                    i -= 1
                out.swapped_blocks += self._preempt(victim)
                preempted.append(victim)
                if victim is r:
                    scheduled = False
                    break
            if not scheduled:
                if give_back:
                    continue  # later entries may still fit
                break
            reqs.append(r)
            toks.append(n)
            budget -= n
            i += 1

        self.admission_blocked = None
        if not preempted:
            self.batching.open_admission(len(running))
            admitted = 0
            while budget > 0 and len(waiting):
                if len(running) >= s.max_num_seqs:
                    self.admission_blocked = "max_num_seqs"
                    break
                if not self.batching.may_admit(admitted):
                    self.admission_blocked = "batching"
                    break
                r = waiting.peek()
                if s.max_long_prefills is not None and r.prompt_tokens >= s.long_prompt_tokens and sum(
                        1 for q in running if q.prompt_tokens >= s.long_prompt_tokens
                        and q.num_computed_tokens < q.num_tokens - 1) >= s.max_long_prefills:
                    self.admission_blocked = "long_prompts"  # FIFO: the queue is not reordered
                    break
                if s.reserve != "prompt" and not self._reservation_fits(r):
                    self.admission_blocked = "kv"
                    break
                swapped = r.swapped_blocks > 0
                resident = swapped or r.kv_transferred  # its KV is on the host or arrived from a prefill replica
                # a fresh prefix-cache lookup at every admission (vLLM); otherwise the KV comes with it
                hit_blocks, hit = ([], r.num_computed_tokens) if resident else kv.lookup(r)
                n = r.num_tokens - hit
                if 0 < thr < n:
                    n = thr
                if n > budget:
                    if not s.enable_chunked_prefill:
                        self.admission_blocked = "budget"
                        break
                    n = budget
                if not allocate(r, n, full_sequence_must_fit=s.scheduler_reserve_full_isl,
                                apply_watermark=bool(running), hit_blocks=hit_blocks):
                    self.admission_blocked = "kv"  # head-of-line: nobody behind r is admitted
                    break
                if swapped:  # copy its KV back before it runs
                    out.swapped_blocks += r.swapped_blocks
                    self.swap_used -= r.swapped_blocks
                    r.swapped_blocks = 0
                elif r.kv_transferred:
                    r.kv_transferred = False
                else:
                    r.num_computed_tokens = hit
                    r.prefix_queries += r.num_tokens
                    r.prefix_hits += hit
                    if r.num_preemptions == 0:
                        r.cached_tokens = hit
                    else:
                        r.recomputed_tokens += r.num_tokens - hit
                if r.num_preemptions:
                    r.time_preempted += now - r.preempted_at
                waiting.pop()
                running.append(r)
                r.status = RUNNING
                r.batch_id = self.batching.batch_id
                if r.first_scheduled_time is None:
                    r.first_scheduled_time = now
                    self.recent_admissions.append(now)
                reqs.append(r)
                toks.append(n)
                budget -= n
                admitted += 1

        # vLLM's _update_after_schedule: computed tokens advance before the model runs.
        local = self.s.local_attention
        if local is not None:
            local_pairs, local_ctx = self._local_reads(local, reqs, toks)
        prefill_tokens = pairs = decode_seqs = decode_ctx = 0
        for r, n in zip(reqs, toks):
            c = r.num_computed_tokens
            if n == 1 and c == r.num_tokens - 1:
                decode_seqs += 1
                decode_ctx += c + 1
            else:
                prefill_tokens += n
                pairs += n * c + n * (n + 1) // 2
                if c == r.num_tokens - 1:  # a decode verifying drafts still reads its whole KV context
                    decode_ctx += c + n
            r.num_computed_tokens = c + n
        if local is not None:
            pairs, decode_ctx = local.mix(pairs, local_pairs), local.mix(decode_ctx, local_ctx)
        out.shape = BatchShape(len(reqs), prefill_tokens, pairs, decode_seqs, decode_ctx)
        out.num_running = len(running)
        out.num_waiting = len(waiting)
        self._last_decode_only = (not preempted and prefill_tokens == 0 and decode_seqs == len(running))
        self._changed = False
        return out

    @staticmethod
    def _local_reads(local: LocalAttention, reqs: list[Request], toks: list[int]) -> tuple[int, int]:
        """The step's prefill pairs and decode reads in one local layer (the shape averages them over layers)."""
        pairs = ctx = 0
        for r, n in zip(reqs, toks):
            c = r.num_computed_tokens
            if n == 1 and c == r.num_tokens - 1:
                ctx += local.span(c)
            else:
                pairs += local.pairs(c, n)
                if c == r.num_tokens - 1:
                    ctx += local.span(c + n - 1)
        return pairs, ctx

    def predicted_queue_wait(self, prompt_tokens: int, prefill_tokens_per_s: float) -> float:
        """Seconds a request arriving now would wait for its first token: its turn in the queue at the
        recent admission rate, and the queued prompts ahead of it at the full-budget prefill rate."""
        prefill = (self.queued_prompt_tokens + prompt_tokens) / prefill_tokens_per_s
        adm = self.recent_admissions
        if len(self.waiting) and len(adm) >= 2 and adm[-1] > adm[0]:
            return max(prefill, len(self.waiting) * (adm[-1] - adm[0]) / (len(adm) - 1))
        return prefill

    def _expected_output(self, r: Request) -> int:
        """max_tokens, or a quantile of the outputs seen so far for its class (max_tokens until one is seen)."""
        if self.s.reserve == "quantile":
            seen = self._outputs.get(r.spec.slo_class)
            if seen:
                return seen[min(len(seen) - 1, int(self.s.reserve_quantile * len(seen)))]
        return r.spec.output_limit

    def _reservation_fits(self, r: Request) -> bool:
        """Blocks for prompt + expected output must be free beyond what running requests still reserve."""
        bs = self.kv.block_size
        total = -(-min(r.prompt_tokens + self._expected_output(r), self.s.max_model_len) // bs)
        outstanding = sum(q.reserved_blocks - len(q.blocks) for q in self.running if q.reserved_blocks > len(q.blocks))
        if total + outstanding > self.kv.num_free_blocks:
            return False
        r.reserved_blocks = total
        return True

    def _preempt(self, r: Request) -> int:
        """Free the victim's blocks and put it back at the queue front. Recompute (vLLM V1) forgets its
        computed tokens; swap keeps them in host memory while there is room. Returns blocks swapped out."""
        blocks = len(r.blocks) + len(r.local_blocks)
        mode = self.s.preemption_mode
        if mode == "auto":
            mode = "swap" if self._swap_cost(2 * blocks) < self._recompute_cost(r.num_computed_tokens) else "recompute"
        swap = mode == "swap" and r.num_computed_tokens > 0 and self.swap_used + blocks <= self.s.swap_space_blocks
        self.kv.free(r)
        r.status = PREEMPTED
        r.num_preemptions += 1
        r.preempted_at = self._now
        if swap:
            r.swapped_blocks = blocks
            r.num_swaps += 1
            self.swap_used += blocks
        else:
            r.num_computed_tokens = 0
        self.waiting.prepend(r)
        return blocks if swap else 0

    def update_from_output(self, out: SchedulerOutput, step: int, t_end: float) -> list[Request]:
        """A request whose computed tokens reach its length samples one token at t_end; a decode that
        verified drafts keeps the accepted ones plus one, and gives back the rejected (vLLM)."""
        finished = []
        for r, n in zip(out.reqs, out.tokens):
            if r.num_computed_tokens < r.num_tokens or r.status != RUNNING:
                continue  # a prefill chunk, or preempted after being scheduled
            new = 1
            c = r.num_computed_tokens - n
            if n > 1 and c == r.num_tokens - 1:
                accepted = self._accept(n - 1)
                out.spec_seqs += 1
                out.spec_drafts += n - 1
                out.spec_accepted += accepted
                r.num_computed_tokens = c + 1 + accepted
                new = min(accepted + 1, r.stop_len - r.num_tokens)
            r.num_tokens += new
            r.num_output_tokens += new
            if r.first_token_time is None:
                r.first_token_time = t_end
                self.queued_prompt_tokens -= r.prompt_tokens
            r.record_tokens(step, step)
            if r.num_tokens >= r.stop_len:
                finished.append(r)
            elif self.s.prefill_only:
                out.handed_off.append(r)
        if finished:
            self._finish(finished, t_end)
        if out.handed_off:
            self._hand_off(out.handed_off)
        return finished

    def _hand_off(self, reqs: list[Request]) -> None:
        """Disaggregation: the prompt is done here; its KV leaves for a decode replica."""
        for r in reqs:
            self.kv.free(r)
            r.status = "transferring"
            r.prefill_runs, r.token_runs = r.token_runs, []
        self.running = [r for r in self.running if r.status == RUNNING]
        self._changed = True

    def _finish(self, finished: list[Request], t_end: float) -> None:
        for r in finished:
            r.status = FINISHED
            r.finish_time = t_end
            self.kv.free(r)
            if self.s.reserve == "quantile":
                bisect.insort(self._outputs.setdefault(r.spec.slo_class, []), r.num_output_tokens)
        self.running = [r for r in self.running if r.status == RUNNING]
        self._changed = True

    # -- decode runs: several steps at once when nothing can change in between ----
    def decode_run_limit(self) -> int:
        """How many upcoming steps are certain to be plain decode steps of the same batch.

        True when the last step decoded every running request and admitted nobody, no
        request arrived or finished since, and admission stays shut for a reason that
        decode steps cannot lift (max_num_seqs, a full pool, a static batch). The run
        ends where the first request finishes or the free blocks would run out.
        Arrivals bound it further in the engine. 0 means: take a normal step.
        """
        running = self.running
        if (self._changed or not self._last_decode_only or not running or self.s.num_speculative_tokens
                or len(running) > self.s.max_num_batched_tokens
                or (len(self.waiting) and self.admission_blocked not in _STABLE_BLOCKS)):
            return 0
        k = min(r.stop_len - r.num_tokens for r in running)
        if k < 2:
            return 0
        bs = self.kv.block_size
        free = len(self.kv.free_blocks)
        need = lambda k: sum(max(0, -(-(r.num_tokens + k - 1) // bs) - len(r.blocks)) for r in running)  # noqa: E731
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

    def decode_context_tokens(self) -> int:
        return sum(r.num_tokens for r in self.running)

    def apply_decode_run(self, k: int, first_step: int, t_end: float) -> tuple[list[int], list[Request]]:
        """Advance every running request by k decode tokens, as k schedule()+update calls would.

        Returns the blocks in use after each step's allocation, and the requests
        that finished at the last step.
        """
        bs = self.kv.block_size
        grown = [0] * k
        last = first_step + k - 1
        finished = []
        kv = self.kv
        for r in self.running:
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
            self._finish(finished, t_end)
        return used_after, finished
