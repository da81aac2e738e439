"""vLLM V1's scheduler: schedule() and update_from_output(), as a mechanism; the decisions come from policies/.

Follows ../shared/docs/vllm-v1-scheduler.md section 1 (token budget, running first,
then waiting; head-of-line blocking; recompute preemption). The queue policy picks
the admission order and the victim, the batching policy gates admission. What servesim
adds lives in files of its own and hooks in here: preemption.py (swap and auto instead of
recompute), admission.py (reservation, the long-prompt cap), speculation.py (drafts verified
in a decode), decode_runs.py (many pure-decode steps at once), decode_cohort.py (steady
decoders advanced implicitly inside a step); disaggregation's hand-off is the `prefill_only` flag, and a decode
replica's admission of a handed-off request starts its KV pull through the `pull` hook (disaggregation.py).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from itertools import count
from operator import attrgetter

from servesim.simulator.admission import RECENT_GAPS, AdmissionRules
from servesim.simulator.batch import BatchShape
from servesim.simulator.decode_cohort import DecodeCohort
from servesim.simulator.kv_cache import KVBlockManager
from servesim.simulator.local_attention import LocalAttention
from servesim.simulator.preemption import Preemption
from servesim.simulator.request import FINISHED, PULL, PULLED, RUNNING, TRANSFERRING, WAITING, Request
from servesim.simulator.speculation import Speculation


@dataclass(frozen=True)
class SchedulerSettings:
    """vLLM's scheduler config (`--max-num-batched-tokens`, ...), plus the shape servesim reports."""

    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    threshold_spares_a_lone_request: bool = True  # 0.33 lifts the cap when one request is eligible; 0.19 keeps it
    counts_blocked_lookups: bool = False  # 0.19 records each prefix-cache lookup, a blocked request's too (in
    # get_computed_blocks); 0.33 records the one that admits it
    self_preemption_ends_loop: bool = False  # 0.19: a request that is its own victim ends the running loop; 0.33
    # goes on to the requests after it under PRIORITY
    draft_slots: int = 0  # 0.33: budget each scheduled request's drafter takes besides its tokens (a draft model's)
    input_budget: int | None = None  # 0.33 with draft slots: max_num_batched_tokens, which tokens and draft slots
    # take, where max_num_scheduled_tokens (max_num_batched_tokens above, tokens only) is smaller; None: the same
    lookahead_slots: int = 0  # KV slots reserved past the scheduled tokens for the drafter (num_lookahead_tokens)
    lookahead_at_admission: bool = True  # 0.19 reserves them for running and pulled requests only (r141)
    pads_new_decodes: int = 0  # 0.33: k, to which an admission with one token left is padded (placeholder drafts)
    scheduler_reserve_full_isl: bool = True
    loaded_by_priority: bool = False  # 0.19 under PRIORITY: a loaded request goes first only where it ranks first;
    # else (FCFS, and 0.33 always) requests holding their pulled KV are admitted before the queue
    prefill_only: bool = False  # disaggregation: hand each request off once its prompt is computed
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
    spec_discarded: int = 0  # accepted tokens past a request's stop, trimmed as vLLM trims them (not generated)
    padded: tuple = ()  # admissions padded with k placeholder drafts, none of which is accepted (0.33)
    handed_off: list = field(default_factory=list)  # prefill-only: requests whose decode moves elsewhere
    implicit: int = 0  # decode-cohort members decoding this step, not in reqs (simulator/decode_cohort.py)
    implicit_context: int = 0  # their tokens


def _chunk(r: Request, budget: int, thr: int, k: int, max_len: int) -> int:
    """The tokens vLLM's running loop gives r this step (<= 0: none): the rest of its prompt or one decode
    (with k drafts), capped by long_prefill_token_threshold, the budget left and max_model_len."""
    c = r.num_computed_tokens
    n = r.num_tokens - c
    if k and n == 1 and r.sampled:  # drafts follow a sampled token: not a prompt's last, nor a recompute's after
        n += k  # a partial chunk (vLLM drops drafts proposed there, r141)
    if 0 < thr < n:
        n = thr
    if n > budget:
        n = budget
    if n > max_len - c - 1:
        n = max_len - c - 1
    return n


