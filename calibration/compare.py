"""`servesim calibrate compare A B`: two linear profiles, component by component.

Each typical step is split into kernel time, the other GPU work the overhead terms add, and host CPU time.

Where a harness profile and an imported kernel-table profile of one device disagree,
the ratio per component says which part of a step differs (fixed per-step cost, the
linear layers' weight read or GEMM rate, attention per KV token or per prefill pair),
and the ratio at a few typical steps says how much it matters.
"""

from __future__ import annotations

import pandas as pd

from servesim.calibration.fit import shape_range
from servesim.calibration.grid import GridPoint
from servesim.simulator.config import say_once
from servesim.simulator.cost_model import (LinearCostModel, OverheadCostModel, Profile, extrapolation_warnings,
                                           linear_model, load_profile, refuse_zero_step)
from servesim.simulator.errors import ConfigError
from servesim.simulator.hardware import load_hardware
from servesim.simulator.model_arch import load_model

KV_TOKENS = 100_000
ZERO = 1e-9  # ms: fitted coefficients this small are zeros of the non-negative fit, not measurements

COMPONENTS = [
    ("per-step overhead (ms)", "step_overhead_ms"),
    ("per sequence (ms)", "per_seq_ms"),
    ("linear layers: weight-read floor per step (ms)", "linear_floor_ms"),
    ("linear layers: GEMM time per token above the knee (ms)", "per_token_ms"),
    ("linear layers: knee (tokens per step)", "knee_tokens"),
    ("decode attention per KV token read, at 100k KV tokens a step (ms)", "kv_token_ms"),
    ("decode attention: KV tokens that still fit a cache", "context_cache_tokens"),
    ("prefill attention per (query, key) pair (ms)", "per_attention_pair_ms"),
    # terms a profile may carry beside the GEMM model (teaching's token costs, a MoE profile's experts): a row each,
    # else a profile made of them compared as if it had none (round 89)
    ("per prefill token (ms)", "per_prefill_token_ms"),
    ("per decode token (ms)", "per_decode_token_ms"),
    ("MoE: per expert a step's tokens touch (ms)", "per_expert_ms"),
]
CARRIED = {"per_prefill_token_ms", "per_decode_token_ms", "per_expert_ms"}  # a row only where a profile has one

STEPS = [
    ("decode 1 seq at 1,024", GridPoint("decode", 1, 0, 1024)),
    ("decode 32 seqs at 1,024", GridPoint("decode", 32, 0, 1024)),
    ("decode 128 seqs at 2,048", GridPoint("decode", 128, 0, 2048)),
    ("prefill 1 x 512", GridPoint("prefill", 1, 512)),
    ("prefill 1 x 4,096", GridPoint("prefill", 1, 4096)),
    ("prefill 4 x 2,048", GridPoint("prefill", 4, 2048)),
    ("mixed: 512-token chunk + 64 decodes at 1,024", GridPoint("mixed", 64, 512, 1024)),
]


def _linear(p: Profile) -> LinearCostModel:
    if p.cost_model != "linear":
        raise ConfigError("profile", f"{p.name} uses the {p.cost_model} cost model; compare takes linear profiles")
    model = linear_model(p)
    refuse_zero_step(model, p.name)
    return model


def _with_overhead(p: Profile, m: LinearCostModel, other: Profile) -> OverheadCostModel | None:
    """The profile's overhead terms on its own model and GPU (else the other profile's: a run puts them on the
    scenario's), under vLLM's defaults (CUDA graphs to 512 tokens, asynchronous scheduling); None when the profile
    carries none (a measured engine or the harness). Terms with no model or GPU to put them on are said to be left
    out (r129: compared on kernels alone, two profiles that time every run alike differed by 9%)."""
    if p.overhead is None:
        return None
    generic = ("any", "from-scenario")
    model = p.model if p.model not in generic else other.model if other.model not in generic else None
    gpu = p.gpu or other.gpu
    if model is None or not gpu:
        say_once([f"servesim: note: profile {p.name}'s overhead terms are left out of the comparison: it names no "
                  f"{'GPU' if not gpu else 'model'} to put them on, nor does the other profile (a run puts them "
                  f"on the scenario's)"])
        return None
    if (model, gpu) != (p.model, p.gpu):
        say_once([f"servesim: note: profile {p.name}'s overhead terms are put on {model} on {gpu} (the other "
                  f"profile's), as a run puts them on the scenario's"])
    return OverheadCostModel(m, p.overhead, load_model(model), load_hardware(gpu), 512, True, p.tensor_parallel_size)


def _value(m: LinearCostModel, key: str) -> float:
    if key == "knee_tokens":
        return float(m.knee_tokens() or 0)
    if key == "kv_token_ms":  # the fit may put attention before or beyond its cache knee: count both
        c = m.c
        return c.per_context_token_ms + c.per_spilled_context_token_ms * max(0.0, KV_TOKENS - c.context_cache_tokens) / KV_TOKENS
    return float(getattr(m.c, key))


def compare_profiles(a: str | Profile, b: str | Profile) -> pd.DataFrame:
    """One row per component and per typical step: A's value, B's, and A / B (empty where B is zero)."""
    pa = a if isinstance(a, Profile) else load_profile(a)
    pb = b if isinstance(b, Profile) else load_profile(b)
    ma, mb = _linear(pa), _linear(pb)
    rows = [{"part": "component", "what": label, "a": _value(ma, key), "b": _value(mb, key)}
            for label, key in COMPONENTS if key not in CARRIED or _value(ma, key) or _value(mb, key)]
    oa, ob = _with_overhead(pa, ma, pb), _with_overhead(pb, mb, pa)
    parts = lambda o, m, shape: o.parts(shape) if o else (m.step_time(shape), 0.0, 0.0)  # noqa: E731
    for label, pt in STEPS:
        a, b = parts(oa, ma, pt.shape), parts(ob, mb, pt.shape)
        rows.append({"part": "kernels (ms)", "what": label, "a": a[0] * 1e3, "b": b[0] * 1e3})
        rows.append({"part": "other GPU work: norms, rotary, sampler, eager launches (ms)", "what": label,
                     "a": a[1] * 1e3, "b": b[1] * 1e3})
        rows.append({"part": "host CPU, hidden under async scheduling (ms)", "what": label, "a": a[2] * 1e3,
                     "b": b[2] * 1e3})
        rows.append({"part": "step time (ms)", "what": label,
                     "a": (oa or ma).step_time(pt.shape) * 1e3, "b": (ob or mb).step_time(pt.shape) * 1e3})
    t = pd.DataFrame(rows)
    for col in ("a", "b"):
        t.loc[t[col].abs() < ZERO, col] = 0.0
    t["a_over_b"] = (t["a"] / t["b"].where(t["b"] > 0)).astype(float)
    steps = shape_range(pd.DataFrame([pt.shape._asdict() for _, pt in STEPS]))
    t.attrs.update(a=pa.name, b=pb.name, warnings=[w for p in (pa, pb) for w in extrapolation_warnings(
        p, steps, "the typical steps compared")])
    return t


def format_table(t: pd.DataFrame) -> str:
    a, b = t.attrs.get("a", "A"), t.attrs.get("b", "B")
    lines = [f"| | {a} | {b} | A / B |", "|---|---|---|---|"]
    for r in t.itertuples():
        ratio = "n/a" if pd.isna(r.a_over_b) else f"{r.a_over_b:.2f}"
        what = r.what if r.part == "component" else f"{r.what}: {r.part}"
        lines.append(f"| {what} | {r.a:.4g} | {r.b:.4g} | {ratio} |")
    return "\n".join(lines)
