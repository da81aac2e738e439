"""A Llama-architecture transformer in plain torch, with a paged KV cache.

Our own modules rather than transformers': the harness must run vLLM-shaped steps
(all the step's tokens flattened into one [tokens, hidden] tensor, KV written into and
read from a block pool through per-sequence block tables), which HF's modules do not
do, and it must build any shape from an architecture without downloading weights.
Weights are random; timing does not depend on their values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import ModelArchitecture

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    if name not in TORCH_DTYPES:
        raise ConfigError("dtype", f"unknown dtype {name!r}; known: {', '.join(TORCH_DTYPES)}")
    return TORCH_DTYPES[name]


def kv_bytes_per_token(a: ModelArchitecture, dtype: torch.dtype) -> int:
    """The pool's bytes per cached token (K and V, every layer) in the dtype the model runs in here."""
    return 2 * a.num_hidden_layers * a.num_key_value_heads * a.head_dim * torch.tensor([], dtype=dtype).element_size()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class DecoderLayer(nn.Module):
    def __init__(self, a: ModelArchitecture):
        super().__init__()
        h, d = a.hidden_size, a.head_dim
        self.heads, self.kv_heads, self.head_dim = a.num_attention_heads, a.num_key_value_heads, d
        self.qkv = nn.Linear(h, (self.heads + 2 * self.kv_heads) * d, bias=a.attention_bias)
        self.o = nn.Linear(self.heads * d, h, bias=False)
        self.gate_up = nn.Linear(h, 2 * a.intermediate_size, bias=False)
        self.down = nn.Linear(a.intermediate_size, h, bias=False)
        self.norm1, self.norm2 = RMSNorm(h), RMSNorm(h)
        self.q_norm = RMSNorm(d) if a.qk_norm else None
        self.k_norm = RMSNorm(d) if a.qk_norm else None


@dataclass
class StepBatch:
    """One engine step's inputs, flattened as vLLM does."""

    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    slots: torch.Tensor  # [T] flat cache slot of each new token
    logit_rows: torch.Tensor  # [S] the last token of each sequence
    prefill: list  # (first row, rows, cached before, gather [cached + rows]) per prefill chunk
    decode_rows: torch.Tensor | None  # [B] rows of the decode tokens
    decode_gather: torch.Tensor | None  # [B, C] flat slots of each decode's context
    decode_mask: torch.Tensor | None  # [B, 1, 1, C] True where a slot is real (None: all real)
    decode_tables: torch.Tensor | None = None  # [B, pages] int32 block ids, 0-padded (paged attention)
    decode_lens: torch.Tensor | None = None  # [B] int32 context lengths, the new token included
    decode_max_len: int = 0


