"""Fit the `linear` cost model (simulator/cost_model.py) to measured or composed step times.

Form, in ms, per step:
    step_overhead + per_seq x seqs + max(linear_floor, per_token x tokens)
    + per_context_token x K + per_spilled_context_token x max(0, K - context_cache_tokens)
    + per_attention_pair x prefill (query, context) pairs
where K is the KV tokens the step's decodes read. The knee max(floor, per_token x tokens)
is the linear layers' roofline: below it a step costs the weight read, above it the
GEMM FLOPs. The second knee is the KV working set outgrowing a cache (clear on CPUs,
near zero on GPUs). Both knees are found by a scan with non-negative least squares
at each candidate, then refined jointly. Relative errors are minimised, since the
held-out error is reported as a percentage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls

from servesim.simulator.batch import SHAPE_FIELDS
from servesim.simulator.errors import ConfigError

SHAPE_COLUMNS = SHAPE_FIELDS
PARAMS = ["step_overhead_ms", "per_seq_ms", "per_token_ms", "linear_floor_ms", "per_context_token_ms",
          "per_spilled_context_token_ms", "context_cache_tokens", "per_attention_pair_ms"]
# a mixture-of-experts model's measurements carry `experts_touched` (expected distinct experts a layer runs for the
# step's tokens): its weights are read per expert touched, a curve in the tokens the knee above cannot follow
MOE_PARAM = "per_expert_ms"


@dataclass
class FitResult:
    coefficients: dict
    held_out: dict  # mape, p90_ape, max_ape, points
    train: dict
    predictions: pd.DataFrame  # every point with its prediction and split

    @property
    def shape_range(self) -> dict:
        return shape_range(self.predictions)


_COUNT = ("a non-negative integer up to 2^40", lambda v: (v >= 0) & (v == np.round(v)) & (v <= 2**40))
# what each numeric column may hold; a time is 0 (a step log's zero-length step, left out) or 1 ns to 11 days: the
# fit works in relative errors, and a time of 1e-300 ms overflowed it
_TIME = ("0 or a time from 1e-6 to 1e9 ms", lambda v: (v == 0) | ((v >= 1e-6) & (v <= 1e9)))
_VALUE_RULES = {**{c: _COUNT for c in SHAPE_COLUMNS},
                **{c: _TIME for c in ("time_ms", "time_ms_p10", "time_ms_p90")},  # the harness's spread too (r158)
                "repeats": ("an integer >= 1 (the timings its median is of)",
                            lambda v: (v >= 1) & (v == np.round(v)) & (v <= 2**40)),
                "experts_touched": ("a non-negative number up to 2^40 (expected distinct experts a layer runs)",
                                    lambda v: (v >= 0) & (v <= 2**40))}


def kv_floor_ms(arch, gpu: str, kv_dtype: str | None, tp: int | None) -> float:
    """The least a decode KV token may cost on this GPU: its bytes at the datasheet bandwidth (0 where the model is
    not known, or its attention is local: a layer-averaged context is not every layer's)."""
    from servesim.simulator.hardware import load_hardware
    from servesim.simulator.local_attention import local_attention

    if arch is None or local_attention(arch) is not None:
        return 0.0
    kv = arch.model_copy(update={"kv_cache_dtype": kv_dtype}) if kv_dtype else arch
    try:
        return kv.kv_bytes_per_token_per_gpu(tp or 1) / (load_hardware(gpu).memory_bandwidth_gbps * 1e9) * 1e3
    except ConfigError:  # a GPU servesim has no datasheet for: no floor
        return 0.0


def check_measurements(df: pd.DataFrame, source: str = "measurements", contexts: int = 3) -> pd.DataFrame:
    df = df.reset_index(drop=True)  # rows are named by their place in the table as read
    missing = [c for c in SHAPE_COLUMNS + ["time_ms"] if c not in df.columns]
    if missing:
        raise ConfigError(source, f"missing column(s) {', '.join(missing)}")
    for col, rule in _VALUE_RULES.items():  # a damaged row is named, never dropped
        if col not in df.columns:
            continue
        v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        # a truth value is no number, though pandas reads CSV's True as 1 (the README: no `true` for a number)
        truth = np.full(len(df), df[col].dtype == bool) if df[col].dtype != object else \
            df[col].map(lambda x: isinstance(x, (bool, np.bool_))).to_numpy(dtype=bool)
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(v) | ~rule[1](v) | truth
        if bad.any():
            i = int(np.argmax(bad))
            raw = df[col].iloc[i]
            raise ConfigError(source, f"row {i + 1}: {col} must be {rule[0]}, got {getattr(raw, 'item', lambda: raw)()!r}")
    _check_spread(df, source)
    df = df[_step_rows(df, source)]
    _check_shapes_agree(df, source)
    df = df[df["time_ms"].astype(float) > 0]  # a step log's zero-length step (equal start times) times nothing
    if len(df) < 8:
        raise ConfigError(source, f"{len(df)} usable step measurements; a fit needs at least 8")
    check_identifiable(df, source, contexts=contexts)
    _say_flat(df)
    return df.reset_index(drop=True)


def _check_spread(df: pd.DataFrame, source: str) -> None:
    """The harness's p10 and p90 around its median: a row whose median lies outside them (or a p10 above its p90)
    is damaged, not timed (r158: fitted unsaid)."""
    t = df["time_ms"].astype(float)
    low, high = (df[c].astype(float) if c in df else t for c in ("time_ms_p10", "time_ms_p90"))
    slack = 1e-9 * t.abs()  # the harness's percentiles, rounded as written
    _bad_row(df, ((low > t + slack) | (t > high + slack)).to_numpy(), source,
             lambda r: f"time_ms {float(r['time_ms']):.6g} must lie within its time_ms_p10 and time_ms_p90 (the "
                       f"spread of its repeats), got {float(r.get('time_ms_p10', r['time_ms'])):.6g} and "
                       f"{float(r.get('time_ms_p90', r['time_ms'])):.6g}")


def _say_flat(df: pd.DataFrame) -> None:
    """Steps of many token counts that all take one time: no per-token cost to fit (r158: a 'MAPE 0.0%' fit)."""
    from servesim.simulator.config import say_once

    t = df["time_ms"].astype(float)
    tokens = df["prefill_tokens"] + df["decode_seqs"]
    if t.max() <= 1.01 * t.min() and tokens.max() >= 2 * tokens.min():
        say_once([f"servesim: warning: every step measured takes {t.median():.4g} ms (within 1%) from "
                  f"{int(tokens.min()):,} to {int(tokens.max()):,} tokens: the fit finds no cost per token, so "
                  f"its profile times every batch alike; check the timings"])


# a row's `kind`: the harness's grid kinds (calibration/grid.py) or a measured engine's whole "step"; its `scope`
# says what was timed: a whole forward pass ("step") or one layer's kernel ("layer", the attention points)
STEP_ROW_KINDS = ("prefill", "decode", "mixed", "step")
KERNEL_ROW_KINDS = ("attention",)
SCOPE_OF = {**{k: "step" for k in STEP_ROW_KINDS}, **{k: "layer" for k in KERNEL_ROW_KINDS}}


def _bad_row(df: pd.DataFrame, bad: np.ndarray, source: str, message) -> None:
    """The first row `bad` marks, named by its 1-based position in the table as read."""
    if bad.any():
        i = int(np.argmax(bad))
        raise ConfigError(source, f"row {df.index[i] + 1}: {message(df.iloc[i])}")


def _step_rows(df: pd.DataFrame, source: str) -> np.ndarray:
    """Which rows time a whole step. Kernel-only points (kind attention, scope layer) are not step times; a row
    whose kind and scope disagree, or that names neither where the table has the column, is damaged, not
    guessed at: fitting a kernel time as a step made a profile several times wrong."""
    keep = np.ones(len(df), dtype=bool)
    for col, known in (("kind", SCOPE_OF), ("scope", ("step", "layer"))):
        if col in df.columns:
            v = df[col].to_numpy(dtype=object)
            _bad_row(df, ~np.isin(v, list(known)), source,
                     lambda r, c=col, k=known: f"{c} must be one of {', '.join(k)}, got "
                                                      + ("nothing" if pd.isna(r[c]) else repr(r[c])))
    if "kind" in df.columns and "scope" in df.columns:
        implied = df["kind"].map(SCOPE_OF).to_numpy(dtype=object)
        _bad_row(df, implied != df["scope"].to_numpy(dtype=object), source,
                 lambda r: f"kind {r['kind']} is timed with scope {SCOPE_OF[r['kind']]}, but the row says scope "
                           f"{r['scope']}")
    if "scope" in df.columns:
        keep &= df["scope"].to_numpy(dtype=object) == "step"
    elif "kind" in df.columns:
        keep &= np.isin(df["kind"].to_numpy(dtype=object), STEP_ROW_KINDS)
    return keep


def _check_shapes_agree(df: pd.DataFrame, source: str) -> None:
    """A row's aggregates must describe some batch: decodes among its sequences, at least one token per prefill
    sequence and per decode read, every prefill token attending at least to itself; and where the harness's grid
    columns are there (kind, batch, tokens, context), the counts that point has. A row that contradicts itself
    (a 16-token prefill of 1,000,000 tokens) was fitted as if true."""
    n = {c: df[c].to_numpy(dtype=float) for c in SHAPE_COLUMNS}
    prefill_seqs = n["num_seqs"] - n["decode_seqs"]
    rules = [
        (n["num_seqs"] < 1, "a step schedules at least one sequence (num_seqs >= 1)"),
        (prefill_seqs < 0, "decode_seqs cannot exceed num_seqs"),
        ((prefill_seqs == 0) & ((n["prefill_tokens"] > 0) | (n["prefill_attention_pairs"] > 0)),
         "prefill_tokens and prefill_attention_pairs need a prefill sequence (num_seqs > decode_seqs)"),
        (n["prefill_tokens"] < prefill_seqs, "each prefill sequence computes at least one token "
                                             "(prefill_tokens >= num_seqs - decode_seqs)"),
        (n["prefill_attention_pairs"] < n["prefill_tokens"], "each prefill token attends at least to itself "
                                                             "(prefill_attention_pairs >= prefill_tokens)"),
        (n["decode_context_tokens"] < n["decode_seqs"], "each decode reads at least its own token "
                                                         "(decode_context_tokens >= decode_seqs)"),
        ((n["decode_seqs"] == 0) & (n["decode_context_tokens"] > 0), "decode_context_tokens needs a decode"),
    ]
    if {"kind", "batch", "tokens", "context"} <= set(df.columns):
        from servesim.calibration.grid import GridPoint

        grid = df["kind"].isin(("prefill", "decode", "mixed")).to_numpy()
        counts = lambda s: (s.num_seqs, s.prefill_tokens, s.decode_seqs)  # noqa: E731 (local layers change the rest)
        want = np.array([counts(GridPoint(k, b, t, c).shape) if g else (0, 0, 0) for k, b, t, c, g in
                         zip(df["kind"], _ints(df["batch"]), _ints(df["tokens"]), _ints(df["context"]), grid)],
                        dtype=float).reshape(-1, 3)
        got = np.column_stack([n["num_seqs"], n["prefill_tokens"], n["decode_seqs"]])
        rules.append((grid & (want != got).any(axis=1),
                      "its num_seqs, prefill_tokens and decode_seqs are not those of its grid point "
                      "(kind, batch, tokens, context)"))
    for bad, rule in rules:
        _bad_row(df, bad, source, lambda r, rule=rule: f"the batch shape contradicts itself: {rule}")


def _ints(col: pd.Series) -> list[int]:
    """A grid column as integers; a damaged value as -1, which no grid point has."""
    v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
    return np.where(np.isfinite(v) & (v >= 0) & (v <= 2**40), v, -1).astype(np.int64).tolist()


def check_identifiable(df: pd.DataFrame, source: str, part: str = "the measurements", contexts: int = 3) -> None:
    """Data that cannot tell the terms apart is refused, not fitted: a fit on one prompt length reports a small
    error on its own rows and then predicts other workloads several times wrong."""
    decode_only = df["prefill_tokens"] == 0
    tokens = df["prefill_tokens"] + df["decode_seqs"]
    decodes = df[df["decode_seqs"] > 0]
    # per sequence, and pairs per prompt token: a step's totals grow with its batch alone, which tells the KV read
    # and the attention pairs from the per-sequence and per-token terms no better than one length does (r171: one
    # 512-token length at 9 batch sizes passed, fitted 0.9% "held out", and ran 8k prompts 4.5x slow)
    ctx = (decodes["decode_context_tokens"] / decodes["decode_seqs"]).round(6)
    prefills = df[df["prefill_tokens"] > 0]
    pairs = (prefills["prefill_attention_pairs"] / prefills["prefill_tokens"]).round(6)
    missing = [what for what, ok in (
        ("decode-only steps", decode_only.any()), ("steps with prefill", (~decode_only).any()),
        ("at least 3 different token counts per step", tokens.nunique() >= 3),
        (f"at least {contexts} different decode context sizes per sequence", ctx.nunique() >= contexts),
        ("at least 2 different prompt lengths (attention pairs per prefill token)", pairs.nunique() >= 2)) if not ok]
    if missing:
        raise ConfigError(source, f"cannot identify the step-time terms: {part} lack "
                                  f"{', '.join(missing)} (measure more varied batches)")


def shape_range(df: pd.DataFrame) -> dict:
    """The largest batches the fit saw: beyond them a profile extrapolates."""
    return {"max_tokens": int((df["prefill_tokens"] + df["decode_seqs"]).max()), "max_seqs": int(df["num_seqs"].max()),
            "max_decode_context_tokens": int(df["decode_context_tokens"].max())}


def _features(df: pd.DataFrame) -> tuple[np.ndarray, ...]:
    s = df["num_seqs"].to_numpy(float)
    t = (df["prefill_tokens"] + df["decode_seqs"]).to_numpy(float)
    k = df["decode_context_tokens"].to_numpy(float)
    p = df["prefill_attention_pairs"].to_numpy(float)
    return s, t, k, p


def predict_ms(coef: dict | np.ndarray, df: pd.DataFrame) -> np.ndarray:
    c = np.array([coef[p] for p in PARAMS + ([MOE_PARAM] if MOE_PARAM in coef else [])]) \
        if isinstance(coef, dict) else coef
    s, t, k, p = _features(df)
    ms = c[0] + c[1] * s + np.maximum(c[3], c[2] * t) + c[4] * k + c[5] * np.maximum(0.0, k - c[6]) + c[7] * p
    return ms + c[8] * df["experts_touched"].to_numpy(float) if len(c) > 8 else ms


def _errors(pred: np.ndarray, y: np.ndarray) -> dict:
    ape = np.abs(pred - y) / y
    return {"mape": float(ape.mean()), "p90_ape": float(np.percentile(ape, 90)), "max_ape": float(ape.max()),
            "points": int(len(y))}


def _candidates(x: np.ndarray, most: int = 40) -> np.ndarray:
    """Knee positions to scan: every measured value, or quantiles of them for long logs (refined after)."""
    u = np.unique(x)
    return u if len(u) <= most else np.unique(np.quantile(u, np.linspace(0, 1, most)))


SPILL_POINTS = 3  # distinct decode contexts a fitted cache knee must leave above it


def _fit(df: pd.DataFrame, cache_knee: bool = True, context_floor_ms: float = 0.0) -> np.ndarray:
    """cache_knee False: no KV cache knee (a GPU's; its cache holds no working set of thousands of tokens): every
    decode KV token costs from the first (r162: a B200 fp8 fit put the KV reads in a knee at 17,862 tokens, each
    step's attention free below it). context_floor_ms: the least a decode KV token may cost (its bytes at the GPU's
    bandwidth; r165: DeepSeek-V3's fit on H200 read its latent cache at 5.6 TB/s, 13% short at 32k contexts)."""
    s, t, k, p = _features(df)
    y = df["time_ms"].to_numpy(float)
    moe = [df["experts_touched"].to_numpy(float)] if "experts_touched" in df else []
    best, best_err = None, np.inf
    # the cache knee leaves at least SPILL_POINTS distinct decode contexts above it: a slope past the knee fitted
    # on one point had nothing to hold it, and a held-out step past the training range came out 35x too slow
    distinct = np.unique(k)
    k_cap = float(distinct[-SPILL_POINTS]) if len(distinct) > SPILL_POINTS and cache_knee else 0.0
    spill = [lambda k_knee: np.maximum(0.0, k - k_knee)] if cache_knee else []
    for knee in _candidates(np.concatenate([[0.0], t])):
        for k_knee in _candidates(k[k <= k_cap]) if k_cap > 0 else [0.0]:
            a = np.column_stack([np.ones_like(t), s, np.maximum(t, knee), k] + [f(k_knee) for f in spill] + [p] + moe)
            a = a / y[:, None]
            scale = np.abs(a).max(axis=0)
            scale[scale == 0] = 1.0
            x, _ = nnls(a / scale, np.ones_like(y) - a[:, 3] * context_floor_ms)  # the context slope above its floor
            x = x / scale
            x[3] += context_floor_ms
            err = np.sum((a @ x - 1.0) ** 2)
            if not cache_knee:
                x = np.insert(x, 4, 0.0)  # the spilled slope, none
            if err < best_err:
                best_err, best = err, np.array([x[0], x[1], x[2], x[2] * knee, x[3], x[4], k_knee, x[5]] + list(x[6:]))
    scale = np.maximum(np.abs(best), 1e-12)
    free = np.ones(len(best), dtype=bool)
    if not cache_knee:  # the knee and the slope past it stay 0 in the refinement too
        free[[PARAMS.index("per_spilled_context_token_ms"), PARAMS.index("context_cache_tokens")]] = False
    upper = np.full(len(best), np.inf)
    upper[PARAMS.index("context_cache_tokens")] = max(k_cap, best[PARAMS.index("context_cache_tokens")]) / \
        scale[PARAMS.index("context_cache_tokens")] + 1e-9  # the refinement keeps the knee where points lie past it

    def full(z: np.ndarray) -> np.ndarray:
        out = best / scale
        out[free] = z
        return out

    lower = np.zeros(len(best))
    lower[PARAMS.index("per_context_token_ms")] = context_floor_ms / scale[PARAMS.index("per_context_token_ms")]
    res = least_squares(lambda z: (predict_ms(full(z) * scale, df) - y) / y, (best / scale)[free],
                        bounds=(lower[free], upper[free]), xtol=1e-12, ftol=1e-12, gtol=1e-12)
    return full(res.x) * scale


def _held_out_rows(df: pd.DataFrame, holdout: float, seed: int) -> np.ndarray:
    """A random `holdout` share of the batch shapes, every repeat of a shape on one side: a repeat on both
    sides scores the fit on what it was fitted to (a table listed twice "held out" its training rows). With
    every shape once, this is the plain random split of rows."""
    keys = SHAPE_COLUMNS + [c for c in ("experts_touched",) if c in df.columns]
    group = df.groupby(keys, sort=False).ngroup().to_numpy()  # numbered in order of first appearance
    n_groups = int(group.max()) + 1
    n_test = max(1, int(round(holdout * n_groups)))
    chosen = np.random.default_rng(seed).choice(n_groups, size=n_test, replace=False)
    return np.isin(group, chosen)


MIN_HELD_OUT = 5  # held-out measurements below which the held-out error is said to mean little


def fit_step_model(df: pd.DataFrame, holdout: float = 0.2, seed: int = 0, source: str = "measurements",
                   cache_knee: bool = True, context_floor_ms: float = 0.0) -> FitResult:
    """Fit on a random (1 - holdout) of the points; report the error on the rest (cache_knee, context_floor_ms: see
    _fit)."""
    if not (isinstance(holdout, (int, float)) and 0 < holdout < 1):
        raise ConfigError("--holdout", f"must be a fraction strictly between 0 and 1, got {holdout}")
    contexts = 3 if cache_knee else 2  # a knee needs a third context to be placed; a line alone, two
    df = check_measurements(df, source, contexts)
    test = _held_out_rows(df, holdout, seed)
    fitted = int((~test).sum())
    if fitted < 8:  # the refusals above hold for what is fitted, not only for the whole table
        raise ConfigError("--holdout", f"{holdout:g} leaves {fitted} of {len(df)} measurements to fit on; "
                                       f"a fit needs at least 8 (hold out less)")
    check_identifiable(df[~test], source, f"the {fitted} measurements left to fit on (--holdout {holdout:g}, "
                                          f"--seed {seed})", contexts)
    if int(test.sum()) < MIN_HELD_OUT:  # an error over one or two points says little about the fit
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: --holdout {holdout:g} holds out {int(test.sum())} of {len(df)} measurements: "
                  f"the held-out error rests on too few to mean much (hold out at least {MIN_HELD_OUT})"])
    coef = _fit(df[~test], cache_knee, context_floor_ms)
    pred = predict_ms(coef, df)
    y = df["time_ms"].to_numpy(float)
    out = df.assign(predicted_ms=pred, split=np.where(test, "held_out", "train"))
    held = _errors(pred[test], y[test]) if test.any() else _errors(pred, y)
    names = PARAMS + [MOE_PARAM] * (len(coef) > len(PARAMS))
    return FitResult({k: float(v) for k, v in zip(names, coef)}, held, _errors(pred[~test], y[~test]), out)
