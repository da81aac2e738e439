"""Settings that nothing reads in the combination given: named in a warning, not refused.

A setting moved from its default that the chosen mechanism ignores (speculation settings with
`method: none`, `swap_space` or `host_link_gbps` under recompute preemption, a CUDA-graph size under
eager mode, arrival fields another process does
not use) would otherwise be silently dropped; refusing it would break a sweep across the
setting that gives it its effect (`speculative.method=none,fixed`), so it is said once.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

# settings a search varies itself: a setting whose effect depends on them is not "without effect" in its first runs
_VARIED: ContextVar[frozenset] = ContextVar("varied", default=frozenset())


# the workload settings a run reads beside requests given to it (the API's requests=, a real run compare replays):
# the classes it judges them by, the max_tokens sent and the min_tokens asked for (r151: said to have no effect)
WORKLOAD_READ_WITH_REQUESTS = ("workload.slo_classes", "workload.request_max_tokens",
                               "workload.max_tokens_past_context", "workload.min_tokens")


@contextmanager
def varying(*keys: str):
    """While a search varies `keys` (search replicas starts at one replica), the settings that take effect at other
    values of them are not said to have none (the router at one replica changed the answer: 2 replicas, or 3)."""
    token = _VARIED.set(_VARIED.get() | set(keys))
    try:
        yield
    finally:
        _VARIED.reset(token)


def changed(section, name: str) -> bool:
    """Whether a setting moved from its default (what a warning or a release's refusal is about)."""
    return getattr(section, name) != type(section).model_fields[name].default


# why priorities are said unread: a workload file records them all the same (cli.py's workload write knows them by it)
PRIORITIES_UNREAD = "only the priority queue and the lowest_priority victim read priorities"


def without_effect(scenario: Scenario, has_local_layers: bool, profile=None, max_num_seqs: int = 0,
                   max_num_batched_tokens: int = 0, sliding_window: bool = False,
                   dense: str | None = None, max_model_len: int = 0) -> list[str]:
    """Settings moved from their default that nothing reads in this combination: said, not refused, so a sweep
    across the setting that gives them their effect (speculative.method=none,fixed) runs every point.
    `sliding_window`: the KV pool has a sliding-window group servesim models (beside full attention); `dense`: the model's name when it has no experts."""
    sp, e, p, c = scenario.speculative, scenario.engine, scenario.policies, scenario.cluster
    a = getattr(scenario.workload, "arrival", None)
    rules = [(sp.method == "none", sp, "speculative", ["num_speculative_tokens", "acceptance_rate",
                                                        "acceptance_distribution", "draft_cost_ratio",
                                                        "eagle_block_drop", "lookahead_block_hashes",
                                                        "drafting_slots_per_seq", "draft_pass_tokens",
                                                        "lookahead_slots", "proposal_distribution", "drafts_vary",
                                                        "parallel_drafting", "skips_unused_drafts"],
              "speculative.method is none"),
             (sp.method == "none", e, "engine", ["graph_sizes_round_to_drafts"], "speculative.method is none"),
             (p.preemption_mode == "recompute", e, "engine", ["swap_space"], "policies.preemption_mode is recompute"),
             (p.preemption_mode == "recompute", scenario.hardware, "hardware", ["host_link_gbps"],
              "policies.preemption_mode is recompute (the link carries swapped blocks only)"),
             (e.enforce_eager, e, "engine", ["max_cudagraph_capture_size", "cudagraph_capture_sizes",
                                             "graph_sizes_round_to_drafts"],
              "engine.enforce_eager runs without CUDA graphs"),
             (p.admission.reserve != "quantile", p.admission, "policies.admission", ["reserve_quantile"],
              f"policies.admission.reserve is {p.admission.reserve}"),
             (not p.admission.shed_on_ttft_slo, p.admission, "policies.admission", ["shed_ttft_ms"],
              "policies.admission.shed_on_ttft_slo is off"),
             (p.admission.shed_on_ttft_slo and bool(getattr(scenario.workload, "slo_classes", None)) and
              all(c.ttft_ms is not None for c in scenario.workload.slo_classes.values()), p.admission,
              "policies.admission", ["shed_ttft_ms"], "every SLO class sets its own ttft_ms, which shedding reads"),
             (not c.prefill_replicas, c, "cluster", ["kv_link_gbps", "decode_router"],
              "cluster.prefill_replicas is 0 (no disaggregation)"),
             (bool(c.prefill_replicas) and c.replicas == 1 and "cluster.replicas" not in _VARIED.get(), c, "cluster",
              ["decode_router"], "one decode replica takes every hand-off"),
             (c.dp_ranks_reached == e.data_parallel_size and "engine.data_parallel_size" not in _VARIED.get(), c,
              "cluster", ["dp_ranks_reached"], f"it reaches every one of the {e.data_parallel_size} DP rank(s)"),
             ((c.prefill_replicas or c.replicas) == 1 and "cluster.replicas" not in _VARIED.get(),
              c, "cluster", ["router"],
              "one replica takes every request" + (" (vLLM's own balancer spreads them over its DP ranks)"
                                                   if e.data_parallel_size > 1 and not c.prefill_replicas
                                                   and (c.dp_ranks_reached or 2) > 1 else "")),  # (r167)
             (sp.method != "none" and not e.enable_prefix_caching, sp, "speculative",
              ["eagle_block_drop", "lookahead_block_hashes"], "engine.enable_prefix_caching is off (no prefix hit)"),
             (not e.dispatches_moe, e, "engine",
              ["all2all_backend"], "vLLM moves MoE tokens between ranks only with enable_expert_parallel over "
                                   "data_parallel_size > 1"),
             (not has_local_layers, e, "engine", ["disable_hybrid_kv_cache_manager"],
              "the model has no local-attention layers"),
             (not (sliding_window and e.enable_prefix_caching), e, "engine", ["prefix_cache_retention_interval"],
              "servesim models no sliding-window KV cache group here" if not sliding_window else
              "engine.enable_prefix_caching is off (nothing is cached)"),
             (sp.method != "none" and sp.acceptance_distribution is not None, sp, "speculative", ["acceptance_rate"],
              "speculative.acceptance_distribution gives the acceptances"),
             (profile is not None and profile.overhead is None, e, "engine",
              ["max_cudagraph_capture_size", "cudagraph_capture_sizes",  # async: also the queue
               "graph_sizes_round_to_drafts"] +
              # 0.33's start-up reserve holds its CUDA graphs' memory: eager, the pool is larger (r148)
              ["enforce_eager"] * (e.is_0_19 or e.reserved_memory_gib is not None or e.num_gpu_blocks_override is not
                                   None or e.kv_cache_memory_bytes is not None),
              f"profile {getattr(profile, 'name', '')} has no overhead terms (its step time is the engine's whole)"),
             (scenario.profile != "auto", scenario.hardware, "hardware", ["kernel_tables"],
              "a profile is given: the tables are composed only by profile: auto"),  # r148
             (sp.proposal_distribution is not None, sp, "speculative", ["drafts_vary"],
              "speculative.proposal_distribution gives the drafts proposed")]
    measured = profile is not None and profile.cost_model != "roofline"
    datasheet = f"profile {getattr(profile, 'name', '')}'s step times come from its coefficients (measured or " \
                f"fitted), not from datasheet speeds (profile=roofline reads them)"
    rules.append((measured, scenario.hardware, "hardware", ["bf16_tflops", "fp8_tflops", "fp4_tflops"], datasheet))
    rules.append((measured and profile.overhead is None, scenario.hardware, "hardware", ["memory_bandwidth_gbps"],
                  datasheet))
    rules.append((measured or e.tensor_parallel_size == 1, scenario.hardware, "hardware", ["gpu_link_gbps"],
                  datasheet if measured else "tensor_parallel_size is 1 (only the roofline's all-reduce reads it)"))
    rules.append((e.performance_mode == "interactivity", e, "engine", ["performance_mode"],
                  "interactivity's finer CUDA-graph sizes are not modelled (throughput's doubled budgets are)"))
    rules.append((e.performance_mode == "throughput" and e.max_num_batched_tokens is not None and
                  e.max_num_seqs is not None, e, "engine", ["performance_mode"],
                  "throughput doubles only default budgets, and max_num_batched_tokens and max_num_seqs are given"))
    rules.append((e.max_num_batched_tokens is not None and e.max_num_seqs is not None, e, "engine", ["usage_context"],
                  "it picks the default budgets, and max_num_batched_tokens and max_num_seqs are given"))
    rules.append((p.batching != "static", p, "policies", ["static_batch_size"], f"policies.batching is {p.batching}"))
    rules.append((dense is not None, scenario.moe, "moe", ["routing"], f"{dense} is a dense model: it has no router"))
    rules.append((dense is None and measured and profile.moe_routing is None, scenario.moe, "moe", ["routing"],
                  f"profile {getattr(profile, 'name', '')}'s step times follow no router skew (it records none; "
                  f"the kernel tables' composition and the roofline read it)"))
    rules.append((e.kv_cache_memory_bytes is not None and e.num_gpu_blocks_override is None, e, "engine",
                  ["gpu_memory_utilization"], "engine.kv_cache_memory_bytes sizes the KV cache (vLLM ignores it then)"))
    rules.append((e.num_gpu_blocks_override is not None, e, "engine", ["kv_cache_memory_bytes"],
                  "engine.num_gpu_blocks_override gives the KV pool's blocks"))
    rules.append((e.tensor_parallel_size * e.data_parallel_size == 1, e, "engine", ["enable_expert_parallel"],
                  "one GPU (tensor_parallel_size x data_parallel_size = 1) holds every expert"))
    rules.append((dense is not None and e.tensor_parallel_size * e.data_parallel_size > 1, e, "engine",
                  ["enable_expert_parallel"], f"{dense} is a dense model: it has no experts to spread (vLLM runs "
                                              f"it as plain tensor and data parallelism)"))  # (r181: refused)
    w = scenario.workload
    if p.queue != "priority" and p.preemption_victim != "lowest_priority":  # nothing else reads a priority
        why = f"policies.queue is {p.queue} ({PRIORITIES_UNREAD})"
        rules.append((hasattr(w, "priorities"), w, "workload", ["priorities"], why))
        rules += [(True, cls, f"workload.slo_classes.{name}", ["priority"], why)
                  for name, cls in (getattr(w, "slo_classes", None) or {}).items()]
    rules.append((hasattr(w, "request_max_tokens") and not w.request_max_tokens and w.type != "trace", w, "workload",
                  ["max_tokens_past_context"], "workload.request_max_tokens is off (no request sends max_tokens)"))
    seats = min(((max_num_seqs, "max_num_seqs"), (e.max_num_active_seqs, "max_num_active_seqs")),
                key=lambda c: c[0] or float("inf"))
    if p.batching == "static" and p.static_batch_size and seats[0] and p.static_batch_size > seats[0]:
        rules.append((True, p, "policies", ["static_batch_size"],
                      f"at most {seats[1]} ({seats[0]}) run at once, so batches are of {seats[0]}"))
    long = p.admission.long_prompt_tokens, p.admission.max_long_prefills  # given together (config.py)
    if long[1] is not None and max_model_len and long[0] >= max_model_len:  # (r147)
        rules.append((True, p.admission, "policies.admission", ["long_prompt_tokens", "max_long_prefills"],
                      f"no prompt is that long: prompts are shorter than max_model_len ({max_model_len})"))
    elif long[1] is not None and seats[0] and long[1] >= seats[0]:
        rules.append((True, p.admission, "policies.admission", ["max_long_prefills"],
                      f"at or above {seats[1]} ({seats[0]}), which caps every running request already"))
    if e.max_num_active_seqs is not None and max_num_seqs and e.max_num_active_seqs >= max_num_seqs:  # (r151)
        rules.append((True, e, "engine", ["max_num_active_seqs"],
                      f"at or above max_num_seqs ({max_num_seqs}), which caps every running request already"))
    step = min(max_num_batched_tokens, e.max_num_scheduled_tokens or max_num_batched_tokens) if not e.is_0_19 \
        else max_num_batched_tokens  # 0.33's steps issue max_num_scheduled_tokens at most (r146)
    if step and e.long_prefill_token_threshold >= step:  # (r145)
        rules.append((True, e, "engine", ["long_prefill_token_threshold"],
                      f"at or above the tokens a step takes ({step}), which cap a chunk already"))
    if w.type == "synthetic" and w.max_concurrency and w.num_requests and w.max_concurrency >= w.num_requests:
        rules.append((True, w, "workload", ["max_concurrency"],
                      f"at or above workload.num_requests ({w.num_requests}): no request waits for another"))  # r148
    if a is not None and a.process == "closed_loop" and a.ramp_up_s and a.concurrency == 1:  # (r176)
        rules.append((True, a, "workload.arrival", ["ramp_up_s"], "one client starts at t = 0"))
    if a is not None and a.process == "closed_loop" and w.num_requests and a.concurrency >= w.num_requests:
        rules.append((True, a, "workload.arrival", ["think_time_s"],
                      f"workload.arrival.concurrency ({a.concurrency}) is at or above workload.num_requests "
                      f"({w.num_requests}): each client sends one request, none a second"))
    rules.append((w.type == "sessions", w, "workload", ["clip_to_max_model_len"],
                  "sessions cut no turn (a turn past max_model_len is refused, 400, and ends its session)"))
    if w.type == "sessions" and w.turns.dist == "fixed" and w.turns.value == 1:
        rules.append((True, w, "workload", ["message_tokens", "think_time_s"],
                      "workload.turns is 1: no session sends a follow-up message"))
    if max_num_batched_tokens and (e.max_num_scheduled_tokens or 0) > max_num_batched_tokens:
        rules.append((True, e, "engine", ["max_num_scheduled_tokens"],
                      f"above max_num_batched_tokens ({max_num_batched_tokens}), which bounds a step (vLLM's scheduler "
                      f"would issue steps its model runner, sized for {max_num_batched_tokens} tokens, cannot take)"))
    if a is not None and a.process == "onoff" and a.off_s == 0:  # r166: a Poisson stream at rate, unsaid
        rules.append((True, a, "workload.arrival", ["on_s"], "workload.arrival.off_s is 0: no silence between "
                                                             "the on windows (a Poisson stream at rate)"))
    if a is not None:
        uses = {"cv": a.process == "gamma", "on_s": a.process == "onoff", "off_s": a.process == "onoff",
                "points": a.process == "curve", "period_s": a.process == "curve",
                "concurrency": a.process == "closed_loop", "think_time_s": a.process == "closed_loop",
                "rate": a.process in ("poisson", "gamma", "constant", "onoff") and a.ramp_up_strategy is None,
                "vllm_client_draws": a.process in ("poisson", "gamma")}  # constant gaps draw nothing (r148)
        rules += [(not used, a, "workload.arrival", [name], f"workload.arrival.process is {a.process}"
                   + (" with a ramp_up_strategy" if name == "rate" and a.ramp_up_strategy else ""))
                  for name, used in uses.items()]
    said = [f"servesim: warning: {where}.{name} has no effect: {why}"
            for inert, section, where, names, why in rules if inert for name in names if changed(section, name)]
    said += _inert_coefficients(profile, e.tensor_parallel_size)
    said += [f"servesim: warning: workload.slo_classes.{name} sets no target (ttft_ms, tpot_ms or e2el_ms): every "
             f"completed request of it counts as good in goodput"  # r128: goodput_fraction 1.0 at any load
             for name, cls in (getattr(scenario.workload, "slo_classes", None) or {}).items()
             if cls.ttft_ms is None and cls.tpot_ms is None and cls.e2el_ms is None]
    if c.router == "prefix_affinity" and not e.enable_prefix_caching and (c.prefill_replicas or c.replicas) > 1:
        said.append("servesim: warning: cluster.router=prefix_affinity routes as least_outstanding: "
                    "engine.enable_prefix_caching is off, so no replica holds a cached prefix to prefer")  # its tie-break
    if measured and profile.overhead is not None and changed(scenario.hardware, "memory_bandwidth_gbps"):
        said.append(f"servesim: warning: hardware.memory_bandwidth_gbps scales only the overhead's activation traffic: "
                    f"{datasheet.replace('them', 'it')}")  # a what-if device's kernels are timed by the roofline
    return said


def _inert_coefficients(profile, tensor_parallel_size: int) -> list[str]:
    """A profile's coefficient its cost model reads only elsewhere: the roofline's all-reduce latency at TP 1 (no
    all-reduce), a linear profile's price per expert without the expert count it is priced over (a dense model's).
    Built-in profiles give neither, so these are a user's edits."""
    coef = getattr(profile, "coefficients", None) or {}
    said = []
    if profile is not None and profile.cost_model == "roofline" and tensor_parallel_size == 1 and \
            "allreduce_latency_us" in coef:
        said.append("servesim: warning: profile.coefficients.allreduce_latency_us has no effect: "
                    "tensor_parallel_size is 1 (no all-reduce)")
    if profile is not None and profile.cost_model == "linear" and coef.get("per_expert_ms") and \
            not coef.get("moe_experts"):
        said.append("servesim: warning: profile.coefficients.per_expert_ms has no effect: the profile has no "
                    "moe_experts (a step's expert reads are priced over the experts it touches, of those)")
    return said
