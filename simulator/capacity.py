"""KV-cache capacity arithmetic: how many requests fit, before any simulation.

The same pool sizing feeds the simulator's block manager, so the calculator and a
simulation can never disagree about the pool.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from servesim.simulator.errors import ConfigError

GIB = 2**30


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_pool_bytes(memory_bytes: int, gpu_memory_utilization: float, weight_bytes: int, reserved_bytes: int = 0,
                  reserved_given: bool = True) -> int:
    """vLLM: ceil(total x utilisation) - weights - everything else its start-up profile takes (reserved_bytes: given,
    or servesim's estimate of it, start_up_memory.py)."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError("engine.gpu_memory_utilization", f"must be in (0, 1], got {gpu_memory_utilization}")
    pool = math.ceil(memory_bytes * gpu_memory_utilization) - weight_bytes - reserved_bytes
    if pool <= 0:  # named by what takes the memory: a reserve given larger than what the weights leave, else the share
        usable_after_weights = math.ceil(memory_bytes * gpu_memory_utilization) - weight_bytes
        raise ConfigError(
            "engine.reserved_memory_gib" if reserved_given and reserved_bytes and usable_after_weights > 0 else
            "engine.gpu_memory_utilization",
            f"no memory left for the KV cache: {memory_bytes * gpu_memory_utilization / GIB:.2f} GiB usable, "
            f"weights {weight_bytes / GIB:.2f} GiB" + ("" if usable_after_weights <= 0 else ", ") + (
                "" if usable_after_weights <= 0 else  # the weights alone: the profile is beside the point
                f"reserved {reserved_bytes / GIB:.2f} GiB" if reserved_given else
                f"vLLM's start-up profile {reserved_bytes / GIB:.2f} GiB (servesim's estimate: the sampler warm-up "
                f"of max_num_seqs requests and the forward pass of max_num_batched_tokens size it; or give "
                f"engine.reserved_memory_gib)"),
        )
    return pool


CUDA_CONTEXT_BYTES = round(0.4 * GIB)  # in use at vLLM's start: the least of public logs' total - free (0.41-0.60 GiB)


def check_start_memory(memory_bytes: int, gpu_memory_utilization: float, field: str = "engine.gpu_memory_utilization"):
    """vLLM's request_memory: a share above the memory free at start-up (the total less the CUDA context) fails its
    worker before anything loads; 0.999 of an H100 asked for 80 MiB more than it has (round 126)."""
    if memory_bytes > 2 * CUDA_CONTEXT_BYTES and \
            math.ceil(memory_bytes * gpu_memory_utilization) > memory_bytes - CUDA_CONTEXT_BYTES:
        raise ConfigError(field, f"{gpu_memory_utilization:g} of {memory_bytes / GIB:.2f} GiB is more than is free "
                                 f"when vLLM starts (some {CUDA_CONTEXT_BYTES / GIB:.1f} GiB goes to the CUDA "
                                 f"context first), which vLLM refuses; at most "
                                 f"{math.floor((memory_bytes - CUDA_CONTEXT_BYTES) / memory_bytes * 1000) / 1000:g}")


def num_blocks(pool_bytes: int, kv_bytes_per_token: int, block_size: int) -> int:
    return pool_bytes // (kv_bytes_per_token * block_size)


@dataclass(frozen=True)
class CapacityReport:
    model: str
    kv_bytes_per_token: int
    pool_bytes: int
    pool_gib: float
    block_size: int
    num_blocks: int  # vLLM's "# GPU blocks", its null block included
    usable_blocks: int  # all but block 0, vLLM's null block, which no request holds
    max_model_len: int
    contiguous_bytes_per_request: int
    contiguous_requests: int
    tokens_per_request: int
    blocks_per_request: int
    paged_requests: int
    paged_gain_vs_contiguous: float | None  # None: contiguous reservation holds no request at all
    max_model_len_blocks: int  # what one max_model_len request holds: vLLM refuses to start on a smaller pool
    shared_prefix_tokens: int | None = None
    private_tokens: int | None = None
    shared_prefix_blocks: int | None = None
    private_blocks_per_request: int | None = None
    shared_prefix_requests: int | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def capacity(
    *,
    model_name: str,
    kv_bytes_per_token: int,
    pool_bytes: int,
    block_size: int,
    max_model_len: int,
    tokens_per_request: int,
    shared_prefix_tokens: int | None = None,
    private_tokens: int | None = None,
    layout=None,
    in_flight_tokens: int | None = None,
) -> CapacityReport:
    """Concurrent requests under contiguous reservation, paging, and paging with a shared prefix. `layout`
    (simulator/hybrid_kv.py) cuts the pool for models with local-attention layers: blocks of one layer group,
    and a request's local groups holding only their window; with `in_flight_tokens`, one max_model_len request is
    counted as vLLM's start-up check counts it (each local group its window plus the tokens in flight), as run's is."""
    for field, value in (("block_size", block_size), ("max_model_len", max_model_len), ("tokens_per_request", tokens_per_request)):
        if value <= 0:
            raise ConfigError(field, f"must be positive, got {value}")
    held = (lambda t: cdiv(t, block_size)) if layout is None else \
        (lambda t: layout.blocks_for(t, t - 1, block_size))  # noqa: E731
    blocks = num_blocks(pool_bytes, kv_bytes_per_token if layout is None else layout.page_bytes_per_token, block_size)
    contiguous_bytes = max_model_len * kv_bytes_per_token
    contiguous = pool_bytes // contiguous_bytes
    usable = blocks - 1  # block 0 is vLLM's null block: the simulator's pool hands out the rest
    per_req = held(tokens_per_request)
    paged = usable // per_req
    extra = {}
    if shared_prefix_tokens is not None or private_tokens is not None:
        if shared_prefix_tokens is None or private_tokens is None:
            raise ConfigError("shared_prefix_tokens", "give both shared_prefix_tokens and private_tokens")
        if shared_prefix_tokens < 0 or private_tokens <= 0:
            raise ConfigError("private_tokens", "shared_prefix_tokens must be >= 0 and private_tokens > 0")
        prefix_blocks = shared_prefix_tokens // block_size  # prefix caching shares full blocks only
        length = shared_prefix_tokens + private_tokens
        if layout is not None and layout.local_groups:  # each local group shares the prefix blocks in its window
            kept = layout.local.skipped_tokens(length - 1) // block_size  # the first block it still holds
            prefix_blocks += layout.local_groups * max(0, shared_prefix_tokens // block_size - kept)
        private_blocks = held(length) - prefix_blocks  # >= 1: private_tokens > 0
        extra = dict(
            shared_prefix_tokens=shared_prefix_tokens,
            private_tokens=private_tokens,
            shared_prefix_blocks=prefix_blocks,
            private_blocks_per_request=private_blocks,
            shared_prefix_requests=max(0, (usable - prefix_blocks) // private_blocks),
        )
    return CapacityReport(
        model=model_name,
        kv_bytes_per_token=kv_bytes_per_token,
        pool_bytes=pool_bytes,
        pool_gib=pool_bytes / GIB,
        block_size=block_size,
        num_blocks=blocks,
        usable_blocks=usable,
        max_model_len=max_model_len,
        contiguous_bytes_per_request=contiguous_bytes,
        contiguous_requests=contiguous,
        tokens_per_request=tokens_per_request,
        blocks_per_request=per_req,
        paged_requests=paged,
        paged_gain_vs_contiguous=(paged / contiguous) if contiguous else None,
        max_model_len_blocks=held(max_model_len) if layout is None or in_flight_tokens is None else
        layout.max_blocks(max_model_len, in_flight_tokens, block_size),
        **extra,
    )
