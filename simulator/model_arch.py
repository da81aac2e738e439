"""Model architecture: the one place KV bytes per token, weight bytes and FLOPs come from."""

from __future__ import annotations

import json
import math
import os
import re
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import ConfigDict, Field, NonNegativeInt, PositiveInt, field_validator, model_validator

from servesim.workloads.settings import MAX_INT, Settings

from servesim.simulator.errors import JSON_ERRORS, ConfigError, first_error, json_problem, unique_keys

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
Dtype = Literal["fp32", "fp16", "bf16", "fp8"]
# Linear-layer weight formats: bits per weight, scales included. nvfp4: 4-bit e2m1 plus an fp8 scale per 16
# (modelopt_fp4, W4A4); w4a16: 4-bit integers plus an fp16 scale and a 4-bit zero point (packed eight to an
# int32 in AWQ's and GPTQ's qzeros) per group of 128 (GPTQ's g_idx, 32 bits per input row, left out: under 0.01
# bit a weight). Embeddings, the LM head and the norms stay in 16 bits, as vLLM quantizes linear layers only.
# mxfp4: 4-bit e2m1 plus an e8m0 scale per 32 (gpt-oss's experts, run by vLLM with 16-bit activations).
W4A16_GROUP = 128
WEIGHT_BITS = {"fp32": 32.0, "fp16": 16.0, "bf16": 16.0, "fp8": 8.0, "nvfp4": 4.5, "w4a16": 4 + (16 + 4) / W4A16_GROUP,
               "mxfp4": 4.25}
WeightFormat = Literal["fp32", "fp16", "bf16", "fp8", "nvfp4", "w4a16", "mxfp4"]

# How unevenly a router spreads tokens over experts, named as the kernel tables measure it: balanced, or a power
# law over the experts ranked by load (servesim reads the exponent as Zipf's: expert i drawn in proportion to i^-a).
ROUTINGS = {"balanced": 0.0, "power_law_1.01": 1.01, "power_law_1.2": 1.2}
DEFAULT_ROUTING = "power_law_1.2"

# HF config.json keys that mean the same as ours.
_HF_ALIASES = {"torch_dtype": "dtype", "n_layer": "num_hidden_layers"}
_HF_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float8": "fp8"}


MAX_LAYERS = 4096  # decoder layers: today's deepest models have some 100; lists are made over this count


