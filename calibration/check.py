"""`servesim calibrate check`: re-measure a sample of a profile's grid and compare.

The mission's regression check at step level: the profile says how wrong it may be
(its tolerance); a re-measured MAPE beyond that fails.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from servesim.calibration.grid import STEP_KINDS, make_grid
from servesim.simulator.cost_model import linear_model, load_profile
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import load_model


def check_profile(profile_path: str, device: str, points: int = 8, seed: int = 0, warmup: int = 2,
                  repeats: int = 5, threads: int | None = None) -> tuple[pd.DataFrame, float, float]:
    """Returns (per-point table, re-measured MAPE, tolerance)."""
    from servesim.calibration.harness import Harness

    prof = load_profile(profile_path)
    if prof.cost_model != "linear" or not prof.grid:
        raise ConfigError("profile", f"{profile_path} is not a calibrated profile (no grid to re-measure)")
    if (prof.tensor_parallel_size or 1) > 1:
        raise ConfigError("profile", f"{profile_path} is a tensor-parallel profile (TP {prof.tensor_parallel_size}); "
                                     "the harness measures one device")
    if prof.overhead is not None or prof.fitted:  # r135: checked without them, a profile whose runs pay 10x passed
        raise ConfigError("profile", f"{profile_path} is not a harness profile: "
                                     f"{'it was fitted to serving runs' if prof.fitted else 'it adds overhead terms'}"
                                     f" (a kernel-table import or `calibrate fit RUN`), which the harness does not "
                                     f"measure; check it against real runs (servesim compare, validate serving)")
    import torch

    from servesim.calibration.harness import measured_here, usable_device

    usable_device(torch, device)  # a device this machine lacks is one line, before describing it
    measured_here(prof.device, profile_path, device)
    try:  # what the profile says, named as its fields
        arch = load_model(prof.architecture or prof.model)
        grid = [p for p in make_grid(prof.grid, arch.max_position_embeddings) if p.kind in STEP_KINDS]
    except ConfigError as exc:
        field = exc.field.replace("model.", "architecture.", 1) if prof.architecture else exc.field
        raise ConfigError(f"profile.{field}", exc.message.replace(" (in scenario)", f" (in {profile_path})")) from None
    if points < 1:
        raise ConfigError("points", "must be >= 1")
    rng = np.random.default_rng(seed)
    sample = [grid[i] for i in sorted(rng.choice(len(grid), size=min(points, len(grid)), replace=False))]
    model = linear_model(prof)
    try:  # the harness reads the profile's dtype and attention: a bad one is the file's field (r129: said bare)
        h = Harness(arch, device, prof.dtype, prof.block_size or 16, sample, threads,
                    attention=prof.attention or "gather")
    except ConfigError as exc:
        if exc.field not in ("dtype", "attention"):
            raise
        raise ConfigError(f"profile.{exc.field}", f"{exc.message} (in {profile_path})") from None
    rows = []
    for p in sample:
        m = h.measure(p, warmup, repeats)
        pred = model.step_time(p.shape) * 1000
        rows.append({"kind": p.kind, "batch": p.batch, "tokens": p.tokens, "context": p.context,
                     "measured_ms": m["time_ms"], "predicted_ms": pred,
                     "error": (pred - m["time_ms"]) / m["time_ms"]})
    table = pd.DataFrame(rows)
    mape = float(table["error"].abs().mean())
    tol = prof.tolerance if prof.tolerance is not None else 0.10
    return table, mape, tol


def median_ratio(table: pd.DataFrame) -> float:
    """The typical predicted / measured step time of a check's points."""
    return float(np.median(table["predicted_ms"] / table["measured_ms"]))
