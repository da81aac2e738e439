"""`servesim calibrate run`: time real forward passes and paged-attention kernels on a device.

Timing discipline: warm-up runs first; on CUDA, CUDA events with a synchronize; on the
CPU a fixed thread count and perf_counter; several repeats; the median is the
measurement (p10 and p90 kept beside it). Inputs are random token ids over a random KV
cache, not zeros.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd

from servesim.calibration.grid import GridPoint, make_grid
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import ModelArchitecture, load_model


def _torch():
    try:
        import torch
    except ImportError:
        raise ConfigError("calibrate", "torch is not installed; install the extra: pip install -e '.[calibrate]'") from None
    return torch


class Harness:
    def __init__(self, arch: ModelArchitecture, device: str, dtype: str, block_size: int, points: list[GridPoint],
                 threads: int | None = None, seed: int = 0, attention: str = "gather"):
        torch = _torch()
        from servesim.calibration.torch_model import PagedLlama, torch_dtype

        tdtype = torch_dtype(dtype)
        self.torch, self.device, self.block_size = torch, usable_device(torch, device, "device"), block_size
        self.cuda = self.device.type == "cuda"
        if not self.cuda:
            self.threads = threads or torch.get_num_threads()
            torch.set_num_threads(self.threads)
        else:
            self.threads = None
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        # spread contexts keep each batch's sum, so the largest point plus a partial block per sequence fits
        self.num_blocks = -(-max(p.max_kv_tokens for p in points) // block_size) + 2 * max(p.batch for p in points) + 8
        self.model = PagedLlama(arch, self.num_blocks, block_size, tdtype, self.device, attention).eval()
        self.arch = arch

    # -- batches ------------------------------------------------------------
    def _table(self, free: list, tokens: int) -> np.ndarray:
        return np.array([free.pop() for _ in range(-(-tokens // self.block_size))], dtype=np.int64)

    @staticmethod
    def spread(context: int, batch: int) -> list[int]:
        """Decode contexts around `context`, summing to batch x context: a real batch is never uniform
        (and uniform contexts would let attention skip the padding mask that real batches need)."""
        if batch == 1:
            return [context]
        ctx = np.rint(np.linspace(0.5 * context, 1.5 * context, batch)).astype(int)
        ctx[-1] += batch * context - ctx.sum()
        return [int(c) for c in ctx]

    def build(self, p: GridPoint):
        """Real block tables over a shuffled free list (as a long-running pool has them), sizes from the point."""
        from servesim.calibration.torch_model import make_batch

        free = list(self.rng.permutation(np.arange(1, self.num_blocks)))  # block 0 is the null block
        if p.kind == "prefill":
            seqs = [(p.tokens, 0)] * p.batch
        elif p.kind in ("decode", "attention"):
            seqs = [(1, c) for c in self.spread(p.context, p.batch)]
        else:
            seqs = [(p.tokens, p.context)] + [(1, c) for c in self.spread(p.context, p.batch)]
        return make_batch([(self._table(free, cached + new), cached, new) for new, cached in seqs],
                          self.block_size, self.arch.vocab_size, self.device, self.rng)

    # -- timing ---------------------------------------------------------------
    def _time(self, fn, batches: list, warmup: int) -> list[float]:
        torch = self.torch
        for b in batches[:warmup]:
            fn(b)
        times = []
        if self.cuda:
            torch.cuda.synchronize(self.device)
            for b in batches[warmup:]:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(b)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        else:
            for b in batches[warmup:]:
                t0 = time.perf_counter()
                fn(b)
                times.append((time.perf_counter() - t0) * 1000.0)
        return times

    def measure(self, p: GridPoint, warmup: int = 2, repeats: int = 5) -> dict:
        """Each run gets its own batch of the point's shape (fresh block tables and token ids): re-running
        one batch would time caches that still hold its KV, which a real next step does not find."""
        batches = [self.build(p) for _ in range(warmup + repeats)]
        if p.kind == "attention":
            qd = self.torch.randn(p.batch, self.arch.num_attention_heads, self.arch.head_dim,
                                  device=self.device, dtype=self.model.k_cache.dtype)
            fn = lambda b: self.model.decode_attention(0, qd, b)  # noqa: E731
            scope = "layer"
        else:
            fn, scope = self.model, "step"
        with self.torch.no_grad():
            times = self._time(fn, batches, warmup)
        return p.row() | {"scope": scope, "time_ms": statistics.median(times),
                          "time_ms_p10": float(np.percentile(times, 10)),
                          "time_ms_p90": float(np.percentile(times, 90)), "repeats": repeats}


def usable_device(torch, device: str, field: str = "--device"):
    """cpu, or a CUDA device that this torch build can see; anything else is one line naming --device."""
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(field, f"{device!r}: {str(exc).splitlines()[0]}") from None
    if d.type == "cpu" and d.index not in (None, 0):
        raise ConfigError(field, f"{device!r}: the CPU is one device, cpu")
    if d.type == "cuda" and not (torch.cuda.is_available() and (d.index or 0) < torch.cuda.device_count()):
        raise ConfigError(field, f"{device!r}: no such CUDA device here ({torch.cuda.device_count()} visible)")
    if d.type not in ("cpu", "cuda"):
        raise ConfigError(field, f"{device!r}: only cpu and cuda[:N] are measured")
    return d


def measured_here(profile_device: str, profile_label: str, device: str) -> None:
    """A profile measured on another device is no check of it here: its timings would judge the hardware."""
    from servesim.calibration.hardware_info import describe

    here = describe(device)["name"]
    if profile_device not in ("any", here):
        raise ConfigError("--device", f"{profile_label} was measured on {profile_device}, but {device} here is "
                                      f"{here}: re-measure it on the device it describes")


def free_memory(torch, device: str) -> tuple[float | None, float]:
    """Bytes free for the model on `device` (None where unknown) and what to keep for activations."""
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            return None, 0.0
        return float(torch.cuda.mem_get_info(torch.device(device))[0]), 6 * 2**30
    try:  # MemAvailable: what can be allocated without swapping, page cache included
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None, 0.0
    return kib * 1024.0, 2**30


def memory_plan(arch: ModelArchitecture, device: str, dtype: str, points: list[GridPoint],
                max_kv_gib: float | None = None) -> tuple[list[GridPoint], list[GridPoint], float | None]:
    """Points whose KV cache fits the device, the ones that do not, and the KV budget in GiB.

    The budget is the free memory (on the CPU: what the system has available) less the
    weights and a reserve for activations; a point's cost is its KV tokens in the pool plus
    the per-layer copies attention makes of them (gathered K/V, expanded to every query head,
    with the padding of uneven contexts). Weights that do not fit are refused up front.
    """
    torch = _torch()
    from servesim.calibration.torch_model import kv_bytes_per_token, torch_dtype

    elem = torch.tensor([], dtype=torch_dtype(dtype)).element_size()
    per_token = kv_bytes_per_token(arch, torch_dtype(dtype))
    transient = 2 * (arch.num_attention_heads + arch.num_key_value_heads) * arch.head_dim * elem * 1.5
    free, reserve = free_memory(torch, device)
    weights = arch.num_params * elem
    if free is not None and weights > 0.92 * free - reserve:  # the kernel would kill the process instead
        raise ConfigError("--model", f"{arch.name}'s {weights / 2**30:.1f} GiB of {dtype} weights do not fit "
                                     f"the {free / 2**30:.1f} GiB free on {device}")
    if max_kv_gib is None and free is not None:
        max_kv_gib = (0.92 * free - weights - reserve) / 2**30
    if max_kv_gib is None:
        return list(points), [], None
    if max_kv_gib <= 0:
        raise ConfigError("max_kv_gib", f"no memory left for a KV cache on {device} ({max_kv_gib:.1f} GiB)")
    fits = lambda p: p.max_kv_tokens * (per_token + transient) <= max_kv_gib * 2**30  # noqa: E731
    return [p for p in points if fits(p)], [p for p in points if not fits(p)], max_kv_gib


def run_calibration(model: str, device: str, dtype: str, out: str | Path, grid: str | None = None,
                    block_size: int = 16, warmup: int = 2, repeats: int = 5, threads: int | None = None,
                    progress: bool = True, points: list[GridPoint] | None = None,
                    max_kv_gib: float | None = None, attention: str = "gather") -> Path:
    """Measure the grid, write measurements.parquet and run.json into `out`."""
    from servesim.calibration.hardware_info import describe

    arch = load_model(model)
    arch.require_dense("the torch harness", "--model")
    grid = grid or ("gpu" if device.startswith("cuda") else "cpu")
    pts = points if points is not None else make_grid(grid, arch.max_position_embeddings)
    if not pts:
        raise ConfigError("grid", "the grid is empty")
    if repeats < 1 or warmup < 0:
        raise ConfigError("repeats", "repeats must be >= 1 and warmup >= 0")
    pts, skipped, budget = memory_plan(arch, device, dtype, pts, max_kv_gib)
    if not pts:
        raise ConfigError("max_kv_gib", f"no grid point fits a {budget:.3g} GiB KV cache")
    if skipped and progress:
        print(f"{len(skipped)} grid point(s) need more than the {budget:.3g} GiB KV budget and are skipped: "
              + ", ".join(f"{p.kind} {p.batch}x{p.tokens or p.context}" for p in skipped))
    h = Harness(arch, device, dtype, block_size, pts, threads, attention=attention)
    it = pts
    if progress:
        from tqdm import tqdm

        it = tqdm(pts, desc=f"calibrating {arch.name} on {device}", unit="point")
    t0 = time.perf_counter()
    rows = [h.measure(p, warmup, repeats) for p in it]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(out / "measurements.parquet", index=False)
    meta = {"model": arch.name, "architecture": arch.model_dump(mode="json"), "device": device, "dtype": dtype,
            "block_size": block_size, "grid": grid, "attention": attention, "warmup": warmup, "repeats": repeats,
            "points": len(pts), "wall_s": round(time.perf_counter() - t0, 1),
            "kv_budget_gib": None if budget is None else round(budget, 2),
            "skipped_points": [p.row() for p in skipped],
            "hardware": describe(device, h.threads)}
    (out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out