class Scheduler:
    def __init__(self, settings: SchedulerSettings, kv: KVBlockManager, queue_policy, batching,
                 preemption: Preemption | None = None, admission: AdmissionRules | None = None,
                 speculation: Speculation | None = None):
        """The policies decide (queue order and victim, the batching gate); servesim's additions hook in:
        how a victim gives up its KV (vLLM: recompute), admission rules beyond vLLM's, speculation."""
        self.s = settings
        self.kv = kv
        self.queue_policy = queue_policy
        self.batching = batching
        self.preemption = preemption or Preemption()
        admission = admission or AdmissionRules()
        self.admission = admission if admission.active else None
        self._finished_hook = admission.finished
        self.speculation = speculation
        self.running: list[Request] = []
        self.waiting = queue_policy.make_queue()
        self.admission_blocked: str | None = None  # why admission last stopped with requests waiting
        self.last_step_decode_only = False  # the previous step scheduled every running request for one decode token
        self.changed = True  # an arrival or a finish since the previous schedule()
        self.queued_prompt_tokens = 0  # prompts of requests without a first token (vLLM's queued tokens)
        # the engine's pace, for queue-wait predictions (admission.predicted_queue_wait): the gaps between first
        # admissions of requests already waiting at the one before (a backlog's; an idle engine's gaps are the
        # arrivals', r155), and the last first admission
        self.service_gaps: deque = deque(maxlen=RECENT_GAPS)
        self.last_admission: float | None = None
        self._now = 0.0
        # async scheduling: vLLM plans a step while the one before it runs, so a request that reached the queue
        # after that one started waits a step more; the engine sets it before each schedule (inf: all are seen)
        self.admit_before = math.inf
        self.step = 0  # the index of the next step (update_from_output and decode runs advance it)
        self._seq = count(1)  # running-order keys
        self.cohort: DecodeCohort | None = None
        self.holding: dict[int, Request] = {}  # disaggregation: requests holding blocks for their pulled KV, in
        # flight (vLLM's WAITING_FOR_REMOTE_KVS) or arrived (self.loaded), counted as waiting, by request id
        self.loaded = queue_policy.make_holding_queue()  # pulled KV arrived: admitted before the queue (vLLM 0.19's
        # skipped_waiting, 0.33's kv_holding_waiting), so a head that cannot get blocks never holds up a request
        # that has them
        self.pull = None  # disaggregation, a decode replica's: pull(request, tokens, now) starts a KV pull

    def use_decode_cohort(self) -> bool:
        """Advance steady decoders implicitly (decode_cohort.py) where that is exact: not with speculation,
        admission rules or local layers, which read or move every running request each step."""
        if (self.speculation is None and self.admission is None and self.s.local_attention is None
                and self.kv.plain_running_path):
            self.cohort = DecodeCohort(self.kv)
        return self.cohort is not None

    # -- inputs -------------------------------------------------------------
    def add_request(self, req: Request, now: float = 0.0) -> None:
        req.queued_at = now
        self.waiting.add(req)
        if req.first_token_time is None:
            self.queued_prompt_tokens += req.prompt_tokens
        self.changed = True

    @property
    def pulling(self) -> int:
        """Requests holding blocks for their pulled KV, counted as waiting."""
        return len(self.holding)

    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0 or bool(self.loaded)

    def pulled(self, req: Request, now: float = 0.0) -> None:
        """Its KV has arrived: it waits among the loaded, admitted before the queue (r132: vLLM drains requests
        holding KV first; behind a blocked head a lone loaded request was called a deadlock), to compute the
        prompt's last token and sample the client's first."""
        req.remote_kv, req.num_computed_tokens = PULLED, req.num_tokens - 1
        self.kv.register_computed(req)  # its blocks found only now (vLLM's _update_waiting_for_remote_kv caches them;
        # r159: a second request hit them while they were still being pulled, and finished before they arrived)
        req.status, req.queued_at = WAITING, now
        self.loaded.add(req)
        self.changed = True

    def next_is_loaded(self) -> bool:
        """Whether admission takes the first loaded request next, rather than the queue's head."""
        if not self.loaded:
            return False
        if not len(self.waiting) or not self.s.loaded_by_priority:
            return True
        a, b = self.loaded.peek(), self.waiting.peek()
        return (a.priority, a.engine_arrival, a.request_id) <= (b.priority, b.engine_arrival, b.request_id)

    # -- one step -----------------------------------------------------------
    def schedule(self, now: float) -> SchedulerOutput:
        """vLLM's schedule(): running requests first, within the token budget, preempting for KV; then
        waiting ones in the queue's order while budget, max_num_seqs and KV last (head-of-line)."""
        self._now = now
        cohort = self.cohort
        if cohort is not None and cohort.size:
            out = self._schedule_around_cohort(now)
            if out is not None:
                return out
            cohort.dissolve(self.step)  # the plain loop below, with every request explicit
        s, kv, running, waiting = self.s, self.kv, self.running, self.waiting
        if s.local_attention is not None:
            kv.step = self.step  # the steps still in flight are the one before (hybrid_kv.LocalGroups)
        budget = s.max_num_batched_tokens
        room = s.input_budget or budget  # 0.33's input budget: tokens and draft slots (equal budgets: one binds)
        max_len = s.max_model_len
        thr = self._threshold()
        out = SchedulerOutput()
        reqs, toks, preempted = out.reqs, out.tokens, out.preempted
        allocate = kv.allocate_slots
        select_victim = self.queue_policy.select_victim
        give_back = self.queue_policy.victim_may_be_scheduled
        # most running requests' allocate_slots is a no-op (no new block, no block to register): skipped inline,
        # where the manager's running path is plain vLLM's (not with local layers, whose window moves every step)
        plain, bs, hashing = kv.plain_running_path, kv.block_size, kv.caches_prefixes

        k = out.spec_k = self.speculation.drafts(len(running)) if self.speculation is not None else 0
        propose = self.speculation.propose if k else None  # a decode's own count of drafts, where it varies
        slots = s.draft_slots  # taken from the input budget with each request scheduled, as 0.33's are
        ahead = s.lookahead_slots
        i = 0
        while i < len(running) and budget > 0 and room > slots:
            r = running[i]
            # a decode verifies k drafts in the same pass (or as many as it proposed)
            n = _chunk(r, budget if budget < room - slots else room - slots, thr,
                       k if propose is None or r.num_tokens - r.num_computed_tokens != 1 else propose(k), max_len)
            if n <= 0:
                i += 1
                continue
            c = r.num_computed_tokens
            scheduled = True
            end = c + n + ahead
            if plain and -(-(end if end < max_len else max_len) // bs) <= len(r.blocks) and not (
                    hashing and (c + n if c + n < r.num_tokens else r.num_tokens) // bs > r.num_hashed_blocks):
                reqs.append(r)
                toks.append(n)
                budget -= n
                room -= n + slots
                i += 1
                continue
            while not allocate(r, n, num_lookahead_tokens=ahead):
                victim = select_victim(running)
                vi = running.index(victim) if give_back else len(running) - 1
                del running[vi]
                if give_back and vi < i:  # already scheduled this step: return its tokens
                    j = reqs.index(victim)
                    budget += toks[j]
                    room += toks[j] + slots
                    del reqs[j], toks[j]
                    i -= 1
                out.swapped_blocks += self.preemption.give_up(victim, kv, now)
                waiting.prepend(victim)
                preempted.append(victim)
                if victim is r:
                    scheduled = False
                    break
            if not scheduled:
                if give_back and not s.self_preemption_ends_loop:
                    continue  # later entries may still fit
                break
            reqs.append(r)
            toks.append(n)
            budget -= n
            room -= n + slots
            i += 1

        self.admission_blocked = None
        if not preempted:
            self._admit(out, budget, room, thr, now)
        self._update_after_schedule(out)
        return out

    def _schedule_around_cohort(self, now: float) -> SchedulerOutput | None:
        """schedule() with the decode cohort's members taking one token each in their places in the running
        list, unseen; the other running requests go through vLLM's loop. None (nothing changed) where a member
        would not get its token or a block would be short: the plain loop decides who waits or is preempted."""
        s, kv, cohort, running, step = self.s, self.kv, self.cohort, self.running, self.step
        budget, max_len, bs = s.max_num_batched_tokens, s.max_model_len, kv.block_size
        due, blocks = cohort.due(step)  # members that take or fill a block this step
        thr = self._threshold()
        plan, ahead = [], 0
        for r in [q for q in running if q.joined_at < 0]:
            members = cohort.before(r.seq)  # each took one token before r's turn
            budget -= members - ahead
            ahead = members
            if budget <= 0:
                break
            n = _chunk(r, budget, thr, 0, max_len)
            if n <= 0:
                continue
            slots = r.num_computed_tokens + n
            need = -(-(slots if slots < max_len else max_len) // bs) - len(r.blocks)  # allocate_slots' count
            if need > 0:
                blocks += need
            plan.append((r, n))
            budget -= n
        budget -= cohort.size - ahead
        if budget < 0 or blocks > len(kv.free_blocks):
            return None
        out = SchedulerOutput()
        i = 0  # the allocations in running order, members' and the others' (blocks come off the queue in turn)
        for r, n in plan:
            while i < len(due) and due[i].seq < r.seq:
                cohort.allocate(due[i], step)
                i += 1
            if not kv.allocate_slots(r, n):
                raise AssertionError(f"allocate_slots failed for {r} with the blocks counted free")
            out.reqs.append(r)
            out.tokens.append(n)
        for r in due[i:]:
            cohort.allocate(r, step)
        out.implicit, out.implicit_context = cohort.size, cohort.context_tokens(step)
        self.admission_blocked = None
        self._admit(out, budget, budget, thr, now)  # no drafter beside a cohort: one budget
        self._update_after_schedule(out)
        cohort.scheduled_step = step
        return out

    def _seen(self, most: int) -> int:
        """The waiting and loaded requests this step sees, counted up to `most`: under async scheduling not those
        that reached the queue after the step was planned (admit_before), which vLLM's scheduler has not yet
        (r142: 0.33's lone-request rule and a static batch counted them)."""
        if most <= 0 or self.admit_before == math.inf:
            return max(0, min(most, len(self.waiting) + len(self.loaded)))
        seen = 0
        for queue in (self.waiting, self.loaded):
            for r in queue.unordered():
                if r.queued_at <= self.admit_before:
                    seen += 1
                    if seen >= most:
                        return seen
        return seen

    def _threshold(self) -> int:
        """long_prefill_token_threshold, which 0.33 lifts for a lone request (none other running, waiting or
        holding pulled KV: get_request_counts)."""
        s, running = self.s, self.running
        if not s.long_prefill_token_threshold or not s.threshold_spares_a_lone_request or len(running) > 1:
            return s.long_prefill_token_threshold
        return s.long_prefill_token_threshold if len(running) + self._seen(2 - len(running)) > 1 else 0

    def _count_lookup(self, r: Request, hit: int) -> None:
        """A prefix-cache lookup into r's prefix_queries/hits, the prefix_cache_queries/hits vLLM reports: a
        preempted request's re-lookup vLLM counts apart (PrefixCacheStats.preempted_*), out of them."""
        if self.kv.caches_prefixes and r.num_preemptions == 0:
            r.prefix_queries += r.num_tokens
            r.prefix_hits += hit

    def _admit(self, out: SchedulerOutput, budget: int, room: int, thr: int, now: float) -> None:
        s, kv, running, waiting, rules = self.s, self.kv, self.running, self.waiting, self.admission
        reqs, toks = out.reqs, out.tokens
        allocate = kv.allocate_slots
        loaded = self.loaded
        unseen: list = []  # set aside: arrived after this step was planned
        self.batching.open_admission(len(running), self._seen(self.batching.counts_waiting))
        slots = s.draft_slots  # what a request admitted takes of the input budget besides its tokens (0.33)
        # 0.33 pads an admission with one token left (a full prefix hit, a resumed or pulled request) to 1 + k, so
        # the step keeps its uniform decode shape, unless a running request is mid-prompt (r154)
        pad = s.pads_new_decodes if s.pads_new_decodes and all(r.sampled for r in reqs) else 0
        ran = bool(reqs)  # the running loop scheduled someone
        while budget > 0 and room > slots and (loaded or len(waiting)):
            if len(running) >= s.max_num_seqs:
                self.admission_blocked = "max_num_seqs"
                break
            if not self.batching.may_admit():
                self.admission_blocked = "batching"
                break
            from_loaded = self.next_is_loaded()
            queue = loaded if from_loaded else waiting
            r = queue.peek()
            if r.queued_at > self.admit_before:  # not in vLLM's queue when it planned this step (async scheduling)
                if queue is waiting and self.queue_policy.key is None:  # FCFS: the rest came later still
                    self.admission_blocked = "async"
                    break
                unseen.append((queue, queue.pop()))
                continue
            if rules is not None and (why := rules.refusal(r, running, kv, self.holding.values())):
                self.admission_blocked = why
                break
            if r.remote_kv == PULL:
                if not self._start_pull(r, now):
                    self.admission_blocked = "kv"
                    break
                continue
            swapped = r.swapped_blocks > 0
            resident = swapped or r.remote_kv  # its KV is on the host or was pulled from a prefill replica
            # a fresh prefix-cache lookup at every admission (vLLM); otherwise the KV comes with it
            hit_blocks, hit = ([], r.num_computed_tokens) if resident else kv.lookup(r)
            n = r.num_tokens - hit
            cap = budget if budget < room - slots else room - slots
            padded = n == 1 and pad and (ran or hit) and hit + 2 + pad <= s.max_model_len
            if padded:
                if 1 + pad > cap:  # vLLM: rather not schedule it than unpadded
                    self.admission_blocked = "budget"
                    break
                n = 1 + pad
            if 0 < thr < n:
                n = thr
            blocked = "budget" if n > cap and not s.enable_chunked_prefill else None
            n = min(n, cap)
            if not blocked and not allocate(r, n, full_sequence_must_fit=s.scheduler_reserve_full_isl,
                                            apply_watermark=bool(running), hit_blocks=hit_blocks,
                                            num_lookahead_tokens=s.lookahead_slots if s.lookahead_at_admission
                                            or r.remote_kv
                                            else 0):
                blocked = "kv"  # head-of-line: nobody behind r is admitted
            if blocked:
                self.admission_blocked = blocked
                if s.counts_blocked_lookups and not resident:
                    self._count_lookup(r, hit)
                break
            if swapped:  # copy its KV back before it runs
                out.swapped_blocks += self.preemption.swap_in(r)
            elif r.remote_kv:
                r.remote_kv = 0
            else:
                r.num_computed_tokens = hit
                self._count_lookup(r, hit)
                if r.num_preemptions == 0:
                    r.cached_tokens = hit
                elif r.recompute_end > hit:  # what it had computed before its preemption, less the cache's hit
                    r.recomputed_tokens += r.recompute_end - hit
                else:
                    r.recompute_end = 0
            if r.num_preemptions:
                r.time_preempted += now - r.preempted_at
            if from_loaded:
                loaded.pop()
                del self.holding[r.request_id]
            else:
                waiting.pop()
            r.seq = next(self._seq)
            running.append(r)
            r.status = RUNNING
            r.batch_id = self.batching.batch_id
            self.batching.joined()
            if r.first_scheduled_time is None:  # vLLM stamps it as its scheduler plans the step: under async
                # scheduling, as the step before started (r145: a step late, queue time 13.2 ms where vLLM's is 6.3)
                r.first_scheduled_time = min(now, self.admit_before)
                self._paced(r, now)
            reqs.append(r)
            toks.append(n)
            budget -= n
            room -= n + slots
            if padded:
                out.padded += (r,)
        for queue, r in unseen:
            queue.add(r)
        if unseen:  # seen at the next step, which must be a plain one (no decode run past it)
            self.admission_blocked = "async"

    def _paced(self, r: Request, now: float) -> None:
        """A first admission: the gap since the last one is the engine's pace where r was waiting by then."""
        last = self.last_admission
        if last is not None and r.queued_at <= last:
            self.service_gaps.append(now - last)
        self.last_admission = now

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        """vLLM's _update_after_schedule: computed tokens advance before the model runs; the step's shape
        is what the cost model prices."""
        reqs, toks = out.reqs, out.tokens
        local = self.s.local_attention
        if local is not None:
            local_pairs, local_ctx = self._local_reads(local, reqs, toks)
        prefill_tokens = pairs = decode_seqs = decode_ctx = 0
        for r, n in zip(reqs, toks):
            c = r.num_computed_tokens
            if n == 1 and c == r.num_tokens - 1:
                decode_seqs += 1
                decode_ctx += c + 1
            elif c == r.num_tokens - 1:  # a decode verifying drafts: its 1 + k tokens through the linear layers,
                prefill_tokens += n  # its attention one pass over its KV context, as a decode's (r145: priced
                decode_ctx += c + n  # as prefill pairs too, 4-7% of a speculative step in a linear profile)
            else:
                prefill_tokens += n
                pairs += n * c + n * (n + 1) // 2
            r.num_computed_tokens = c + n
            r.sampled = c + n >= r.num_tokens
        if local is not None:
            pairs, decode_ctx = local.mix(pairs, local_pairs), local.mix(decode_ctx, local_ctx)
            for r, n in zip(reqs, toks):
                r.flight_step, r.flight_tokens = self.step, n
        decode_seqs += out.implicit
        decode_ctx += out.implicit_context
        out.shape = BatchShape(len(reqs) + out.implicit, prefill_tokens, pairs, decode_seqs, decode_ctx)
        out.num_running = len(self.running)
        out.num_waiting = len(self.waiting) + len(self.holding)
        self.last_step_decode_only = (not out.preempted and prefill_tokens == 0 and decode_seqs == len(self.running))
        self.changed = False

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

    def update_from_output(self, out: SchedulerOutput, step: int, t_end: float) -> list[Request]:
        """vLLM's update_from_output(): a request whose computed tokens reach its length samples one token
        at t_end (a decode that verified drafts keeps the accepted ones plus one); returns those finished."""
        finished = []
        spec = self.speculation
        prefill_only, running = self.s.prefill_only, RUNNING  # read once: this loop runs per request-step
        for r, n in zip(out.reqs, out.tokens):
            if r.num_computed_tokens < r.num_tokens or r.status != running:
                continue  # a prefill chunk, or preempted after being scheduled
            if prefill_only:  # its token is sampled here but the P/D proxy discards it: the decode replica's is
                r.prefill_runs = [step, step]  # the client's first (this one still counts in /metrics here)
                self.queued_prompt_tokens -= r.prompt_tokens
                out.handed_off.append(r)
                continue
            new = 1
            c = r.num_computed_tokens - n
            if n > 1 and c == r.num_tokens - 1:
                new = spec.verify(r, c, n, out, r in out.padded if out.padded else False)
            r.num_tokens += new
            r.num_output_tokens += new
            if r.first_token_time is None:
                r.first_token_time = t_end
                self.queued_prompt_tokens -= r.prompt_tokens
            runs = r.token_runs  # Request.record_tokens(step, step), inline: once per request-step
            if runs and runs[-1] == step - 1:
                runs[-1] = step
            else:
                runs.append(step)
                runs.append(step)
            if r.num_tokens >= r.stop_len:
                finished.append(r)
        cohort = self.cohort
        if out.implicit:
            done = cohort.finishing(step)
            if done:  # in running order, as step by step
                finished = sorted(finished + done, key=attrgetter("seq")) if finished else done
            cohort.scheduled_step = None
        if finished:
            self.finish(finished, t_end)
        if out.handed_off:
            self._hand_off(out.handed_off)
        if cohort is not None:
            for r in out.reqs:  # requests whose next step is a plain decode (a prompt's last token is not)
                if (r.joined_at < 0 and r.status == running and r.num_computed_tokens == r.num_tokens - 1
                        and r.first_token_time is not None):
                    cohort.join(r, step + 1)
        self.step = step + 1
        return finished

    def _start_pull(self, r: Request, now: float) -> bool:
        """Disaggregation, vLLM's connector at admission: the local prefix-cache hit first, then blocks for the
        whole prompt, held while the rest of its KV is pulled from the prefill replica; no budget, no seat among
        the running. False (nothing changed) where the blocks are not free."""
        s, kv = self.s, self.kv
        hit_blocks, hit = kv.lookup(r)
        if not kv.allocate_slots(r, r.num_tokens - hit, full_sequence_must_fit=s.scheduler_reserve_full_isl,
                                 apply_watermark=bool(self.running), hit_blocks=hit_blocks,
                                 skip_to=r.num_tokens - 1,  # all but the last token come over the link,
                                 delay_cache_blocks=True):  # cached once here (vLLM: delay_cache_blocks)
            return False
        self.waiting.pop()
        if kv.caches_prefixes:  # the decode engine's own lookup (a request new to it: none preempted there yet)
            r.prefix_queries += r.num_tokens
            r.prefix_hits += hit
        r.num_computed_tokens = hit
        r.pulled_tokens = r.num_tokens - hit
        r.status = TRANSFERRING
        self.holding[r.request_id] = r
        r.seq = next(self._seq)  # the order its pull started: FCFS's among the loaded (make_holding_queue)
        self._paced(r, now)  # its admission here (its first scheduling was the prefill replica's)
        self.pull(r, r.pulled_tokens, now)
        return True

    def _hand_off(self, reqs: list[Request]) -> None:
        """Disaggregation (servesim's): the prompt is done here; its KV leaves for a decode replica."""
        for r in reqs:
            self.kv.free(r)
            r.status = TRANSFERRING
        self.running = [r for r in self.running if r.status == RUNNING]
        self.changed = True

    def finish(self, finished: list[Request], t_end: float) -> None:
        for r in finished:
            r.status = FINISHED
            r.finish_time = t_end
            self.kv.free(r)
            self._finished_hook(r)
        self.running = [r for r in self.running if r.status == RUNNING]
        self.changed = True

    def decode_context_tokens(self) -> int:
        """The running requests' tokens: the context of a decode of them all."""
        if self.cohort is None or not self.cohort.size:
            return sum(r.num_tokens for r in self.running)
        return sum(r.num_tokens for r in self.running if r.joined_at < 0) + self.cohort.context_tokens(self.step)

    def settle(self) -> None:
        """Bring the decode cohort's members' counters up to date (the run stopped, or a decode run starts)."""
        if self.cohort is not None and self.cohort.size:
            self.cohort.dissolve(self.step)
