"""`servesim capacity` as a function: a deployment named by model and GPU, turned into the paging arithmetic of
simulator/capacity.py (pool, blocks, concurrent requests), with the checks a run makes of the same settings.

The CLI flags and the Python API share ARGUMENTS, so both refuse the same values with the same words.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from servesim.simulator.capacity import GIB, CapacityReport, capacity, check_start_memory, kv_pool_bytes, num_blocks
from servesim.simulator.cli_args import FRACTION, checked, human_readable_int_or_auto, number
from servesim.simulator.errors import ConfigError
from servesim.simulator.hybrid_kv import KVLayout
from servesim.workloads.settings import MAX_BLOCK_SIZE, MAX_GIB, MAX_GPUS, MAX_TOKENS

DEFAULT_TOKENS_PER_REQUEST = 1800
_LENGTH = number(int, ge=2, le=MAX_TOKENS)


def _max_model_len(text: str) -> int | str:
    """--max-model-len as `vllm serve` reads it (32768, 32k, 32K; -1 or auto: the longest one request's KV fits the
    pool), within servesim's range."""
    try:
        value = human_readable_int_or_auto(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a length such as 32768, 32k or 32K, or -1/auto, got {text!r}")
    return "auto" if value == -1 else _LENGTH(str(value))


_max_model_len.__name__ = "int"  # argparse names the type in its own messages

# argument -> (CLI flag, parser): the ranges both interfaces enforce
ARGUMENTS = {
    "gpu_memory_gib": ("--gpu-memory-gib", number(float, gt=0, le=MAX_GIB)),
    "gpu_memory_utilization": ("--gpu-memory-utilization", FRACTION),
    "weights_gib": ("--weights-gib", number(float, gt=0, le=MAX_GIB)),  # a model has weights (r157: 0 taken)
    "reserved_memory_gib": ("--reserved-memory-gib", number(float, ge=0, le=MAX_GIB)),
    "max_num_seqs": ("--max-num-seqs", number(int, ge=1, le=MAX_TOKENS)),
    "max_num_batched_tokens": ("--max-num-batched-tokens", number(int, ge=1, le=MAX_TOKENS)),
    "tensor_parallel_size": ("--tensor-parallel-size", number(int, ge=1, le=MAX_GPUS)),
    "block_size": ("--block-size", number(int, ge=1, le=MAX_BLOCK_SIZE)),
    "max_model_len": ("--max-model-len", _max_model_len),
    "tokens_per_request": ("--tokens-per-request", number(int, ge=1, le=MAX_TOKENS)),
    "shared_prefix_tokens": ("--shared-prefix-tokens", number(int, ge=0, le=MAX_TOKENS)),
    "private_tokens": ("--private-tokens", number(int, ge=1, le=MAX_TOKENS)),
}


@dataclass
class CapacityPlan:
    report: CapacityReport
    gpu_memory_gib: float
    gpu_memory_utilization: float
    weights_bytes: int  # per GPU of the TP group
    reserved_bytes: int  # per GPU: vLLM's start-up profile besides weights and KV (config.start_up_reserve)
    tensor_parallel_size: int
    layout: KVLayout
    warnings: list[str]  # flags given that nothing read, and what the plan gives up against vLLM

    def say(self) -> None:
        """Each warning on stderr, as the CLI and the API say them (r158: the API said none)."""
        from servesim.simulator.config import say_once

        say_once(f"servesim: warning: {w}" for w in self.warnings)

    def as_dict(self) -> dict:
        return self.report.as_dict() | {"gpu_memory_gib": self.gpu_memory_gib,
                                        "gpu_memory_utilization": self.gpu_memory_utilization,
                                        "weights_gib": self.weights_bytes / GIB,
                                        "reserved_memory_gib": self.reserved_bytes / GIB,
                                        "tensor_parallel_size": self.tensor_parallel_size}

    def lines(self) -> list[str]:
        """What `servesim capacity` prints."""
        r, tp, layout = self.report, self.tensor_parallel_size, self.layout
        per = f" per GPU of {tp}" if tp > 1 else ""
        out = [f"{r.model}: {r.kv_bytes_per_token:,} B of KV cache per token{per}",
               f"KV pool{per}: {self.gpu_memory_gib:g} GiB x {self.gpu_memory_utilization:g} - "
               f"{self.weights_bytes / GIB:.2f} GiB weights - {self.reserved_bytes / GIB:.2f} GiB vLLM's start-up "
               f"profile = {r.pool_gib:.2f} GiB = {r.num_blocks:,} blocks of "
               f"{r.block_size} tokens ({r.usable_blocks:,} usable: block 0 is vLLM's null block)"
               + (f" x {layout.group_layers} layers (hybrid KV cache: 1 full-attention group, {layout.local_groups} "
                  f"local, each holding its window)" if layout.local_groups else ""),
               f"contiguous, {r.max_model_len:,} tokens reserved each ({r.contiguous_bytes_per_request / GIB:.2f} "
               f"GiB): {r.contiguous_requests:,} concurrent requests",
               f"paged, {r.tokens_per_request:,} tokens each ({r.blocks_per_request} blocks): {r.paged_requests:,} "
               f"concurrent requests ("
               + (f"{r.paged_gain_vs_contiguous:.1f}x contiguous)" if r.paged_gain_vs_contiguous is not None
                  else "contiguous holds none)")]
        if r.shared_prefix_requests is not None:
            out.append(f"paged with a {r.shared_prefix_tokens:,}-token shared prefix ({r.shared_prefix_blocks} blocks, "
                       f"stored once) and {r.private_tokens:,} private tokens ({r.private_blocks_per_request} "
                       f"blocks): {r.shared_prefix_requests:,} concurrent requests")
        return out


def plan(model: str = "llama-3-8b", gpu: str = "generic-80gb", *, gpu_memory_gib: float | None = None,
         gpu_memory_utilization: float = 0.92, quantization: str | None = None, kv_cache_dtype: str = "auto",
         weights_gib: float | None = None, reserved_memory_gib: float | None = None,
         max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
         tensor_parallel_size: int = 1, block_size: int | None = None,
         disable_hybrid_kv_cache_manager: bool | None = None, max_model_len: int | str | None = None,
         tokens_per_request: int | None = None, shared_prefix_tokens: int | None = None,
         private_tokens: int | None = None, vllm_version: str = "0.33.0", enforce_eager: bool = False) -> CapacityPlan:
    """How many requests fit one deployment's KV pool: contiguous, paged, and paged with a shared prefix; the pool
    as a run sizes it, less what vLLM's start-up profile takes (max_num_seqs and the token budget size it)."""
    from servesim.simulator.config import (KV_CACHE_DTYPES, QUANTIZED_FORMATS, EngineSettings, _budgets,
                                  in_flight_tokens, attention_block_size, check_attention_backend, check_formats,
                                  check_expert_blocks, check_float_kv_cache, check_max_model_len, check_mlp_split,
                                  check_tensor_parallel,
                                  check_given_block_size,
                                  fit_max_model_len, largest_cuda_graph, resolved_kv_cache_dtype,
                                  start_up_reserve, with_formats)
    from servesim.simulator.hardware import load_hardware
    from servesim.simulator.hybrid_kv import kv_layout
    from servesim.simulator.local_attention import local_attention
    from servesim.simulator.model_arch import load_model

    given = locals()
    values = {name: None if given[name] is None else checked(flag, given[name], parse)
              for name, (flag, parse) in ARGUMENTS.items()}
    if quantization is not None and quantization not in QUANTIZED_FORMATS:
        raise ConfigError("--quantization", f"one of {', '.join(QUANTIZED_FORMATS)}, got {quantization!r}")
    if kv_cache_dtype not in ("auto", *KV_CACHE_DTYPES):
        raise ConfigError("--kv-cache-dtype", f"one of auto, {', '.join(KV_CACHE_DTYPES)}, got {kv_cache_dtype!r}")
    if disable_hybrid_kv_cache_manager not in (None, True, False):
        raise ConfigError("--disable-hybrid-kv-cache-manager", f"true, false or None, got "
                                                               f"{disable_hybrid_kv_cache_manager!r}")
    tp, private, shared = values["tensor_parallel_size"], values["private_tokens"], values["shared_prefix_tokens"]
    base = load_model(model)
    arch = with_formats(base, quantization, kv_cache_dtype)
    try:
        hw = load_hardware(gpu, memory_gib=values["gpu_memory_gib"])
    except ConfigError as exc:  # capacity's flags, not a scenario's settings (r166)
        raise ConfigError({"hardware.gpu": "--gpu", "hardware.memory_gib": "--gpu-memory-gib"}.get(exc.field, exc.field),
                          exc.message) from None
    check_formats(arch, hw, quantization, "--quantization")
    check_tensor_parallel(arch, tp, "--tensor-parallel-size")
    check_mlp_split(arch, tp, None, "--tensor-parallel-size")  # capacity's experts split by TP
    if vllm_version == "0.19.0" and arch.weight_block_size and arch.is_moe:  # experts split by TP, as run checks
        check_expert_blocks(arch, tp, "--tensor-parallel-size")
    auto = values["max_model_len"] == "auto"
    max_len = check_max_model_len(arch, None if auto else values["max_model_len"], "--max-model-len")
    # per GPU of the TP group: its share of the weights, and of each token's KV (MLA's latent cache is whole on each)
    w = values["weights_gib"]
    weights = round(w * GIB) if w is not None else math.ceil(arch.weight_bytes_per_gpu(tp))
    utilization = values["gpu_memory_utilization"]
    check_start_memory(hw.memory_bytes, utilization, "--gpu-memory-utilization")
    # vLLM's budget and async scheduling, as run's defaults; the budget from the model's length, as vLLM takes
    # it before the engine fits `auto` to the pool
    budgets = {k: values[k] for k in ("reserved_memory_gib", "max_num_seqs", "max_num_batched_tokens")}
    from servesim.simulator.vllm_command import VLLM_VERSIONS

    if vllm_version not in VLLM_VERSIONS:
        raise ConfigError("--vllm-version", f"one of {', '.join(VLLM_VERSIONS)}, got {vllm_version!r:.40}")
    check_float_kv_cache(base, kv_cache_dtype, vllm_version == "0.19.0", "--kv-cache-dtype")
    if enforce_eager not in (True, False):
        raise ConfigError("--enforce-eager", f"true or false, got {enforce_eager!r:.40}")
    try:  # the release's budgets and its start-up profile (0.19 subtracts no CUDA graph estimate; eager: none)
        defaults = EngineSettings(vllm_defaults=vllm_version, enforce_eager=enforce_eager,
                                  **{k: v for k, v in budgets.items() if v is not None})
        budget, seqs = _budgets(defaults, hw, max_len)
    except (ConfigError, ValueError) as exc:
        field = getattr(exc, "field", "engine.max_num_seqs").removeprefix("engine.")
        raise ConfigError(ARGUMENTS.get(field, ("--max-num-seqs",))[0],
                          getattr(exc, "message", str(exc)).replace("max_num_batched_tokens", "--max-num-batched-tokens")) \
            from None
    reserved = start_up_reserve(defaults, arch, tp, None, budget, seqs,
                                largest_cuda_graph(defaults, hw, seqs, budget, 1, arch) > 0)
    memory = f"--gpu-memory-gib {gpu_memory_gib:g}" if gpu_memory_gib is not None else f"--gpu {gpu}"

    def memory_flag(reserve: bool) -> str:  # the most specific flag given of those sizing the pool
        return "--reserved-memory-gib" if reserve and values["reserved_memory_gib"] is not None else \
            "--weights-gib" if w is not None else "--gpu-memory-gib" if gpu_memory_gib is not None else \
            "--gpu-memory-utilization"
    try:
        pool = kv_pool_bytes(hw.memory_bytes, utilization, weights, reserved, values["reserved_memory_gib"] is not None)
    except ConfigError as exc:  # the flags given, not the engine setting they stand for
        exc.message = exc.message.replace("engine.reserved_memory_gib", "reserved_memory_gib")  # said as an argument
        raise ConfigError(memory_flag(exc.field == "engine.reserved_memory_gib"),
                          f"{exc.message} ({memory}, --tensor-parallel-size {tp})") from None
    layout = kv_layout(arch, tp, disable_hybrid_kv_cache_manager)
    old = vllm_version == "0.19.0"
    kv_dtype = resolved_kv_cache_dtype(arch, kv_cache_dtype)  # as a run resolves auto (round 127)
    # the GPU still picks latent attention's block size and, for local-attention layers, the token budget the
    # start-up bound counts, and its default budgets size vLLM's start-up profile and the requests run at once:
    # only where none applies do the three numbers give all it would (round 89; r165: an A100's 256 max_num_seqs)
    generic = load_hardware("generic-80gb", memory_gib=gpu_memory_gib)  # at the memory given (r166: 40 GiB)
    gpu_inert = gpu != "generic-80gb" and gpu_memory_gib is not None and w is not None and not quantization and \
        values["reserved_memory_gib"] is not None and local_attention(arch) is None and (
            values["block_size"] is not None or attention_block_size(arch, hw, kv_dtype, None, old) ==
            attention_block_size(arch, generic, kv_dtype, None, old)) and (
            values["max_num_seqs"] is not None or seqs == _budgets(defaults, generic, max_len)[1])
    inert = [("--gpu", gpu_inert, "--gpu-memory-gib, --weights-gib and --reserved-memory-gib give all it would"),
             ("--quantization", quantization and w is not None,
              "--weights-gib gives the weights (quantization leaves the KV bytes as they are)"),
             ("--enforce-eager", enforce_eager and values["reserved_memory_gib"] is not None,
              "--reserved-memory-gib gives what vLLM's start-up profile takes, its CUDA graphs' share too"),
             ("--enforce-eager", enforce_eager and values["reserved_memory_gib"] is None and vllm_version == "0.19.0",
              "vLLM 0.19's start-up profile counts no CUDA graph memory to leave out"),
             ("--max-num-batched-tokens", max_num_batched_tokens is not None and values["reserved_memory_gib"] is not
              None and local_attention(arch) is None, "--reserved-memory-gib gives what vLLM's start-up profile "
                                                     "takes, which it would size"),
             ("--disable-hybrid-kv-cache-manager", disable_hybrid_kv_cache_manager is not None
              and local_attention(arch) is None, "the model has no local-attention layers")]
    warnings = [f"{flag} has no effect: {why}" for flag, unused, why in inert if unused]  # as run says of settings
    try:
        check_attention_backend(arch, hw, kv_dtype, None, old)
    except ConfigError as exc:  # said of the flag given, not the engine setting it stands for
        raise ConfigError("--kv-cache-dtype", exc.message) from None
    if values["block_size"] is not None and (said := check_given_block_size(hw, values["block_size"], old, None,
                                                                           "--block-size")):
        warnings.append(said)  # (r158: said on stderr, left out of the API's warnings)
    block_size = values["block_size"] or attention_block_size(arch, hw, kv_dtype, None, old)
    in_flight = in_flight_tokens(defaults, budget, True)
    # vLLM's start-up check and auto-fit: 0.33 counts the blocks beside the null block, 0.19 every block (round 127)
    whole = num_blocks(pool, layout.page_bytes_per_token, block_size)
    if whole < 2:  # as run refuses it: none beside vLLM's null block (r154: "-1 usable blocks", exit 0)
        raise ConfigError(memory_flag(False), f"a KV pool of {pool / 2**20:,.1f} MiB holds {whole} block(s) of "
                                              f"{block_size} tokens ({layout.page_bytes_per_token * block_size:,} "
                                              f"bytes each): none beside vLLM's null block, so no request could run "
                                              f"({memory}, --tensor-parallel-size {tp})")
    counted = whole - (0 if old else 1)
    if auto and counted < layout.max_blocks(max_len, in_flight, block_size):
        max_len = fit_max_model_len(layout, in_flight, block_size, counted, max_len, "--max-model-len")
    tokens = values["tokens_per_request"]
    if shared is not None and private is not None:  # the same requests, shared or not
        whole = shared + private
        if whole > max_len:
            raise ConfigError("--shared-prefix-tokens", f"a shared prefix of {shared:,} and {private:,} private "
                                                        f"tokens do not fit one request of max_model_len={max_len:,}")
        if tokens is not None and tokens != whole:
            raise ConfigError("--tokens-per-request", f"{tokens:,}, but a request of the shared prefix and its "
                                                      f"private tokens holds {whole:,}: leave one out")
        tokens = whole
    elif tokens is None:
        tokens = DEFAULT_TOKENS_PER_REQUEST
    if tokens > max_len:
        raise ConfigError("--tokens-per-request", f"{tokens:,} tokens do not fit one request of "
                                                  f"max_model_len={max_len:,}")
    report = capacity(model_name=arch.name, kv_bytes_per_token=arch.kv_bytes_per_token_per_gpu(tp), pool_bytes=pool,
                      block_size=block_size,
                      max_model_len=max_len, tokens_per_request=tokens,
                      shared_prefix_tokens=shared, private_tokens=private, layout=layout, in_flight_tokens=in_flight)
    most = max(report.paged_requests, report.shared_prefix_requests or 0)
    if most > seqs:  # the pool is not the only bound on what runs at once
        warnings.append(f"vLLM runs at most max_num_seqs={seqs:,} requests at once (--max-num-seqs; vLLM's "
                        f"default here unless given): the pool's {most:,} is more than run at once")
    if counted < report.max_model_len_blocks:  # as `run` refuses it, in one line
        warnings.append(f"vLLM would not start: the pool's {counted:,} {'blocks' if old else 'usable blocks'} "
                        f"cannot hold one "
                        f"request of max_model_len={max_len:,} ({report.max_model_len_blocks:,} blocks); lower "
                        f"--max-model-len or give the cache more memory")
    if layout.note:  # the layout's (a sliding window counted whole): the API's caller gets it too (r158)
        warnings.insert(0, layout.note.removeprefix("servesim: warning: "))
    return CapacityPlan(report, hw.memory_gib, utilization, weights, reserved, tp, layout, warnings)
