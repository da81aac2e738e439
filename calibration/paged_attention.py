"""Paged decode attention that reads K/V in place through the block tables (Triton).

The harness's default decode attention gathers every sequence's context into a dense
tensor and calls SDPA: it copies the whole KV context each step, so it measures more
memory traffic than an engine's paged kernel does (4x vLLM's on the CPU, docs/fidelity.md).
This kernel is the engine's way: each program reads one sequence's pages for one KV head
straight from the pool, all of that head's query heads at once (GQA), with an online
softmax; long contexts are split into partitions reduced by a second kernel
(flash-decoding), so a batch of one still fills the GPU.

Needs Triton: on CUDA, or on the CPU under TRITON_INTERPRET=1 (the tests' correctness check).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

PARTITION = 512  # context tokens per program
BLOCK_N = 64  # tokens per inner step
# Triton's CPU interpreter computes bf16/fp16 dots wrongly (triton 3.9): interpreted, the dots run in fp32.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _partial(q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, o_ptr, m_ptr, l_ptr, scale,
             stride_qb, stride_qh, stride_ks, stride_kh, stride_tb, stride_ob, stride_oh, stride_os,
             stride_mb, stride_mh, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr,
             D_PAD: tl.constexpr, PAGE: tl.constexpr, BLOCK: tl.constexpr, PART: tl.constexpr,
             DOT_FP32: tl.constexpr):
    b, kvh, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    ctx = tl.load(lens_ptr + b)
    start = s * PART
    end = tl.minimum(start + PART, ctx)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, D_PAD)
    heads = kvh * GROUP + g
    gmask, dmask = g < GROUP, d < D
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :],
                mask=gmask[:, None] & dmask[None, :], other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, D_PAD], tl.float32)
    for n0 in range(start, end, BLOCK):
        tok = n0 + tl.arange(0, BLOCK)
        tmask = tok < end
        page = tl.load(tables_ptr + b * stride_tb + tok // PAGE, mask=tmask, other=0)
        slot = page.to(tl.int64) * PAGE + tok % PAGE
        kv_off = slot[:, None] * stride_ks + kvh * stride_kh + d[None, :]
        kv_mask = tmask[:, None] & dmask[None, :]
        k = tl.load(k_ptr + kv_off, mask=kv_mask, other=0.0)
        if DOT_FP32:
            k = k.to(tl.float32)
        sc = tl.dot(q, tl.trans(k)) * scale
        sc = tl.where(tmask[None, :], sc, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, 1))
        p = tl.exp(sc - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_ptr + kv_off, mask=kv_mask, other=0.0)
        if DOT_FP32:
            v = v.to(tl.float32)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o_off = b * stride_ob + heads[:, None] * stride_oh + s * stride_os + d[None, :]
    tl.store(o_ptr + o_off, acc, mask=gmask[:, None] & dmask[None, :])
    ml_off = b * stride_mb + heads * stride_mh + s
    tl.store(m_ptr + ml_off, m_i, mask=gmask)
    tl.store(l_ptr + ml_off, l_i, mask=gmask)


@triton.jit
def _reduce(o_ptr, m_ptr, l_ptr, out_ptr, splits, stride_ob, stride_oh, stride_os, stride_mb, stride_mh,
            stride_outb, stride_outh, D: tl.constexpr, D_PAD: tl.constexpr, S_PAD: tl.constexpr):
    b, h = tl.program_id(0), tl.program_id(1)
    s = tl.arange(0, S_PAD)
    d = tl.arange(0, D_PAD)
    smask, dmask = s < splits, d < D
    m = tl.load(m_ptr + b * stride_mb + h * stride_mh + s, mask=smask, other=float("-inf"))
    l = tl.load(l_ptr + b * stride_mb + h * stride_mh + s, mask=smask, other=0.0)
    w = tl.exp(m - tl.max(m, 0))  # partitions past the context hold m = -inf: weight 0
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + s[:, None] * stride_os + d[None, :],
                mask=smask[:, None] & dmask[None, :], other=0.0)
    out = tl.sum(o * w[:, None], 0) / tl.sum(l * w, 0)
    tl.store(out_ptr + b * stride_outb + h * stride_outh + d, out.to(out_ptr.dtype.element_ty), mask=dmask)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, tables: torch.Tensor,
                           lens: torch.Tensor, max_len: int, page: int) -> torch.Tensor:
    """q [B, H, D] (one token per sequence); k/v_cache [slots, KV, D] of one layer, slot = block x page
    + offset; tables [B, pages] block ids (0-padded); lens [B] context lengths, the new token included;
    max_len: the largest of lens (known on the host). Returns [B, H, D] in q's dtype."""
    b, h, d = q.shape
    kv = k_cache.shape[1]
    group = h // kv
    splits = triton.cdiv(max_len, PARTITION)
    o = torch.empty((b, h, splits, d), device=q.device, dtype=torch.float32)
    m = torch.empty((b, h, splits), device=q.device, dtype=torch.float32)
    l_ = torch.empty_like(m)
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    d_pad = triton.next_power_of_2(d)
    _partial[(b, kv, splits)](
        q, k_cache, v_cache, tables, lens, o, m, l_, d ** -0.5,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), tables.stride(0),
        o.stride(0), o.stride(1), o.stride(2), m.stride(0), m.stride(1),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), D=d, D_PAD=max(16, d_pad), PAGE=page,
        BLOCK=BLOCK_N, PART=PARTITION, DOT_FP32=INTERPRETED)
    out = torch.empty_like(q)
    _reduce[(b, h)](o, m, l_, out, splits, o.stride(0), o.stride(1), o.stride(2), m.stride(0), m.stride(1),
                    out.stride(0), out.stride(1), D=d, D_PAD=d_pad, S_PAD=max(2, triton.next_power_of_2(splits)))
    return out
