"""servesim's admission rules inside the scheduler's waiting loop (`policies.admission`), beside vLLM's
token budget, `max_num_seqs` and KV checks:

- a cap on long prompts prefilling at once (`long_prompt_tokens`, `max_long_prefills`): the queue
  stays in order, so a long prompt at its head waits;
- output reservation (`reserve: max_tokens | quantile`): admit only when blocks for the prompt and
  its expected output are free beyond what running requests still reserve; `quantile` learns
  each SLO class's output lengths from the requests that finished.
"""

from __future__ import annotations

import bisect
from itertools import chain

from servesim.simulator.request import Request


class AdmissionRules:
    def __init__(self, reserve: str = "prompt", reserve_quantile: float = 0.9, long_prompt_tokens: int | None = None,
                 max_long_prefills: int | None = None, max_model_len: int = 0, prefill_only: bool = False):
        """prefill_only: a disaggregated prefill replica's, whose requests leave with their first token (r150: it
        reserved their whole expected outputs, throttling its prefills for decodes it never runs)."""
        self.reserve, self.reserve_quantile = reserve, reserve_quantile
        self.prefill_only = prefill_only
        self.long_prompt_tokens, self.max_long_prefills = long_prompt_tokens, max_long_prefills
        self.max_model_len = max_model_len
        self._outputs: dict = {}  # finished output lengths per SLO class, sorted
        self.active = reserve != "prompt" or max_long_prefills is not None

    def refusal(self, r: Request, running: list[Request], kv, held=()) -> str | None:
        """Why r may not be admitted now (the scheduler's admission_blocked reason), or None. held: requests holding
        blocks for pulled KV, not yet running (a disaggregated decode replica's), whose reservations stand too."""
        long = self.long_prompt_tokens
        if self.max_long_prefills is not None and r.prompt_tokens >= long and sum(
                1 for q in running if q.prompt_tokens >= long
                and q.num_computed_tokens < q.num_tokens - 1) >= self.max_long_prefills:
            return "long_prompts"  # FIFO: the queue is not reordered
        if self.reserve != "prompt" and not self._reservation_fits(r, running, kv, held):
            return "kv"
        return None

    def _expected_output(self, r: Request) -> int:
        """max_tokens, or a quantile of the outputs seen so far for its class (max_tokens until one is seen); on a
        prefill replica the first token alone."""
        if self.prefill_only:
            return 1
        if self.reserve == "quantile":
            seen = self._outputs.get(r.spec.slo_class)
            if seen:
                return seen[min(len(seen) - 1, int(self.reserve_quantile * len(seen)))]
        return r.spec.output_limit

    def _reservation_fits(self, r: Request, running: list[Request], kv, held=()) -> bool:
        """Blocks for prompt + expected output must be free beyond what running and held requests still reserve
        (less those r holds already: a disaggregated decode replica's pulled prompt). r139: pulls that started
        counted no reservation, so they took the room of the loaded requests' outputs: nothing ran, nothing freed."""
        total = r.reserved_blocks if r.remote_kv and r.reserved_blocks else \
            -(-min(r.prompt_tokens + self._expected_output(r), self.max_model_len) // kv.block_size)
        # a pulled request keeps the reservation its pull started with (r140: a quantile risen while the KV was in
        # flight refused it, and with nothing running nothing freed the room: the held reservations fit the pool)
        outstanding = sum(q.reserved_blocks - len(q.blocks) for q in chain(running, held)
                          if q is not r and q.reserved_blocks > len(q.blocks))
        if total - len(r.blocks) + outstanding > kv.num_free_blocks:
            return False
        r.reserved_blocks = total
        return True

    def finished(self, r: Request) -> None:
        if self.reserve == "quantile":
            bisect.insort(self._outputs.setdefault(r.spec.slo_class, []), r.num_output_tokens)


def predicted_queue_wait(sched, req, prefill_tokens_per_s: float, now: float, prompt: bool = True) -> float:
    """Seconds a request arriving now at `sched` would wait for its first token (essay 003's shedding
    predictor): its turn in the queue at the engine's recent pace of admission, and the queued prompts ahead of it
    at the full-budget prefill rate (prompt=False: a decode replica's, which computes none). The pace is that of a
    backlog: the last gaps between admissions of requests that were waiting at the one before (an idle engine
    admits as requests arrive: its gaps, 0.5 s at 2 req/s, shed requests one step from their first token, r155); and
    it is measured up to now: while admission stalls (a full KV pool) the gap still open since the queue's oldest
    request could have gone bounds it, where the last gaps alone had kept predicting the pace before the stall
    (r117: 24 of 36 requests let in waited up to 8x their TTFT target). Its turn is the queue policy's: under priority or
    SJF only the requests ordered before it are ahead (r150: a high-priority request was judged on the whole
    queue's wait and shed, 30 of 35)."""
    key, ahead, behind_tokens = sched.queue_policy.key, len(sched.waiting), 0
    if key is not None and ahead:
        mine = key(req)
        behind = [r for r in sched.waiting.unordered() if key(r) >= mine]
        ahead -= len(behind)
        behind_tokens = sum(r.prompt_tokens for r in behind if r.first_token_time is None)
    prefill = (sched.queued_prompt_tokens - behind_tokens + req.prompt_tokens) / prefill_tokens_per_s if prompt \
        else 0.0
    if not ahead:
        return prefill
    gaps, last = sched.service_gaps, sched.last_admission
    oldest = min(r.queued_at for r in sched.waiting.unordered())
    stalled = now - max(oldest, last) if last is not None else 0.0  # the queue held, nobody admitted since
    gap = max(sum(gaps) / len(gaps) if gaps else 0.0, stalled)
    return max(prefill, ahead * gap)


RECENT_GAPS = 16  # the pace of the last 16 backlogged admissions: a stall's slower pace shows within a few