class ModelArchitecture(Settings):
    """HF-style transformer shape: GQA or multi-head latent attention, optionally some layers local (a sliding
    window or Llama 4's chunks); a gated MLP, or mixture-of-experts layers (routed experts, top-k per token,
    optional shared experts, the first layers optionally dense)."""

    model_config = ConfigDict(frozen=True)

    name: str = "custom"
    hf_model_type: str | None = Field(default=None, description="the HF config's model_type (gpt_oss, ...), by "
                                                                "which vLLM updates some settings per model")
    num_hidden_layers: PositiveInt = Field(..., le=MAX_LAYERS)  # lists are made over it
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt
    head_dim: PositiveInt | None = None
    intermediate_size: PositiveInt
    vocab_size: PositiveInt
    max_position_embeddings: PositiveInt = 8192
    max_model_len_0_19: PositiveInt | None = Field(
        default=None, description="vLLM 0.19's derived length where it differs from 0.33's (a YaRN RoPE scaling: "
                                  "0.19 multiplies original_max_position_embeddings by its factor)")
    default_max_model_len: PositiveInt | None = Field(
        default=None, description="vLLM's length when none is given, where below the longest it takes: a LongRoPE "
                                  "scaling's original_max_position_embeddings")
    dtype: WeightFormat = Field("bf16", description="the linear layers' format (fp8: W8A8, nvfp4: W4A4, w4a16: "
                                                     "4-bit weights with 16-bit activations)")
    kv_cache_dtype: Dtype | None = Field(default=None, description="defaults to the activations' dtype")
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over each head's q and k
    # mixture of experts: num_experts routed experts, experts_per_token of them per token (0: a dense model)
    num_experts: NonNegativeInt = 0
    experts_per_token: NonNegativeInt = 0
    moe_intermediate_size: PositiveInt | None = Field(default=None, description="each routed expert's; default "
                                                                                "intermediate_size (Mixtral)")
    quant_method: str | None = Field(default=None, description="a quantized checkpoint's quantization_config "
                                                               "quant_method (awq, gptq, fp8, modelopt, mxfp4), "
                                                               "which vLLM holds --quantization to")
    expert_dtype: WeightFormat | None = Field(default=None, description="the routed experts' format when it differs "
                                                                         "from dtype (gpt-oss: mxfp4 experts)")
    weight_block_size: tuple[PositiveInt, PositiveInt] | None = Field(
        default=None, description="a block-scaled fp8 checkpoint's [N, K] scale blocks (weight_block_size), which "
                                  "vLLM 0.19 holds each GPU's expert slice to; its experts are timed from the "
                                  "block-scaled fused-MoE kernels")
    num_shared_experts: NonNegativeInt = 0  # run for every token (DeepSeek, Qwen2-MoE)
    shared_expert_intermediate_size: PositiveInt | None = Field(
        default=None, description="all shared experts together; default num_shared_experts x moe_intermediate_size")
    encoder_params: NonNegativeInt = Field(0, description="weights outside the decoder (Llama 4's vision encoder), "
                                                           "16-bit: they take memory, not step time")
    num_dense_layers: NonNegativeInt = Field(0, description="layers with a dense MLP of intermediate_size "
                                                            "(DeepSeek's first_k_dense_replace)")
    # multi-head latent attention (DeepSeek-V2/V3): the KV cache holds kv_lora_rank + qk_rope_head_dim per token
    kv_lora_rank: PositiveInt | None = None
    q_lora_rank: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None
    num_nextn_predict_layers: NonNegativeInt | None = Field(
        default=None, description="the MTP layers a DeepSeek-V3 checkpoint carries: vLLM's MTP drafter's n_predict "
                                  "(None: not stated)")
    # local attention: num_local_attention_layers layers (default all) see only the last sliding_window tokens,
    # or only their own attention_chunk_size chunk (Llama 4); the others attend to the whole context
    sliding_window: PositiveInt | None = None
    attention_chunk_size: PositiveInt | None = None
    num_local_attention_layers: PositiveInt | None = None

    @field_validator("name")
    @classmethod
    def _printable_name(cls, v):
        """It heads the run's report, labels /metrics and names the profile: an empty or control-character name
        ran, writing a newline or NUL into them (round 81)."""
        if not v.strip() or not v.isprintable() or len(v) > 200:
            raise ValueError("must be printable text of 1 to 200 characters")
        return v

    @field_validator("hf_model_type")
    @classmethod
    def _known_family(cls, v):
        """vLLM updates settings by it (gpt_oss's larger CUDA graphs): a typo was taken and changed them silently."""
        if v is not None and v not in HF_FAMILIES:
            raise ValueError(f"not a model_type servesim reads ({', '.join(sorted(HF_FAMILIES))})")
        return v

    @model_validator(mode="after")
    def _check_local_attention(self):
        if self.sliding_window and self.attention_chunk_size:
            raise ValueError("give sliding_window or attention_chunk_size, not both")
        if self.num_local_attention_layers is not None:
            if not (self.sliding_window or self.attention_chunk_size):
                raise ValueError("num_local_attention_layers needs sliding_window or attention_chunk_size")
            if self.num_local_attention_layers > self.num_hidden_layers:
                raise ValueError(f"num_local_attention_layers must be <= num_hidden_layers ({self.num_hidden_layers})")
        if (self.sliding_window or self.attention_chunk_size) and self.is_mla:
            raise ValueError("local attention with latent attention is not modelled")
        return self

    @model_validator(mode="after")
    def _check_moe_and_mla(self):
        if self.num_experts:
            if not 1 <= self.experts_per_token <= self.num_experts:
                raise ValueError(f"experts_per_token must be in 1..num_experts ({self.num_experts}), "
                                 f"got {self.experts_per_token}")
            if self.num_dense_layers >= self.num_hidden_layers:
                raise ValueError("num_dense_layers must leave at least one mixture-of-experts layer")
        elif self.experts_per_token or self.num_shared_experts or self.num_dense_layers or self.expert_dtype or \
                self.moe_intermediate_size or self.shared_expert_intermediate_size:  # (r148: the sizes were taken)
            raise ValueError("experts_per_token, num_shared_experts, num_dense_layers, expert_dtype, "
                             "moe_intermediate_size and shared_expert_intermediate_size need num_experts > 0")
        if self.dtype == "mxfp4":  # r174: a dense Llama ran with MXFP4 linear layers no vLLM kernel runs
            raise ValueError("dtype mxfp4: vLLM's MXFP4 quantizes a MoE model's experts only (gpt-oss's), so give "
                             "expert_dtype: mxfp4 with num_experts > 0; its other linear layers stay 16-bit")
        mla = [self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim]
        if any(v is not None for v in mla) and not all(v is not None for v in mla):
            raise ValueError("latent attention needs all of kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, "
                             "v_head_dim")
        if self.q_lora_rank is not None and self.kv_lora_rank is None:
            raise ValueError("q_lora_rank is for latent attention (give kv_lora_rank and its head dims)")
        return self

    @model_validator(mode="after")
    def _check_heads(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError("head_dim is required when hidden_size is not a multiple of num_attention_heads")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        return self

    @property
    def activation_dtype(self) -> str:
        """What activations (and, by default, the KV cache) are held in: quantized models keep bf16 activations."""
        return self.dtype if self.dtype in ("fp32", "fp16") else "bf16"

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.activation_dtype]

    @property
    def kv_dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.kv_cache_dtype or self.activation_dtype]

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def local_window(self) -> int | None:
        """The sliding window or chunk of the local-attention layers; None when every layer attends to all."""
        return self.sliding_window or self.attention_chunk_size

    @property
    def num_local_layers(self) -> int:
        if not self.local_window:
            return 0
        return self.num_local_attention_layers or self.num_hidden_layers

    def require_dense(self, what: str, field: str = "model") -> None:
        """Tools that build or compose dense GQA layers refuse MoE and MLA models in one line."""
        if self.is_moe or self.is_mla or self.local_window:
            kind = " and ".join(w for w, on in (("mixture-of-experts", self.is_moe), ("latent attention", self.is_mla),
                                                ("local attention", bool(self.local_window))) if on)
            raise ConfigError(field, f"{self.name} has {kind} layers, which {what} does not build yet (dense GQA "
                                     f"models only); simulate it with profile: auto (the roofline)")

    @property
    def num_moe_layers(self) -> int:
        return self.num_hidden_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def kv_bytes_per_token(self) -> int:
        """Every layer's cache for one token: K and V of each KV head (2 x kv_heads x head_dim), or MLA's latent
        vector and its rotary key (kv_lora_rank + qk_rope_head_dim), in the KV dtype."""
        return self.kv_bytes_per_token_per_gpu(1)

    def kv_bytes_per_token_per_gpu(self, tensor_parallel_size: int = 1) -> int:
        """KV heads split across the TP group; with fewer KV heads than GPUs each GPU keeps one (vLLM replicates).
        MLA's latent cache has no heads to split: every TP rank holds all of it."""
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes * self.num_hidden_layers
        heads = max(1, self.num_key_value_heads // tensor_parallel_size)
        return 2 * heads * self.head_dim * self.kv_dtype_bytes * self.num_hidden_layers

    @cached_property
    def attention_params(self) -> int:
        """Projections of one layer's attention."""
        h, n = self.hidden_size, self.num_attention_heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = h * self.q_lora_rank + self.q_lora_rank * n * qk if self.q_lora_rank else h * n * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * n * (
                self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + n * self.v_head_dim * h
        d = self.head_dim
        bias = (n + 2 * self.num_key_value_heads) * d if self.attention_bias else 0
        return h * n * d + 2 * h * self.num_key_value_heads * d + n * d * h + bias

    @property
    def expert_params(self) -> int:
        """One routed expert (gate, up and down projections)."""
        return 3 * self.hidden_size * (self.moe_intermediate_size or self.intermediate_size)

    @property
    def moe_fixed_params(self) -> int:
        """A MoE layer's weights every token uses: the shared experts and the router."""
        shared = self.shared_expert_intermediate_size or self.num_shared_experts * (
            self.moe_intermediate_size or self.intermediate_size)
        return 3 * self.hidden_size * shared + self.hidden_size * self.num_experts

    def _linear_params(self, experts: int) -> int:
        dense = (self.num_hidden_layers if not self.is_moe else self.num_dense_layers) * 3 * self.hidden_size * \
            self.intermediate_size
        moe = self.num_moe_layers * (experts * self.expert_params + self.moe_fixed_params)
        return self.num_hidden_layers * self.attention_params + dense + moe

    @cached_property
    def linear_params(self) -> int:
        """Every linear layer's weights: attention, dense MLPs, every expert."""
        return self._linear_params(self.num_experts)

    @cached_property
    def active_linear_params(self) -> int:
        """The linear weights one token multiplies through: attention, dense MLPs, its top-k experts."""
        return self._linear_params(self.experts_per_token)

    @property
    def norm_params_per_layer(self) -> int:
        extra = (2 * self.head_dim if self.qk_norm else 0) + \
            ((self.q_lora_rank or 0) + (self.kv_lora_rank or 0) if self.is_mla else 0)
        return 2 * self.hidden_size + extra

    @cached_property
    def num_params(self) -> int:
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else embed
        return embed + head + self.linear_params + self.num_hidden_layers * self.norm_params_per_layer + \
            self.hidden_size + self.encoder_params

    @property
    def _wide_bytes(self) -> int:
        return 4 if self.dtype == "fp32" else 2

    @property
    def router_bytes(self) -> int:
        """The MoE routers: vLLM leaves them unquantized (DeepSeek's and Mixtral's GateLinear take no quant config;
        fp8 checkpoints skip Qwen3's) and replicates them on every GPU of the TP group."""
        return self.num_moe_layers * self.hidden_size * self.num_experts * self._wide_bytes

    @property
    def latent_down_projection_bytes(self) -> int:
        """MLA's down-projections to the latent query and KV (fused_qkv_a_proj, or kv_a_proj_with_mqa without a
        query rank), which vLLM replicates on every GPU of the TP group (disable_tp), in the weight format."""
        if not self.is_mla:
            return 0
        width = (self.q_lora_rank or 0) + self.kv_lora_rank + self.qk_rope_head_dim
        return math.ceil(self.num_hidden_layers * self.hidden_size * width * WEIGHT_BITS[self.dtype] / 8)

    @property
    def weight_bytes(self) -> int:
        """Linear layers in the weight format (routed experts in theirs, the routers in 16 bits); embeddings, LM
        head and norms in 16 bits (32 for fp32 models)."""
        rest = self.num_params - self.linear_params
        experts = self.num_moe_layers * self.num_experts * self.expert_params
        routers = self.num_moe_layers * self.hidden_size * self.num_experts
        return math.ceil((self.linear_params - experts - routers) * WEIGHT_BITS[self.dtype] / 8) + \
            self.expert_weight_bytes + self.router_bytes + rest * self._wide_bytes

    @property
    def norm_bytes(self) -> int:
        """The norms' weights (each layer's, Qwen3's q/k norms, MLA's latent ones, the final one), whole on every
        GPU of the TP group as vLLM's RMSNorm holds them (r181: split over TP, 2.2 MB a GPU of Llama-3.1-70B at 8)."""
        return (self.num_hidden_layers * self.norm_params_per_layer + self.hidden_size) * self._wide_bytes

    def shared_expert_bytes(self, sequence_parallel_moe: bool) -> int:
        """The shared experts vLLM keeps whole on each GPU: DeepSeek's and Llama 4's under sequence-parallel MoE
        (expert parallelism with TP > 1 and DP > 1, its default all2all backend: disable_tp), 0 otherwise
        (Qwen2-MoE's shared expert stays split)."""
        if not (sequence_parallel_moe and self.hf_model_type in ("deepseek_v2", "deepseek_v3", "llama4_text")):
            return 0
        shared = self.shared_expert_intermediate_size or self.num_shared_experts * (
            self.moe_intermediate_size or self.intermediate_size)
        return math.ceil(self.num_moe_layers * 3 * self.hidden_size * shared * WEIGHT_BITS[self.dtype] / 8)

    def dense_weight_bytes_per_gpu(self, tensor_parallel_size: int = 1, expert_parallel: int | None = None) -> float:
        """One GPU's weights other than the routed experts: split over the TP group but for what vLLM replicates
        on each GPU (the routers, MLA's down-projections: r133, DeepSeek-V3 at TP 8 held 0.94 GiB a GPU more
        than counted; the shared experts under sequence-parallel MoE, expert parallelism over more GPUs than a
        TP group above 1: r135, Llama-4-Scout at -tp 2 -dp 2 -ep 5.6 GiB)."""
        sequence_parallel = bool(expert_parallel) and 1 < tensor_parallel_size < expert_parallel
        replicated = self.router_bytes + self.latent_down_projection_bytes + \
            self.shared_expert_bytes(sequence_parallel) + self.norm_bytes
        return (self.weight_bytes - self.expert_weight_bytes - replicated) / tensor_parallel_size + replicated + \
            self.kv_projection_copies_bytes(tensor_parallel_size)

    def kv_projection_copies_bytes(self, tensor_parallel_size: int) -> float:
        """What a GPU holds beyond its TP share of the K and V projections when the TP group outnumbers the KV
        heads: vLLM's QKVParallelLinear gives each GPU one whole KV head (num_kv_head_replicas = TP / KV heads),
        not a share of one (r180: 4% of a GPU's weights uncounted at TP 4 over 2 KV heads; the KV cache counted it)."""
        kv = self.num_key_value_heads
        if self.is_mla or tensor_parallel_size <= kv:
            return 0.0
        per_layer = 2 * self.hidden_size * self.head_dim + (2 * self.head_dim if self.attention_bias else 0)
        return self.num_hidden_layers * per_layer * (1 - kv / tensor_parallel_size) * WEIGHT_BITS[self.dtype] / 8

    def step_weight_bytes_per_gpu(self, tensor_parallel_size: int = 1, expert_parallel: int | None = None) -> float:
        """The dense weights a step reads on one GPU: not the input embedding, whose rows for the step's tokens
        alone are looked up (unless tied: the LM head reads it whole), nor an encoder a text request never runs
        (r143: the roofline read Llama-3.1-8B's 1 GiB embedding every step, +7% on a decode)."""
        unread = (0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size) + self.encoder_params
        return self.dense_weight_bytes_per_gpu(tensor_parallel_size, expert_parallel) - \
            unread * self._wide_bytes / tensor_parallel_size

    def weight_bytes_per_gpu(self, tensor_parallel_size: int = 1, expert_parallel: int | None = None,
                             redundant_experts: int = 0) -> float:
        """One GPU's weights: everything split over the TP group, or with expert parallelism over `expert_parallel`
        GPUs (TP x DP), whole experts spread over all of them (EPLB's redundant copies too, each a whole expert's
        weights) and the rest split over the TP group; what vLLM replicates whole on each."""
        experts = self.expert_weight_bytes * (self.num_experts + redundant_experts) / self.num_experts \
            if redundant_experts else self.expert_weight_bytes
        return self.dense_weight_bytes_per_gpu(tensor_parallel_size, expert_parallel) + experts / (
            expert_parallel or tensor_parallel_size)

    @property
    def expert_weight_bytes(self) -> int:
        """The routed experts' share of weight_bytes: what a step reads only for the experts its tokens pick."""
        bits = WEIGHT_BITS[self.expert_dtype or self.dtype]
        return math.ceil(self.num_moe_layers * self.num_experts * self.expert_params * bits / 8)

    def experts_touched(self, tokens: int, routing: str = "balanced") -> float:
        """Expected distinct experts a MoE layer runs for `tokens` tokens routing top-k over E experts: balanced,
        E (1 - (1 - k/E)^n), the most a batch can read; skewed, sum_i 1 - (1 - q_i)^n with q_i the chance a token
        picks expert i (k i^-a / sum j^-a, capped at 1 and the rest raised so that they still sum to k)."""
        if not self.is_moe or tokens <= 0:
            return 0.0
        if not ROUTINGS[routing]:
            return self.num_experts * (1.0 - (1.0 - self.experts_per_token / self.num_experts) ** tokens)
        return _skewed_touched(self.num_experts, self.experts_per_token, ROUTINGS[routing], tokens)

    @property
    def matmul_params(self) -> int:
        """Parameters a token multiplies through: its share of every layer plus the LM head (not the embedding
        lookup); a model card's "active parameters". The cost models charge the LM head per sequence instead."""
        return self.active_linear_params + self.vocab_size * self.hidden_size

    @property
    def linear_flops_per_token(self) -> int:
        """A token's multiply-adds through its share of every decoder layer (not the embedding lookup)."""
        return 2 * self.active_linear_params

    @property
    def lm_head_flops_per_seq(self) -> int:
        """The LM head's, once per scheduled sequence: vLLM computes logits for each request's last scheduled
        token only (a prefill chunk's other tokens never reach it)."""
        return 2 * self.vocab_size * self.hidden_size

    @property
    def attention_flops_per_token_pair(self) -> int:
        """FLOPs of one query token attending to one context token (QK^T and PV), all layers. MLA attends in the
        latent space (vLLM absorbs the up-projections): scores over kv_lora_rank + rope dims, values over
        kv_lora_rank, per head."""
        if self.is_mla:
            per_head = 2 * (self.kv_lora_rank + self.qk_rope_head_dim) + 2 * self.kv_lora_rank
            return per_head * self.num_attention_heads * self.num_hidden_layers
        return 4 * self.num_attention_heads * self.head_dim * self.num_hidden_layers


@lru_cache(maxsize=64)
def _pick_chances(experts: int, top_k: int, skew: float) -> tuple[float, ...]:
    weights = [(i + 1) ** -skew for i in range(experts)]
    q = [top_k * w / sum(weights) for w in weights]
    while max(q) > 1.0 + 1e-12:  # an expert is picked at most once a token: cap it, spread the rest
        full = [x >= 1.0 for x in q]
        rest = top_k - sum(full)
        free = sum(x for x, f in zip(q, full) if not f)
        q = [1.0 if f else x * rest / free for x, f in zip(q, full)]
    return tuple(q)


@lru_cache(maxsize=1 << 16)
def _skewed_touched(experts: int, top_k: int, skew: float, tokens: int) -> float:
    return float(sum(1.0 - (1.0 - q) ** tokens for q in _pick_chances(experts, top_k, skew)))


def _builtin_dir():
    return resources.files("servesim.simulator") / "data" / "models"


def builtin_model_names() -> list[str]:
    return sorted(p.name[:-5] for p in _builtin_dir().iterdir() if p.name.endswith(".yaml"))


# HF `model_type`s whose config.json servesim reads, and how each names the mixture-of-experts fields.
HF_FAMILIES = {
    "llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {},
    "mixtral": {"num_local_experts": "num_experts", "num_experts_per_tok": "experts_per_token"},
    "qwen2_moe": {"num_experts": "num_experts", "num_experts_per_tok": "experts_per_token",
                  "moe_intermediate_size": "moe_intermediate_size",
                  "shared_expert_intermediate_size": "shared_expert_intermediate_size"},
    "qwen3_moe": {"num_experts": "num_experts", "num_experts_per_tok": "experts_per_token",
                  "moe_intermediate_size": "moe_intermediate_size"},
    "deepseek_v2": {"n_routed_experts": "num_experts", "num_experts_per_tok": "experts_per_token",
                    "moe_intermediate_size": "moe_intermediate_size", "n_shared_experts": "num_shared_experts",
                    "first_k_dense_replace": "num_dense_layers"},
}
HF_FAMILIES["deepseek_v3"] = HF_FAMILIES["deepseek_v2"]
# model_types vLLM loads with another family's config class (transformers_utils/config.py _CONFIG_REGISTRY)
HF_FAMILY_ALIASES = {"kimi_k2": "deepseek_v3"}
# a multimodal wrapper's decoder family, which its config class gives a text_config naming none
WRAPPED_FAMILIES = {"llama4": "llama4_text"}
HF_FAMILIES["gpt_oss"] = HF_FAMILIES["mixtral"]  # every layer MoE, experts of intermediate_size
HF_FAMILIES["llama4_text"] = {"num_local_experts": "num_experts", "num_experts_per_tok": "experts_per_token",
                              "intermediate_size": "moe_intermediate_size", "intermediate_size_mlp": "intermediate_size"}
# transformers' config classes' defaults for the keys servesim reads (5.23's, as vLLM loads a config.json through
# them): a key the file leaves out is the class's, not servesim's guess (a Mistral without num_key_value_heads has
# 8, a Qwen3 without head_dim 128). Keys whose class default is None are left out: __post_init__ derives them
_BASE = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
HF_CONFIG_DEFAULTS = {
    "llama": dict(zip(_BASE, (32000, 4096, 11008, 32, 32)), max_position_embeddings=2048),
    "mistral": dict(zip(_BASE, (32000, 4096, 14336, 32, 32)), num_key_value_heads=8,
                    max_position_embeddings=131072, sliding_window=4096),
    "mixtral": dict(zip(_BASE, (32000, 4096, 14336, 32, 32)), num_key_value_heads=8,
                    max_position_embeddings=131072, num_local_experts=8, num_experts_per_tok=2),
    "qwen2": dict(zip(_BASE, (151936, 4096, 22016, 32, 32)), num_key_value_heads=32, max_position_embeddings=32768),
    "qwen3": dict(zip(_BASE, (151936, 4096, 22016, 32, 32)), num_key_value_heads=32, head_dim=128,
                  max_position_embeddings=32768),
    "qwen2_moe": dict(zip(_BASE, (151936, 2048, 5632, 24, 16)), num_key_value_heads=16, max_position_embeddings=32768,
                      num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
                      shared_expert_intermediate_size=5632),
    "qwen3_moe": dict(zip(_BASE, (151936, 2048, 6144, 24, 32)), num_key_value_heads=4, max_position_embeddings=32768,
                      num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768),
    "deepseek_v2": dict(zip(_BASE, (102400, 4096, 11008, 32, 32)), max_position_embeddings=2048,
                        n_routed_experts=64, moe_intermediate_size=1407, n_shared_experts=2, first_k_dense_replace=0,
                        kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
    "deepseek_v3": dict(zip(_BASE, (129280, 7168, 18432, 61, 128)), num_key_value_heads=128,
                        max_position_embeddings=4096, n_routed_experts=256, num_experts_per_tok=8,
                        moe_intermediate_size=2048, n_shared_experts=1, first_k_dense_replace=3, kv_lora_rank=512,
                        q_lora_rank=1536, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
    "gpt_oss": dict(zip(_BASE, (201088, 2880, 2880, 36, 64)), num_key_value_heads=8, head_dim=64,
                    max_position_embeddings=131072, sliding_window=128, num_local_experts=128, num_experts_per_tok=4,
                    attention_bias=True),
    "llama4_text": dict(zip(_BASE, (202048, 5120, 8192, 48, 40)), num_key_value_heads=8, head_dim=128,
                        max_position_embeddings=131072, num_local_experts=16, num_experts_per_tok=1,
                        intermediate_size_mlp=16384, attention_chunk_size=8192),
}
# the config keys vLLM derives a model's length from, the smallest one present (model_arch_config_convertor.py)
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
_LOCAL_KEYS = ("sliding_window", "attention_chunk_size", "num_local_attention_layers")
_MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
_QWEN_MOE = ("qwen2_moe", "qwen3_moe")


def _method(q: dict) -> str:
    """A quantization_config's quant_method as vLLM reads it: lower-cased ("AWQ" is awq)."""
    return str(q.get("quant_method", "")).lower()


def _modelopt_flat(q):
    """ModelOpt's own layout ({producer: {name: modelopt}, quantization: {quant_algo, kv_cache_quant_algo}}, as
    hf_quant_config.json holds it) under the quant_method vLLM gives it (_normalize_quantization_config), its
    algorithms at the top as a config.json's ModelOpt entry has them; any other config as it is."""
    if not isinstance(q, dict):
        return q
    inner = q.get("quantization")
    producer = q.get("producer") if isinstance(q.get("producer"), dict) else {}
    if isinstance(inner, dict) and (producer.get("name") == "modelopt" or "modelopt_quant_config" in inner):
        return {**q, **inner, "quant_method": "modelopt"}
    return q


def _w4_group(q):
    """A 4-bit AWQ/GPTQ quantization_config's group size (AutoAWQ's q_group_size too; 128 when not given), else
    None."""
    if not isinstance(q, dict) or _method(q) not in ("awq", "gptq") or q.get("bits", q.get("w_bit")) != 4:
        return None
    return q.get("group_size", q.get("q_group_size", W4A16_GROUP))


def checkpoint_format(q) -> str | None:
    """A config.json quantization_config's weight format, where servesim models it (None: not modelled): fp8
    (DeepSeek's block-scaled weights, ModelOpt FP8), gpt-oss's mxfp4 experts, 4-bit AWQ/GPTQ (w4a16), ModelOpt
    NVFP4."""
    if not isinstance(q, dict):
        return None
    method = _method(q)
    if method in ("fp8", "mxfp4"):
        return method
    if _w4_group(q) == W4A16_GROUP:
        return "w4a16"
    if method == "modelopt":
        return {"NVFP4": "nvfp4", "FP8": "fp8"}.get(str(q.get("quant_algo", "")).upper())
    return None


# a checkpoint's lists of modules vLLM leaves unquantized, each matched as vLLM matches it: Fp8Config's
# ignored_layers and compressed-tensors' ignore by name (or `re:` pattern), AWQ's modules_to_not_convert as a
# substring of the layer's name (is_layer_skipped_awq), ModelOpt's exclude_modules as a glob (fnmatch)
_SKIP_LISTS = {"ignored_layers": "name", "ignore": "name", "modules_to_not_convert": "substring",
               "exclude_modules": "glob"}
# the lists each method's config reads (r179: an AWQ config's ignored_layers, which AWQConfig never reads, refused);
# fp8's modules_to_not_convert is its fallback for ignored_layers
_SKIP_LISTS_READ = {"fp8": ("ignored_layers", "modules_to_not_convert"), "awq": ("modules_to_not_convert",),
                    "modelopt": ("exclude_modules", "ignore"), "gptq": ()}
_ATTENTION = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.qkv_proj", "self_attn.o_proj",
              "self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj",
              "self_attn.fused_qkv_a_proj")
_MLP = ("gate_proj", "up_proj", "down_proj", "gate_up_proj")  # a fused layer and the shards vLLM checks for it
_DENSE_MLP = tuple(f"mlp.{p}" for p in _MLP)
_EXPERTS = {"mixtral": "block_sparse_moe.experts", "gpt_oss": "block_sparse_moe.experts",
            "llama4_text": "feed_forward.experts"}  # others: mlp.experts
_SHARED = {"qwen2_moe": "mlp.shared_expert", "deepseek_v2": "mlp.shared_experts", "deepseek_v3": "mlp.shared_experts",
           "llama4_text": "feed_forward.shared_expert"}


def _layer_projections(data: dict, family: str, layers: int) -> list[str]:
    """The quantized linear layers vLLM builds in each decoder layer of this family (r178: a Mixtral AWQ
    checkpoint's router entry `gate` matched a dense mlp.gate_proj Mixtral has not): attention; a dense layer's
    MLP; an MoE layer's fused experts and, where the family has them, its shared experts."""
    experts = next((data.get(hf) for hf, ours in HF_FAMILIES.get(family, {}).items() if ours == "num_experts"), None)
    moe = isinstance(experts, int) and not isinstance(experts, bool) and experts > 0
    first, step, only = data.get("first_k_dense_replace"), data.get("decoder_sparse_step"), data.get("mlp_only_layers")

    def dense(i: int) -> bool:
        return not moe or (isinstance(first, int) and i < first) or (isinstance(only, list) and i in only) or (
            isinstance(step, int) and step > 1 and (i + 1) % step != 0)
    shared = _SHARED.get(family) if family == "llama4_text" or data.get("shared_expert_intermediate_size") or \
        data.get("n_shared_experts") else None
    moe_layer = (_EXPERTS.get(family, "mlp.experts"), *((f"{shared}.{p}" for p in _MLP) if shared else ()))
    return [f"{root}layers.{i}.{p}" for i in range(min(max(layers, 1), 512))
            for root in ("model.", "model.language_model.", "language_model.model.")
            for p in _ATTENTION + (_DENSE_MLP if dense(i) else moe_layer)]


def _matches(entry: str, name: str, how: str) -> bool:
    """vLLM's is_layer_skipped: an entry naming anything inside a fused-MoE layer (`...experts.5.down_proj`,
    Mixtral's `...experts.0.w1`) leaves that whole layer unquantized; otherwise the list's own rule."""
    import fnmatch

    if name.endswith("experts") and "experts" in entry and name in entry:
        return True
    if entry.startswith("re:"):
        return re.fullmatch(entry[3:], name) is not None
    return {"substring": lambda: entry in name, "glob": lambda: fnmatch.fnmatch(name, entry),
            "name": lambda: name == entry or name.endswith("." + entry)}[how]()


def _left_unquantized(q, data: dict, family: str) -> str | None:
    """Decoder linear layers a checkpoint keeps in 16 bits, which servesim would count quantized (r174: an fp8
    checkpoint leaving its 96 MLP projections unquantized was sized 5.25 GiB light, its pool 2,688 blocks big;
    r176: a glob ending in `gate` matched every gate_proj). Each entry is matched, as vLLM matches it, against the
    decoder's projections at every layer; one naming what servesim counts 16-bit anyway (lm_head, embeddings,
    routers, norms, a vision tower) matches none. gpt-oss's mxfp4 quantizes its experts only, as servesim counts."""
    if not isinstance(q, dict) or checkpoint_format(q) in (None, "mxfp4"):
        return None
    layers = data.get("num_hidden_layers")
    names = _layer_projections(data, family, layers if isinstance(layers, int) and not isinstance(layers, bool) else 1)
    for key, how in _SKIP_LISTS.items():
        if key not in _SKIP_LISTS_READ.get(_method(q), tuple(_SKIP_LISTS)):
            continue
        if key == "modules_to_not_convert" and _method(q) == "fp8":  # Fp8Config's fallback for ignored_layers,
            if q.get("ignored_layers"):  # matched as they are (r178: as AWQ's substrings, a router entry hit
                continue  # gate_proj); unread beside them
            how = "name"
        listed = q.get(key)
        if listed is None:
            continue
        if not (isinstance(listed, list) and all(isinstance(n, str) for n in listed)):
            return f"quantization_config {key} {str(listed)[:60]} (vLLM reads a list of module names)"
        for n in listed:
            if n.startswith("re:"):
                try:
                    re.compile(n[3:])
                except re.error as e:
                    return f"quantization_config {key} entry {n[:60]!r} is no regular expression ({e})"
        odd = [n for n in listed if any(_matches(n, name, how) for name in names)]
        if odd:
            more = f" (and {len(odd) - 1:,} more)" if len(odd) > 1 else ""
            return (f"quantization_config {key} leaves {odd[0][:80]!r}{more} unquantized (servesim counts every "
                    f"decoder linear layer in the checkpoint's format: give the checkpoint without them, or its "
                    f"16-bit one with engine.quantization)")
    if q.get("dynamic"):  # GPTQ's per-module bits or skips
        return (f"quantization_config dynamic {str(q['dynamic'])[:80]} (per-module bit widths and skipped modules are "
                f"not modelled)")
    block = q.get("modules_in_block_to_quantize")  # GPTQ: a decoder layer's linear layers not listed stay 16-bit
    if block is not None:
        listed = {str(n).split(".")[-1] for n in (sum(block, []) if all(isinstance(b, list) for b in block)
                                                  else block)} if isinstance(block, list) else set()
        missing = [p for p in ("o_proj", "down_proj") if p not in listed]
        if missing or not listed & {"q_proj", "qkv_proj", "q_a_proj", "q_b_proj"}:
            return (f"quantization_config modules_in_block_to_quantize {str(block)[:80]} leaves a decoder layer's "
                    f"other linear layers unquantized (not modelled)")
    return None


def _unmodelled(data: dict, family: str) -> str | None:
    """A config field that changes memory or time in a way servesim does not model, named; None if none."""
    first, layers = data.get("max_window_layers", 28), data.get("num_hidden_layers")
    slides = data.get("sliding_window") is not None and not (  # transformers: the layers from max_window_layers on
        all(isinstance(v, int) and not isinstance(v, bool) for v in (first, layers)) and first >= layers)
    if data.get("use_sliding_window") and family not in ("mistral", "mixtral") and slides:
        return (f"use_sliding_window with max_window_layers {data.get('max_window_layers')} (Qwen's sliding "
                f"layers are not modelled)")
    listed = data.get("layer_types")
    kinds = set(listed) if isinstance(listed, list) and all(isinstance(k, str) for k in listed) else {"full_attention"}
    if kinds - {"full_attention", "sliding_attention"}:
        return f"layer_types {sorted(kinds)} (servesim models full and sliding-window attention layers only)"
    if data.get("moe_layer_freq", 1) != 1:
        return f"moe_layer_freq {data['moe_layer_freq']} (MoE layers every layer after the dense ones only)"
    if data.get("interleave_moe_layer_step", 1) != 1:
        return (f"interleave_moe_layer_step {data['interleave_moe_layer_step']} (dense and MoE layers interleaved "
                f"are not modelled)")
    q = data.get("quantization_config")
    group = _w4_group(q)
    if group is not None and group != W4A16_GROUP:
        return (f"quantization_config group_size {group!r:.20} (servesim counts 4-bit AWQ/GPTQ weights in groups of "
                f"{W4A16_GROUP}: a scale and a zero point each)")
    if left := _left_unquantized(q, data, family):
        return left
    if q is not None and checkpoint_format(q) is None:
        return (f"quantization_config {q.get('quant_method') if isinstance(q, dict) else q!r} (servesim reads fp8, "
                f"mxfp4, 4-bit AWQ/GPTQ and ModelOpt NVFP4/FP8 checkpoints from config.json; model the others as a "
                f"16-bit checkpoint with engine.quantization)")
    return None


def _int_field(data: dict, key: str, least: int = 1, where: str = "model") -> int:
    """An integer config field a layout is computed from, checked before it is used (a layer count bounded: lists
    are made over it)."""
    v = data.get(key)
    most = MAX_LAYERS if key == "num_hidden_layers" else None
    if isinstance(v, bool) or not isinstance(v, int) or v < least or (most and v > most):
        raise ConfigError(f"{where}.{key}", f"must be an integer >= {least}{f' and <= {most:,}' if most else ''}, "
                                            f"got {v!r:.40}")
    return v


def _layer_list(data: dict, key: str, allowed: set, layers: int, exact: bool = True) -> list:
    v = data.get(key)
    if not isinstance(v, list) or any(isinstance(x, (list, dict)) or x not in allowed for x in v):
        raise ConfigError(f"model.{key}", f"must be a list of {', '.join(map(repr, sorted(allowed, key=str)))}, "
                                          f"got {v!r:.80}")
    if len(v) < layers or (exact and len(v) != layers):
        raise ConfigError(f"model.{key}", f"has {len(v)} entries for {layers} layers")
    return v[:layers]


WINDOW_SWITCHED = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")  # whose window use_sliding_window turns on


def _local_layers(data: dict, family: str) -> dict:
    """Which layers attend locally, in the family's own terms: layer_types (gpt-oss, Gemma), Mistral's
    sliding_window on every layer, Llama 4's chunks on its RoPE layers (no_rope_layers 1)."""
    if family == "llama4_text":
        if data.get("attention_chunk_size") is None:
            return {}
        chunk, layers = _int_field(data, "attention_chunk_size"), _int_field(data, "num_hidden_layers")
        if data.get("no_rope_layers"):
            flags = _layer_list(data, "no_rope_layers", {0, 1}, layers)
        else:
            every = _int_field(data | {"no_rope_layer_interval": data.get("no_rope_layer_interval", 4)},
                               "no_rope_layer_interval")
            flags = [int((i + 1) % every != 0) for i in range(layers)]
        # no RoPE layer chunked: every layer attends to the whole context
        return {"attention_chunk_size": chunk, "num_local_attention_layers": sum(flags)} if any(flags) else {}
    if data.get("layer_types") is not None:
        kinds = _layer_list(data, "layer_types", {"full_attention", "sliding_attention"},
                            _int_field(data, "num_hidden_layers"))
        if family in WINDOW_SWITCHED and not data.get("use_sliding_window"):
            # transformers' Qwen configs drop sliding_window unless use_sliding_window (Qwen3Config.__post_init__):
            # every layer attends to the whole context, whatever layer_types lists (r171: 18 of 36 windowed, the
            # concurrency 1.75x vLLM's)
            return {}
        if "sliding_attention" in kinds:
            if data.get("sliding_window") is None:
                raise ConfigError("model.sliding_window", "layer_types has sliding_attention layers but no "
                                                          "sliding_window")
            return {"sliding_window": _int_field(data, "sliding_window"),
                    "num_local_attention_layers": kinds.count("sliding_attention")}
        return {}
    if family in ("mistral", "mixtral") and data.get("sliding_window") is not None:
        return {"sliding_window": _int_field(data, "sliding_window")}
    if family == "gpt_oss" and data.get("sliding_window") is not None:  # GptOssConfig's default layer_types:
        layers = _int_field(data, "num_hidden_layers")  # sliding on the even layers, full on the odd (round 80)
        return {"sliding_window": _int_field(data, "sliding_window"), "num_local_attention_layers": (layers + 1) // 2}
    return {}


def _vision_params(v) -> int:
    """A ViT encoder's weights (attention 4h^2 and a 2-matrix MLP per layer): memory only, never step time."""
    if not isinstance(v, dict):
        raise ConfigError("model.vision_config", f"must be a mapping with hidden_size, intermediate_size and "
                                                 f"num_hidden_layers, got {v!r:.60}")
    h, i, n = (_int_field(v, k, where="model.vision_config") for k in ("hidden_size", "intermediate_size",
                                                                      "num_hidden_layers"))
    return n * (4 * h * h + 2 * h * i)


# RoPE scalings whose max_position_embeddings is already the scaled length (each release's _get_and_verify_max_len)
_ROPE_SCALED_ALREADY = {"0.33.0": ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"),
                        "0.19.0": ("su", "longrope", "llama3")}


def _rope(data: dict) -> dict | None:
    """A config.json's RoPE scaling, checked as vLLM's patch_rope_parameters checks it: a mapping naming its
    rope_type (or the legacy type), one per layer type where nested (r154: a factor without a type multiplied the
    length, a text or list was ignored; vLLM does not start)."""
    key = "rope_scaling" if data.get("rope_scaling") else "rope_parameters"
    rope = data.get(key)
    if not rope:
        return None
    if not isinstance(rope, dict):
        raise ConfigError(f"model.{key}", f"must be a mapping with a rope_type, got {rope!r:.60}")
    nested = all(isinstance(v, dict) for v in rope.values())  # per layer type (transformers v5)
    for name, one in (rope.items() if nested else [(None, rope)]):
        kind, legacy = one.get("rope_type"), one.get("type")
        where = f"model.{key}" + (f".{name}" if name else "")
        if kind is None and legacy is None:
            raise ConfigError(where, "has no rope_type (or type): vLLM does not start without one")
        if kind is not None and legacy is not None and kind != legacy and (legacy, kind) not in (
                ("su", "longrope"), ("mrope", "default")):
            raise ConfigError(where, f"rope_type {kind!r} contradicts its legacy type {legacy!r} (vLLM does not "
                                     f"start)")
        named = {"su": "longrope", "mrope": "default"}.get(kind if kind is not None else legacy,
                                                            kind if kind is not None else legacy)
        if named not in ROPE_TYPES:  # (r180: an unknown type's factor stretched the length)
            raise ConfigError(f"{where}.{'rope_type' if kind is not None else 'type'}",
                              f"{named!r} is no RoPE type vLLM knows ({', '.join(sorted(ROPE_TYPES))}): its get_rope "
                              f"raises, and it does not start")
    return None if nested else rope


# vLLM's get_rope (model_executor/layers/rotary_embedding): the scaling types it builds, after patch_rope_parameters
# renames the legacy su and mrope
ROPE_TYPES = frozenset({"default", "llama3", "mllama4", "linear", "ntk", "dynamic", "xdrope", "yarn",
                        "deepseek_yarn", "deepseek_llama_scaling", "longrope", "openpangu"})


def _rope_length(data: dict, length: int, release: str) -> int:
    """The model's length as the release derives it: multiplied by a RoPE scaling's factor (linear, dynamic),
    unless the scaling's max_position_embeddings is already the scaled one (llama3, longrope; yarn in 0.33, where
    0.19 multiplies yarn's original_max_position_embeddings instead)."""
    rope = _rope(data)
    if rope is None:
        return length
    kind = rope.get("rope_type", rope.get("type"))
    factor = rope.get("factor")
    if kind in _ROPE_SCALED_ALREADY[release] or factor is None:  # vLLM: a null factor is 1
        return length
    key = "rope_scaling" if data.get("rope_scaling") else "rope_parameters"
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < math.inf:
        raise ConfigError(f"model.{key}.factor", f"must be a positive number (vLLM multiplies the model's length by "
                                                 f"it), got {factor!r}")
    scaled = length * factor
    if not 1 <= scaled <= MAX_INT:  # vLLM multiplies by any factor: a length under one token, or past what servesim
        # holds, is named here (not as the max_position_embeddings it would become)
        beyond = f"past the {MAX_INT:,} servesim holds" if scaled > 1 else "less than one"
        raise ConfigError(f"model.{key}.factor", f"{factor!r} makes the model's length {scaled:.4g} tokens, {beyond}")
    if kind == "yarn":  # 0.19 (0.33 takes it as scaled): the original length x the factor; none given, as it is
        original = rope.get("original_max_position_embeddings")
        valid = isinstance(original, int) and not isinstance(original, bool) and original > 0
        return int(original * factor) if valid else length
    return int(length * factor)


def model_length(arch: "ModelArchitecture", release: str) -> int:
    """The longest context vLLM `release` takes for the model."""
    return arch.max_model_len_0_19 or arch.max_position_embeddings if release == "0.19.0" \
        else arch.max_position_embeddings


def default_model_length(arch: "ModelArchitecture", release: str) -> int:
    """vLLM `release`'s max_model_len for the model when none is given."""
    return min(arch.default_max_model_len or math.inf, model_length(arch, release))


def _hf_lengths(data: dict) -> dict:
    """The model's length fields from a config.json, as vLLM derives them: the smallest of the length keys present,
    or model_max_length where given (Command-R's rule, which vLLM applies to every model), scaled by RoPE as each
    release does; a LongRoPE model defaults to its original_max_position_embeddings."""
    lengths = {k: _int_field(data, k) for k in LENGTH_KEYS if data.get(k) is not None}
    for key, value in lengths.items():  # named here: past this, the field it becomes would be named instead
        if value > MAX_INT:
            raise ConfigError(f"model.{key}", f"a {len(str(value))}-digit integer: at most {MAX_INT:,} in size")
    if not lengths:  # vLLM's fallback, said as it says it
        from servesim.simulator.config import say_once

        say_once(["servesim: warning: the model's config.json holds none of the keys vLLM reads its length from: "
                  "2048 assumed, as vLLM assumes it"])
        lengths = {"max_position_embeddings": 2048}
    derived = lengths.get("model_max_length") or min(lengths.values())
    out = {"max_position_embeddings": _rope_length(data, derived, "0.33.0")}
    if (older := _rope_length(data, derived, "0.19.0")) != out["max_position_embeddings"]:
        out["max_model_len_0_19"] = older
    default = _rope_length(data, derived, "0.33.0")
    rope = _rope(data)
    if rope is not None and rope.get("rope_type", rope.get("type")) == "longrope" \
            and data.get("original_max_position_embeddings") is not None:
        default = _int_field(data, "original_max_position_embeddings")
    if default < out["max_position_embeddings"]:
        out["default_max_model_len"] = default
    return out


def _checkpoint_kv_dtype(q: dict) -> str | None:
    """The KV cache format a ModelOpt checkpoint asks for (vLLM resolves --kv-cache-dtype auto to it:
    get_kv_cache_quant_algo_string); None: the activations'. Its 4-bit KV cache is not modelled."""
    if not str(q.get("quant_method", "")).startswith("modelopt"):
        return None
    inner = q.get("quantization", q) if isinstance(q.get("quantization", q), dict) else q
    algo = inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo") \
        or q.get("kv_cache_quant_algo")
    if isinstance(algo, dict):
        bits, kind = algo.get("num_bits"), algo.get("type")
        algo = "fp8" if algo.get("dynamic") is False and bits == 8 and kind == "float" else \
            "nvfp4" if bits == 4 and kind == "float" else None
    algo = str(algo).lower() if algo is not None else None
    if algo == "nvfp4":
        raise ConfigError("model.quantization_config", "kv_cache_quant_algo NVFP4: a 4-bit KV cache (vLLM 0.33's) is "
                                                       "not modelled")
    return "fp8" if algo == "fp8" else None


def _check_expert_groups(data: dict) -> None:
    """DeepSeek's grouped routing as vLLM's grouped_topk runs it: the experts viewed as n_group equal groups, the
    best topk_group of them kept; experts that do not split, or more groups kept than there are, fail its first
    forward pass, the start-up profile's (r180: both ran)."""
    experts, groups, kept = (data.get(k) for k in ("n_routed_experts", "n_group", "topk_group"))
    whole = [isinstance(v, int) and not isinstance(v, bool) for v in (experts, groups, kept)]
    for key, v, ok in (("n_group", groups, whole[1]), ("topk_group", kept, whole[2])):
        if v is not None and not ok:  # vLLM views and picks by them as sizes (r181: 4.0 passed the checks)
            raise ConfigError(f"model.{key}", f"must be an integer (vLLM's grouped routing takes it as a size), got "
                                              f"{v!r:.40}")
    if whole[1] and groups < 1:
        raise ConfigError("model.n_group", f"{groups}: vLLM's grouped routing needs at least one group")
    if whole[0] and whole[1] and experts % groups:
        raise ConfigError("model.n_group", f"{groups} groups do not split the {experts} routed experts evenly: vLLM's "
                                           f"grouped routing views them as equal groups, and it does not start")
    if whole[1] and whole[2] and not 1 <= kept <= groups:
        raise ConfigError("model.topk_group", f"{kept} groups kept of {groups}: vLLM's grouped routing keeps 1 to "
                                              f"n_group of them, and it does not start")


def _from_hf(data: dict, source: str) -> dict:
    """An HF config.json -> servesim's fields: the family's own names mapped, its dense-layer layout counted,
    anything that changes memory or time and is not modelled refused by name."""
    given = data.get("model_type")
    family = HF_FAMILY_ALIASES.get(given, given) if isinstance(given, str) else given
    if not isinstance(family, str) or family not in HF_FAMILIES:
        raise ConfigError("model.model_type", f"{family!r} is not a family servesim reads (known: "
                                              f"{', '.join(sorted(HF_FAMILIES))}); describe it in a YAML of "
                                              f"servesim's fields (in {source})")
    data = {k: v for k, v in HF_CONFIG_DEFAULTS[family].items() if k not in data} | data
    if data.get("dtype") == "fp32":  # vLLM's --dtype auto runs a float32 checkpoint in bfloat16
        data["dtype"] = "bf16"
    if data.get("sliding_window") == 0 and not isinstance(data["sliding_window"], bool):
        data |= {"sliding_window": None, "layer_types": None}  # vLLM: no window, every layer attends to all
    why = _unmodelled(data, family)
    if why:
        raise ConfigError("model", f"{source}: {why}")
    out = {k: v for k, v in data.items() if k in ModelArchitecture.model_fields
           and k not in ("num_experts", "intermediate_size", "max_position_embeddings") + _LOCAL_KEYS}
    if data.get("intermediate_size") is not None:
        out["intermediate_size"] = data["intermediate_size"]
    if data.get("num_key_value_heads") is None and data.get("num_attention_heads") is not None:
        out["num_key_value_heads"] = data["num_attention_heads"]  # transformers' __post_init__: one per head
    hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
    if out.get("head_dim") is None and family not in ("deepseek_v2", "deepseek_v3") and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (hidden, heads)) and hidden % heads:
        out["head_dim"] = hidden // heads  # the config class's and vLLM's models' floor (r180: refused)
    out.update(_hf_lengths(data))
    out.update(_local_layers(data, family))
    out["hf_model_type"] = family
    for hf, ours in HF_FAMILIES[family].items():
        if data.get(hf) is not None:
            out[ours] = data[hf]
    if family in ("deepseek_v2", "deepseek_v3"):
        out.update({k: data[k] for k in _MLA_KEYS if data.get(k) is not None})
        out.pop("head_dim", None)
        _check_expert_groups(data)
    if family in _QWEN_MOE and out.get("num_experts"):
        layers = _int_field(data, "num_hidden_layers")
        given = data.get("decoder_sparse_step")  # 0 divides by zero in vLLM's layer loop: refused
        step = _int_field({"decoder_sparse_step": 1 if given is None else given}, "decoder_sparse_step")
        listed = data.get("mlp_only_layers") or []
        if not isinstance(listed, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in listed):
            raise ConfigError("model.mlp_only_layers", f"must be a list of layer numbers (integers >= 0), got "
                                                       f"{listed!r:.60}")
        dense_only = set(listed)
        moe = [i for i in range(layers) if (i + 1) % step == 0 and i not in dense_only]
        if moe != list(range(layers - len(moe), layers)):
            raise ConfigError("model", f"{source}: decoder_sparse_step {step} / mlp_only_layers interleave dense "
                                       f"and MoE layers; servesim counts them as dense-then-MoE only when the "
                                       f"dense ones come first")
        out["num_dense_layers"] = layers - len(moe)
    if family in ("qwen2", "qwen2_moe"):  # vLLM's Qwen2 attention always has a q/k/v bias (no config key)
        out["attention_bias"] = True
    if family in ("qwen3", "qwen3_moe"):  # vLLM's Qwen3 attention always norms each head's q and k (r154: lost)
        out["qk_norm"] = True
    if family == "llama4_text":
        out["num_shared_experts"] = 1  # one shared expert of the routed ones' size in every MoE layer
    q = data.get("quantization_config")
    if isinstance(q, dict):
        out["quant_method"] = _method(q)
        if kv := _checkpoint_kv_dtype(q):
            out["kv_cache_dtype"] = kv
        fmt = checkpoint_format(q)
        if fmt == "fp8" and q.get("weight_block_size") is not None:
            blocks = q["weight_block_size"]
            if not (isinstance(blocks, list) and len(blocks) == 2 and all(
                    isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in blocks)):
                raise ConfigError("model.quantization_config.weight_block_size", f"two positive integers [N, K], as "
                                                                                 f"vLLM takes it, got {blocks!r:.40}")
            out["weight_block_size"] = tuple(blocks)
        if fmt == "mxfp4":  # gpt-oss: the experts only; attention, router, embeddings stay 16-bit
            out["expert_dtype"] = fmt
        else:  # fp8 (DeepSeek-V3's block-scaled weights), 4-bit AWQ/GPTQ, NVFP4: the linear layers
            out["dtype"] = fmt
    return out


def _from_mapping(data: dict, source: str) -> ModelArchitecture:
    data = {_HF_ALIASES.get(k, k): v for k, v in data.items()}
    if isinstance(data.get("dtype"), str):
        data["dtype"] = _HF_DTYPES.get(data["dtype"], data["dtype"])
    if "architectures" in data or "model_type" in data:  # an HF config.json
        text_config = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
        q = next((c.get(key) for c in (data, text_config) for key in ("quantization_config", "compression_config")
                  if c.get(key) is not None), None)  # vLLM's order: the top level's, compressed-tensors' name
        if q is not None:  # too, then a multimodal wrapper's text_config's
            data["quantization_config"] = _modelopt_flat(q)
        if "text_config" in data:  # a multimodal wrapper (Llama 4): the decoder is text_config
            if not isinstance(data["text_config"], dict):
                raise ConfigError("model.text_config", f"must be a mapping, got {data['text_config']!r:.60}")
            text = ({"dtype": data["dtype"]} if data.get("dtype") is not None else {}) | \
                ({"model_type": WRAPPED_FAMILIES[data["model_type"]]} if isinstance(data.get("model_type"), str)
                 and data["model_type"] in WRAPPED_FAMILIES else {}) | {_HF_ALIASES.get(k, k): v for k, v in data["text_config"].items()}
            vision = data.get("vision_config")
            data = text | {"name": data.get("name", "custom"),
                           "encoder_params": _vision_params(vision) if vision is not None else 0} | (
                {"quantization_config": data["quantization_config"]} if "quantization_config" in data else {})
            if isinstance(data.get("dtype"), str):
                data["dtype"] = _HF_DTYPES.get(data["dtype"], data["dtype"])
        data = _from_hf(data, source)
    try:
        return ModelArchitecture.model_validate(data)  # not **data: a key 1 is no keyword
    except Exception as exc:  # pydantic ValidationError -> one line naming the field
        field, msg = first_error(exc, "model")
        raise ConfigError(field, f"{msg} (in {source})") from None


# HF model ids vLLM users name -> servesim's built-in architectures (their profiles match by these names)
HF_IDS = {"meta-llama/Llama-3.1-8B": "llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
          "meta-llama/Llama-3.1-70B": "llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
          "Qwen/Qwen3-32B": "qwen3-32b", "Qwen/Qwen3-8B": "qwen3-8b",
          "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b",
          "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b", "mistralai/Mistral-7B-v0.1": "mistral-7b",
          "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b", "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
          "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b", "deepseek-ai/DeepSeek-V3": "deepseek-v3",
          "deepseek-ai/DeepSeek-R1": "deepseek-v3", "openai/gpt-oss-120b": "gpt-oss-120b",
          "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E": "llama-4-scout",
          "meta-llama/Meta-Llama-3-8B": "llama-3-8b", "meta-llama/Meta-Llama-3-8B-Instruct": "llama-3-8b",
          "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b"}  # (Qwen2.5-7B's base checkpoint reads 131,072 positions)
# checkpoints of a built-in's shape whose config.json differs from it elsewhere: the built-in's name is kept, so its
# profiles apply (Qwen3-2507's 262,144 native positions, where Qwen3-30B-A3B's config.json reads 40,960)
HF_ID_CHANGES = {"Qwen/Qwen3-30B-A3B-Instruct-2507": {"max_position_embeddings": 262144},
                 "meta-llama/Llama-4-Scout-17B-16E": {"max_position_embeddings": 262144}}  # the Instruct's: 10 M
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hf_cache_dir() -> Path:
    """Where huggingface_hub keeps downloads: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub"


def _cached_config(hf_id: str) -> Path | None:
    """The config.json of `hf_id` in the local HF cache (the snapshot refs/main names, else the newest), offline."""
    repo = hf_cache_dir() / f"models--{hf_id.replace('/', '--')}"
    ref = repo / "refs" / "main"
    if ref.is_file():
        pinned = repo / "snapshots" / ref.read_text().strip() / "config.json"
        if pinned.is_file():
            return pinned
    found = sorted((repo / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _load_file(path: Path, name: str) -> ModelArchitecture:
    from servesim.simulator.files import load_yaml, read_settings_text

    text = read_settings_text(path, "model")
    if path.suffix == ".json":
        try:
            data = json.loads(text, object_pairs_hook=unique_keys)
        except JSON_ERRORS as exc:
            raise ConfigError("model", f"cannot parse {path}: {json_problem(exc)}") from None
    else:
        data = load_yaml(text, "model", str(path))
    if not isinstance(data, dict):
        raise ConfigError("model", f"{path} must hold a mapping of architecture fields")
    sidecar = path.with_name("hf_quant_config.json")
    if path.suffix == ".json" and data.get("quantization_config") is None and sidecar.is_file():
        # ModelOpt 0.29 and before keep the quantization beside config.json, where vLLM reads it too
        try:
            data["quantization_config"] = json.loads(read_settings_text(sidecar, "model"),
                                                     object_pairs_hook=unique_keys)
        except JSON_ERRORS as exc:
            raise ConfigError("model", f"cannot parse {sidecar}: {json_problem(exc)}") from None
    data.setdefault("name", name)
    return _from_mapping(data, str(path))


def load_model(spec: str | dict | ModelArchitecture) -> ModelArchitecture:
    """A built-in name, an HF model id (a known one as its built-in, else its config.json in the local HF cache,
    offline), a path to a YAML or HF config.json or to a folder holding config.json, or an inline mapping."""
    if isinstance(spec, ModelArchitecture):
        return spec
    if isinstance(spec, dict):
        return _from_mapping(spec, "scenario")
    if spec in HF_IDS:
        return load_model(HF_IDS[spec]).model_copy(update=HF_ID_CHANGES.get(spec, {}))
    path = Path(spec)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError("model", f"{spec} is a folder without a config.json")
        return _load_file(path / "config.json", path.resolve().name)
    if not path.exists() and path.suffix not in (".yaml", ".yml", ".json") and _HF_ID.match(str(spec)):
        cached = _cached_config(str(spec))
        if cached is None:
            raise ConfigError("model", f"{spec} is neither a built-in nor in the local HF cache ({hf_cache_dir()}); "
                                       f"servesim reads it offline: `huggingface-cli download {spec} config.json` "
                                       f"fetches it, or give a path to its config.json")
        return _load_file(cached, str(spec).split("/", 1)[1].lower())
    if path.suffix in (".yaml", ".yml", ".json") or path.exists() or path.is_symlink():
        return _load_file(path, path.stem)  # read_settings_text names what is missing or unreadable there
    f = _builtin_dir() / f"{spec}.yaml"
    if not f.is_file():
        raise ConfigError("model", f"unknown model {spec!r}; built-in: {', '.join(builtin_model_names())}, or a path to a YAML/config.json")
    return _from_mapping(yaml.safe_load(f.read_text()), f"built-in {spec}")
