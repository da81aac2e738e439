"""Model architecture: the one place KV bytes per token, weight bytes and FLOPs come from."""

from __future__ import annotations

import json
import math
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from simulator.errors import ConfigError

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
Dtype = Literal["fp32", "fp16", "bf16", "fp8"]
# Linear-layer weight formats: bits per weight, scales included. nvfp4: 4-bit e2m1 plus an fp8 scale per 16
# (modelopt_fp4, W4A4); w4a16: 4-bit integers plus an fp16 scale (and zero point) per group of 128 (AWQ, GPTQ).
# Embeddings, the LM head and the norms stay in 16 bits, as vLLM quantizes linear layers only.
WEIGHT_BITS = {"fp32": 32.0, "fp16": 16.0, "bf16": 16.0, "fp8": 8.0, "nvfp4": 4.5, "w4a16": 4.25}
WeightFormat = Literal["fp32", "fp16", "bf16", "fp8", "nvfp4", "w4a16"]

# HF config.json keys that mean the same as ours.
_HF_ALIASES = {"torch_dtype": "dtype", "n_layer": "num_hidden_layers"}
_HF_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float8": "fp8"}


class ModelArchitecture(BaseModel):
    """HF-style transformer shape (Llama/Qwen/Mistral family: GQA attention, gated MLP)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    num_hidden_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt
    head_dim: PositiveInt | None = None
    intermediate_size: PositiveInt
    vocab_size: PositiveInt
    max_position_embeddings: PositiveInt = 8192
    dtype: WeightFormat = Field("bf16", description="the linear layers' format (fp8: W8A8, nvfp4: W4A4, w4a16: "
                                                     "4-bit weights with 16-bit activations)")
    kv_cache_dtype: Dtype | None = Field(default=None, description="defaults to the activations' dtype")
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over each head's q and k

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
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer: 2 x kv_heads x head_dim x bytes x layers."""
        return 2 * self.num_key_value_heads * self.head_dim * self.kv_dtype_bytes * self.num_hidden_layers

    def kv_bytes_per_token_per_gpu(self, tensor_parallel_size: int = 1) -> int:
        """KV heads split across the TP group; with fewer KV heads than GPUs each GPU keeps one (vLLM replicates)."""
        heads = max(1, self.num_key_value_heads // tensor_parallel_size)
        return 2 * heads * self.head_dim * self.kv_dtype_bytes * self.num_hidden_layers

    @cached_property
    def params_per_layer(self) -> int:
        h, d = self.hidden_size, self.head_dim
        q = h * self.num_attention_heads * d
        kv = 2 * h * self.num_key_value_heads * d
        o = self.num_attention_heads * d * h
        bias = (self.num_attention_heads + 2 * self.num_key_value_heads) * d if self.attention_bias else 0
        mlp = 3 * h * self.intermediate_size
        return q + kv + o + bias + mlp + self.norm_params_per_layer

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0)

    @cached_property
    def num_params(self) -> int:
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else embed
        return embed + head + self.num_hidden_layers * self.params_per_layer + self.hidden_size

    @property
    def weight_bytes(self) -> int:
        """Linear layers in the weight format; embeddings, LM head and norms in 16 bits (32 for fp32 models)."""
        linear = self.num_hidden_layers * (self.params_per_layer - self.norm_params_per_layer)
        rest = self.num_params - linear
        wide = 4 if self.dtype == "fp32" else 2
        return math.ceil(linear * WEIGHT_BITS[self.dtype] / 8) + rest * wide

    @property
    def matmul_params(self) -> int:
        """Parameters a token multiplies through: every layer plus the LM head (not the embedding lookup)."""
        return self.num_hidden_layers * self.params_per_layer + self.vocab_size * self.hidden_size

    @property
    def linear_flops_per_token(self) -> int:
        return 2 * self.matmul_params

    @property
    def attention_flops_per_token_pair(self) -> int:
        """FLOPs of one query token attending to one context token (QK^T and PV), all layers."""
        return 4 * self.num_attention_heads * self.head_dim * self.num_hidden_layers


def _builtin_dir():
    return resources.files("simulator") / "data" / "models"


def builtin_model_names() -> list[str]:
    return sorted(p.name[:-5] for p in _builtin_dir().iterdir() if p.name.endswith(".yaml"))


def _from_mapping(data: dict, source: str) -> ModelArchitecture:
    data = {_HF_ALIASES.get(k, k): v for k, v in data.items()}
    if isinstance(data.get("dtype"), str):
        data["dtype"] = _HF_DTYPES.get(data["dtype"], data["dtype"])
    known = set(ModelArchitecture.model_fields)
    if "architectures" in data or "model_type" in data:  # an HF config.json: keep what we model
        data = {k: v for k, v in data.items() if k in known}
    try:
        return ModelArchitecture(**data)
    except Exception as exc:  # pydantic ValidationError -> one line naming the field
        from simulator.config import first_error

        field, msg = first_error(exc)
        raise ConfigError(f"model.{field}" if field else "model", f"{msg} (in {source})") from None


def load_model(spec: str | dict | ModelArchitecture) -> ModelArchitecture:
    """A built-in name, a path to a YAML or HF config.json, or an inline mapping."""
    if isinstance(spec, ModelArchitecture):
        return spec
    if isinstance(spec, dict):
        return _from_mapping(spec, "scenario")
    path = Path(spec)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        if not path.exists():
            raise ConfigError("model", f"file not found: {spec}")
        text = path.read_text()
        try:
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            raise ConfigError("model", f"cannot parse {spec}: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise ConfigError("model", f"{spec} must hold a mapping of architecture fields")
        data.setdefault("name", path.stem)
        return _from_mapping(data, str(spec))
    f = _builtin_dir() / f"{spec}.yaml"
    if not f.is_file():
        raise ConfigError("model", f"unknown model {spec!r}; built-in: {', '.join(builtin_model_names())}, or a path to a YAML/config.json")
    return _from_mapping(yaml.safe_load(f.read_text()), f"built-in {spec}")
