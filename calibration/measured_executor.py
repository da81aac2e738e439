"""Measured replay: the simulator's own scheduler, but every batch really runs.

An Executor (simulator/executor.py) that runs each scheduled batch as real forward
passes of the architecture (calibration/torch_model.py) over a paged KV cache laid out
exactly as the simulator's block manager allocated it, and returns the measured time.
A simulation and a measured replay of the same workload differ only in step durations:
the cleanest test of a cost model on the batches that really occur.
"""

from __future__ import annotations

import time

import numpy as np

from servesim.calibration.harness import usable_device
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import ModelArchitecture

MAX_CACHE_GIB = 16.0


class MeasuredExecutor:
    pure = False  # durations are measurements: no decode runs, every step really runs

    def __init__(self, arch: ModelArchitecture, device: str, dtype: str, block_size: int, num_blocks: int,
                 threads: int | None = None, seed: int = 0, attention: str = "gather"):
        from servesim.calibration.harness import _torch
        from servesim.calibration.torch_model import PagedLlama, kv_bytes_per_token, torch_dtype

        torch = _torch()
        tdtype = torch_dtype(dtype)
        cache_gib = num_blocks * block_size * kv_bytes_per_token(arch, tdtype) / 2**30
        if cache_gib > MAX_CACHE_GIB:
            raise ConfigError("engine.num_gpu_blocks_override",
                              f"a measured replay would allocate a {cache_gib:.1f} GiB KV cache for {num_blocks:,} "
                              f"blocks; set engine.num_gpu_blocks_override to a smaller pool")
        self.torch, self.device = torch, usable_device(torch, device)
        self.cuda = self.device.type == "cuda"
        if not self.cuda and threads:
            torch.set_num_threads(threads)
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.arch, self.block_size = arch, block_size
        self.model = PagedLlama(arch, num_blocks, block_size, tdtype, self.device, attention).eval()
        self.steps = 0
        self._warm_up()

    def _warm_up(self) -> None:
        """The first forward passes pay for allocation and kernel selection: not part of any step."""
        from servesim.calibration.torch_model import make_batch

        blocks = list(range(1, min(9, self.model.k_cache.shape[1] // self.block_size)))
        if len(blocks) < 2:
            return
        tokens = len(blocks) * self.block_size
        for seqs in ([(blocks, 0, tokens)], [(blocks[:1], 3, 1), (blocks[1:], 5, 1)]):
            for _ in range(2):
                self.model(make_batch(seqs, self.block_size, self.arch.vocab_size, self.device, self.rng))

    def batch(self, reqs, tokens):
        """The StepBatch of the scheduled requests, through their real block tables."""
        from servesim.calibration.torch_model import make_batch

        # the scheduler has already advanced num_computed_tokens by n
        seqs = [(r.blocks, r.num_computed_tokens - n, n) for r, n in zip(reqs, tokens)]
        return make_batch(seqs, self.block_size, self.arch.vocab_size, self.device, self.rng)

    def run(self, shape, scheduled) -> float:
        b = self.batch(scheduled.reqs, scheduled.tokens)
        torch = self.torch
        self.steps += 1
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.model(b)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        t0 = time.perf_counter()
        self.model(b)
        return time.perf_counter() - t0
