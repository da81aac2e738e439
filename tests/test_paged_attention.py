"""The Triton paged decode-attention kernel against dense attention (under Triton's CPU interpreter here,
on the GPU with TRITON_INTERPRET=0), and the harness model with either attention."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is in the `calibrate` extra; `make test` installs it")
pytest.importorskip("triton", reason="triton is in the `test` extra; `make test` installs it")

from servesim.calibration.harness import Harness  # noqa: E402
from servesim.calibration.grid import GridPoint  # noqa: E402
from servesim.calibration.paged_attention import paged_decode_attention  # noqa: E402
from servesim.calibration.torch_model import PagedLlama, check_attention, make_batch  # noqa: E402
from servesim.simulator.errors import ConfigError  # noqa: E402
from servesim.simulator.model_arch import load_model  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _case(heads, kv_heads, dim, page, lens, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    blocks = sum(-(-n // page) for n in lens) + 5
    kc = torch.randn(blocks * page, kv_heads, dim, generator=g).to(DEVICE, dtype)
    vc = torch.randn(blocks * page, kv_heads, dim, generator=g).to(DEVICE, dtype)
    q = torch.randn(len(lens), heads, dim, generator=g).to(DEVICE, dtype)
    free = (torch.randperm(blocks - 1, generator=g) + 1).tolist()  # scattered blocks, as a used pool has them
    tables = torch.zeros(len(lens), max(-(-n // page) for n in lens), dtype=torch.int32)
    ref = []
    for i, n in enumerate(lens):
        own = [free.pop() for _ in range(-(-n // page))]
        tables[i, :len(own)] = torch.tensor(own, dtype=torch.int32)
        slots = (torch.tensor(own)[:, None] * page + torch.arange(page)).flatten()[:n].to(DEVICE)
        k = kc[slots].double().transpose(0, 1).repeat_interleave(heads // kv_heads, 0)  # [H, n, d]
        v = vc[slots].double().transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        w = torch.softmax((k @ q[i].double()[:, :, None])[..., 0] / dim ** 0.5, -1)  # [H, n]
        ref.append((w[:, None, :] @ v)[:, 0])
    out = paged_decode_attention(q, kc, vc, tables.to(DEVICE), torch.tensor(lens, dtype=torch.int32, device=DEVICE),
                                 max(lens), page)
    return out, torch.stack(ref)


@pytest.mark.parametrize("heads,kv_heads,dim,page,lens", [
    (4, 2, 32, 16, [1, 15, 16, 17]),           # partial pages and a one-token context
    (8, 8, 64, 16, [513, 40]),                  # no GQA; a context just past one partition
    (32, 8, 128, 16, [1100, 3, 700]),           # Llama-3-8B's heads, several partitions
    (12, 4, 80, 32, [300, 64]),                 # a head size that is not a power of two, 32-token pages
])
def test_kernel_matches_dense_attention(heads, kv_heads, dim, page, lens):
    out, ref = _case(heads, kv_heads, dim, page, lens, torch.float32, seed=len(lens) + dim)
    assert out.shape == ref.shape and out.dtype == torch.float32
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < (1e-4 if DEVICE == "cpu" else 5e-3)  # tf32 dots on a GPU


def test_kernel_in_bf16():
    out, ref = _case(32, 8, 128, 16, [900, 33], torch.bfloat16, seed=3)
    assert out.dtype == torch.bfloat16
    assert ((out.double() - ref).norm() / ref.norm()).item() < 2e-2


def test_model_gives_the_same_logits_with_either_attention():
    arch = load_model("tiny-llama")
    logits = {}
    for attention in ("gather", "paged"):
        torch.manual_seed(0)
        m = PagedLlama(arch, 64, 16, torch.float32, DEVICE, attention).eval()
        seqs = [(np.arange(1, 9), 30, 20), (np.arange(9, 20), 170, 1), (np.arange(20, 22), 17, 1),
                (np.arange(22, 23), 0, 1)]  # a prefill chunk after cached context, and three decodes
        b = make_batch(seqs, 16, arch.vocab_size, DEVICE, np.random.default_rng(1))
        logits[attention] = m(b)
    assert logits["gather"].shape == (4, arch.vocab_size)
    assert torch.allclose(logits["gather"], logits["paged"], rtol=1e-4, atol=1e-4)


def test_harness_times_the_paged_kernel():
    h = Harness(load_model("tiny-llama"), DEVICE, "fp32", 16, [GridPoint("attention", 4, 0, 100)], threads=1,
                attention="paged")
    row = h.measure(GridPoint("attention", 4, 0, 100), warmup=0, repeats=1)
    assert row["time_ms"] > 0 and row["scope"] == "layer"


def test_attention_errors(monkeypatch):
    with pytest.raises(ConfigError, match="unknown attention 'flash'"):
        check_attention("flash", "cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        check_attention("paged", "cpu")