def make_batch(seqs, block_size: int, vocab_size: int, device, rng: np.random.Generator) -> StepBatch:
    """A step of (block table, cached tokens, new tokens) per sequence, flattened as vLLM does.

    One new token is a decode: decodes are batched, padded to the longest context with
    reads of block 0 (vLLM's null block) masked out. Longer ones are prefill chunks.
    """
    bs = block_size
    positions, slots, logit_rows, prefill, dec_rows, dec_ctx, dec_tables = [], [], [], [], [], [], []
    row = 0
    for table, cached, new in seqs:
        table = np.asarray(table, dtype=np.int64)
        pos = np.arange(cached, cached + new)
        positions.append(pos)
        slots.append(table[pos // bs] * bs + pos % bs)
        ctx = np.arange(cached + new)
        gather = table[ctx // bs] * bs + ctx % bs
        if new == 1:
            dec_rows.append(row)
            dec_ctx.append(gather)
            dec_tables.append(table[:-(-(cached + 1) // bs)])
        else:
            prefill.append((row, new, cached, torch.as_tensor(gather, device=device)))
        row += new
        logit_rows.append(row - 1)
    decode_rows = decode_gather = decode_mask = decode_tables = decode_lens = None
    width = 0
    if dec_rows:
        width = max(len(g) for g in dec_ctx)
        gather = np.zeros((len(dec_ctx), width), dtype=np.int64)
        mask = np.zeros((len(dec_ctx), width), dtype=bool)
        tables = np.zeros((len(dec_ctx), -(-width // bs)), dtype=np.int32)
        for i, (g, t) in enumerate(zip(dec_ctx, dec_tables)):
            gather[i, :len(g)] = g
            mask[i, :len(g)] = True
            tables[i, :len(t)] = t
        decode_rows = torch.as_tensor(np.array(dec_rows), device=device)
        decode_gather = torch.as_tensor(gather, device=device)
        if not mask.all():
            decode_mask = torch.as_tensor(mask[:, None, None, :], device=device)
        decode_tables = torch.as_tensor(tables, device=device)
        decode_lens = torch.as_tensor(np.array([len(g) for g in dec_ctx], dtype=np.int32), device=device)
    return StepBatch(
        input_ids=torch.as_tensor(rng.integers(0, vocab_size, size=row), device=device),
        positions=torch.as_tensor(np.concatenate(positions), device=device),
        slots=torch.as_tensor(np.concatenate(slots), device=device),
        logit_rows=torch.as_tensor(np.array(logit_rows), device=device),
        prefill=prefill, decode_rows=decode_rows, decode_gather=decode_gather, decode_mask=decode_mask,
        decode_tables=decode_tables, decode_lens=decode_lens, decode_max_len=width)


ATTENTION = ("gather", "paged")


def check_attention(attention: str, device) -> None:
    """`gather`: SDPA over each context copied out of the pool (any device). `paged`: the Triton kernel
    reading the pool in place (calibration/paged_attention.py), on CUDA, or under TRITON_INTERPRET=1."""
    if attention not in ATTENTION:
        raise ConfigError("attention", f"unknown attention {attention!r}; known: {', '.join(ATTENTION)}")
    if attention == "paged":
        if torch.device(device).type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ConfigError("attention", "paged attention is a Triton kernel: it needs a CUDA device "
                                           "(or TRITON_INTERPRET=1 on the CPU, for correctness checks only)")
        try:
            import triton  # noqa: F401
        except ImportError:
            raise ConfigError("attention", "paged attention needs triton (pip install triton)") from None


class PagedLlama(nn.Module):
    def __init__(self, a: ModelArchitecture, num_blocks: int, block_size: int, dtype: torch.dtype, device,
                 attention: str = "gather"):
        super().__init__()
        check_attention(attention, device)
        self.arch, self.block_size, self.attention_kind = a, block_size, attention
        # built in place on the device: an 8B model initialised on the host in fp32 would take 32 GB and minutes
        with torch.device(device):
            self.embed = nn.Embedding(a.vocab_size, a.hidden_size)
            self.layers = nn.ModuleList(DecoderLayer(a) for _ in range(a.num_hidden_layers))
            self.norm = RMSNorm(a.hidden_size)
            self.lm_head = nn.Linear(a.hidden_size, a.vocab_size, bias=False)
        self.to(dtype=dtype)
        shape = (a.num_hidden_layers, num_blocks * block_size, a.num_key_value_heads, a.head_dim)
        g = torch.Generator(device=device).manual_seed(0)
        # random, not zeros: attention reads real-looking values
        self.k_cache = torch.randn(shape, generator=g, device=device, dtype=dtype).mul_(0.5)
        self.v_cache = torch.randn(shape, generator=g, device=device, dtype=dtype).mul_(0.5)
        inv = 1.0 / (500000.0 ** (torch.arange(0, a.head_dim, 2, device=device, dtype=torch.float32) / a.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def _rope(self, x, cos, sin):
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    def attention(self, layer: int, q, b: StepBatch):
        """Paged attention over the block pool: prefill chunks one by one, decodes batched."""
        out = torch.empty_like(q)  # [T, H, d]
        kc, vc = self.k_cache[layer], self.v_cache[layer]
        for first, rows, cached, gather in b.prefill:
            qc = q[first:first + rows].transpose(0, 1).unsqueeze(0)  # [1, H, rows, d]
            k = kc[gather].transpose(0, 1).unsqueeze(0)  # [1, KV, cached + rows, d]
            v = vc[gather].transpose(0, 1).unsqueeze(0)
            if cached == 0:
                o = F.scaled_dot_product_attention(qc, k, v, is_causal=True, enable_gqa=True)
            else:
                i = torch.arange(rows, device=q.device)[:, None]
                j = torch.arange(cached + rows, device=q.device)[None, :]
                o = F.scaled_dot_product_attention(qc, k, v, attn_mask=j <= cached + i, enable_gqa=True)
            out[first:first + rows] = o[0].transpose(0, 1)
        if b.decode_rows is not None:
            out[b.decode_rows] = self.decode_attention(layer, q[b.decode_rows], b)
        return out

    def decode_attention(self, layer: int, qd, b: StepBatch):
        """One query token per sequence against its cached context, through the block tables."""
        if self.attention_kind == "paged":
            from servesim.calibration.paged_attention import paged_decode_attention

            return paged_decode_attention(qd, self.k_cache[layer], self.v_cache[layer], b.decode_tables,
                                          b.decode_lens, b.decode_max_len, self.block_size)
        k = self.k_cache[layer][b.decode_gather].transpose(1, 2)  # [B, KV, C, d]
        v = self.v_cache[layer][b.decode_gather].transpose(1, 2)
        o = F.scaled_dot_product_attention(qd.unsqueeze(2), k, v, attn_mask=b.decode_mask, enable_gqa=True)
        return o.squeeze(2)

    @torch.no_grad()
    def forward(self, b: StepBatch):
        a = self.arch
        x = self.embed(b.input_ids)
        freqs = b.positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = freqs.cos().to(x.dtype)[:, None, :], freqs.sin().to(x.dtype)[:, None, :]
        t = x.shape[0]
        for li, layer in enumerate(self.layers):
            res = x
            qkv = layer.qkv(layer.norm1(x))
            q, k, v = qkv.split([a.num_attention_heads * a.head_dim, a.num_key_value_heads * a.head_dim,
                                 a.num_key_value_heads * a.head_dim], dim=-1)
            q = q.view(t, a.num_attention_heads, a.head_dim)
            k = k.view(t, a.num_key_value_heads, a.head_dim)
            v = v.view(t, a.num_key_value_heads, a.head_dim)
            if layer.q_norm is not None:
                q, k = layer.q_norm(q), layer.k_norm(k)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            self.k_cache[li][b.slots] = k
            self.v_cache[li][b.slots] = v
            x = res + layer.o(self.attention(li, q, b).reshape(t, -1))
            res = x
            g, u = layer.gate_up(layer.norm2(x)).chunk(2, dim=-1)
            x = res + layer.down(F.silu(g) * u)
        return self.lm_head(self.norm(x[b.logit_rows]))
