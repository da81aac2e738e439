"""The roofline fallback's coefficients, fitted to the built-in profiles composed from measured kernel tables.

A GPU or a format without kernel tables (A100 PCIe, NVFP4 on an H100) is timed by the roofline: the datasheet's
bandwidth and FLOP/s, derated. With assumed efficiencies and no fixed cost per step, it ran about 12% faster than
the kernels measured on GPUs that have tables (median), so a fallback deployment ranked ahead of a measured one
on a faster GPU (r162: an A100 PCIe beat the A100 SXM it is slower than). Here its memory and compute efficiency
and its kernel time per step are fitted, in log ratio, to every built-in composed profile's step times over a grid
of decode and prefill shapes; the error is reported leaving each GPU out in turn (fitted on the others), the
situation a GPU without tables is in.

`make roofline-fallback` writes simulator/data/roofline-fallback.yaml, which the fallback reads.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

from servesim.simulator.batch import decode_shape, shape_of
from servesim.simulator.cost_model import (RooflineCoefficients, RooflineCostModel, builtin_profile_names,
                                            linear_model, load_profile)

OUT = Path(__file__).resolve().parents[1] / "simulator" / "data" / "roofline-fallback.yaml"
DECODE_BATCHES, DECODE_CONTEXTS, PREFILLS = (1, 4, 16, 64, 256), (256, 2048), (256, 1024, 4096)
FITTED = ("memory_efficiency", "compute_efficiency", "step_overhead_ms")


def kernel_points() -> list[tuple]:
    """(profile, gpu, arch, hardware, tp, shape, kernel seconds) over every built-in composed profile's grid."""
    from servesim.simulator.config import load

    points = []
    for name in builtin_profile_names():
        p = load_profile(name)
        if p.cost_model != "linear" or not p.gpu or p.model in ("any", "from-scenario"):
            continue
        sets = [f"profile={name}", f"model={p.model}", f"hardware.gpu={p.gpu}", "engine.max_model_len=8192",
                f"engine.tensor_parallel_size={p.tensor_parallel_size}"]
        sets += [f"engine.quantization={p.dtype}"] if p.dtype != "bf16" else []
        sets += [f"engine.kv_cache_dtype={p.kv_cache_dtype}"] if p.kv_cache_dtype not in (None, "bf16") else []
        with contextlib.redirect_stderr(io.StringIO()):  # each deployment's own notes: not this fit's
            rs = load(None, sets)
        kernels = linear_model(p)  # the composed kernel time, without the host overhead both add alike
        shapes = [decode_shape(b, b * c) for b in DECODE_BATCHES for c in DECODE_CONTEXTS] + \
            [shape_of([(n, 0, False)]) for n in PREFILLS]
        points += [(name, p.gpu, rs.arch, rs.hardware, p.tensor_parallel_size, s, kernels.step_time(s))
                   for s in shapes]
    return points


def roofline_s(z, point: tuple) -> float:
    c = RooflineCoefficients(**dict(zip(FITTED, z)))
    return RooflineCostModel(point[2], point[3], c, point[4]).step_time(point[5])


def fit(points: list[tuple]) -> np.ndarray:
    """The three coefficients minimising the squared log ratio of roofline to kernel time."""
    res = least_squares(lambda z: np.array([math.log(roofline_s(z, p) / p[6]) for p in points]),
                        [0.8, 0.6, 1.0], bounds=([0.05, 0.05, 0.0], [1.0, 1.0, 50.0]))
    return res.x


def errors(z, points: list[tuple]) -> dict:
    ape = np.array([abs(roofline_s(z, p) / p[6] - 1) for p in points])
    return {"mape": round(float(ape.mean()), 4), "p90_ape": round(float(np.percentile(ape, 90)), 4),
            "max_ape": round(float(ape.max()), 4), "points": int(len(ape))}


def fallback(points: list[tuple] | None = None) -> dict:
    """The fitted coefficients, and each GPU's error when fitted without it (and all of them pooled)."""
    points = points if points is not None else kernel_points()
    z = fit(points)
    left_out, pooled = {}, []
    for gpu in sorted({p[1] for p in points}):
        zg = fit([p for p in points if p[1] != gpu])
        held = [p for p in points if p[1] == gpu]
        left_out[gpu] = errors(zg, held)
        pooled += [abs(roofline_s(zg, p) / p[6] - 1) for p in held]
    return {"coefficients": {k: round(float(v), 4) for k, v in zip(FITTED, z)},
            "held_out_error": {"mape": round(float(np.mean(pooled)), 4),
                               "p90_ape": round(float(np.percentile(pooled, 90)), 4),
                               "max_ape": round(float(np.max(pooled)), 4), "points": len(pooled),
                               "what": "each GPU's composed kernel step times, fitted on the other GPUs'"},
            "left_out_gpu": left_out,
            "source": f"fitted to the kernel step times of {len({p[0] for p in points})} built-in profiles composed "
                      f"from measured kernel tables ({', '.join(sorted({p[1] for p in points}))}) over "
                      f"{len(points)} decode and prefill shapes (calibration/roofline_fit.py)"}


def main() -> None:
    out = fallback()
    header = ("# The roofline fallback's kernel coefficients (make roofline-fallback; calibration/roofline_fit.py):\n"
              "# a GPU or format without kernel tables is timed with these, plus the default host overhead.\n")
    OUT.write_text(header + yaml.safe_dump(out, sort_keys=False))
    print(f"{OUT}: {out['coefficients']}; held out (each GPU left out): MAPE {out['held_out_error']['mape']:.1%}")


if __name__ == "__main__":
    main()
