"""A request's state inside one replica, in vLLM's terms (num_tokens, num_computed_tokens)."""

from __future__ import annotations

from enum import StrEnum

from servesim.workloads.spec import RequestSpec


class RequestStatus(StrEnum):
    """vLLM's RequestStatus, as far as servesim's requests go (text values: the results write them)."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    TRANSFERRING = "transferring"  # disaggregation: the prompt's KV on its way to a decode replica
    FINISHED = "finished"
    REJECTED = "rejected"  # refused at arrival (vLLM's HTTP 503, servesim's shedding)


# module constants for the hot loops, where an enum's class attribute costs a lookup each time
WAITING, RUNNING, PREEMPTED, TRANSFERRING, FINISHED, REJECTED = RequestStatus

# disaggregation, a decode replica's Request.remote_kv: its prompt's KV is on a prefill replica, to pull at admission
# (vLLM's connector, after the local prefix-cache lookup); or pulled, so its admission computes the last token only
PULL, PULLED = 1, 2


class Request:
    """Mutable per-request state. __slots__ because the hot loop touches these every step.

    Token times are stored as runs of consecutive step indices of the replica that
    served it ([start, end, start, end, ...]): exact, and O(1) per step instead of
    one timestamp per token. Metrics expand them at the end.
    """

    __slots__ = (
        "spec", "request_id", "arrival_time", "prompt_tokens", "priority", "expected_job",
        "num_tokens", "num_output_tokens", "num_computed_tokens", "stop_len", "finish_reason",
        "blocks", "status", "num_preemptions", "replica", "batch_id",
        "first_scheduled_time", "first_token_time", "finish_time", "token_runs", "reject_reason",
        "num_hashed_blocks", "cached_tokens", "prefix_queries", "prefix_hits", "reserved_blocks",
        "recomputed_tokens", "recompute_end", "swapped_blocks", "num_swaps", "preempted_at", "time_preempted",
        "remote_kv", "pulled_tokens", "prefill_runs", "prefill_replica", "local_blocks", "local_first", "seq",
        "joined_at", "lazy_keys", "prefix_junction", "engine_arrival", "sampled", "queued_at", "flight_step",
        "flight_tokens",
    )

    def __init__(self, spec: RequestSpec, max_model_len: int, sends_max_tokens: bool = False, min_tokens: int = 0):
        """sends_max_tokens: the client asks for the output's length as max_tokens (vllm bench serve), so the
        output ends there, capped ("length"). min_tokens: vLLM holds the model's stop back until this many tokens
        (SamplingParams.min_tokens): an answer the model would end sooner runs on to it (r148: it ended sooner)."""
        self.spec = spec
        self.request_id = spec.request_id
        self.arrival_time = spec.arrival_time
        # when the engine serving it received it, which its queue order and victim rule read: the client's arrival,
        # but a disaggregated decode replica's (a vLLM instance of its own) stamps the hand-off (r140)
        self.engine_arrival = spec.arrival_time
        self.sampled = False  # its last step sampled a token (not a partial chunk): only then has it drafts
        self.queued_at = spec.arrival_time  # when it last reached its scheduler's queue (an arrival, a pulled KV)
        # the step it was last scheduled in and its tokens there: under 0.33's async scheduling still in flight as
        # the next step is planned (hybrid_kv.LocalGroups frees a window's blocks only on the tokens processed)
        self.flight_step, self.flight_tokens = -1, 0
        self.prompt_tokens = spec.prompt_tokens
        self.priority = spec.priority
        limit = spec.output_limit
        self.expected_job = spec.prompt_tokens + limit  # what SJF may know in advance
        # the max_tokens it sends: its own, even where the client sends the others' lengths (r147), else its
        # output's length (vllm bench serve), else none (the context bounds it)
        sent = spec.max_tokens if spec.max_tokens is not None else spec.output_tokens if sends_max_tokens else None
        produced = min(spec.output_tokens, limit)
        if produced < min_tokens:
            produced = min(min_tokens, sent if sent is not None else max_model_len)
        self.stop_len = min(spec.prompt_tokens + produced, max_model_len)
        # "length" where max_tokens or the context cut the output; a drawn length without max_tokens ends at the
        # model's own stop (EOS), as a chat answer does (r147: an answer ending before its max_tokens was "length")
        capped = sent is not None and produced >= sent
        self.finish_reason = "length" if capped or self.stop_len >= max_model_len else "stop"
        self.num_tokens = spec.prompt_tokens  # prompt + generated so far
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.blocks: list[int] = []
        self.local_blocks: list[int] = []  # hybrid models: the local-attention groups' blocks (simulator/hybrid_kv.py)
        self.local_first = 0  # the token block the oldest of them holds
        self.status = WAITING
        self.num_preemptions = 0
        self.replica = 0
        self.batch_id = -1
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.token_runs: list[int] = []
        self.reject_reason: str | None = None
        self.num_hashed_blocks = 0  # prefix caching: this request's leading blocks already registered
        self.cached_tokens = 0  # prefix-cache hit at first admission
        self.prefix_queries = 0  # tokens looked up in the prefix cache at admission, before any preemption
        self.prefix_hits = 0
        self.reserved_blocks = 0  # admission reservation: blocks held back for this request's expected growth
        self.recomputed_tokens = 0  # tokens prefilled again after preemptions (prefix hits excluded)
        self.recompute_end = 0  # preempted: the tokens it had computed, which its return computes again
        self.swapped_blocks = 0  # blocks of KV waiting in host memory (swap preemption)
        self.num_swaps = 0
        self.preempted_at = 0.0
        self.time_preempted = 0.0  # seconds between preemptions and re-admissions
        self.remote_kv = 0  # disaggregation: PULL or PULLED (above)
        self.pulled_tokens = 0  # disaggregation: the prompt tokens whose KV crossed the link (the rest were cached)
        self.prefill_runs: list[int] = []  # token runs on the prefill replica (disaggregation)
        self.prefill_replica: int | None = None
        self.seq = 0  # its place in the running list: set at each admission, increasing (the decode cohort's key)
        self.joined_at = -1  # the step it joined its replica's decode cohort (simulator/decode_cohort.py), or -1
        self.lazy_keys = True  # prefix caching: blocks only it can name are registered when it is freed (kv_cache.py)
        self.prefix_junction = 0  # 0.33's shared_prefix_boundary, in blocks: a window kept for siblings (hybrid_kv.py)

    def record_tokens(self, first_step: int, last_step: int) -> None:
        """One token at each step first_step..last_step: extend the last run or start one."""
        runs = self.token_runs
        if runs and runs[-1] == first_step - 1:
            runs[-1] = last_step
        else:
            runs.append(first_step)
            runs.append(last_step)

    def __repr__(self) -> str:
        return (f"Request({self.request_id}, {self.status}, tokens={self.num_tokens}, "
                f"computed={self.num_computed_tokens}, blocks={len(self.blocks)})")
