"""What vLLM's start-up memory profile takes from the GPU's share besides the weights, before it sizes the KV cache.

vLLM (gpu_worker.determine_available_memory) gives the KV cache
    total x gpu_memory_utilization - weights - torch peak of a profile run - non-torch memory
    [- its CUDA graph estimate: on by default since 0.21, so in 0.33, not in 0.19],
where the profile run is one forward pass of max_num_batched_tokens tokens followed by a sampler warm-up of
min(max_num_seqs, max_num_batched_tokens) requests with top-k and top-p on (gpu_model_runner._dummy_sampler_run).
Leaving this out sized the pool 1 to 7 GiB too large (10% for Llama-3.1-8B on an H100, 22% on the RTX 4090 run).

The warm-up holds whole [requests x vocab] logits tensors at once, which is why max_num_seqs and the vocabulary
dominate: 16-bit logits, their fp32 copy, then on the native top-k/top-p path (0.19's; 0.33 warms it after its
FlashInfer one) the probabilities and the exponential noise it samples with: 4 fp32 copies in all. With a draft
method the profile then warms the rejection sampler on twice the rows (the target's 16-bit logits, the draft's
probabilities, the bonus tokens' sampler, the target's fp32 logits and their copy): some 6, counted, not measured.
The forward pass's largest live set is the gated MLP's (its input, the residual, gate and up, their product). The
rest is measured, not derived: a workspace left after both (cuBLAS, torch.compile) and the non-torch memory (NCCL,
custom all-reduce buffers), and 0.33's graph estimate, each the median of public vLLM start-up logs listed in
docs/architecture.md ("KV pool"), where the estimate's error against them is given. engine.reserved_memory_gib,
given, replaces the whole estimate: the sum a user's own vLLM log reports.
"""

from __future__ import annotations

import math

GIB = 2**30
FP32 = 4  # the sampler upcasts the logits
ACTIVATION_BYTES = 2  # 16-bit activations, the models servesim runs
# fp32 [requests x vocab] copies alive at the warm-up's peak (see the module's docstring)
SAMPLER_COPIES = 4.0
SPECULATIVE_COPIES = 6.0
WORKSPACE_BYTES = round(0.5 * GIB)  # torch peak beyond both terms: median of the logged runs' residuals
NON_TORCH_BYTES = round(0.13 * GIB)  # one GPU: 0.13 GiB in the logs (0.02 to 0.26)
NON_TORCH_PER_DOUBLING = round(0.42 * GIB)  # each doubling of tensor parallelism: 0.55 GiB at TP 2, ~1 at TP 4
CUDA_GRAPH_BYTES = round(0.3 * GIB)  # 0.33's estimate: median of logged ones (0.04 to 0.66 GiB)


def sampler_peak_bytes(vocab_size: int, max_num_seqs: int, max_num_batched_tokens: int, speculative: bool) -> int:
    """The sampler warm-up's peak: its requests' logits in the copies the top-k/top-p path (and, with a draft
    method, the rejection sampler) holds."""
    requests = min(max_num_seqs, max_num_batched_tokens)
    return math.ceil((SPECULATIVE_COPIES if speculative else SAMPLER_COPIES) * requests * vocab_size * FP32)


def forward_peak_bytes(arch, max_num_batched_tokens: int, tp: int, expert_parallel: bool) -> int:
    """The profile pass's largest live set per GPU: a layer's input and residual, and its MLP's gate, up and their
    product (a MoE layer's for each of a token's experts, its intermediate split by TP unless the experts are
    spread whole over the GPUs)."""
    dense = 3 * arch.intermediate_size / tp if arch.num_dense_layers or not arch.is_moe else 0
    moe = 0.0
    if arch.is_moe:
        expert = arch.moe_intermediate_size or arch.intermediate_size
        moe = arch.experts_per_token * (3 * expert / (1 if expert_parallel else tp) + arch.hidden_size)
        if arch.num_shared_experts:
            moe += 3 * (arch.shared_expert_intermediate_size or arch.num_shared_experts * expert) / tp
    return math.ceil(max_num_batched_tokens * (2 * arch.hidden_size + max(dense, moe)) * ACTIVATION_BYTES)


def non_torch_bytes(tp: int) -> int:
    """NCCL's and the custom all-reduce's buffers grow with the TP group; one GPU keeps a little too."""
    return NON_TORCH_BYTES + round(NON_TORCH_PER_DOUBLING * math.log2(tp))


def start_up_reserve_bytes(arch, *, max_num_seqs: int, max_num_batched_tokens: int, tp: int, expert_parallel: bool,
                           release: str, cuda_graphs: bool, speculative: bool = False) -> int:
    """Everything vLLM's profile takes besides weights and KV cache, per GPU (see the module's docstring)."""
    activation = max(sampler_peak_bytes(arch.vocab_size, max_num_seqs, max_num_batched_tokens, speculative),
                     forward_peak_bytes(arch, max_num_batched_tokens, tp, expert_parallel)) + WORKSPACE_BYTES
    graphs = CUDA_GRAPH_BYTES if cuda_graphs and release != "0.19.0" else 0
    return activation + non_torch_bytes(tp) + graphs
