"""Device datasheet numbers: memory for the KV pool, bandwidth and FLOP/s for the roofline."""

from __future__ import annotations

from importlib import resources
from typing import Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError

from servesim.workloads.settings import GiB, Settings, Speed

from servesim.simulator.errors import ConfigError, first_error


class Hardware(Settings):
    model_config = ConfigDict(frozen=True)

    name: str = "custom"
    memory_gib: GiB
    memory_bandwidth_gbps: Speed = 3350.0
    bf16_tflops: Speed = 989.0
    fp8_tflops: Speed | None = None  # None: no fp8 tensor cores
    fp4_tflops: Speed | None = None  # None: no fp4 tensor cores (only Blackwell has them)
    host_link_gbps: Speed = 32.0  # GPU <-> host copies (swap), one direction
    gpu_link_gbps: Speed = 64.0  # GPU <-> GPU (tensor-parallel all-reduce), per GPU and direction
    kernel_tables: str | None = None  # its folder of measured kernel tables (aiconfigurator layout), if any
    compute_capability: float | None = Field(None, ge=1, le=99)  # CUDA's (10.0 = Blackwell B200); None: not CUDA
    platform: Literal["cuda", "xpu"] = "cuda"  # vLLM's: XPU (Intel) sets its own block size and graph default

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 2**30)

    def has_tensor_cores_for(self, dtype: str) -> bool:
        """Whether the datasheet gives this weight format's own math (fp8, nvfp4); any other runs at 16 bits."""
        return {"fp8": self.fp8_tflops, "nvfp4": self.fp4_tflops}.get(dtype, 0) is not None

    def peak_flops(self, dtype: str) -> float:
        if dtype == "fp8" and self.fp8_tflops:
            return self.fp8_tflops * 1e12
        if dtype == "nvfp4" and self.fp4_tflops:
            return self.fp4_tflops * 1e12
        if dtype == "fp32":
            return self.bf16_tflops * 1e12 / 2  # TF32 tensor cores run at half the bf16 rate
        return self.bf16_tflops * 1e12


def _table() -> dict:
    return yaml.safe_load((resources.files("servesim.simulator") / "data" / "hardware.yaml").read_text())


def builtin_gpu_table() -> dict:
    return _table()


def builtin_gpu_names() -> list[str]:
    return sorted(_table())


def gpu_for_device(device_name: str) -> str | None:
    """The built-in GPU a CUDA device name (torch.cuda.get_device_name(), as a run records it) is; None: none is.
    A built-in key is its own GPU (r174: `calibrate fit --gpu h100-sxm` records device h100-sxm, and its profile
    relabelled h200-sxm timed H200 runs unsaid)."""
    if device_name in _table():
        return device_name
    want = " ".join(str(device_name).lower().split())
    return next((key for key, spec in _table().items()
                 if want in (" ".join(n.lower().split()) for n in spec.get("cuda_names", []))), None)


def load_hardware(gpu: str | None, **overrides) -> Hardware:
    """A built-in GPU by name, with any datasheet field overridden."""
    base: dict = {}
    if gpu is not None:
        table = _table()
        if gpu not in table:
            raise ConfigError("hardware.gpu", f"unknown GPU {gpu!r}; built-in: {', '.join(sorted(table))}")
        base = {k: v for k, v in table[gpu].items() if k != "cuda_names"}
    base.update({k: v for k, v in overrides.items() if v is not None})
    if "memory_gib" not in base:
        raise ConfigError("hardware", "give a built-in 'gpu' or 'memory_gib'")
    try:
        return Hardware(**base)
    except ValidationError as exc:
        raise ConfigError(*first_error(exc, "hardware")) from None
