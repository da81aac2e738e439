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

from calibration.grid import GridPoint, make_grid
from simulator.errors import ConfigError
from simulator.model_arch import ModelArchitecture, load_model


def _torch():
    try:
        import torch
    except ImportError:
        raise ConfigError("calibrate", "torch is not installed; install the extra: pip install -e '.[calibrate]'") from None
    return torch


class Harness:
    def __init__(self, arch: ModelArchitecture, device: str, dtype: str, block_size: int, points: list[GridPoint],
                 threads: int | None = None, seed: int = 0):
        torch = _torch()
        from calibration.torch_model import TORCH_DTYPES, PagedLlama

        if dtype not in TORCH_DTYPES:
            raise ConfigError("dtype", f"unknown dtype {dtype!r}; known: {', '.join(TORCH_DTYPES)}")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError("device", f"{device} requested but torch sees no CUDA device")
        if device != "cpu" and not device.startswith("cuda"):
            raise ConfigError("device", f"unknown device {device!r}; use cpu or cuda[:N]")
        self.torch, self.device, self.block_size = torch, torch.device(device), block_size
        self.cuda = self.device.type == "cuda"
        if not self.cuda:
            self.threads = threads or torch.get_num_threads()
            torch.set_num_threads(self.threads)
        else:
            self.threads = None
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        slots = max(p.max_kv_tokens for p in points)
        self.num_blocks = -(-slots // block_size) + 2 * len(points) + 8
        self.model = PagedLlama(arch, self.num_blocks, block_size, TORCH_DTYPES[dtype], self.device).eval()
        self.arch = arch

    # -- batches ------------------------------------------------------------
    def _table(self, free: list, tokens: int) -> np.ndarray:
        n = -(-tokens // self.block_size)
        blocks = np.array([free.pop() for _ in range(n)], dtype=np.int64)
        return blocks

    def _slots(self, table: np.ndarray, start: int, stop: int) -> np.ndarray:
        pos = np.arange(start, stop)
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def build(self, p: GridPoint):
        """Real block tables over a shuffled free list, as a long-running pool has them."""
        torch, dev = self.torch, self.device
        free = list(self.rng.permutation(self.num_blocks))
        prefill_seqs = []  # (cached, new)
        decodes = []
        if p.kind == "prefill":
            prefill_seqs = [(0, p.tokens)] * p.batch
        elif p.kind in ("decode", "attention"):
            decodes = [p.context] * p.batch
        else:
            prefill_seqs = [(p.context, p.tokens)]
            decodes = [p.context] * p.batch
        ids, positions, slots, logit_rows, prefill = [], [], [], [], []
        row = 0
        for cached, new in prefill_seqs:
            table = self._table(free, cached + new)
            positions.append(np.arange(cached, cached + new))
            slots.append(self._slots(table, cached, cached + new))
            gather = torch.as_tensor(self._slots(table, 0, cached + new), device=dev)
            prefill.append((row, new, cached, gather))
            row += new
            logit_rows.append(row - 1)
        decode_rows = decode_gather = None
        if decodes:
            gathers = []
            for ctx in decodes:
                table = self._table(free, ctx + 1)
                positions.append(np.array([ctx]))
                slots.append(self._slots(table, ctx, ctx + 1))
                gathers.append(self._slots(table, 0, ctx + 1))
                logit_rows.append(row)
                row += 1
            decode_rows = torch.arange(row - len(decodes), row, device=dev)
            decode_gather = torch.as_tensor(np.stack(gathers), device=dev)
        from calibration.torch_model import StepBatch

        positions = np.concatenate(positions)
        return StepBatch(
            input_ids=torch.as_tensor(self.rng.integers(0, self.arch.vocab_size, size=row), device=dev),
            positions=torch.as_tensor(positions, device=dev),
            slots=torch.as_tensor(np.concatenate(slots), device=dev),
            logit_rows=torch.as_tensor(np.array(logit_rows), device=dev),
            prefill=prefill, decode_rows=decode_rows, decode_gather=decode_gather, decode_mask=None)

    # -- timing ---------------------------------------------------------------
    def _time(self, fn, warmup: int, repeats: int) -> list[float]:
        torch = self.torch
        for _ in range(warmup):
            fn()
        times = []
        if self.cuda:
            torch.cuda.synchronize(self.device)
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        else:
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1000.0)
        return times

    def measure(self, p: GridPoint, warmup: int = 2, repeats: int = 5) -> dict:
        b = self.build(p)
        if p.kind == "attention":
            qd = self.torch.randn(p.batch, self.arch.num_attention_heads, self.arch.head_dim,
                                  device=self.device, dtype=self.model.k_cache.dtype)
            with self.torch.no_grad():
                times = self._time(lambda: self.model.decode_attention(0, qd, b), warmup, repeats)
            scope = "layer"
        else:
            times = self._time(lambda: self.model(b), warmup, repeats)
            scope = "step"
        return p.row() | {"scope": scope, "time_ms": statistics.median(times),
                          "time_ms_p10": float(np.percentile(times, 10)),
                          "time_ms_p90": float(np.percentile(times, 90)), "repeats": repeats}


def run_calibration(model: str, device: str, dtype: str, out: str | Path, grid: str | None = None,
                    block_size: int = 16, warmup: int = 2, repeats: int = 5, threads: int | None = None,
                    progress: bool = True, points: list[GridPoint] | None = None) -> Path:
    """Measure the grid, write measurements.parquet and run.json into `out`."""
    from calibration.hardware_info import describe

    arch = load_model(model)
    grid = grid or ("gpu" if device.startswith("cuda") else "cpu")
    pts = points if points is not None else make_grid(grid, arch.max_position_embeddings)
    if not pts:
        raise ConfigError("grid", "the grid is empty")
    if repeats < 1 or warmup < 0:
        raise ConfigError("repeats", "repeats must be >= 1 and warmup >= 0")
    h = Harness(arch, device, dtype, block_size, pts, threads)
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
            "block_size": block_size, "grid": grid, "warmup": warmup, "repeats": repeats,
            "points": len(pts), "wall_s": round(time.perf_counter() - t0, 1),
            "hardware": describe(device, h.threads)}
    (out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out
