"""What the measurements were taken on: pynvml on CUDA, /proc/cpuinfo on the CPU."""

from __future__ import annotations

import datetime as dt
import os
import platform

CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "neon", "asimd")


def _cpu() -> dict:
    info = {"kind": "cpu", "name": platform.processor() or platform.machine(), "logical_cores": os.cpu_count()}
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name":
            info["name"] = value.strip()
        elif key in ("flags", "Features") and "flags" not in info:
            present = set(value.split())
            info["flags"] = [f for f in CPU_FLAGS if f in present]
    return info


def _cuda(index: int) -> dict:
    import torch

    info = {"kind": "cuda", "index": index, "name": torch.cuda.get_device_name(index),
            "cuda": torch.version.cuda, "memory_bytes": torch.cuda.get_device_properties(index).total_memory}
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(h)
        info.update(
            name=name.decode() if isinstance(name, bytes) else name,
            memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
            sm_clock_mhz=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            memory_clock_mhz=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            max_sm_clock_mhz=pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            max_memory_clock_mhz=pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
            driver=pynvml.nvmlSystemGetDriverVersion(),
        )
        if isinstance(info["driver"], bytes):
            info["driver"] = info["driver"].decode()
        pynvml.nvmlShutdown()
    except Exception as exc:  # pynvml missing or no NVML: keep what torch said, and say why
        info["pynvml_error"] = f"{type(exc).__name__}: {exc}"
    return info


def describe(device: str, threads: int | None = None) -> dict:
    import torch

    info = _cuda(torch.device(device).index or 0) if device.startswith("cuda") else _cpu()
    if threads:
        info["torch_threads"] = threads
    info.update(torch=torch.__version__, python=platform.python_version(), platform=platform.platform(),
                date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    return info
