"""The scenario: one YAML validated field by field, resolved into concrete settings.

Setting names and defaults are vLLM's (SchedulerConfig, CacheConfig); fields that
vLLM does not have say so in their description.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, NamedTuple

import numpy as np
import yaml
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, ValidationError, model_validator

from servesim.policies.batching import BatchingName
from servesim.policies.queues import QueueName, VictimName
from servesim.policies.routing import RouterName
from servesim.simulator.capacity import CUDA_CONTEXT_BYTES, check_start_memory, kv_pool_bytes, num_blocks
from servesim.simulator.start_up_memory import start_up_reserve_bytes
from servesim.simulator.cost_model import CostModel, Profile, build_cost_model
from servesim.simulator.errors import ConfigError, first_error, printable
from servesim.simulator.files import Refused, TooLarge, dump_yaml, safe_load_bounded
from servesim.simulator.hardware import Hardware, builtin_gpu_table, load_hardware
from servesim.simulator.hybrid_kv import KVLayout, kv_layout
from servesim.simulator.inert_settings import changed, without_effect
from servesim.simulator.local_attention import local_attention
from servesim.simulator.model_arch import (DEFAULT_ROUTING, W4A16_GROUP, ModelArchitecture, default_model_length,
                                           load_model, model_length)
from servesim.simulator.preemption import PreemptionMode
from servesim.simulator.rederive import (MODEL_IDENTITY, PROFILE_IDENTITY, at, digest, digest_less, file_digest,
                                         rederive)
from servesim.simulator.scheduler import SchedulerSettings
from servesim.simulator.speculation import SpeculationMethod
from servesim.workloads import SyntheticWorkload, Workload
from servesim.workloads.settings import (GiB, MAX_BLOCK_SIZE, MAX_BLOCKS, MAX_GIB, MAX_GPUS, MAX_REPLICAS, MAX_REQUESTS,
                                MAX_SECONDS, MAX_SEQS, MAX_TOKENS, Settings, Speed, Tokens, refuse)

GIB = 2**30


# vLLM 0.33's all-to-all backends that batch DP MoE (ParallelConfig.use_batched_dp_moe), with their own default budget
BATCHED_DP_BACKENDS = ("deepep_low_latency", "nixl_ep")
# vLLM 0.33's --all2all-backend choices (config/parallel.py All2AllBackend); expert parallelism is timed as the
# default's (allgather_reducescatter: NCCL all-gather and reduce-scatter), which 0.33 runs for pplx and naive too
ALL2ALL_0_19 = ("allgather_reducescatter", "naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "mori",
                "nixl_ep", "flashinfer_all2allv", "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided")
ALL2ALL_0_33 = tuple(b for b in ALL2ALL_0_19 if b != "mori") + ("deepep_v2", "mori_high_throughput",
                                                                  "mori_low_latency", "moonep", "passthrough")
ALL2ALL_BACKENDS = ALL2ALL_0_33 + ("mori",)
TIMED_ALL2ALL = ("allgather_reducescatter", "naive", "pplx")


# vLLM's CUDA attention backends a line may name that servesim checks and sizes blocks for (ATTENTION_BACKENDS)
ATTENTION_BACKEND_NAMES = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "FLASHMLA", "FLASH_ATTN_MLA",
                           "FLASHINFER_MLA", "CUTLASS_MLA", "TRITON_MLA")


class EngineSettings(Settings):
    """vLLM engine arguments (names and defaults from vLLM 0.33)."""

    max_num_batched_tokens: Tokens | None = Field(None, description="None: vLLM's usage-context default")
    max_num_seqs: int | None = Field(None, ge=1, le=MAX_SEQS, description="None: vLLM's usage-context default")
    max_num_active_seqs: int | None = Field(
        None, ge=1, le=MAX_SEQS, description="vLLM 0.33's: the requests its scheduler admits into RUNNING, at most "
                                             "max_num_seqs (None: max_num_seqs, which still sizes the CUDA graphs)")
    max_model_len: Annotated[int, Field(ge=2, le=MAX_TOKENS)] | Literal["auto"] | None = Field(
        None, description="None: the model's max_position_embeddings (a prompt and one token); "
                                               "auto (vLLM's -1): the longest that one request's KV fits in the pool")
    block_size: int = Field(16, ge=1, le=MAX_BLOCK_SIZE, description=(
        "tokens per KV block. Not given: vLLM's, 16 unless the attention backend vLLM picks needs another (latent "
        "attention: 32 on compute capability 10.x, FlashInfer MLA's; 64 on Hopper with an fp8 KV cache, FlashMLA's)"))
    gpu_memory_utilization: float = Field(0.92, gt=0, le=1)
    num_gpu_blocks_override: int | None = Field(None, ge=1, le=MAX_BLOCKS)
    max_num_scheduled_tokens: Tokens | None = Field(
        None, description="vLLM 0.33's: the tokens its scheduler issues per step (None: max_num_batched_tokens, "
                          "which still bounds it)")
    kv_cache_memory_bytes: int | None = Field(
        None, ge=1, le=MAX_GIB * GIB, description="vLLM's: the KV cache of each GPU in bytes, in place of what "
                                                  "gpu_memory_utilization leaves (which it then ignores)")
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = Field(0, ge=0, le=MAX_TOKENS)
    scheduler_reserve_full_isl: bool = True
    watermark: float = Field(0.0, ge=0, lt=1)
    enable_prefix_caching: bool = True
    prefix_cache_retention_interval: int | None = Field(
        0, ge=0, le=MAX_TOKENS, description=(
            "vLLM 0.33's: which of a sliding window's blocks stay in the prefix cache. 0: the window before each "
            "prompt's end and before a shared prefix's end; a multiple of block_size: also every that many tokens; "
            "None: every block (0.19 keeps every block and has no such setting)"))
    tensor_parallel_size: int = Field(1, ge=1, le=MAX_GPUS)
    pipeline_parallel_size: int = Field(1, ge=1, le=MAX_GPUS, description="only 1: pipeline stages (micro-batches in flight, "
                                                               "bubbles) are not modelled yet")
    data_parallel_size: int = Field(
        1, ge=1, le=MAX_REPLICAS, description="attention data parallel: this many engines (DP ranks), each its own scheduler and KV cache, "
                       "behind vLLM's own balancer (cluster.router's vllm_dp), each replica's ranks by themselves")
    disable_hybrid_kv_cache_manager: bool | None = Field(
        None, description="models with local-attention layers: true gives every layer the whole context's KV instead "
                          "of dropping what local layers no longer read. None: vLLM's default, the hybrid manager on "
                          "for sliding windows and chunked local attention (Llama 4) alike; off in 0.19 beside a KV "
                          "connector (disaggregation) and for chunked local attention beside EAGLE-type drafts "
                          "(speculative.eagle_block_drop or lookahead_block_hashes)")
    all2all_backend: Literal[ALL2ALL_BACKENDS] | None = Field(
        None, description="vLLM's --all2all-backend (None: allgather_reducescatter, as vLLM's). Expert parallelism "
                          "over data_parallel_size > 1 is timed as allgather_reducescatter's NCCL collectives whatever "
                          "the backend (another's kernels are not timed: said); deepep_low_latency and nixl_ep batch "
                          "DP MoE, whose default max_num_batched_tokens is 256 (0.33's)")
    enable_expert_parallel: bool = Field(
        False, description="MoE: whole experts spread over the tensor_parallel_size x data_parallel_size GPUs, "
                           "instead of every expert split over the TP group")
    num_redundant_experts: int = Field(0, ge=0, le=MAX_GPUS * 64, description=(
        "vLLM's EPLB (eplb_config's num_redundant_experts): extra copies of experts spread with the others over "
        "the expert-parallel GPUs, each a whole expert's weights (their balancing is not modelled)"))
    quantization: Literal["fp8", "modelopt_fp4", "awq", "awq_marlin", "gptq", "gptq_marlin"] | None = Field(
        None, description="fp8: W8A8 with per-tensor scales; modelopt_fp4: NVFP4 W4A4 (Blackwell); awq, gptq (and "
                          "their marlin kernels): 4-bit weights, 16-bit activations. Linear layers only; the KV cache "
                          "follows kv_cache_dtype. Others vLLM knows (bitsandbytes, gguf, mxfp4, ...) are not modelled")
    kv_cache_dtype: Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        "auto", description="auto: the model's activation dtype; fp8 (= fp8_e4m3) and fp8_e5m2: one byte per value")
    attention_backend: Literal[tuple(ATTENTION_BACKEND_NAMES)] | None = Field(
        None, description="vLLM's --attention-backend, where it names a CUDA backend servesim checks: refused where "
                          "vLLM would not start with it, and its block size derived (None: vLLM's own choice)")
    async_scheduling: bool | None = Field(
        None, description="None: vLLM's default, on (since about 0.14, with the mp and uni executors); plans the next "
                          "step while this one runs, so the host's CPU time hides behind the GPU's, and a request "
                          "reaching the queue while a step runs waits a step more")
    enforce_eager: bool = Field(False, description="no CUDA graphs: every step pays the CPU's kernel launches")
    max_cudagraph_capture_size: Tokens | None = Field(
        None, description="None: vLLM's min(2 x max_num_seqs, 512; 0.33 on Blackwell 1024), at most "
                          "max_num_batched_tokens, then the largest of vLLM's capture sizes under it (1, 2, 4, steps "
                          "of 8 to 248, of 16 from 256; 0.33 adds the budget and max_num_seqs); larger steps run eager")
    cudagraph_capture_sizes: list[Tokens] | None = Field(
        None, min_length=1, max_length=4096, description="vLLM's: the step sizes to capture, in place of its grid; "
                                                        "those above max_num_batched_tokens are dropped, as vLLM "
                                                        "drops them")
    graph_sizes_round_to_drafts: bool | None = Field(
        None, description="under speculation vLLM rounds CUDA-graph capture sizes up to multiples of 1 + k, those "
                          "past the largest dropped, where its decode graphs are full: 0.19 with a separate decode "
                          "routine (FULL_AND_PIECEWISE, its default, or FULL_DECODE_ONLY), 0.33 on its V1 model "
                          "runner only (suffix or custom_class drafting, parallel drafting but DFlash's and "
                          "DSpark's, a heterogeneous-vocabulary draft model, dual batch overlap). None: the "
                          "release's default (0.19 yes, 0.33 no); servesim vllm sets it from the line")
    swap_space: float = Field(4.0, ge=0, le=MAX_GIB, description="GiB of host memory for swapped-out KV blocks (vLLM V0)")
    max_num_queued_reqs: int | None = Field(
        None, ge=0, le=MAX_REQUESTS, description="reject (503) when unfinished requests + 1 exceed it, counted over "
                                                 "the deployment's DP ranks (vLLM's API server); 0 refuses every one")
    max_num_queued_tokens: int | None = Field(
        None, ge=0, description="reject (503) when prompt tokens of requests without a first token, over the "
                                "deployment's DP ranks, reach it; 0 refuses every one")
    usage_context: Literal["openai_server", "llm_class"] = "openai_server"
    vllm_defaults: Literal["0.33.0", "0.19.0"] = Field(
        "0.33.0", description="the vLLM release whose defaults fill what is not given: 0.33 adds a 16384-token "
                              "budget tier for GPUs of >= 160 GiB and captures CUDA graphs up to 1024 tokens on "
                              "Blackwell (compute capability 10.x), where 0.19 stays at 8192 and 512")
    performance_mode: Literal["balanced", "interactivity", "throughput"] = Field(
        "balanced", description="vLLM's: throughput doubles the default token budget and max_num_seqs (those not "
                                "given); interactivity captures small CUDA graphs one size apart (not modelled)")
    reserved_memory_gib: float | None = Field(
        None, ge=0, le=MAX_GIB, description="servesim's: the memory vLLM's start-up profile takes besides weights and "
                                            "KV cache (activations, non-torch, 0.33's CUDA graph estimate); none: "
                                            "estimated (simulator/start_up_memory.py)")

    @property
    def is_0_19(self) -> bool:
        """Whether vLLM 0.19's defaults and checks apply where they differ from 0.33's (vllm_defaults)."""
        return self.vllm_defaults == "0.19.0"

    @property
    def dispatches_moe(self) -> bool:
        """Whether MoE tokens move between ranks (an all2all_backend's work): expert parallelism over
        data_parallel_size > 1 (vLLM's do_naive_dispatch_combine needs dp_size > 1)."""
        return self.enable_expert_parallel and self.data_parallel_size > 1

    @property
    def batches_dp_moe(self) -> bool:
        """Whether the all2all_backend batches DP MoE (BATCHED_DP_BACKENDS, in 0.33), with its own default budget."""
        return self.dispatches_moe and self.all2all_backend in BATCHED_DP_BACKENDS and not self.is_0_19


class HardwareSettings(Settings):
    gpu: str | None = "h200-sxm"
    kernel_tables: str | None = Field(None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
                                      description="the GPU's folder under the kernel tables' root (default: the built-in "
                                                  "GPU's); a folder name, not a path")
    memory_gib: GiB | None = None
    memory_bandwidth_gbps: Speed | None = None
    bf16_tflops: Speed | None = None
    fp8_tflops: Speed | None = None
    fp4_tflops: Speed | None = None
    host_link_gbps: Speed | None = None
    gpu_link_gbps: Speed | None = None
    compute_capability: float | None = Field(None, ge=1, le=99, description=(
        "CUDA's, which vLLM's Marlin kernels and attention backends are picked by (a GPU given by its memory: an "
        "H100 SXM's 9.0 unless given)"))


class AdmissionSettings(Settings):
    """Admission beyond vLLM's (background essay 003)."""

    reserve: Literal["prompt", "max_tokens", "quantile"] = Field(
        "prompt", description="prompt: vLLM (the prompt must fit); max_tokens / quantile: also reserve blocks for "
                              "the expected output, which running requests keep until they grow into them")
    reserve_quantile: float = Field(0.9, gt=0, le=1, description="quantile of observed output lengths per SLO class")
    long_prompt_tokens: Tokens | None = Field(None, description="a prompt this long counts as long")
    max_long_prefills: int | None = Field(
        None, ge=1, le=MAX_SEQS, description="FIFO with at most this many long prompts in prefill at once (the queue is not reordered)")
    shed_on_ttft_slo: bool = Field(
        False, description="reject at arrival when the predicted queue wait exceeds the request's TTFT SLO")
    shed_ttft_ms: PositiveFloat | None = Field(None, description="the TTFT SLO for requests whose class sets none")


class PolicySettings(Settings):
    batching: BatchingName = "continuous"
    static_batch_size: int | None = Field(None, ge=1, le=MAX_SEQS, description="static batching: requests per batch (default max_num_seqs)")
    queue: QueueName = "fcfs"
    admission: AdmissionSettings = AdmissionSettings()
    preemption_mode: PreemptionMode = Field(
        "recompute", description="recompute (vLLM V1), swap to host memory (vLLM V0's swap_space), or auto: "
                                 "per victim, whichever the profile and host link predict cheaper")
    preemption_victim: VictimName | None = Field(
        None, description="None: the queue policy's own (vLLM: last admitted for fcfs, lowest priority for priority)")


class SpeculativeSettings(Settings):
    """Speculative decoding: k draft tokens per decode, verified in the target's pass (vLLM's accounting:
    drafts use the token budget; rejected ones are given back). `adaptive` lowers k as the batch grows
    and stops speculating once the step is compute-bound (past the profile's knee)."""

    method: SpeculationMethod = "none"
    num_speculative_tokens: int = Field(4, ge=1, le=1024)  # vLLM bounds it only below (its V1 sampler at 128)
    acceptance_rate: float = Field(0.7, gt=0, le=1, description="per-token probability a draft is accepted")
    acceptance_distribution: list[NonNegativeFloat] | None = Field(
        None, description="probabilities of accepting 0, 1, ..., k drafts (overrides acceptance_rate)")
    proposal_distribution: list[NonNegativeFloat] | None = Field(
        None, description="probabilities that a decode proposes 0, 1, ..., k drafts (vLLM's suffix decoding and "
                          "0.19's n-gram on the CPU propose as many as the text matches, often none: a decode "
                          "without drafts is a plain one); None: k on every decode")
    drafts_vary: bool = Field(
        False, description="the method proposes as many drafts as the text matches (suffix decoding; 0.19's CPU "
                           "n-gram): without proposal_distribution, k on every decode is an upper bound on its "
                           "cost, said in a warning (servesim vllm sets it)")
    draft_cost_ratio: float = Field(
        0.05, ge=0, le=100, description="the drafter's pass costs this fraction of the target's over the same "
                                        "tokens: a first over every token the step scheduled, prefill chunks "
                                        "included, then k - 1 over one token per request")
    parallel_drafting: bool = Field(
        False, description="vLLM's parallel drafting (P-EAGLE, PARD; DFlash and DSpark always): one drafter pass "
                           "proposes all k drafts, with no k - 1 after it (servesim vllm sets it)")
    skips_unused_drafts: bool | None = Field(
        None, description="whether the drafter's passes are skipped in a step where no request samples a token: "
                          "None, the release's (0.33's V2 model runner skips them; 0.19 never does); false for "
                          "0.33's V1 model runner, which runs them in every step (servesim vllm sets it)")
    drafting_slots_per_seq: int = Field(
        0, ge=0, le=65, description="vLLM's max_num_new_slots_for_drafting: the slots a draft model (1; with "
                                    "parallel drafting k) or parallel drafting (k - 1) adds to a sequence's step. "
                                    "0.19 keeps them out of every step: an unset engine.max_num_scheduled_tokens is "
                                    "the token budget less this x max_num_seqs, a given one must leave that much; "
                                    "0.33 takes them from the budget with each request scheduled (servesim vllm "
                                    "sets it)")
    lookahead_slots: int = Field(
        0, ge=0, le=65, description="vLLM's num_lookahead_tokens: KV slots each allocation reserves past the tokens "
                                    "scheduled, for the drafter's own KV (EAGLE-type and draft models: k; 0.33's "
                                    "DFlash k + 1); 0.19 reserves none at a request's admission (servesim vllm sets "
                                    "it)")
    draft_pass_tokens: int = Field(
        0, ge=0, le=65, description="vLLM 0.33's DFlash and DSpark: the query tokens a request takes in the draft "
                                    "pass; at most max_num_batched_tokens // this requests run at once "
                                    "(max_num_active_seqs lowered, as vLLM lowers it; servesim vllm sets it)")
    lookahead_block_hashes: bool = Field(
        False, description="vLLM 0.33's: a block's prefix-cache hash covers the token after it (EAGLE-type drafters "
                           "with prefix caching and no KV connector), so a hit keeps its last block where that "
                           "token is shared too, in place of eagle_block_drop (servesim vllm sets it)")
    eagle_block_drop: bool = Field(
        False, description="vLLM's EAGLE-type drafters (EAGLE, EAGLE3, MTP) read the hidden state of the token after "
                           "each position: a prefix-cache hit gives back its last block to be computed again "
                           "(servesim vllm sets it for those methods)")

    @model_validator(mode="after")
    def _dist(self):
        if self.lookahead_block_hashes and self.eagle_block_drop:
            refuse("lookahead_block_hashes", "and eagle_block_drop are two rules for a hit's last block (0.33's "
                                             "and 0.19's): give one")
        for field in ("acceptance_distribution", "proposal_distribution"):
            d = getattr(self, field)
            if d is not None and (len(d) != self.num_speculative_tokens + 1 or abs(sum(d) - 1) > 1e-6):
                refuse(field, f"needs k + 1 = {self.num_speculative_tokens + 1} probabilities summing to 1, got "
                              f"{len(d)} summing to {sum(d):g}")
        return self


class ClusterSettings(Settings):
    """Replicas of the same deployment behind a router (each its own scheduler and KV pool)."""

    replicas: int = Field(1, ge=1, le=MAX_REPLICAS)
    router: RouterName = Field("round_robin", description="across the replicas; a replica's data-parallel ranks "
                                                           "are balanced by vLLM's own balancer (vllm_dp)")
    prefill_replicas: int = Field(
        0, ge=0, le=MAX_REPLICAS, description="prefill/decode disaggregation: this many prefill-only replicas in front of the `replicas` "
                       "decode replicas; the router picks the prefill replica, decode_router the decode replica")
    decode_router: Literal["round_robin", "least_outstanding"] = Field(
        "round_robin", description="disaggregation: which decode replica the proxy hands a computed prompt to: in "
                                   "turn, as vLLM's P/D proxies do (its NIXL toy proxy, the Mooncake and disagg "
                                   "demos), or the fewest unfinished requests (disagg_proxy_demo's opt-in "
                                   "least_loaded)")
    kv_link_gbps: Speed = Field(50.0, description="per-GPU link for moving a prompt's KV to its decode replica, in "
                                                  "GB/s (gigabytes, not gigabits, a second)")
    dp_ranks_reached: int | None = Field(
        None, ge=1, le=MAX_REPLICAS, description="the DP ranks of a replica the simulated clients' API server balances "
        "over (vLLM's hybrid balancing: --data-parallel-size-local; an external balancer's rank: 1); the others step "
        "with them but take none of these requests. null: all of them (vLLM's internal balancer)")


class SimulationSettings(Settings):
    decode_runs: bool = Field(True, description="servesim's fast paths: uninterrupted decode steps advanced together, "
                                                    "steady decoders implicitly (same results, faster); false: step "
                                                    "by step, request by request")
    max_sim_time_s: float | None = Field(None, gt=0, le=MAX_SECONDS, description="stop the run at this simulated time")
    # the steady state the summary measures: requests of the warm-up and cool-down are simulated (they load the
    # engine) but left out of every request figure (README, Metrics: definitions)
    warmup_s: float = Field(0.0, ge=0, le=MAX_SECONDS, description="leave out requests arriving in the first "
                                                                   "warmup_s seconds")
    cooldown_s: float = Field(0.0, ge=0, le=MAX_SECONDS, description="leave out requests arriving in the last "
                                                                     "cooldown_s seconds of arrivals")
    warmup_requests: int = Field(0, ge=0, le=MAX_REQUESTS, description="leave out the first N requests to arrive")
    cooldown_requests: int = Field(0, ge=0, le=MAX_REQUESTS, description="leave out the last N requests to arrive")

    @property
    def measures_a_window(self) -> bool:
        return bool(self.warmup_s or self.cooldown_s or self.warmup_requests or self.cooldown_requests)


class MoESettings(Settings):
    """servesim: how a mixture-of-experts router spreads tokens (vLLM has no such setting: it is the traffic's)."""

    routing: Literal["balanced", "power_law_1.01", "power_law_1.2"] = Field(
        DEFAULT_ROUTING, description="expert load imbalance, as the kernel tables measure it: balanced, or a power law "
                                     "over the experts ranked by load; the fused-MoE times and the roofline's experts "
                                     "touched both follow it")


class Scenario(Settings):
    def __init__(self, **data):
        """Made by hand (the API's servesim.Scenario(...)): a bad value is a ConfigError naming it, as load's are
        (pydantic's ValidationError was the API's only exception of another kind, round 89)."""
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(*first_error(exc)) from None

    # pydantic calls an __init__ of its own making only when validating (model_validate: a key that is no string
    # is then its error, not Python's "keywords must be strings"); this one wraps the same init
    __init__.__pydantic_base_init__ = True

    @classmethod
    def model_validate(cls, obj, **kwargs):
        """As the constructor: a bad value is a ConfigError naming it (r160: model_validate does not go through
        __init__, so its ValidationError reached the API's callers)."""
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as exc:
            raise ConfigError(*first_error(exc)) from None

    @classmethod
    def model_validate_json(cls, json_data, **kwargs):
        """As model_validate, from JSON text (r161: pydantic's ValidationError)."""
        import json

        try:
            data = json.loads(json_data)
        except ValueError as exc:
            raise ConfigError("scenario", f"not JSON: {exc}") from None
        return cls.model_validate(data, **kwargs)

    @classmethod
    def model_validate_strings(cls, obj, **kwargs):
        """Refused: servesim reads a number only as a number, never from text (r161: pydantic's ValidationError)."""
        raise ConfigError("scenario", "Scenario.model_validate_strings is not taken: settings are read with their "
                                      "types (numbers as numbers); give the mapping to Scenario.model_validate")

    name: str = "default"
    seed: int = Field(0, ge=0, description="the run's random seed (numpy's, so non-negative)")
    model: str | dict = "llama-3.1-8b"
    hardware: HardwareSettings = HardwareSettings()
    profile: str | dict = Field(
        "auto", description="auto: the built-in profile for this model, GPU, dtype, KV dtype and TP, else one composed "
                            "from the GPU's kernel tables, else the roofline (with a warning)")
    engine: EngineSettings = EngineSettings()
    policies: PolicySettings = PolicySettings()
    workload: Workload = SyntheticWorkload()
    cluster: ClusterSettings = ClusterSettings()
    speculative: SpeculativeSettings = SpeculativeSettings()
    simulation: SimulationSettings = SimulationSettings()
    moe: MoESettings = MoESettings()
    resolved: dict | None = Field(None, description="written by servesim next to results; read back only for "
                                                    "resolved.derived, which tells a value servesim derived (set "
                                                    "back to what the scenario said, its `from`) from one edited "
                                                    "since (it stands); not a --set")

    @model_validator(mode="after")
    def _reached_ranks_exist(self):
        reached, dp = self.cluster.dp_ranks_reached, self.engine.data_parallel_size
        if reached is not None and reached > dp:
            raise ValueError(f"cluster.dp_ranks_reached: {reached} above engine.data_parallel_size {dp} (the ranks "
                             f"the API server can reach)")
        return self

    @model_validator(mode="after")
    def _client_seed(self):
        """vLLM's client seeds numpy's legacy generator, which takes no seed past 2**32 - 1: no vLLM run draws
        such a seed's gaps (r138: folded onto seed % 2**32 silently)."""
        if getattr(getattr(self.workload, "arrival", None), "vllm_client_draws", False) and self.seed >= 2**32:
            raise ValueError(f"seed: {self.seed} is past 2**32 - 1, which vLLM's client (np.random.seed) takes at "
                             f"most under workload.arrival.vllm_client_draws")
        return self

    @model_validator(mode="after")
    def _shedding_has_a_target(self):
        a = self.policies.admission
        if a.shed_on_ttft_slo and a.shed_ttft_ms is None and not any(
                c.ttft_ms for c in (getattr(self.workload, "slo_classes", None) or {}).values()):
            raise ValueError("policies.admission.shed_on_ttft_slo: no TTFT SLO to shed on; set "
                             "policies.admission.shed_ttft_ms or a ttft_ms in workload.slo_classes")
        return self

@dataclass(frozen=True)
class ResolvedScenario:
    """Everything the engine needs, with every default made concrete."""

    scenario: Scenario
    arch: ModelArchitecture
    hardware: Hardware
    profile: Profile
    cost_model: CostModel
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    num_gpu_blocks: int
    kv_pool_bytes: int | None
    cost_model_source: str = ""
    async_scheduling: bool = False
    cudagraph_max_tokens: int = 0
    kv_layout: KVLayout | None = None  # how the KV pool is cut into blocks; always set by resolve
    scheduler: SchedulerSettings | None = None  # vLLM's scheduler config, resolved; always set by resolve
    source: str | None = None  # the scenario file it was read from, if any
    derived_block_size: bool = False  # engine.block_size not given: the attention backend's (attention_block_size)
    reserved_memory_bytes: int = 0  # per GPU, vLLM's start-up profile besides weights and KV (start_up_reserve)
    scenario_text: str = ""  # the scenario and profile as resolved: the API refuses them edited since

    def weight_bytes_per_gpu(self) -> int:
        """The model's weights on each GPU of an engine, beside which its KV pool is sized."""
        e = self.scenario.engine
        ep = e.tensor_parallel_size * e.data_parallel_size if e.enable_expert_parallel else None
        return math.ceil(self.arch.weight_bytes_per_gpu(e.tensor_parallel_size, ep, e.num_redundant_experts))

    def edited(self) -> bool:
        """Whether its scenario or profile was changed in place since resolve: what it derived is then stale."""
        return bool(self.scenario_text) and _resolved_text(self.scenario, self.profile) != self.scenario_text

    @property
    def in_flight_tokens(self) -> int:
        """What a local-attention layer may hold beyond its window, at start-up and at admission (in_flight_tokens)."""
        return in_flight_tokens(self.scenario.engine, self.max_num_batched_tokens, self.async_scheduling)

    def input_files(self) -> list[str]:
        """The files this run reads: whatever it writes must not replace one of them."""
        return input_files(self.scenario, self.source)

    def as_dict(self) -> dict:
        """The resolved config, written next to every result so a run can be repeated exactly."""
        d = self.scenario.model_dump(mode="json")
        d["workload"] = _absolute_paths(d["workload"])  # a trace or a lengths file, found from any folder
        if not self.arch.is_moe:
            d.pop("moe")  # a router setting for a model without one would be refused on the way back in
        d["model"] = self.arch.model_dump(mode="json")
        hw = self.hardware.model_dump(mode="json")
        d["hardware"] = {"gpu": self.scenario.hardware.gpu} | {k: hw[k] for k in HardwareSettings.model_fields if k in hw}
        d["profile"] = self.profile.model_dump(mode="json")
        d["engine"].update(max_num_batched_tokens=self.max_num_batched_tokens, max_num_seqs=self.max_num_seqs,
                           max_model_len=self.max_model_len)
        d["engine"].update(async_scheduling=self.async_scheduling)
        if self.cudagraph_max_tokens:  # none when eager, or when every size given is above the budget
            d["engine"].update(max_cudagraph_capture_size=self.cudagraph_max_tokens)
        e = self.scenario.engine  # per GPU, as the pool beside them is (r154: the model's whole weights and KV
        d["resolved"] = {"num_gpu_blocks": self.num_gpu_blocks, "kv_pool_bytes": self.kv_pool_bytes,  # stood here)
                         "reserved_memory_bytes": self.reserved_memory_bytes,
                         "weight_bytes_per_gpu": self.weight_bytes_per_gpu(),
                         "kv_bytes_per_token_per_gpu": self.arch.kv_bytes_per_token_per_gpu(e.tensor_parallel_size),
                         "cost_model_source": self.cost_model_source, "derived": self._derived(d)}
        read = sorted(set(workload_paths(d["workload"])))
        if read:  # what each file the workload reads held: a rerun of this config.yaml says a file since changed
            d["resolved"]["input_sha256"] = {f: content_sha256(f) for f in read}
        return d

    def _derived(self, d: dict) -> dict:
        """The values written above that servesim derived rather than the scenario gave: each with what the
        scenario said and a digest of what was written, so a run of this file with other --set values derives
        them again (see rederive) instead of keeping, say, the old GPU's memory."""
        sc, e = self.scenario, self.scenario.engine
        given = {"model": sc.model if isinstance(sc.model, str) else None,
                 "profile": sc.profile if isinstance(sc.profile, str) else None}  # auto, a built-in name, a file
        given |= {f"hardware.{k}": None for k in d["hardware"] if k != "gpu" and getattr(sc.hardware, k) is None}
        given |= {f"engine.{k}": getattr(e, k) for k in ("max_num_batched_tokens", "max_num_seqs", "max_model_len",
                                                         "async_scheduling", "max_cudagraph_capture_size")
                  if k in d["engine"] and getattr(e, k) in (None, "auto")}  # auto: fitted to the pool again
        if self.derived_block_size:  # unset: the attention backend's again, for the GPU and KV dtype as they are
            given["engine.block_size"] = None
        out = {k: {"from": v, "digest": digest(at(d, k))} for k, v in given.items()
               if v is not None or k not in ("model", "profile")}
        if "profile" in out and sc.profile == "auto":
            out["profile"]["timings"] = digest_less(d["profile"], PROFILE_IDENTITY)
        if "model" in out:
            out["model"]["shape"] = digest_less(d["model"], MODEL_IDENTITY)
        for entry in out.values():  # a model or profile read from a file: where it is, and its bytes as read
            if isinstance(entry["from"], str) and (f := file_digest(entry["from"])) is not None:
                if Path(entry["from"]).exists():  # a path, found from anywhere (not an HF id: its cache's)
                    entry["from"] = str(Path(entry["from"]).resolve())
                entry["file"] = f
        return out


def max_model_len_given(sc: Scenario) -> int | None:
    """The max_model_len a scenario gives itself (None: derived when resolved, from the model and the pool)."""
    given = sc.engine.max_model_len
    return given if isinstance(given, int) and not isinstance(given, bool) else None


def input_files(sc: Scenario, source: str | None = None) -> list[str]:
    """The files a scenario reads: its own file, a model or profile file, every workload `path`."""
    found = [source] + [v for v in (sc.model, sc.profile) if isinstance(v, str) and Path(v).is_file()]
    if isinstance(sc.model, str) and Path(sc.model).is_dir():  # an HF model folder: its config.json is read
        found.append(str(Path(sc.model) / "config.json"))
    return [f for f in found + workload_paths(sc.workload.model_dump(mode="json")) if f]


def workload_paths(workload) -> list[str]:
    """Every `path` setting in a workload mapping, at any depth (a trace, a lengths file, an empirical one's)."""
    found, stack = [], [workload]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found += [node["path"]] if isinstance(node.get("path"), str) else []
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _absolute_paths(section):
    """A section's `path` settings that name a file, made absolute: a config.yaml run from another folder reads
    the same files (a path is read relative to the folder servesim runs in)."""
    if isinstance(section, list):
        return [_absolute_paths(v) for v in section]
    if not isinstance(section, dict):
        return section
    out = {k: _absolute_paths(v) for k, v in section.items()}
    if isinstance(out.get("path"), str) and Path(out["path"]).is_file():
        out["path"] = str(Path(out["path"]).resolve())
    return out


def parse_scenario(data: dict | None) -> Scenario:
    try:
        return Scenario.model_validate(data or {})  # not Scenario(**data): a key 1 or null was "keywords must be strings"
    except ValidationError as exc:
        raise ConfigError(*first_error(exc)) from None


def load_scenario_file(path: str | Path) -> dict:
    from servesim.simulator.files import load_yaml, read_settings_text

    trace = ConfigError("scenario", f"{path} is a trace, not a scenario (YAML): replay it with --set "
                                    f"workload.type=trace --set workload.path={path}")
    named_so = Path(path).suffix.lower() in (".jsonl", ".csv", ".parquet")  # (r182: said as bad YAML, or as a
    try:  # record's keys unknown settings)
        data = load_yaml(read_settings_text(path, "scenario"), "scenario", str(path))
    except ConfigError:
        if named_so:
            raise trace from None
        raise
    if named_so and not (isinstance(data, dict) and set(map(str, data)) & set(Scenario.model_fields)):
        raise trace
    if data is None:  # (r150: an emptied file ran the default scenario unsaid, as an empty path did, r143)
        raise ConfigError("scenario", f"{path} holds no settings (empty, or only comments): write {{}} for the "
                                      f"defaults, or give no scenario")
    if not isinstance(data, dict):
        raise ConfigError("scenario", f"{path} must hold a mapping of settings, not {type(data).__name__}")
    return data


SETTING_PATH = re.compile(  # a --set, --grid or --zip KEY
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*$")


def dropped_sets(sets: list[str], scenario=None, axes=(), searched: tuple[str, ...] = ()) -> list[str]:
    """A user's --set of a whole section after a --set of a key inside it: the key is dropped (a mapping replaces
    the section). So are the scenario's own keys in a section a --set or axis (setting, values, flag) gives as a
    mapping (r157: said for neither). One warning per section, for the command to say once the settings are
    valid; `searched`, the settings the command sets itself, are not said."""
    given: list[str] = []
    out = []
    for item in sets:
        key = item.split("=", 1)[0].strip()
        dropped = [k for k in given if k.startswith(key + ".")]
        if dropped:
            out.append(f"servesim: warning: --set {key}=... replaces the whole section, so the --set "
                       f"{', '.join(dropped)} given before it has no effect (give it inside the mapping, or after)")
        given = [k for k in given if k not in dropped and k != key] + [key]
    return out + _replaced_in_scenario(scenario, sets, axes, searched)


def _replaced_in_scenario(scenario, sets: list[str], axes, searched: tuple[str, ...]) -> list[str]:
    """The scenario's keys a mapping given for their whole section leaves out, replaced rather than merged: each
    one the run then holds otherwise. Not said: a key the new kind has no field for (a lognormal's sigma under
    {dist: fixed}), one a later --set gives again, one left at the value it had, or one the command sets."""
    if isinstance(scenario, (str, Path)):
        try:
            scenario = load_scenario_file(scenario)
        except ConfigError:  # the command said it already
            return []
    if not isinstance(scenario, dict):
        return []
    keys = [item.split("=", 1)[0].strip() for item in sets]
    given = [(key, [set_value(item.split("=", 1)[1])], "--set", keys[i + 1:])
             for i, (key, item) in enumerate(zip(keys, sets))
             if "=" in item] + [(k, list(vs), f, []) for k, vs, f in axes]
    out = []
    for key, values, flag, later in given:
        old = _section_given(scenario, key)
        if not isinstance(old, dict):
            continue
        mappings = [v for v in values if isinstance(v, dict)]
        lost: dict = {}
        for value in mappings:
            now = _as_run(scenario, sets + ([] if flag == "--set" else [override(key, value)]))
            if now is None:  # refused: the command says why, or the point's run does
                continue
            for leaf, was in _left_out(old, value, key):
                if leaf in searched or was is None or any(leaf == k or leaf.startswith(k + ".") for k in later):
                    continue
                held = _at_path(now, leaf)
                if held == was or held is _NO_FIELD and _kind_changed(scenario, now, key, leaf):
                    continue
                lost[leaf] = lost.get(leaf, 0) + 1
        if lost:
            named = [k if n == len(mappings) else f"{k} (in the {n} of {len(mappings)} values leaving it out)"
                     for k, n in lost.items()]
            out.append(f"servesim: warning: {flag} {key}=... replaces the scenario's whole {key} section, so its "
                       f"{', '.join(named)} has no effect (give {'it' if len(lost) == 1 else 'them'} inside the "
                       f"mapping{', or --set each key' if flag == '--set' else ''})")
    return out


KIND_KEYS = ("dist", "process", "type", "cost_model", "method")  # a section's kind: the fields it has follow it


def _kind_changed(scenario: dict, now: dict, key: str, leaf: str) -> bool:
    """Whether a section from `key` down to the leaf's own took another kind (a lognormal's sigma under
    {dist: fixed} is no field of the new one), as against a free mapping's key simply left out."""
    parts = leaf.split(".")
    for depth in range(len(key.split(".")), len(parts)):
        path = ".".join(parts[:depth])
        was, is_now = _section_given(scenario, path), _at_path(now, path)
        if isinstance(was, dict) and isinstance(is_now, dict) and any(
                k in was and was[k] != is_now.get(k) for k in KIND_KEYS):
            return True
    return False


_NO_FIELD = object()  # a key the run's settings have no field for


def _section_given(scenario: dict, key: str):
    """The scenario's mapping at a dotted key, a named model or profile as that model's (profile's) mapping."""
    node: Any = scenario
    parts, i = key.split("."), 0
    while i < len(parts):
        j = next_key(node, parts, i)
        part = ".".join(parts[i:j])
        nxt = node.get(part) if isinstance(node, dict) else None
        if i == 0 and part in ("model", "profile") and not isinstance(nxt, dict) and "." in key:
            try:
                nxt = _named_section(part, nxt, key)
            except ConfigError:  # profile auto: edited by no mapping of its parts
                return None
        node, i = nxt, j
    return node


def next_key(node, parts: list[str], i: int) -> int:
    """Where the key at parts[i] of a dotted path ends: the longest run of parts, joined by dots, that the mapping
    has (an SLO class named v1.chat, r169: read as class v1's field chat), else the one part."""
    if isinstance(node, dict):
        for j in range(len(parts), i + 1, -1):
            if ".".join(parts[i:j]) in node:
                return j
    return i + 1


def _as_run(scenario: dict, sets: list[str]):
    """The scenario as the command runs it, as plain data: resolved (what it derives, r159: a max_num_seqs given
    as what is derived anyway lost nothing), else as given, its model and profile mappings with every field they
    are read with (None where those settings are refused)."""
    try:
        sc = scenario_of(scenario, sets)
    except ConfigError:
        return None
    try:
        with collected_warnings():  # what resolving says is the run's to say, when it runs
            return resolve(sc).as_dict()
    except ConfigError:  # unresolvable alone (a search's rate to come): as given
        data = sc.model_dump(mode="json")
    for part in ("model", "profile"):
        if isinstance(data.get(part), dict) and (typed := typed_section(part, data[part])) is not None:
            data[part] = typed.model_dump(mode="json")
    return data


def typed_section(part: str, mapping: dict):
    """A model's (profile's) mapping as a run reads it, or None where it does not read (the run says why)."""
    from servesim.simulator.cost_model import load_profile

    try:
        return (load_model if part == "model" else load_profile)(mapping)
    except ConfigError:
        return None


def _at_path(data, key: str):
    """The value at a dotted key of plain data; _NO_FIELD where it has no such key (or no data)."""
    if data is None:
        return _NO_FIELD
    parts, i = key.split("."), 0
    while i < len(parts):
        j = next_key(data, parts, i)
        if not isinstance(data, dict) or (part := ".".join(parts[i:j])) not in data:
            return _NO_FIELD
        data, i = data[part], j
    return data


def _left_out(old: dict, new: dict, prefix: str):
    """(dotted key, value) of each leaf of `old` that `new`, replacing it, does not give."""
    for k, v in old.items():
        if isinstance(v, dict) and v and not (k in new and not isinstance(new[k], dict)):
            yield from _left_out(v, new.get(k) if isinstance(new.get(k), dict) else {}, f"{prefix}.{k}")
        elif k not in new:
            yield f"{prefix}.{k}", v


def set_value(text: str):
    """A --set's value text as apply_overrides reads it (None where it reads no YAML: no section)."""
    try:
        return safe_load_bounded(text)
    except Exception:  # noqa: BLE001 - apply_overrides said it, or took the text
        return None


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """--set a.b=c: the value is read as YAML, so numbers, booleans and lists work."""
    data = copy.deepcopy(data)  # the file's own order kept: slo_classes are drawn in it
    named: list | None = None  # [the model's name] while the model is named, not a mapping, before its edits
    edits: list = []  # the --set edits of that model's fields, made again on a model.name that names another
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "--set takes key=value")
        key, raw = item.split("=", 1)
        if not SETTING_PATH.match(key.strip()):
            raise ConfigError("--set", f"{item[:80]!r}: KEY must be a dotted setting name, e.g. engine.max_num_seqs")
        try:
            value: Any = safe_load_bounded(raw)
        except TooLarge as exc:
            raise ConfigError(key.strip(), f"--set value {exc}") from None
        except Refused as exc:
            raise ConfigError(key.strip(), f"--set value: {exc}") from None
        except (yaml.YAMLError, RecursionError):
            value = raw  # not YAML: the text itself
        parts = key.strip().split(".")
        if parts[0] == "resolved":  # (r149: taken and read by nothing, or on a config.yaml's rerun, read unsaid)
            raise ConfigError(key.strip(), "servesim writes it beside results (what a run derived): not a setting; "
                                           "give the setting itself (engine.num_gpu_blocks_override, model, ...)")
        if parts[0] == "model" and (len(parts) == 1 or named is None):  # the model as named before its edits
            named, edits = (data.get("model") if len(parts) > 1 else value), []
            named = None if isinstance(named, dict) else [named]
        if parts == ["model", "name"] and named is not None and _names_a_model(value):
            data["model"] = value  # another model by its name: its architecture, whatever order its field edits
            for edit in edits:  # came in (they were edits of the model named before)
                _put(data, *edit)
            continue
        if parts[0] == "model" and len(parts) > 1 and named is not None:
            edits.append((parts, value, key))
        _put(data, parts, value, key)
    if edits and all(parts == ["model", "name"] for parts, _, _ in edits) and _printable(edits[-1][1]):
        # r143: a misspelt model ran the default under its name (a name that is no text is the validator's)
        from servesim.simulator.model_arch import builtin_model_names

        raise ConfigError("model.name", f"{edits[-1][1]!r} is no built-in model or HF id servesim knows (built-in: "
                                        f"{', '.join(builtin_model_names())}): --set model=... reads a model by name, "
                                        f"path or HF id; a new name labels a model whose fields you edit too")
    return data


def _put(data: dict, parts: list[str], value, key: str) -> None:
    """One --set: the value at its dotted path, sections made as needed; a field of a named model (profile)
    edits that model's mapping."""
    node, i = data, 0
    while True:
        j = next_key(node, parts, i)
        p = ".".join(parts[i:j])
        if j == len(parts):
            node[p] = value
            return
        nxt = node.get(p)
        if i == 0 and p in ("model", "profile") and not isinstance(nxt, dict):
            nxt = node[p] = _named_section(p, nxt, key.strip())  # a field of the model (profile) it names
        elif nxt is None or isinstance(nxt, str):
            nxt = {}
            node[p] = nxt
        elif not isinstance(nxt, dict):
            raise ConfigError(key, f"{p} is not a section")
        node, i = nxt, j


def _printable(value) -> bool:
    return isinstance(value, str) and value.strip() != "" and value.isprintable()


def _names_a_model(value) -> bool:
    """A built-in model's name or an HF id servesim knows (what `model.name` of a run's config.yaml reads)."""
    from servesim.simulator.model_arch import HF_IDS, builtin_model_names

    return isinstance(value, str) and (value in HF_IDS or value in builtin_model_names())


def _named_section(section: str, name, key: str) -> dict:
    """The model or profile a scenario names (a built-in, a path, an HF id), as the mapping a --set of one of
    its fields edits: the fields it left alone stay that model's (profile's)."""
    if section == "model":
        return load_model(name or Scenario.model_fields["model"].default).model_dump(mode="json")
    if name in (None, "auto"):
        raise ConfigError(key, "profile auto is chosen for the deployment when the scenario is resolved: name a "
                               "profile (a built-in, a path) to edit its fields, or give the whole mapping")
    from servesim.simulator.cost_model import load_profile

    return load_profile(name).model_dump(mode="json")


def sets_give(sets: list[str], key: str) -> bool:
    """Whether the --set items give the dotted `key`, by itself or inside a mapping (workload.arrival={rate: 3}
    gives workload.arrival.rate)."""
    try:
        node: Any = apply_overrides({}, sets)
    except ConfigError:  # a --set that needs the scenario under it (a field of the profile auto picks): by its key
        return any(item.split("=", 1)[0].strip() == key for item in sets)
    return _at_path(node, key) is not _NO_FIELD


def flag_settings(sets: list[str], flags: list[tuple[str, str, Any]]) -> list[str]:
    """--set items and the settings a command's own flags give, (flag, key, value) each (None: not given): a flag and
    a --set of one key, or an empty flag, is one line (r149: --model beside --set model=, or --model '', took one
    of them unsaid)."""
    added = []
    for flag, key, value in flags:
        if value is None:
            continue
        if isinstance(value, str) and not value.strip():
            raise ConfigError(flag, "is empty: give a value or leave the flag out")
        if sets_give(sets, key):
            raise ConfigError(flag, f"--set {key} gives it too: give one")
        added.append(override(key, value))
    return list(sets) + added


def _unwritable(value: Any) -> Any:
    """The part of a value YAML cannot write: a list's or mapping's first such element (r155: a list of a complex
    was called "a list"), else the value itself."""
    parts = list(value.values()) if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else []
    for part in parts:
        try:
            dump_yaml(part.item() if isinstance(part, np.generic) else part, flow=True)
        except yaml.YAMLError:
            return _unwritable(part)
    return value


def override(key: str, value: Any) -> str:
    """The --set text that apply_overrides reads back as exactly `value` (a Python value, not YAML text):
    None, True, 1e-05 and the string 'null' each survive, which f"{key}={value}" does not."""
    if isinstance(value, np.generic):  # a number taken from a numpy array or pandas table
        value = value.item()
    try:
        text = dump_yaml(value, flow=True)
    except yaml.YAMLError:
        raise ConfigError(key, f"a {type(_unwritable(value)).__name__} is not a setting value (numbers, strings, "
                               f"booleans, None, lists and mappings of them are)") from None
    return f"{key}=" + text.removesuffix("\n...\n").strip()  # a scalar's document-end marker


def usage_context_defaults(hw: Hardware, usage_context: str, release: str = "0.33.0") -> tuple[int, int]:
    """vLLM's get_batch_defaults: (max_num_batched_tokens, max_num_seqs) by device memory (the >= 160 GiB tier is
    0.33's; 0.19 treats those GPUs as it treats an H100)."""
    if hw.memory_gib >= 160 and release != "0.19.0":
        return 16384, 1024
    if hw.memory_gib >= 70 and "A100" not in hw.name:
        return (8192 if usage_context == "openai_server" else 16384), 1024
    return (2048 if usage_context == "openai_server" else 8192), 256


QUANTIZED_FORMATS = {"fp8": "fp8", "modelopt_fp4": "nvfp4", "awq": "w4a16", "awq_marlin": "w4a16", "gptq": "w4a16",
                     "gptq_marlin": "w4a16"}
QUANTIZED_CHECKPOINTS = ("fp8", "nvfp4", "w4a16", "mxfp4")  # a model dtype a checkpoint is quantized to
KV_CACHE_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


# the --quantization values vLLM takes beside a checkpoint quantized by each method, where its overrides (AutoAWQ,
# AutoGPTQ, 0.19's AWQ/GPTQ Marlin) claim the line or the method is the same (ModelConfig._verify_quantization);
# a ModelOpt checkpoint's override claims any value. auto_* are 0.33's names.
CHECKPOINT_TAKES = {"awq": ("awq", "awq_marlin", "marlin", "auto_awq"),
                    "gptq": ("gptq", "gptq_marlin", "marlin", "auto_gptq")}


def checkpoint_quantization(arch: ModelArchitecture) -> str | None:
    """The format a checkpoint is quantized to (its experts' where only they are), None for a 16-bit one."""
    return arch.expert_dtype or (arch.dtype if arch.dtype in QUANTIZED_CHECKPOINTS else None)


def checkpoint_takes(arch: ModelArchitecture, quantization: str, release: str = "0.33.0") -> bool:
    """Whether vLLM starts a quantized checkpoint with this --quantization (its own method, however named); a
    checkpoint of no known method (a built-in) takes the values of its own format."""
    method = arch.quant_method
    if method == "modelopt":
        return True
    if method is None:
        return QUANTIZED_FORMATS.get(quantization, quantization) == checkpoint_quantization(arch)
    return quantization in CHECKPOINT_TAKES.get(method, (method,)) and not (
        release == "0.19.0" and quantization.startswith("auto_"))


def with_formats(arch: ModelArchitecture, quantization: str | None, kv_cache_dtype: str = "auto",
                 release: str = "0.33.0") -> ModelArchitecture:
    """The architecture as vLLM's --quantization and --kv-cache-dtype store it: weights' format, KV bytes."""
    own = checkpoint_quantization(arch)
    if quantization and own and not checkpoint_takes(arch, quantization, release):
        # vLLM: the checkpoint's quantization method and --quantization must agree (its own format is no change)
        raise ConfigError("engine.quantization", f"{arch.name}'s checkpoint is already quantized "
                                                 f"({arch.quant_method or own}"
                                                 f"{' experts' if arch.expert_dtype else ''}): vLLM refuses "
                                                 f"{quantization}; leave engine.quantization unset")
    if quantization and not own:
        arch = arch.model_copy(update={"dtype": QUANTIZED_FORMATS[quantization],
                                       "kv_cache_dtype": arch.kv_cache_dtype or arch.activation_dtype})
    if kv_cache_dtype == "fp8_e5m2" and arch.dtype in ("fp8", "nvfp4") and not arch.is_mla:  # (latent attention:
        # no MLA backend takes e5m2 at all, said by check_attention_backend)
        # Fp8Config's and ModelOpt's KV cache methods give the attention layers e4m3 scales (r174: ran)
        how = quantization or arch.quant_method or arch.dtype
        raise ConfigError("engine.kv_cache_dtype", f"fp8_e5m2 beside {arch.dtype} weights"
                                                   f"{f' ({how})' if how != arch.dtype else ''}: vLLM's "
                                                   f"attention layers refuse it (fp8_e5m2 kv-cache is not supported "
                                                   f"with fp8 checkpoints); give fp8 or fp8_e4m3")
    if kv_cache_dtype != "auto":
        arch = arch.model_copy(update={"kv_cache_dtype": KV_CACHE_DTYPES[kv_cache_dtype]})
    return arch


MARLIN_CAPABILITY = 7.5  # vLLM's Marlin kernels (weight-only FP8 and NVFP4) run from this CUDA capability on


UNRELIABLE_MAPE = 0.25  # a profile whose own held-out error passes this is said to be unreliable at each run


def unreliable_fit(profile) -> str | None:
    """A profile whose fit missed its own held-out points by more than UNRELIABLE_MAPE on average: the number is in
    the file (and calibrate import prints it), but a run gave no sign of it."""
    mape = (profile.held_out_error or {}).get("mape")
    if isinstance(mape, (int, float)) and mape > UNRELIABLE_MAPE:
        return (f"servesim: warning: profile {profile.name}'s held-out error is {mape:.0%} (MAPE over the measurements "
                f"it was not fitted on): its step times are unreliable")
    return None


def marlin_off_cuda(quantization: str | None, hw: Hardware) -> str | None:
    """A Marlin method named for a GPU that is not CUDA's, said (r174: ran on Intel's B60); None where fine."""
    if quantization and "marlin" in quantization and hw.platform != "cuda":
        return (f"{quantization}: Marlin's kernels are CUDA's, and the {hw.name} is not a CUDA GPU (vLLM: not "
                f"supported on {hw.platform})")
    return None


def check_formats(arch: ModelArchitecture, hw: Hardware, quantization: str | None,
                  field: str = "engine.quantization") -> str | None:
    """W8A8 runs on fp8 tensor cores and NVFP4 on Blackwell's fp4 ones. Without them vLLM serves both weight-only
    through its Marlin kernels (fp8.py, modelopt.py: capability 7.5 on), 16-bit math on the stored weights: said,
    and timed so (Hardware.peak_flops falls back to bf16). A GPU that is not CUDA has no Marlin: refused."""
    if off := marlin_off_cuda(quantization, hw):
        raise ConfigError(field, f"{off}; give {quantization.split('_')[0]}")
    cc = hw.compute_capability  # vLLM's own floors (r180: a Volta ran bf16, fp8 and Marlin)
    if cc is not None and cc < 8.0 and arch.dtype == "bf16":  # (a quantized model's activations: its own floor)
        raise ConfigError("model.dtype", f"bf16 on compute capability {cc!r}: vLLM needs 8.0 for bfloat16 and does "
                                         f"not start (as it says, give float16: model.dtype fp16)")
    if cc is not None and cc < 8.0 and arch.expert_dtype == "mxfp4":  # Mxfp4Config.get_min_capability: 80
        raise ConfigError("model", f"{arch.name}'s MXFP4 experts on compute capability {cc!r}: vLLM's MXFP4 needs "
                                   f"8.0 and does not start")
    gptq = quantization == "gptq" or quantization is None and arch.quant_method == "gptq"
    if cc is not None and arch.dtype in ("fp8", "nvfp4", "w4a16") and cc < (6.0 if gptq else MARLIN_CAPABILITY):
        raise ConfigError(field if quantization else "model",
                          f"{quantization or arch.quant_method or arch.dtype} on compute capability {cc!r}: below the "
                          f"method's minimum ({6.0 if gptq else MARLIN_CAPABILITY}), vLLM does not start")
    need = {"fp8": ("fp8_tflops", "fp8 tensor cores (Hopper, Ada, Blackwell)"),
            "nvfp4": ("fp4_tflops", "fp4 tensor cores (Blackwell)")}.get(arch.dtype)
    if not need or hw.has_tensor_cores_for(arch.dtype):  # quantized so, or a checkpoint of that format (the model's)
        return None
    what = quantization or f"{arch.name} ({arch.dtype} weights)"
    if hw.compute_capability is not None and hw.compute_capability >= MARLIN_CAPABILITY:
        return (f"servesim: note: a {hw.name} has no {need[1].split(' (')[0]}: vLLM serves {what} weight-only with "
                f"its Marlin kernel, {arch.dtype} weights in memory and 16-bit math, as simulated")
    hint = f"set hardware.{need[0]} if yours does" if field.startswith("engine.") else \
        "give a --gpu that has them"  # capacity's flags have no datasheet field
    raise ConfigError(field if quantization else "model",
                      f"{what} runs on {need[1]} or, weight-only, on CUDA GPUs of capability {MARLIN_CAPABILITY}+ "
                      f"(vLLM's Marlin kernels); a {hw.name} has neither ({hint})")


def _fits_error(arch: ModelArchitecture, hw: Hardware, tp: int, utilization: float, ep: int | None = None,
                redundant: int = 0, reserve_at=lambda t, ep: 0, gpu: str | None = None) -> ConfigError | None:
    """The weights alone must fit each GPU of the TP group; say what would make them fit: the TP whose share of
    the weights leaves room for vLLM's start-up profile too (reserve_at(tp, ep): its bytes per GPU there), or a
    quantization (alone, or with such a TP) where no TP size does."""
    usable = hw.memory_bytes * utilization
    per_gpu = arch.weight_bytes_per_gpu(tp, ep, redundant)
    if per_gpu < usable:
        return None
    room = min(usable, hw.memory_bytes - CUDA_CONTEXT_BYTES)  # advice that holds at a share vLLM starts with
    dp = ep // tp if ep else None  # a larger TP keeps the DP degree: EP over t x dp GPUs
    heads = arch.num_attention_heads  # only a size its heads split over (r154: 16 suggested for 40 heads)
    sizes = sorted({2, 4, 8, 16, 32, 64} | {t for t in range(2, 65) if heads % t == 0})

    def tp_holding(a: ModelArchitecture, smallest: int) -> int | None:
        return next((t for t in sizes if t >= smallest and _splits(a, t, dp and t * dp, redundant) and
                     a.weight_bytes_per_gpu(t, dp and t * dp, redundant) + reserve_at(t, dp and t * dp) < room),
                    None)

    need = tp_holding(arch, tp + 1)
    # a MoE model may keep its TP and spread whole experts over (more) DP ranks instead (r165: only a TP size was
    # offered, one the kernel tables then had no all-reduce for; r166: and with expert parallelism on, and ranks
    # its experts divide over only)
    ranks = None if not arch.is_moe else next((d for d in range((dp or 1) + 1, 65)
                                               if _splits(arch, tp, tp * d, redundant)
                                               and arch.weight_bytes_per_gpu(tp, tp * d, redundant)
                                               + reserve_at(tp, tp * d) < room), None)
    spread = f" or {'' if ep else 'enable_expert_parallel with '}data_parallel_size={ranks}" if ranks else ""
    what = (f"{arch.name} ({arch.dtype}) needs {arch.weight_bytes / GIB:.1f} GiB of weights, {per_gpu / GIB:.1f} GiB "
            f"per GPU at tensor_parallel_size={tp}, more than the {usable / GIB:.1f} GiB usable on a {gpu or hw.name} "
            f"(gpu_memory_utilization={utilization})")
    # what vLLM can start at all: a share up to the memory free after the CUDA context, which must hold the start-up
    # profile too (r169: 1 GiB was told to raise it to 0.599, which held no weights; r170: 0.982 of a 24 GiB GPU,
    # the most it starts with, held 21.9 GiB of weights but not their 1.4 GiB profile beside them)
    share = (per_gpu + reserve_at(tp, ep)) / max(hw.memory_bytes, 1)  # (a memory of 1e-121 GiB is 0 bytes)
    if per_gpu < hw.memory_bytes * 0.95 and share * hw.memory_bytes < hw.memory_bytes - CUDA_CONTEXT_BYTES:
        return ConfigError("engine.gpu_memory_utilization", what + f"; raise gpu_memory_utilization above "
                                                                   f"{math.ceil(share * 1000) / 1000:g} (the weights "
                                                                   f"and vLLM's start-up profile; its KV pool must "
                                                                   f"also hold a request of max_model_len)" +
                           (f" or set tensor_parallel_size={need}" if need else "") + spread)
    if need or spread:
        return ConfigError("engine.tensor_parallel_size", what + f"; tensor_parallel_size={need}{spread} holds the "
                                                                 f"weights and vLLM's start-up profile (its KV pool "
                                                                 f"must also hold a request of max_model_len)")
    return ConfigError("engine.tensor_parallel_size", what + "; " + _quantization_holding(arch, hw, tp, tp_holding))


def _quantization_holding(arch: ModelArchitecture, hw: Hardware, tp: int, tp_holding) -> str:
    """Where no TP size holds the weights: the quantization that does, at this TP or a larger one, said only where
    it exists on this GPU (r169: "quantize it" was offered where no format fits)."""
    for quantization in ("fp8", "awq") if checkpoint_quantization(arch) is None else ():
        smaller = with_formats(arch, quantization)
        try:
            check_formats(smaller, hw, quantization)
        except ConfigError:
            continue
        if (t := tp_holding(smaller, tp)) is not None:
            return f"engine.quantization={quantization}" + ("" if t == tp else f" with tensor_parallel_size={t}") + \
                " holds the weights (a checkpoint quantized so)"
    return f"no TP size{'' if checkpoint_quantization(arch) else ' or quantization'} holds them and vLLM's start-up " \
           f"profile on a GPU of {hw.memory_bytes / GIB:.4g} GiB: a GPU with more memory"


def check_experts_divide(arch: ModelArchitecture, ep: int, redundant: int = 0) -> None:
    """Expert parallelism over ep GPUs: the experts, and with EPLB's redundant copies, divide over them."""
    if (arch.num_experts + redundant) % ep:  # vLLM's EPLB spreads them evenly, or does not start
        if redundant:
            raise ConfigError("engine.num_redundant_experts", f"{arch.num_experts} experts + {redundant} redundant "
                                                              f"do not divide over the {ep} expert-parallel GPUs: vLLM "
                                                              f"does not start")
    if arch.num_experts % ep:  # vLLM's determine_expert_map gives the first E % ep ranks one more
        raise ConfigError("engine.enable_expert_parallel", f"{arch.num_experts} experts do not divide over "
                                                           f"tensor_parallel_size x data_parallel_size = {ep} GPUs: "
                                                           f"vLLM splits them unevenly ({-(-arch.num_experts // ep)} "
                                                           f"on the busiest), which servesim does not model")


def _splits(arch: ModelArchitecture, tp: int, ep: int | None, redundant: int = 0) -> bool:
    """Whether vLLM starts the model at this TP size (its heads and MLP widths split over it) and, with expert
    parallelism over ep GPUs, whether its experts divide over them (as _parallelism requires)."""
    try:
        if ep:
            check_experts_divide(arch, ep, redundant)
        check_tensor_parallel(arch, tp, "engine.tensor_parallel_size")
        check_mlp_split(arch, tp, ep, "engine.tensor_parallel_size")
    except ConfigError:
        return False
    return True


def check_tensor_parallel(arch: ModelArchitecture, tp: int, field: str) -> None:
    """vLLM's QKVParallelLinear: the query heads split over the TP group, the KV heads split over it too or, on a
    group larger than they are, each replicated over an equal share of it."""
    if arch.num_attention_heads % tp:
        raise ConfigError(field, f"{arch.num_attention_heads} attention heads do not split over {tp} GPUs")
    kv = arch.num_key_value_heads
    if not arch.is_mla and (kv % tp if tp < kv else tp % kv):
        raise ConfigError(field, f"{kv} KV heads neither split over {tp} GPUs nor replicate evenly across them "
                                 f"(vLLM does not start)")


def check_mlp_split(arch: ModelArchitecture, tp: int, ep: int | None, field: str) -> None:
    """vLLM's column- and row-parallel MLP layers divide their width over the TP group (distributed.utils.divide,
    an assertion), as FusedMoE divides each expert's where experts split by TP (ep None); shared experts are a
    TP-split MLP either way (r154: an intermediate_size of 14,340 at TP 8 ran)."""
    expert = arch.moe_intermediate_size or arch.intermediate_size
    shared = arch.shared_expert_intermediate_size or arch.num_shared_experts * expert
    widths = [("intermediate_size", arch.intermediate_size, not arch.is_moe or arch.num_dense_layers > 0),
              ("the experts' intermediate size", expert, arch.is_moe and ep is None),
              ("the shared experts' intermediate size", shared, shared > 0)]
    for what, width, split in widths:
        if split and width % tp:
            raise ConfigError(field, f"{tp}: {arch.name}'s {what} ({width:,}) does not split over {tp} GPUs (vLLM "
                                     f"does not start)")
    # the attention's output projection is row-parallel too: its input, the heads' values, split whole by heads
    # (r162: checked for the MLP only, a 24 x 64 o_proj at TP 8 ran quantized)
    widths.append(("attention output width (heads x head_dim)",
                   arch.num_attention_heads * (arch.v_head_dim if arch.is_mla else arch.head_dim), True))
    for what, width, split in widths:
        # a 4-bit AWQ/GPTQ layer's input split over TP holds whole groups (AWQLinearMethod.create_weights: "The input
        # size is not aligned with the quantized weight shape"; r161: Qwen2.5-72B's 29,568 at TP 2 was taken)
        if split and arch.dtype == "w4a16" and (width // tp) % W4A16_GROUP:
            raise ConfigError(field, f"{tp}: {arch.name}'s {what} ({width:,}) splits into {width // tp:,} per GPU, "
                                     f"not whole {W4A16_GROUP}-weight quantization groups (vLLM's AWQ/GPTQ layers "
                                     f"refuse it: too large a tensor parallel size)")


def check_max_model_len(arch: ModelArchitecture, value: int | None, field: str, release: str = "0.33.0") -> int:
    """vLLM's rule: no longer than the model's length as the release derives it (None: its default, that length
    but for a LongRoPE model's original one)."""
    longest = model_length(arch, release)
    if value is not None and value > longest:
        raise ConfigError(field, f"{value} exceeds the model's max_position_embeddings ({longest}"
                                 + (f", as vLLM {release} derives it" if longest != arch.max_position_embeddings else "")
                                 + ")")
    return value or default_model_length(arch, release)


def check_expert_blocks(arch: ModelArchitecture, tp: int, field: str = "engine.tensor_parallel_size") -> None:
    """vLLM 0.19's Fp8MoEMethod: each GPU's slice of an expert (moe_intermediate_size / TP) holds whole scale
    blocks of a block-scaled fp8 checkpoint, N for gate/up and, split, K for down (0.33 shrinks the block to fit)."""
    n, k = arch.weight_block_size
    part = (arch.moe_intermediate_size or arch.intermediate_size) // tp
    if part % n or (tp > 1 and part % k):
        block = n if part % n else k
        raise ConfigError(field, f"{tp}: each GPU's {part}-wide slice of {arch.name}'s "
                                                         f"experts is no multiple of its fp8 weight block ({block}): "
                                                         f"vLLM 0.19 does not start (0.33 shrinks the block; "
                                                         f"expert parallelism keeps experts whole)")


def _parallelism(scenario: Scenario, arch: ModelArchitecture) -> tuple[int, int, int | None]:
    """Tensor, data and expert parallel sizes (ep None: experts split by TP only), and what is not modelled."""
    e = scenario.engine
    tp = e.tensor_parallel_size
    check_tensor_parallel(arch, tp, "engine.tensor_parallel_size")
    if e.pipeline_parallel_size > 1:
        raise ConfigError("engine.pipeline_parallel_size", f"{e.pipeline_parallel_size}: pipeline parallelism (stages "
                                                           f"with batches in flight) is not modelled; use "
                                                           f"tensor_parallel_size x data_parallel_size")
    dp, ep = e.data_parallel_size, None
    if e.enable_expert_parallel and arch.is_moe:  # a dense model's: no effect, said (inert_settings)
        ep = tp * dp
        check_experts_divide(arch, ep, e.num_redundant_experts)
    if e.num_redundant_experts and not arch.is_moe:  # (r182: said to need the flag it was given)
        raise ConfigError("engine.num_redundant_experts", f"{arch.name} is a dense model: it has no experts to copy")
    if e.num_redundant_experts and ep is None:
        raise ConfigError("engine.num_redundant_experts", "needs enable_expert_parallel (vLLM's EPLB spreads experts "
                                                          "over the expert-parallel GPUs)")
    if e.num_redundant_experts and ep == 1:  # vLLM's ParallelConfig: "EPLB requires tensor_parallel_size or
        # data_parallel_size to be greater than 1" (r163: one GPU ran, its pool 26% smaller for the copies)
        raise ConfigError("engine.num_redundant_experts", "needs more than one expert-parallel GPU "
                                                          "(tensor_parallel_size x data_parallel_size > 1): vLLM's "
                                                          "EPLB refuses one")
    check_mlp_split(arch, tp, ep, "engine.tensor_parallel_size")
    if e.is_0_19 and arch.weight_block_size and arch.is_moe and ep is None:
        check_expert_blocks(arch, tp)
    if arch.is_moe and dp > 1 and not e.enable_expert_parallel:
        raise ConfigError("engine.data_parallel_size", f"{dp} ranks of a MoE model without expert parallelism: vLLM "
                                                       f"then splits every expert over tensor_parallel_size x "
                                                       f"data_parallel_size GPUs, which is not modelled; set "
                                                       f"engine.enable_expert_parallel (vllm serve --enable-expert-parallel), or "
                                                       f"data_parallel_size 1")
    if dp > 1 and scenario.cluster.prefill_replicas:
        raise ConfigError("engine.data_parallel_size", "data parallel ranks with prefill/decode disaggregation "
                                                       "(cluster.prefill_replicas) are not modelled")
    return tp, dp, ep


def default_graph_tokens(hw: Hardware, e: EngineSettings) -> int:
    """vLLM's ceiling on the CUDA-graph capture size left unset: 0.33 captures up to 1024 tokens on compute
    capability 10.x (B200, B300; is_device_capability_family(100)), 512 elsewhere and in 0.19."""
    blackwell = hw.compute_capability is not None and int(hw.compute_capability) == 10
    return 1024 if blackwell and not e.is_0_19 else 512


class AttentionBackend(NamedTuple):
    """What one of vLLM's CUDA attention backends takes (v1/attention/backends: supports_compute_capability,
    get_supported_kernel_block_sizes, supported_kv_cache_dtypes; 0.33's Triton kernels' SM89 floor for fp8)."""
    mla: bool  # latent attention's backends take only MLA models, the others none
    runs: Callable[[float], bool]  # on this compute capability
    blocks: int | tuple[int, ...]  # its kernels' block sizes (an int: multiples of it); the engine's is a multiple
    fp8: Callable[[float, bool], bool]  # an fp8 KV cache on (capability, vLLM 0.19)
    sinks: Callable[[float], bool] = lambda cc: False  # attention sinks (gpt-oss's) on this capability
    heads: Callable[[int], bool] = lambda size: True  # its supports_head_size (latent attention's: not checked)
    fp32: bool = True  # float32 among its supported_dtypes (FlashAttention's and FlashInfer's: 16-bit only)


def _any(*_) -> bool:
    return True


ATTENTION_BACKENDS = {
    "FLASH_ATTN": AttentionBackend(False, lambda cc: cc >= 8.0, 16, lambda cc, old: cc >= 9.0,  # FA2: no fp8, no
                                   lambda cc: cc >= 9.0,  # sinks (FlashAttention 3 and 4 have them)
                                   lambda size: size % 8 == 0 and size <= 256, False),
    "FLASHINFER": AttentionBackend(False, lambda cc: 8.0 <= cc <= 12.1, (16, 32, 64, 128, 256, 512, 1024), _any,
                                   lambda cc: cc == 9.0 or int(cc) in (10, 12),  # sinks through TRT-LLM's kernels
                                   lambda size: size in (64, 128, 256), False),
    "TRITON_ATTN": AttentionBackend(False, _any, 16, lambda cc, old: old or cc >= 8.9, _any, lambda size: size >= 32),
    "FLEX_ATTENTION": AttentionBackend(False, _any, 16, lambda cc, old: False),
    "FLASHMLA": AttentionBackend(True, lambda cc: int(cc) in (9, 10), (64,), _any),
    "FLASH_ATTN_MLA": AttentionBackend(True, lambda cc: int(cc) == 9, 16, lambda cc, old: False),
    "FLASHINFER_MLA": AttentionBackend(True, lambda cc: int(cc) == 10, (32, 64), _any),
    "CUTLASS_MLA": AttentionBackend(True, lambda cc: int(cc) == 10, (128,), _any),
    "TRITON_MLA": AttentionBackend(True, _any, 16, lambda cc, old: old or cc >= 8.9),
}
assert tuple(ATTENTION_BACKENDS) == ATTENTION_BACKEND_NAMES
XPU_BACKENDS = ("FLASH_ATTN", "TRITON_ATTN")  # what vLLM's XPU platform runs when a line names a backend


def check_attention_backend(arch: ModelArchitecture, hw: Hardware, kv_cache_dtype: str, backend: str | None = None,
                            is_0_19: bool = False, field: str = "engine.attention_backend") -> None:
    """An attention backend vLLM would not start with: one the line names that does not take the model (latent
    attention or not), the GPU or the KV dtype ("Selected backend ... is not valid"); and, chosen by vLLM, a KV dtype
    no backend takes: fp8_e5m2 with latent attention (every CUDA MLA backend stops at fp8_e4m3), and in 0.33 an fp8
    KV cache below SM89 where only a Triton backend is left (latent attention, or gpt-oss's attention sinks, which
    FlashAttention 2 and FlashInfer on Ampere do not run)."""
    fp8 = kv_cache_dtype in ("fp8", "fp8_e4m3", "fp8_e5m2")
    cc = hw.compute_capability
    # (r148) FlashAttention takes no fp8_e5m2 KV cache: 0.33 says so (not a valid backend), 0.19 takes it, and on
    # Hopper picks it, then fails its first step (its fp8 path reads e4m3 only: get_fp8_dtype_for_flashattn)
    picks_fa = backend == "FLASH_ATTN" or is_0_19 and backend is None and not arch.is_mla and cc is not None and \
        int(cc) == 9
    if kv_cache_dtype == "fp8_e5m2" and picks_fa and hw.platform != "xpu":
        raise ConfigError(field if backend else "engine.kv_cache_dtype",
                          f"fp8_e5m2 under vLLM {'0.19' if is_0_19 else '0.33'}'s FlashAttention"
                          f"{'' if backend else ', which it picks on Hopper'}: it reads an fp8 KV cache as e4m3 only, "
                          f"so vLLM {'fails its first step' if is_0_19 else 'does not start'}; give fp8_e4m3, or "
                          f"engine.attention_backend FLASHINFER or TRITON_ATTN")
    if backend is not None:
        b = ATTENTION_BACKENDS[backend]
        why = ("Intel's XPU runs FLASH_ATTN or TRITON_ATTN" if hw.platform == "xpu" and backend not in XPU_BACKENDS
               else f"{arch.name} {'has' if arch.is_mla else 'has no'} latent attention" if b.mla != arch.is_mla
               else f"it takes no head size {arch.head_dim} ({arch.name}'s)" if not arch.is_mla and not
               b.heads(arch.head_dim)  # (r180: a head size of 512 ran on FlashAttention)
               else "it takes no float32 model (16-bit only)" if arch.dtype == "fp32" and not b.fp32
               else f"it does not run on compute capability {cc:.1f}" if cc is not None and not b.runs(cc)
               else f"it takes no attention sinks ({arch.name}'s)" + (f" on compute capability {cc:.1f}" if cc else "")
               if arch.hf_model_type == "gpt_oss" and not b.mla and cc is not None and not b.sinks(cc)
               else f"it takes no {kv_cache_dtype} KV cache" + (f" on compute capability {cc:.1f}" if cc else "")
               if fp8 and (kv_cache_dtype == "fp8_e5m2" and b.mla or not b.fp8(cc or 0.0, is_0_19)) else None)
        if why:
            raise ConfigError(field, f"{backend}: {why}, so vLLM does not start with it (Selected backend is not "
                                     f"valid)")
        return
    if arch.is_mla and kv_cache_dtype == "fp8_e5m2" and cc is not None:
        raise ConfigError("engine.kv_cache_dtype", f"fp8_e5m2 with {arch.name}'s latent attention: no MLA attention "
                                                   f"backend on an NVIDIA GPU takes it, so vLLM does not start (fp8 "
                                                   f"or fp8_e4m3 does)")
    triton_only = arch.is_mla or arch.hf_model_type == "gpt_oss" or arch.dtype == "fp32"  # (r182: float32 too)
    if fp8 and triton_only and cc is not None and cc < 8.9 and not is_0_19:
        what = "latent attention" if arch.is_mla else "attention sinks" if arch.hf_model_type == "gpt_oss" else \
            "float32 attention (FlexAttention's takes no fp8 KV cache)"
        raise ConfigError("engine.kv_cache_dtype", f"{kv_cache_dtype} on compute capability {cc:.1f}: of vLLM 0.33's "
                                                   f"backends only Triton's take {arch.name}'s {what} "
                                                   f"there, and it needs SM89 for an fp8 KV cache, so vLLM does not "
                                                   f"start")
    if fp8 and cc is not None and cc < 8.0 and not is_0_19 and hw.platform != "xpu":  # (r181: ran, unsaid)
        raise ConfigError("engine.kv_cache_dtype", f"{kv_cache_dtype} on compute capability {cc:.1f}: of vLLM 0.33's "
                                                   f"backends only Triton's and FlexAttention's run there, and neither "
                                                   f"takes an fp8 KV cache below SM89, so vLLM does not start")


def _kernel_blocks(backend: str, hw: Hardware) -> tuple[int, ...]:
    """The backend's kernel block sizes, first its preferred (FlashAttention on Intel's XPU: multiples of 64)."""
    blocks = 64 if backend == "FLASH_ATTN" and hw.platform == "xpu" else ATTENTION_BACKENDS[backend].blocks
    return (blocks,) if isinstance(blocks, int) else blocks


def backend_takes_block(backend: str, hw: Hardware, size: int) -> bool:
    """AttentionBackend.supports_block_size: a multiple of one of its kernels' sizes (the engine's block then holds
    several kernel blocks)."""
    return any(size % k == 0 for k in _kernel_blocks(backend, hw))


def resolved_kv_cache_dtype(arch: ModelArchitecture, kv_cache_dtype: str) -> str:
    """--kv-cache-dtype auto as vLLM resolves it: a checkpoint's own fp8 KV cache (ModelOpt's kv_cache_quant_algo)."""
    return "fp8_e4m3" if kv_cache_dtype == "auto" and arch.kv_cache_dtype == "fp8" else kv_cache_dtype


def check_given_block_size(hw: Hardware, block_size: int, is_0_19: bool, backend: str | None = None,
                         field: str = "engine.block_size") -> str | None:
    """A block size given: on Intel's XPU 0.33's FlashAttention takes multiples of 64 only (a run and
    capacity refuse it alike, round 127). On CUDA any size simulates, but one no vLLM backend takes is said
    (r152: a run and capacity took 17 unsaid, where `servesim vllm` refuses it): returned, for the caller to say."""
    if hw.platform == "xpu" and not is_0_19 and block_size % 64 and backend in (None, "FLASH_ATTN"):
        raise ConfigError(field, f"{block_size}: vLLM 0.33's FlashAttention on Intel's XPU takes multiples of 64 "
                                 f"only (no common block size: it does not start)")
    if hw.platform == "cuda" and block_size % 16 and backend is None:
        return (f"{field} {block_size}: vLLM's CUDA attention backends take multiples of 16, so vLLM would not "
                f"start with it; simulated as given (a what-if)")
    return None


def attention_block_size(arch: ModelArchitecture, hw: Hardware, kv_cache_dtype: str, backend: str | None = None,
                         is_0_19: bool = False) -> int:
    """The KV block size vLLM settles on when --block-size is not given (Platform.update_block_size_for_backend):
    its default 16 unless the first attention backend valid for the model, GPU and KV dtype cannot take it. Of
    servesim's models only latent attention's backends differ: FlashInfer MLA (32 or 64) leads on compute
    capability 10.x; on Hopper FlashAttention MLA (16-bit KV only) leads, then FlashMLA (64) for an fp8 KV cache.
    On Intel's XPU 64: 0.19's platform sets it (xpu.py check_and_update_config), 0.33's FlashAttention there
    takes multiples of 64 only."""
    if hw.platform == "xpu" and is_0_19:  # 0.19's platform sets 64 whatever the backend
        return 64
    if backend is not None:  # the line's: vLLM's 16 where it takes it, else its first size (its preferred one)
        blocks = _kernel_blocks(backend, hw)
        return 16 if 16 in blocks else blocks[0]
    if hw.platform == "xpu":
        return 64
    major = int(hw.compute_capability) if hw.compute_capability is not None else 0
    if not arch.is_mla or kv_cache_dtype == "fp8_e5m2":  # e5m2 (with MLA only off NVIDIA GPUs): 16
        return 16
    if major == 10:
        return 32
    return 64 if major == 9 and kv_cache_dtype in ("fp8", "fp8_e4m3") else 16


def _capture_grid(ceiling: int) -> list[int]:
    """vLLM's default CUDA-graph capture sizes up to a ceiling: 1, 2, 4, then steps of 8 below 256, of 16 above."""
    return [n for n in (1, 2, 4) if n <= ceiling] + list(range(8, min(ceiling + 1, 256), 8)) + \
        list(range(256, ceiling + 1, 16))


def largest_cuda_graph(e: EngineSettings, hw: Hardware, seqs: int, tokens: int, decode_query_len: int,
                       arch: ModelArchitecture | None = None) -> int:
    """The largest step vLLM captures in a CUDA graph (VllmConfig._set_cudagraph_sizes): given sizes, those within
    the budget; else the grid up to the ceiling (the setting; gpt-oss's 1024, which its model config sets when
    neither is given; else vLLM's default; at most the budget), to which 0.33 adds the budget when the ceiling
    reaches it (its decode batches, added too, lie under the grid's largest). 0: none (eager). Given sizes and a
    largest size that disagree are refused, as vLLM refuses them. 0.19 on Intel's XPU captures none unless
    VLLM_XPU_ENABLE_XPU_GRAPH=1 is set (off by default; servesim models the default)."""
    if e.enforce_eager or (hw.platform == "xpu" and e.is_0_19):
        return 0
    # 0.19's full decode graphs (and 0.33's on its V1 model runner) round each size up to a multiple of 1 + k
    rounds = e.is_0_19 if e.graph_sizes_round_to_drafts is None else e.graph_sizes_round_to_drafts
    q = decode_query_len if decode_query_len > 1 and rounds else 1
    if e.cudagraph_capture_sizes is not None:
        sizes = [n for n in e.cudagraph_capture_sizes if n <= tokens]
        largest = max(sizes, default=0)
        if e.max_cudagraph_capture_size is not None and e.max_cudagraph_capture_size != largest:
            raise ConfigError("engine.max_cudagraph_capture_size", f"{e.max_cudagraph_capture_size} is not the "
                                                                   f"largest of cudagraph_capture_sizes within "
                                                                   f"max_num_batched_tokens ({tokens}): {largest}; "
                                                                   f"vLLM refuses them given unlike")
        return _rounded_to_drafts(sizes, largest, q, "engine.cudagraph_capture_sizes") if largest else 0
    given = e.max_cudagraph_capture_size or (1024 if arch is not None and arch.hf_model_type == "gpt_oss" else None)
    ceiling = min(given or min(2 * seqs * decode_query_len, default_graph_tokens(hw, e)), tokens)
    sizes = _capture_grid(ceiling) + ([tokens] if ceiling == tokens and not e.is_0_19 else [])
    return _rounded_to_drafts(sizes, max(sizes), q, "engine.max_cudagraph_capture_size")  # past the list's top
    # (vLLM's final largest size, not the ceiling: r135, 290 where vLLM keeps 275)


def _rounded_to_drafts(sizes: list[int], largest: int, q: int, field: str) -> int:
    """The largest capture size once each is rounded up to a multiple of q (1 + k), those past the largest dropped
    (vLLM's adjust_cudagraph_sizes_for_spec_decode: r134, given sizes 1..30 at k = 3 kept 30, vLLM 16); none
    left: q itself where it fits, else vLLM does not start."""
    if q == 1:
        return max(sizes)
    rounded = [-(-n // q) * q for n in sizes if -(-n // q) * q <= largest]
    if not rounded and q > largest:
        raise ConfigError(field, f"no CUDA-graph capture size is left once rounded up to a multiple of {q} "
                                 f"(num_speculative_tokens + 1) within the largest, {largest}: vLLM does not start")
    return max(rounded) if rounded else q


def sliding_window_group(arch: ModelArchitecture, layout: KVLayout) -> bool:
    """Whether vLLM gives the model a sliding-window KV cache group, the one prefix_cache_retention_interval acts on."""
    local = local_attention(arch)
    return local is not None and not local.chunked and \
        bool(layout.local_groups or local.local_layers == arch.num_hidden_layers)


ONLY_0_33 = ("max_num_queued_reqs", "max_num_queued_tokens", "max_num_active_seqs", "watermark")  # 0.19 lacks them


def _check_release_settings(e: EngineSettings) -> None:
    """Settings vLLM 0.19 does not have (its scheduler and API server lack them): refused under its defaults, as
    its command line refuses their flags, rather than simulated as if 0.19 ran them."""
    if e.is_0_19:
        for name in ONLY_0_33:
            if changed(e, name):
                raise ConfigError(f"engine.{name}", f"{getattr(e, name)}: vLLM 0.19 has no such setting (0.33's); "
                                                    f"leave it out under engine.vllm_defaults 0.19.0")


def _check_retention(e: EngineSettings, arch: ModelArchitecture, layout: KVLayout) -> None:
    """prefix_cache_retention_interval as vLLM 0.33 takes it (_validate_prefix_cache_retention_interval)."""
    interval, field = e.prefix_cache_retention_interval, "engine.prefix_cache_retention_interval"
    if interval == 0:
        return
    if e.is_0_19:
        raise ConfigError(field, f"{interval}: vLLM 0.19 has no such setting (it keeps every sliding-window block "
                                 f"cached); leave it at 0")
    if interval is not None and not sliding_window_group(arch, layout):
        raise ConfigError(field, f"{interval}: {arch.name} has no sliding-window KV cache group here, so vLLM "
                                 f"refuses a retention interval (set it to 0)")
    if interval is not None and interval % e.block_size:
        raise ConfigError(field, f"{interval} is not a multiple of block_size ({e.block_size}): vLLM refuses it")


def _hybrid_off(scenario: Scenario, arch: ModelArchitecture) -> bool | None:
    """engine.disable_hybrid_kv_cache_manager where the scenario leaves it unset, as VllmConfig decides it: off
    beside 0.19's KV connector (disaggregation needs one) and for chunked local attention beside an EAGLE-type
    drafter (use_eagle), which vLLM refuses with the manager on."""
    e, sp = scenario.engine, scenario.speculative
    local = local_attention(arch)
    if local is not None and local.chunked and sp.method != "none" and \
            (sp.eagle_block_drop or sp.lookahead_block_hashes):
        if e.disable_hybrid_kv_cache_manager is False:
            raise ConfigError("engine.disable_hybrid_kv_cache_manager",
                              f"false, with {arch.name}'s chunked local attention beside EAGLE-type drafts "
                              f"(speculative.eagle_block_drop or lookahead_block_hashes): vLLM refuses it")
        return True
    if e.disable_hybrid_kv_cache_manager is None and e.is_0_19 and scenario.cluster.prefill_replicas:
        return True
    return e.disable_hybrid_kv_cache_manager


def in_flight_tokens(e: EngineSettings, tokens: int, async_scheduling: bool) -> int:
    """vLLM's max_in_flight_tokens: a local-attention layer frees the blocks behind its window only once a step
    settles, so one request may hold a budget per step in flight beyond it; 0.33 counts two steps with async
    scheduling (pipeline stages are not modelled), 0.19 one budget."""
    return tokens * (2 if async_scheduling and not e.is_0_19 else 1)


def _budgets(e: EngineSettings, hw: Hardware, max_model_len: int) -> tuple[int, int]:
    """max_num_batched_tokens and max_num_seqs: the settings, else vLLM's defaults for the device and context."""
    tokens, seqs = usage_context_defaults(hw, e.usage_context, e.vllm_defaults)
    if e.batches_dp_moe:
        tokens = 256  # SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP, before the limits below
    if e.performance_mode == "throughput":  # vLLM doubles the defaults, before the limits below
        tokens, seqs = 2 * tokens, 2 * seqs
    if not e.enable_chunked_prefill:
        tokens = max(max_model_len, tokens)
    # vLLM's EngineArgs: an unset budget is at most max_num_seqs (the user's, else the default) x max_model_len
    tokens = e.max_num_batched_tokens or min(tokens, (e.max_num_seqs or seqs) * max_model_len)
    seqs = e.max_num_seqs or min(seqs, tokens)
    if not e.enable_chunked_prefill and tokens < max_model_len:
        raise ConfigError("engine.max_num_batched_tokens",
                          f"{tokens} is smaller than max_model_len ({max_model_len}) with chunked prefill off")
    if not e.enable_chunked_prefill and (e.max_num_scheduled_tokens or tokens) < max_model_len:
        raise ConfigError("engine.max_num_scheduled_tokens",  # the step's budget: a longer prompt never starts
                          f"{e.max_num_scheduled_tokens} is smaller than max_model_len ({max_model_len}) with chunked "
                          f"prefill off: a prompt longer than a step's tokens could never be scheduled")
    if (e.max_num_active_seqs or 0) > seqs:  # vLLM's SchedulerConfig refuses it
        said = "engine.max_num_seqs" if e.max_num_seqs else "max_num_seqs, vLLM's default here"
        raise ConfigError("engine.max_num_active_seqs", f"{e.max_num_active_seqs} is above {said} ({seqs}): vLLM "
                                                        f"refuses it")
    if tokens < seqs:  # vLLM's SchedulerConfig refuses it too (a max_num_seqs left unset is lowered to the budget)
        raise ConfigError("engine.max_num_seqs", f"{seqs} is above max_num_batched_tokens ({tokens}): vLLM needs "
                                                 f"max_num_batched_tokens >= max_num_seqs")
    return tokens, seqs


def _kv_blocks(scenario: Scenario, arch: ModelArchitecture, hw: Hardware, layout: KVLayout, tp: int, ep: int | None,
               tokens: int, max_model_len: int, reserved: int) -> tuple[int, int | None, int]:
    """The KV pool of each engine, in blocks (and bytes; None when num_gpu_blocks_override fixes it), as vLLM
    sizes it, refused where vLLM would not start; and max_model_len, fitted to the pool when it is `auto`.
    `tokens` are the tokens in flight (in_flight_tokens): what a local-attention layer holds beyond its window;
    `reserved` what vLLM's start-up profile takes besides weights and KV (start_up_reserve)."""
    e = scenario.engine
    pool = None

    def memory_sized() -> int:
        """vLLM's profiled pool: per GPU of the TP group, its share of the weights, its share of every token's KV."""
        return kv_pool_bytes(hw.memory_bytes, e.gpu_memory_utilization,
                             math.ceil(arch.weight_bytes_per_gpu(tp, ep, e.num_redundant_experts)),
                             reserved, e.reserved_memory_gib is not None)

    def allocated(field: str, cache: int) -> None:
        """A cache vLLM takes as given (a block count, a byte size): more than the GPU holds beside the weights
        and the profile's activations fails its allocation, as the weights alone failing to fit fail its load."""
        weights = math.ceil(arch.weight_bytes_per_gpu(tp, ep, e.num_redundant_experts))
        if weights + reserved + cache > hw.memory_bytes:
            raise ConfigError(field, f"{cache / GIB:.2f} GiB of KV cache beside {weights / GIB:.2f} GiB of weights"
                                     f"{f' and {reserved / GIB:.2f} GiB reserved' if reserved else ''} per GPU is "
                                     f"more than the {hw.memory_bytes / GIB:.1f} GiB of a {hw.name}: vLLM would run "
                                     f"out of memory")

    if e.num_gpu_blocks_override:
        blocks = e.num_gpu_blocks_override
        allocated("engine.num_gpu_blocks_override", blocks * e.block_size * layout.page_bytes_per_token)
    elif e.kv_cache_memory_bytes:  # vLLM takes it as given
        pool = e.kv_cache_memory_bytes
        allocated("engine.kv_cache_memory_bytes", pool)
        blocks = num_blocks(pool, layout.page_bytes_per_token, e.block_size)
    else:
        pool = memory_sized()
        blocks = num_blocks(pool, layout.page_bytes_per_token, e.block_size)
    pools = scenario.cluster.replicas * e.data_parallel_size + scenario.cluster.prefill_replicas
    if pools > MAX_REPLICAS:  # r147: 1,024 replicas of 1,024 DP ranks each were a million engines (a hang)
        raise ConfigError("engine.data_parallel_size" if e.data_parallel_size > 1 else "cluster.prefill_replicas",
                          f"{pools:,} engines (cluster.replicas x engine.data_parallel_size + cluster.prefill_replicas):"
                          f" more than the {MAX_REPLICAS:,} servesim runs at once")
    if blocks * pools > MAX_BLOCKS:  # each block is some 40 bytes of bookkeeping in every pool
        c = scenario.cluster  # one pool that fits: the count of pools is what passed it (r167: named block_size)
        many = "cluster.prefill_replicas" if c.prefill_replicas > c.replicas * e.data_parallel_size else \
            "engine.data_parallel_size" if e.data_parallel_size > 1 else "cluster.replicas"
        raise ConfigError(many if blocks <= MAX_BLOCKS else
                          "engine.num_gpu_blocks_override" if e.num_gpu_blocks_override else "engine.block_size",
                          f"{pools} KV pool(s) of {blocks:,} blocks ({blocks * pools:,} in all): more than the "
                          f"{MAX_BLOCKS:,} blocks servesim "
                          f"holds in one run; use a larger block_size, fewer replicas, or num_gpu_blocks_override")
    # vLLM fits `auto` to the pool and refuses to start when one max-length request cannot fit; 0.19 does both
    # against the memory it sized (profiled, or kv_cache_memory_bytes as given: round 126), before
    # num_gpu_blocks_override replaces the count (get_kv_cache_configs)
    checked = blocks if not (e.num_gpu_blocks_override and e.is_0_19) else \
        num_blocks(e.kv_cache_memory_bytes or memory_sized(), layout.page_bytes_per_token, e.block_size)
    if not e.is_0_19:  # 0.33 plans against the blocks left beside the null block; 0.19 counts them all
        checked -= 1
    need = layout.max_blocks(max_model_len, tokens, e.block_size)
    if e.max_model_len == "auto" and checked < need:
        max_model_len = fit_max_model_len(layout, tokens, e.block_size, checked, max_model_len, "engine.max_model_len")
        need = layout.max_blocks(max_model_len, tokens, e.block_size)
    if checked < need:
        field = "engine.kv_cache_memory_bytes" if e.kv_cache_memory_bytes and (e.is_0_19 or not e.num_gpu_blocks_override) \
            else "engine.num_gpu_blocks_override" if e.num_gpu_blocks_override else "engine.gpu_memory_utilization"
        counted = "blocks, as vLLM 0.19 counts them" if e.is_0_19 else "usable blocks"
        given = f" (engine.reserved_memory_gib={e.reserved_memory_gib:g} took its share for vLLM's start-up " \
                f"profile)" if field == "engine.gpu_memory_utilization" and e.reserved_memory_gib is not None else ""
        raise ConfigError(field, f"the KV pool ({max(checked, 0):,} {counted} of {e.block_size} tokens) cannot hold "
                                 f"one request of max_model_len={max_model_len:,} ({need:,} blocks){given}; lower "
                                 f"engine.max_model_len or give the cache more memory")
    if blocks < 2:  # vLLM's block pool takes its first block as the null block: none is left for a request (0.19,
        # which checks the memory it sized, not the override, starts: r147)
        field = "engine.num_gpu_blocks_override" if e.num_gpu_blocks_override else "engine.kv_cache_memory_bytes" \
            if e.kv_cache_memory_bytes else "engine.gpu_memory_utilization"
        raise ConfigError(field, f"a KV pool of {blocks} block{'s' if blocks != 1 else ''} of {e.block_size} tokens "
                                 f"leaves none beside vLLM's null block: no request could be admitted (vLLM would wait "
                                 f"on each for ever); give at least 2 blocks")
    return blocks, pool, max_model_len


def _reserve_estimate(scenario: Scenario, arch: ModelArchitecture, hw: Hardware, tp: int, ep: int | None) -> int:
    """The start-up reserve at another TP, for the advice a weights error gives (its budgets at the scenario's
    settings; 0 where they do not resolve: the error it advises on comes first)."""
    e = scenario.engine
    try:
        length = check_max_model_len(arch, None if e.max_model_len == "auto" else e.max_model_len,
                                     "engine.max_model_len", e.vllm_defaults)
        tokens, seqs = _budgets(e, hw, length)
    except ConfigError:
        return 0
    return start_up_reserve(e, arch, tp, ep, tokens, seqs, not e.enforce_eager, scenario.speculative.method != "none")


def start_up_reserve(e: EngineSettings, arch: ModelArchitecture, tp: int, ep: int | None, tokens: int, seqs: int,
                     cuda_graphs: bool, speculative: bool = False) -> int:
    """Bytes per GPU that vLLM's start-up profile takes besides weights and KV cache: engine.reserved_memory_gib
    as given, else servesim's estimate of the profile (start_up_memory.py)."""
    if e.reserved_memory_gib is not None:
        return math.ceil(e.reserved_memory_gib * GIB)
    return start_up_reserve_bytes(arch, max_num_seqs=seqs, max_num_batched_tokens=tokens, tp=tp,
                                  expert_parallel=bool(ep), release=e.vllm_defaults, cuda_graphs=cuda_graphs,
                                  speculative=speculative)


def fit_max_model_len(layout: KVLayout, tokens: int, block_size: int, usable: int, longest: int, field: str) -> int:
    """vLLM's auto-fit (max_model_len -1): the longest length, up to the model's, whose one request's KV fits the
    usable blocks, by bisection as vLLM searches it; refused when not even one token fits."""
    if layout.max_blocks(1, tokens, block_size) > usable:
        raise ConfigError(field, f"auto: the KV pool ({max(usable, 0)} blocks, as vLLM counts them) cannot hold one "
                                 f"token of a request, as vLLM says: give the cache more memory")
    low, high = 1, longest  # low fits, high does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if layout.max_blocks(mid, tokens, block_size) <= usable else (low, mid)
    say_once([f"servesim: note: {field} auto: {low:,} tokens, the longest one request's KV fits in the "
              f"pool ({usable:,} blocks of {block_size}, as vLLM counts them; the model's {longest:,} do not)"])
    return low


def _check_kernel_tables(name: str | None) -> None:
    """hardware.kernel_tables given: a folder of the tables there is (a typo ran on the roofline, warned as a GPU
    without tables is); where no tables are on this machine at all, the run says so and falls back, as for any GPU."""
    from servesim.simulator.profile_select import kernel_tables_root

    root = kernel_tables_root()
    if name is None or root is None or (root / name).is_dir():
        return
    there = sorted(p.name for p in root.iterdir() if p.is_dir() and any(q.is_dir() for q in p.iterdir()))
    raise ConfigError("hardware.kernel_tables", f"{name!r} is not a folder of kernel tables in {root}: "
                                                f"{', '.join(there)}")


def check_float_kv_cache(base: ModelArchitecture, kv_cache_dtype: str, is_0_19: bool,
                         field: str = "engine.kv_cache_dtype") -> None:
    """0.33's VllmConfig._reject_mismatched_float_kv_cache: a 16-bit KV cache dtype is the model's own (r148: a run
    and capacity took what `servesim vllm` refuses). A quantized checkpoint's activation dtype is not kept: not
    judged."""
    model = None if checkpoint_quantization(base) else {"fp16": "float16", "bf16": "bfloat16"}.get(base.dtype)
    if not is_0_19 and kv_cache_dtype in ("float16", "bfloat16") and model not in (None, kv_cache_dtype):
        raise ConfigError(field, f"{kv_cache_dtype} beside the model's dtype {model}: vLLM 0.33 refuses it; give "
                                 f"auto or {model}")


CUSTOM_GPU_SPEEDS = ("memory_bandwidth_gbps", "bf16_tflops", "fp8_tflops", "host_link_gbps", "gpu_link_gbps")


def _hardware(h: HardwareSettings) -> Hardware:
    speeds = {k: getattr(h, k) for k in CUSTOM_GPU_SPEEDS + ("fp4_tflops",)}
    # a tensor-core speed given as null: no such cores, as README says (r153: the GPU's own was kept, unsaid)
    none = {k: None for k in ("fp8_tflops", "fp4_tflops") if k in h.model_fields_set and getattr(h, k) is None}
    assumed = [k for k in CUSTOM_GPU_SPEEDS if speeds[k] is None and k not in none] if h.gpu is None else []
    h100 = builtin_gpu_table()["h100-sxm"]  # a GPU given by its memory runs at an H100 SXM's speeds, every one of
    # them (r175: its links were the class defaults', 64 and 32 GB/s, and it had no fp8, beside README's word),
    # and has its compute capability, which vLLM's Marlin and backends are picked by (r176: "none checked" beside
    # a refusal for want of one)
    if h.gpu is not None and h.compute_capability is not None:  # r178: an H100 given 8.0 kept its fp8 cores, unsaid
        table = builtin_gpu_table().get(h.gpu, {})  # (a datasheet without one, generic-80gb's, takes the user's)
        own, cuda = table.get("compute_capability"), table.get("platform") in (None, "cuda")
        if not cuda or own not in (None, h.compute_capability):
            raise ConfigError("hardware.compute_capability", f"{h.compute_capability!r} beside the built-in {h.gpu}, "
                                                             f"whose is {own if cuda else 'none (not CUDA)'}: its "
                                                             f"datasheet, kernel tables and tensor cores go with it; "
                                                             f"give a capability with hardware.gpu null")
    hw = load_hardware(h.gpu, memory_gib=h.memory_gib, kernel_tables=h.kernel_tables,
                       compute_capability=h.compute_capability, **(speeds | {k: h100[k] for k in assumed}))
    # tensor cores come with a capability: fp8 from 8.9 (Ada), fp4 from 10.0 (Blackwell); the one given, else the
    # built-in's (r181: an A100 given fp8_tflops ran W8A8)
    cc = h.compute_capability if h.compute_capability is not None else hw.compute_capability
    for k, least in (("fp8_tflops", 8.9), ("fp4_tflops", 10.0)):  # (r180: a custom 8.0 kept an H100's fp8 cores)
        if cc is not None and cc < least and getattr(hw, k) is not None:
            if getattr(h, k) is not None:  # the user's own contradiction
                raise ConfigError(f"hardware.{k}", f"{getattr(h, k):g} beside compute_capability {cc!r}: "
                                                   f"{k.split('_')[0]} tensor cores start at {least}")
            hw = hw.model_copy(update={k: None})
            none[k] = None
            if k in assumed:
                assumed.remove(k)
    if h.gpu is None and h.compute_capability is None:  # (r177: the advice named no setting; now one)
        hw = hw.model_copy(update={"compute_capability": h100["compute_capability"]})
        assumed.append("compute_capability")
    if assumed:  # (r169: a GPU given by its memory alone ran at an H100's speeds, unsaid)
        said = [f"{k} {getattr(hw, k):{'.1f' if k == 'compute_capability' else 'g'}}" for k in assumed]
        say_once([f"servesim: warning: hardware.gpu is null: {', '.join(said)} assumed (an H100 SXM's datasheet): "
                  f"give your GPU's (hardware.{assumed[0]}, ...), or a built-in hardware.gpu"])
    return hw.model_copy(update=none) if none else hw


def check_names(scenario: Scenario, given: tuple[str, ...] = ()) -> None:
    """The model, GPU and profile a scenario names exist: a misspelt one fails every run of a sweep, and is the
    user's one-line mistake before any, not a table of failed runs (r147). `given`: those a search gives itself."""
    from servesim.simulator.cost_model import load_profile

    if "model" not in given:
        load_model(scenario.model)
    if "hardware.gpu" not in given:
        _hardware(scenario.hardware)
    if "profile" not in given and scenario.profile != "auto":
        load_profile(scenario.profile)


def resolve(scenario: Scenario) -> ResolvedScenario:
    """Every value a run needs, concrete: the model and GPU by name, the profile `auto` picks, budgets, KV pool."""
    from servesim.simulator.profile_select import (faster_than_memory, mla_shape_warning, opt_in_moe_warning,
                                                   select_profile)

    e = scenario.engine
    base = load_model(scenario.model)
    check_float_kv_cache(base, e.kv_cache_dtype, e.is_0_19)
    arch = with_formats(base, e.quantization, e.kv_cache_dtype, e.vllm_defaults)
    if model_length(arch, e.vllm_defaults) < 2:  # a one-token context holds a prompt and no output (cut to 0)
        raise ConfigError("model.max_position_embeddings", f"{arch.max_position_embeddings}: a request needs at "
                                                            f"least 2 positions (a prompt token and an output token)")
    tp, dp, ep = _parallelism(scenario, arch)
    h = scenario.hardware
    hw = _hardware(h)
    _check_kernel_tables(h.kernel_tables)
    kv_dtype = resolved_kv_cache_dtype(arch, e.kv_cache_dtype)
    check_attention_backend(arch, hw, kv_dtype, e.attention_backend, e.is_0_19)
    derived_block_size = "block_size" not in e.model_fields_set
    if not derived_block_size and e.attention_backend and not backend_takes_block(e.attention_backend, hw,
                                                                                  e.block_size):
        raise ConfigError("engine.block_size", f"{e.block_size}: the attention backend {e.attention_backend} does "
                                               f"not take it (block_size not supported), so vLLM does not start")
    if not derived_block_size and (said := check_given_block_size(hw, e.block_size, e.is_0_19, e.attention_backend)):
        say_once([f"servesim: warning: {said}"])
    size = attention_block_size(arch, hw, kv_dtype, e.attention_backend, e.is_0_19)
    if derived_block_size and size != e.block_size:
        e = e.model_copy(update={"block_size": size})
        e.__pydantic_fields_set__.discard("block_size")  # still unset: derived again from this scenario
        scenario = scenario.model_copy(update={"engine": e})
    err = None if e.num_gpu_blocks_override or e.kv_cache_memory_bytes else \
        _fits_error(arch, hw, tp, e.gpu_memory_utilization, ep, e.num_redundant_experts,
                    lambda t, ep_t: _reserve_estimate(scenario, arch, hw, t, ep_t),
                    None if h.memory_gib is None else f"GPU of {h.memory_gib:g} GiB")
    if err and err.field == "engine.gpu_memory_utilization":  # a share vLLM starts with holds them: its cap first
        check_start_memory(hw.memory_bytes, e.gpu_memory_utilization)
    if err:
        if h.memory_gib is not None:  # the memory given is what left too little (r168: named TP, "an H100 80GB")
            raise ConfigError("hardware.memory_gib", f"{h.memory_gib:g} GiB given: {err.message}")
        raise err
    check_start_memory(hw.memory_bytes, e.gpu_memory_utilization)
    weight_only = check_formats(arch, hw, e.quantization)
    if e.all2all_backend not in (None, *(ALL2ALL_0_19 if e.is_0_19 else ALL2ALL_0_33)):
        raise ConfigError("engine.all2all_backend", f"{e.all2all_backend} is no choice of vLLM {e.vllm_defaults}'s "
                                                    f"--all2all-backend")
    if e.dispatches_moe and e.all2all_backend not in (None, *TIMED_ALL2ALL[:1 if e.is_0_19 else None]):
        say_once([f"servesim: warning: engine.all2all_backend={e.all2all_backend}: its dispatch and combine kernels "
                  f"are not timed; expert parallelism is timed as vLLM's default backend's, allgather_reducescatter "
                  f"(NCCL all-gather and reduce-scatter)" + (", with the batched DP MoE's default budget"
                                                             if e.batches_dp_moe and not e.max_num_batched_tokens
                                                             else "")])
    routing = scenario.moe.routing if arch.is_moe else DEFAULT_ROUTING  # a dense model's: said to have no effect
    selection = select_profile(scenario.profile, arch, h.gpu, hw, tp, ep, routing)
    profile = selection.profile
    # auto: the model's length here, as vLLM derives it before the engine fits it to the pool (the budget's
    # defaults are taken from it, as vLLM's are)
    max_model_len = check_max_model_len(arch, None if e.max_model_len == "auto" else e.max_model_len,
                                        "engine.max_model_len", e.vllm_defaults)
    tokens, seqs = _budgets(e, hw, max_model_len)
    layout = kv_layout(arch, tp, _hybrid_off(scenario, arch))
    _check_retention(e, arch, layout)
    _check_release_settings(e)
    # vLLM's SchedulerConfig refuses it, against the length before an auto-fit to the pool (which comes later)
    if e.long_prefill_token_threshold > max_model_len and not e.is_0_19:  # 0.19: partial prefills only
        raise ConfigError("engine.long_prefill_token_threshold", f"{e.long_prefill_token_threshold} is above "
                                                                  f"max_model_len ({max_model_len}): vLLM refuses it")
    async_scheduling = True if e.async_scheduling is None else e.async_scheduling
    sp = scenario.speculative
    decode_query_len = 1 + (sp.num_speculative_tokens if sp.method != "none" else 0)  # tokens a decode schedules
    graph_tokens = largest_cuda_graph(e, hw, seqs, tokens, decode_query_len, arch)
    if arch.attention_chunk_size and graph_tokens:  # r136: its backend captures no full graph (support NEVER)
        say_once([f"servesim: warning: vLLM runs {arch.name}'s chunked local attention outside CUDA graphs "
                  f"(piecewise graphs around it): its per-layer launches are not charged, steps timed as fully "
                  f"graphed (short by up to the eager launch cost, overhead.eager_per_layer_us a layer)"])
    reserved = start_up_reserve(e, arch, tp, ep, tokens, seqs, graph_tokens > 0, sp.method != "none")
    blocks, pool, max_model_len = _kv_blocks(scenario, arch, hw, layout, tp, ep,
                                             in_flight_tokens(e, tokens, async_scheduling), max_model_len, reserved)
    cost_model = build_cost_model(profile, arch, hw, tp, gpu=h.gpu, cudagraph_max_tokens=graph_tokens, expert_parallel=ep,
                                  data_parallel_size=dp, routing=routing,
                                  async_scheduling=async_scheduling)
    pol = scenario.policies
    if (pol.admission.long_prompt_tokens is None) != (pol.admission.max_long_prefills is None):
        raise ConfigError("policies.admission.max_long_prefills", "give both long_prompt_tokens and max_long_prefills")
    local = local_attention(arch)
    window_group = bool(layout.local_groups) and not local.chunked  # a modelled group retention acts on
    inert = without_effect(scenario, local is not None, profile, seqs, tokens, window_group,
                           None if arch.is_moe else arch.name, max_model_len)
    say_once((weight_only, selection.warning, opt_in_moe_warning(profile, e.is_0_19), mla_shape_warning(arch, profile),
              unreliable_fit(profile), faster_than_memory(profile, cost_model, arch, hw, tp, ep, dp, routing),
              layout.note, *inert))
    if sp.method != "none" and sp.drafts_vary and sp.proposal_distribution is None:
        say_once([f"servesim: warning: this draft method proposes as many drafts as the text matches (none on the "
                  f"random dataset's tokens); servesim verifies k = {sp.num_speculative_tokens} on every decode, an "
                  f"upper bound on its cost: give speculative.proposal_distribution (the share of decodes proposing "
                  f"0..k) for its real one"])
    if sp.method != "none" and e.is_0_19:  # 0.33's drafting mechanisms, which 0.19 does not have
        if sp.lookahead_block_hashes:
            raise ConfigError("speculative.lookahead_block_hashes", "vLLM 0.19 has no lookahead block hashes "
                                                                    "(0.33's): its EAGLE-type drafters drop a hit's "
                                                                    "last block, speculative.eagle_block_drop")
        if sp.draft_pass_tokens:
            raise ConfigError("speculative.draft_pass_tokens", f"{sp.draft_pass_tokens}: vLLM 0.19 has no draft "
                                                               f"pass of its own (0.33's DFlash and DSpark); leave "
                                                               f"it at 0 under engine.vllm_defaults 0.19.0")
        if sp.skips_unused_drafts:
            raise ConfigError("speculative.skips_unused_drafts", "true: vLLM 0.19 runs the drafter in every step "
                                                                 "(0.33's V2 model runner skips the unused ones)")
    if tokens > seqs * max_model_len:  # vLLM's SchedulerConfig warns the same (r146: said nothing)
        say_once([f"servesim: warning: engine.max_num_batched_tokens ({tokens:,}) exceeds max_num_seqs x "
                  f"max_model_len ({seqs * max_model_len:,}): no step can fill it"])
    step_tokens, active_seqs = _drafting_limits(e, sp, tokens, seqs, max_model_len)
    pads = sp.num_speculative_tokens if sp.method == "fixed" and not e.is_0_19 else 0
    scheduler = SchedulerSettings(  # a step holds at most the budget: vLLM's model runner is sized for it
        max_num_batched_tokens=step_tokens,
        max_num_seqs=active_seqs,  # admission into RUNNING; max_num_seqs sizes the graphs
        max_model_len=max_model_len,
        enable_chunked_prefill=e.enable_chunked_prefill, long_prefill_token_threshold=e.long_prefill_token_threshold,
        threshold_spares_a_lone_request=not e.is_0_19,
        counts_blocked_lookups=e.is_0_19,
        self_preemption_ends_loop=e.is_0_19,
        draft_slots=(slots := sp.drafting_slots_per_seq if sp.method != "none" and not e.is_0_19 else 0),
        input_budget=tokens if slots and step_tokens < tokens else None,  # 0.33: max_num_scheduled_tokens apart
        lookahead_slots=sp.lookahead_slots if sp.method != "none" else 0,
        lookahead_at_admission=not e.is_0_19,
        pads_new_decodes=pads,
        scheduler_reserve_full_isl=e.scheduler_reserve_full_isl, local_attention=local,
        loaded_by_priority=e.is_0_19 and scenario.policies.queue == "priority")
    room = min(step_tokens, (scheduler.input_budget or step_tokens) - scheduler.draft_slots)  # an admission's most
    if pads and room < 1 + pads:  # r156: the run stopped, an internal error
        raise ConfigError("engine.max_num_batched_tokens", f"{tokens}: leaves {room} token(s) for an admission, below "
                                                           f"1 + num_speculative_tokens ({1 + pads}): vLLM 0.33 pads "
                                                           f"an admission with one token left (a full prefix hit, a "
                                                           f"pulled prompt) to 1 + k and waits for room, which a step "
                                                           f"never has")
    if pads and 0 < (e.long_prefill_token_threshold or 0) < 1 + pads:  # r178: simulated unpadded, unsaid
        raise ConfigError("engine.long_prefill_token_threshold",
                          f"{e.long_prefill_token_threshold}: below 1 + num_speculative_tokens ({1 + pads}): vLLM 0.33 "
                          f"pads an admission with one token left (a full prefix hit, a resumed or pulled request) to "
                          f"1 + k, cuts it to the threshold, and its engine core fails its own check (1 + k tokens)")
    return ResolvedScenario(scenario, arch, hw, profile, cost_model, tokens, seqs, max_model_len, blocks, pool,
                            selection.source, async_scheduling, graph_tokens, layout, scheduler,
                            derived_block_size=derived_block_size, reserved_memory_bytes=reserved,
                            scenario_text=_resolved_text(scenario, profile))


def _drafting_limits(e: EngineSettings, sp: SpeculativeSettings, tokens: int, seqs: int,
                     max_model_len: int) -> tuple[int, int]:
    """The tokens a step schedules and the requests running at once, as vLLM's VllmConfig narrows them for a
    draft method: 0.19 keeps every sequence's drafting slots out of the step (_set_max_num_scheduled_tokens;
    0.33's scheduler takes them request by request, SchedulerSettings.draft_slots), 0.33's DFlash and DSpark
    passes run at most budget // their query tokens requests."""
    step, active = min(tokens, e.max_num_scheduled_tokens or tokens), e.max_num_active_seqs or seqs
    if sp.method == "none":
        return step, active
    per, slots = sp.drafting_slots_per_seq, sp.drafting_slots_per_seq * seqs
    if per and e.is_0_19 and e.max_num_scheduled_tokens is not None and tokens < e.max_num_scheduled_tokens + slots:
        raise ConfigError("engine.max_num_scheduled_tokens",
                          f"{e.max_num_scheduled_tokens} leaves less than the drafter's {slots} slots "
                          f"({per} x max_num_seqs {seqs}) of the {tokens}-token budget: vLLM 0.19 refuses it")
    if per and e.is_0_19 and e.max_num_scheduled_tokens is None:
        step = tokens - slots or tokens  # a step of 0 is read as unset by 0.19's scheduler: the whole budget
        room, kept = step, f"{per} slots for each of max_num_seqs ({seqs})"
    else:  # 0.33 takes a request's slots beside its tokens from its input budget, the scheduled tokens' apart
        room, kept = min(step, tokens - per), f"{per} slots beside each request's tokens"
    if per and (room < 0 or room == 0 and not e.is_0_19 or room < max_model_len - 1 and not e.enable_chunked_prefill):
        raise ConfigError("speculative.drafting_slots_per_seq",
                          f"the drafter's {kept} leave {max(room, 0)} of the {tokens}-token budget for a request: "
                          f"vLLM {e.vllm_defaults} would "
                          f"{'never start a prompt longer than that' if room > 0 else 'schedule nothing'}; raise "
                          f"engine.max_num_batched_tokens{' or lower engine.max_num_seqs' if e.is_0_19 else ''}")
    if sp.draft_pass_tokens and tokens // sp.draft_pass_tokens < active:
        say_once([f"servesim: note: max_num_active_seqs lowered from {active} to "
                  f"{max(1, tokens // sp.draft_pass_tokens)}: the draft pass takes {sp.draft_pass_tokens} query "
                  f"tokens a request within max_num_batched_tokens={tokens}, as vLLM lowers it"])
        active = max(1, tokens // sp.draft_pass_tokens)
    return step, active


def _resolved_text(scenario: Scenario, profile: Profile) -> str:
    """What a ResolvedScenario was resolved from, as text: compared again to find an edit made in place."""
    # (a value JSON cannot hold, such as an np.int64 assigned in place, is its text: an edit, not a traceback, r143)
    return scenario.model_dump_json(warnings=False, fallback=repr) + profile.model_dump_json()


_WARNED: set[str] = set()  # a fit or a sweep resolves the same deployment many times: say it once


def warn_afresh() -> None:
    """Each call of the Python API says its own warnings, once: a notebook's cell run again, or the same mistake
    in a later cell, said nothing (r130: once a process, as a CLI command is one process)."""
    _WARNED.clear()


def say_once(warnings) -> None:
    """Each warning on stderr, once a process; in a sweep's worker, kept for the parent to say (collected_warnings)."""
    import sys

    for warning in warnings:
        if warning and warning not in _WARNED:
            if _COLLECTED is not None:  # whoever collects says it (once) or drops it
                if warning not in _COLLECTED:
                    _COLLECTED.append(warning)
            else:
                _WARNED.add(warning)
                if not QUIET[0]:
                    print(printable(warning), file=sys.stderr)


_COLLECTED: list | None = None  # set while a sweep worker runs a point
QUIET = [False]  # a command's --quiet: nothing but errors (the CLI sets it per command)


@contextmanager
def collected_warnings():
    """Warnings said inside, gathered rather than printed: a sweep's workers hand theirs to the parent, which says
    each once (every worker process printed its own copy)."""
    global _COLLECTED
    outer, _COLLECTED = _COLLECTED, []
    try:
        yield _COLLECTED
    finally:
        _COLLECTED = outer




def load_scenario(path: str | Path | dict | None = None, overrides: list[str] | None = None) -> Scenario:
    """The scenario file (or the mapping a file would hold) with its --set overrides, validated but not
    resolved (no model, profile or KV pool)."""
    if isinstance(path, dict):
        return scenario_of(path, overrides)
    if path is not None and not str(path).strip():  # r143: an unset $SCENARIO ran the default scenario unsaid
        raise ConfigError("scenario", "an empty path: name a scenario file, or leave it out for the default scenario")
    return scenario_of(load_scenario_file(path) if path else {}, overrides)


def scenario_of(data: dict, overrides: list[str] | None = None) -> Scenario:
    """A scenario mapping (what a scenario file holds) with its --set overrides, validated but not resolved."""
    if not isinstance(data, dict):
        raise ConfigError("scenario", f"must be a mapping of settings, not {type(data).__name__}")
    notes: list[str] = []
    if overrides:  # as edits to the file: a derived value they change stands, and so does one they give
        data = apply_overrides(data, overrides)
    data = rederive(data, notes, [item.split("=", 1)[0].strip() for item in overrides or ()]) if data else {}
    say_once(notes)
    return parse_scenario(data)


def load(path: str | Path | dict | None = None, overrides: list[str] | None = None) -> ResolvedScenario:
    if isinstance(path, (str, Path)) and not any(item.split("=", 1)[0].strip() in ("workload", "workload.path")
                                                 for item in overrides or []):
        _say_workload_beside(path)
    rs = resolve(load_scenario(path, overrides))
    if isinstance(path, (str, Path)) and not overrides:
        _say_resolved_edits(path, rs)
    return dataclasses.replace(rs, source=str(path)) if isinstance(path, (str, Path)) else rs


@functools.lru_cache(maxsize=64)
def _read_back(path: str, stamp: tuple) -> dict:
    """A scenario file's mapping, once per version of it (`stamp`: its size and mtime): a search loads its scenario
    hundreds of times, and the checks below read it again."""
    return load_scenario_file(path)


def _file_data(path) -> dict:
    try:
        st = Path(path).stat()
        return _read_back(str(path), (st.st_size, st.st_mtime_ns))
    except (OSError, ConfigError):
        return {}  # load_scenario says what is wrong


def _say_workload_beside(path) -> None:
    """A results folder's config.yaml replays its workload.jsonl by absolute path: copied or moved, it would replay
    the original folder's (r153: another run's requests, unsaid) or not be found; the one beside it is named."""
    data = _file_data(path)
    w = data.get("workload") if isinstance(data.get("workload"), dict) else {}
    given, beside = w.get("path"), Path(path).parent / "workload.jsonl"
    if w.get("type") != "trace" or not isinstance(given, str) or Path(given).name != "workload.jsonl" or \
            not beside.is_file() or (Path(given).exists() and Path(given).resolve() == beside.resolve()):
        return
    say_once([f"servesim: warning: {path} replays {given}, not the workload.jsonl beside it ({beside}): a copied or "
              f"moved results folder? --set workload.path={beside} replays its own"])


@functools.lru_cache(maxsize=64)
def _digest_of(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def content_sha256(path: str) -> str | None:
    """A file's sha256, read once while its size and modification time stay (a sweep resolves each point); None
    where it cannot be read (the run that reads it says why)."""
    try:
        st = Path(path).stat()
        return _digest_of(path, st.st_size, st.st_mtime_ns) if Path(path).is_file() else None
    except OSError:
        return None


RESOLVED_READ_ONLY = {"num_gpu_blocks": "engine.num_gpu_blocks_override",
                      "kv_pool_bytes": "engine.kv_cache_memory_bytes",
                      "reserved_memory_bytes": "engine.reserved_memory_gib",
                      "weight_bytes_per_gpu": "the model, engine.quantization or engine.tensor_parallel_size",
                      "kv_bytes_per_token_per_gpu": "the model, engine.kv_cache_dtype or engine.tensor_parallel_size",
                      "cost_model_source": "profile"}


def _say_resolved_edits(path, rs: ResolvedScenario) -> None:
    """A run's config.yaml whose `resolved` values are not what its rerun derives: an edit there is read by nothing
    (r153: num_gpu_blocks edited to 100 ran the 56,719 again, unsaid; `--set resolved.*` is refused)."""
    written = _file_data(path).get("resolved")
    if not isinstance(written, dict):
        return
    now = rs.as_dict()["resolved"]
    say_once([f"servesim: warning: resolved.{k} in {path} is {written[k]!r:.30}, where this run derives {now[k]!r:.30}: "
              f"the resolved section records what a run derived and is read by nothing (give the setting itself, "
              f"{setting})" for k, setting in RESOLVED_READ_ONLY.items() if k in written and written[k] != now.get(k)]
             + [f"servesim: warning: resolved.{k} in {path} is no value servesim writes there, and is read by nothing"
                for k in written if k not in now and k != "input_sha256"]  # (r155: an edit of a field added later,
             + [f"servesim: warning: {f} has changed since the run that wrote {path} read it (its sha256 then "
                f"{was!s:.12}..., now {now['input_sha256'][f]!s:.12}...): this run replays what it holds now, not "
                f"what that run read"  # (r159: a rerun of a trace edited since gave other results, unsaid)
                for f, was in (written.get("input_sha256") or {}).items()
                if isinstance(written.get("input_sha256"), dict) and f in now.get("input_sha256", {})
                and now["input_sha256"][f] != was])  # or a new key, unsaid)
