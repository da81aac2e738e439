"""`servesim validate layers`: servesim's per-layer step composition against measured per-operator timings.

../shared/data/gpu/layer-profiles/llmservingsim-h100-mixtral/ holds PyTorch-profiler kernel times of every
operator of Mixtral-8x7B on H100 at TP 2 and 4, for 1 to 2,048 tokens (prefill, no KV cache). Its dense part
(attention projections, the two RMSNorms, rotary embedding, activation, LM head) is what servesim composes
for any dense model: the projections from NVIDIA's kernel tables, the rest from the overhead terms. The
experts are profiled one at a time (`expert.w1`/`w3`/`w2` at `input` tokens: one whole expert's GEMMs, the same
at TP 2 and 4) with the router as `gate`; attention is not in the data.

The MoE part (`check_moe_layers`) compares, like for like, each expert's three GEMMs with the kernel tables'
GEMMs of the same shapes, and a whole MoE layer at balanced routing (E (1 - (1 - k/E)^n) experts touched, n k
tokens shared among them, each expert run separately as the profiled model does, plus its router) with what
servesim composes: vLLM's fused-MoE kernel for all the experts at once (whole experts, MoE TP 1, balanced
routing) plus the router GEMM. The second is an implementation gap as much as an error: the fused kernel
reads each touched expert once and keeps the GPU busy across experts.

Reported by token bucket (1, 2-8, 9-64: decode-sized batches; 65-512; 513-2,048): the measured dense time of
one layer, servesim's kernel-table time for the same GEMMs, and servesim with its overhead terms, so one sees
how much of a small step the kernel tables leave out and how much the overhead terms put back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from servesim.simulator.cost_model import REFERENCE_BANDWIDTH_GBPS, Overhead, activation_traffic, default_overhead
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import ModelArchitecture
from servesim.workloads.settings import MAX_TOKENS

MIXTRAL = {"hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "vocab": 32000, "layers": 32}
GEMMS = ["q_proj", "k_proj", "v_proj", "o_proj"]
OTHER = ["input_layernorm", "post_layernorm", "rope", "act_fn"]
BUCKETS = [(1, 1, "1"), (2, 8, "2-8"), (9, 64, "9-64"), (65, 512, "65-512"), (513, 2048, "513-2048"),
           (2049, MAX_TOKENS, "over 2048")]  # the profiles' own counts reach 2048
H100_BANDWIDTH_GBPS = 3350.0


def _read_layers(path: Path) -> pd.DataFrame:
    """One profiler's table. A file whose last line has no line end was cut off as it was written: its last row's
    numbers may be cut short too (a latency of 12345 read as 1), so it is refused, not read."""
    cols = ["layer_name", "input", "tp_size", "latency(ns)"]
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            if f.tell():
                f.seek(-1, 2)
                if f.read(1) not in (b"\n", b"\r"):
                    raise ConfigError("layers", f"{path}: its last line has no line end, as a file cut off while it "
                                                f"was written: its last row may be cut short; give the whole file")
        d = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise ConfigError("layers", f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    missing = [c for c in cols if c not in d.columns]
    if missing:
        raise ConfigError("layers", f"{path} lacks column(s) {', '.join(missing)}")
    num = d[cols[1:]].apply(pd.to_numeric, errors="coerce")
    if num.isna().any().any() or not (num > 0).all().all() or not np.isfinite(num.to_numpy(float)).all() \
            or not set(GEMMS + OTHER) <= set(d["layer_name"]):
        raise ConfigError("layers", f"{path}: needs positive finite numbers in {', '.join(cols[1:])} and rows for "
                                    f"{', '.join(GEMMS + OTHER)}")
    counts = num[["input", "tp_size"]]
    if not (counts == counts.round()).all().all():  # a token count or TP degree of 1.5 is damage
        row = int((counts != counts.round()).any(axis=1).to_numpy().argmax())
        raise ConfigError("layers", f"{path}, row {row + 2}: input and tp_size must be whole numbers, got "
                                    f"{counts.iloc[row].tolist()}")
    if num["tp_size"].nunique() > 1:  # the buckets' medians would mix them under the first row's TP
        raise ConfigError("layers", f"{path}: rows of several TP degrees ({', '.join(str(int(v)) for v in sorted(num['tp_size'].unique()))}): "
                                    f"one layers.csv per TP degree")
    if (num["latency(ns)"] > 1e12).any():  # 1,000 s for one layer's kernel: a damaged figure (290 digits printed)
        row = int((num["latency(ns)"] > 1e12).to_numpy().argmax())
        raise ConfigError("layers", f"{path}, row {row + 2}: latency(ns) {num['latency(ns)'].iloc[row]:g}, more than "
                                    f"1e12 ns (1,000 s a layer): a damaged table")
    if (num["input"] > MAX_TOKENS).any():  # no step is so large: a damaged count (no bucket holds it)
        row = int((num["input"] > MAX_TOKENS).to_numpy().argmax())
        raise ConfigError("layers", f"{path}, row {row + 2}: input {int(num['input'].iloc[row]):,} tokens, more than "
                                    f"{MAX_TOKENS:,}: a damaged table")
    tp = int(num["tp_size"].iloc[0])
    if MIXTRAL["heads"] % tp:  # vLLM splits the attention heads evenly over the TP group
        raise ConfigError("layers", f"{path}: tp_size {tp} does not split Mixtral's {MIXTRAL['heads']} attention "
                                    f"heads, so no TP group of it serves the model: a damaged table")
    return d.assign(**{c: num[c] for c in cols[1:]})


def _by_token_count(d: pd.DataFrame, path: Path, layers: list[str]) -> pd.DataFrame:
    """Median ms per (input, layer), every one of `layers` measured at every token count: a row missing for one
    count would be summed as nothing (its GEMM lost from the measured side)."""
    wide = d.assign(ms=d["latency(ns)"] * 1e-6).pivot_table(index="input", columns="layer_name", values="ms",
                                                            aggfunc="median")
    gaps = wide.reindex(columns=layers).isna()
    if gaps.any().any():
        tokens, layer = next((int(i), c) for i, row in gaps.iterrows() for c in layers if row[c])
        raise ConfigError("layers", f"{path}: no {layer} row at input {tokens} ({int(gaps.to_numpy().sum())} "
                                    f"(input, layer) pair(s) missing): every layer is measured at every token count")
    return wide


def _h100_tables(tables: str | Path):
    """The H100 tables under the root --tables names; a wrong root is said as --tables."""
    from servesim.calibration.aiconfigurator import KernelTables

    try:
        return KernelTables(tables, "h100_sxm")
    except ConfigError as exc:
        hint = " (a GPU's folder: give the root that holds h100_sxm/)" if (Path(tables) / "gemm").is_dir() else ""
        raise ConfigError("--tables", f"{tables}: {exc.message}{hint}") from None


def _bucket(t: int) -> str:
    return next(label for lo, hi, label in BUCKETS if lo <= t <= hi)


def _layer_files(profiles: str | Path) -> list[Path]:
    """Every layers.csv under the root --data gives; none is said as --data (r166: as "layers")."""
    files = sorted(Path(profiles).rglob("layers.csv"))
    if not files:
        raise ConfigError("--data", f"no layers.csv under {profiles}" + (": it is a file, not a folder"
                                                                          if Path(profiles).is_file() else ""))
    return files


def check_layers(profiles: str | Path, tables: str | Path, out: str | Path | None = None) -> pd.DataFrame:
    profiles = Path(profiles)
    files = _layer_files(profiles)
    t = _h100_tables(tables)
    o = Overhead(**default_overhead())
    m = MIXTRAL
    arch = ModelArchitecture(name="mixtral-8x7b-dense-part", num_hidden_layers=m["layers"], hidden_size=m["hidden"],
                             num_attention_heads=m["heads"], num_key_value_heads=m["kv_heads"],
                             intermediate_size=14336, vocab_size=m["vocab"])
    rows, seen = [], {}
    for f in files:
        d = _read_layers(f)
        tp = int(d["tp_size"].iloc[0])
        if tp in seen:  # the buckets' medians would pool the two under one TP (as one file of two TPs would)
            raise ConfigError("layers", f"{f} and {seen[tp]} are both of TP {tp}: one layers.csv per TP degree")
        seen[tp] = f
        wide = _by_token_count(d, f, GEMMS + OTHER)
        heads, kvh, dd, h = m["heads"] // tp, max(1, m["kv_heads"] // tp), m["head_dim"], m["hidden"]
        traffic = activation_traffic(arch, tp) * REFERENCE_BANDWIDTH_GBPS / H100_BANDWIDTH_GBPS
        for tokens, r in wide.iterrows():
            tokens = int(tokens)
            o_proj = t.gemm_ms(tokens, h, heads * dd, "bf16")
            gemm = t.gemm_ms(tokens, (heads + 2 * kvh) * dd, h, "bf16") + o_proj  # vLLM's fused QKV, as composed
            separate = (t.gemm_ms(tokens, heads * dd, h, "bf16") + 2 * t.gemm_ms(tokens, kvh * dd, h, "bf16")
                        + o_proj)  # the profiled model's four projections, like for like
            other = o.gpu_per_layer_us * 1e-3 + tokens * o.gpu_per_token_per_layer_ns * 1e-6 * traffic
            rows.append({"tp": tp, "tokens": tokens, "bucket": _bucket(tokens),
                         "measured_gemm_ms": float(r[GEMMS].sum()), "table_gemm_ms": gemm,
                         "table_separate_gemm_ms": separate,
                         "measured_other_ms": float(r[OTHER].sum()), "servesim_other_ms": other})
    per = pd.DataFrame(rows)
    per["measured_ms"] = per["measured_gemm_ms"] + per["measured_other_ms"]
    per["kernels_only_ms"] = per["table_gemm_ms"]
    per["with_overhead_ms"] = per["table_gemm_ms"] + per["servesim_other_ms"]
    order = {label: i for i, (_, _, label) in enumerate(BUCKETS)}
    table = (per.groupby(["tp", "bucket"])[["measured_ms", "measured_gemm_ms", "table_gemm_ms",
                                            "table_separate_gemm_ms", "measured_other_ms",
                                            "servesim_other_ms", "kernels_only_ms", "with_overhead_ms"]]
             .median().reset_index())
    table = table.sort_values(["tp", "bucket"], key=lambda c: c.map(order) if c.name == "bucket" else c)
    table["kernels_only_error"] = table["kernels_only_ms"] / table["measured_ms"] - 1
    table["with_overhead_error"] = table["with_overhead_ms"] / table["measured_ms"] - 1
    table["gemm_error"] = table["table_separate_gemm_ms"] / table["measured_gemm_ms"] - 1
    table["other_ratio"] = table["measured_other_ms"] / table["servesim_other_ms"]
    table = table.reset_index(drop=True)
    if out is not None:
        from servesim.calibration.validate import make_out_dir

        out = make_out_dir(out, [profiles, tables])
        table.to_csv(out / "table.csv", index=False)
        per.to_csv(out / "per-token-count.csv", index=False)
    return table


EXPERT_GEMMS = ["expert.w1", "expert.w3", "expert.w2"]
MIXTRAL_MOE = {"experts": 8, "top_k": 2, "inter": 14336}


def check_moe_layers(profiles: str | Path, tables: str | Path, out: str | Path | None = None) -> pd.DataFrame:
    """Mixtral's measured experts against the kernel tables, by token bucket (one layer, ms)."""
    files = _layer_files(profiles)
    t = _h100_tables(tables)
    m, e, k, inter = MIXTRAL, MIXTRAL_MOE["experts"], MIXTRAL_MOE["top_k"], MIXTRAL_MOE["inter"]
    arch = ModelArchitecture(name="mixtral-8x7b", num_hidden_layers=m["layers"], hidden_size=m["hidden"],
                             num_attention_heads=m["heads"], num_key_value_heads=m["kv_heads"],
                             intermediate_size=inter, vocab_size=m["vocab"], num_experts=e, experts_per_token=k)
    d = _read_layers(files[0])  # experts are not split by TP in the data: either file holds the same curves
    if not set(EXPERT_GEMMS + ["gate"]) <= set(d["layer_name"]):
        raise ConfigError("layers", f"{files[0]} has no rows for {', '.join(EXPERT_GEMMS)}, gate")
    wide = _by_token_count(d, files[0], EXPERT_GEMMS + ["act_fn", "gate"])
    xs = wide.index.to_numpy(float)
    expert = wide[EXPERT_GEMMS + ["act_fn"]].sum(axis=1).to_numpy(float)  # one expert over n tokens
    rows = []
    for n in (int(v) for v in xs):
        touched = arch.experts_touched(n)
        per_expert = n * k / touched
        # each expert's share, read off the measured curve only within it (r135: below the file's first token
        # count np.interp held the first value, an invented "measured" figure that flipped the error's sign)
        measured = float(wide.loc[n, "gate"]) + touched * float(np.interp(per_expert, xs, expert)) \
            if xs[0] <= per_expert <= xs[-1] else np.nan
        g = t.gemm_ms
        rows.append({
            "tokens": n, "bucket": _bucket(n),
            "measured_expert_gemm_ms": float(wide.loc[n, EXPERT_GEMMS].sum()),
            "table_expert_gemm_ms": 2 * g(n, inter, m["hidden"], "bf16") + g(n, m["hidden"], inter, "bf16"),
            "measured_moe_ms": measured,
            "composed_moe_ms": t.moe_ms(n, arch, "bf16", 1, routing="balanced") + g(n, e, m["hidden"], "bf16")})
    per = pd.DataFrame(rows)
    order = {label: i for i, (_, _, label) in enumerate(BUCKETS)}
    table = per.groupby("bucket")[[c for c in per.columns if c.endswith("_ms")]].median().reset_index()
    partial = per.groupby("bucket")["measured_moe_ms"].apply(lambda v: v.isna().any())  # a bucket is compared
    table.loc[table["bucket"].map(partial).to_numpy(), "measured_moe_ms"] = np.nan  # whole, or not at all
    table = table.sort_values("bucket", key=lambda c: c.map(order)).reset_index(drop=True)
    table["expert_gemm_error"] = table["table_expert_gemm_ms"] / table["measured_expert_gemm_ms"] - 1
    table["moe_layer_error"] = table["composed_moe_ms"] / table["measured_moe_ms"] - 1
    if out is not None:
        from servesim.calibration.validate import make_out_dir

        out = make_out_dir(out, [profiles, tables])
        table.to_csv(out / "moe-table.csv", index=False)
        per.to_csv(out / "moe-per-token-count.csv", index=False)
    return table


def format_moe_table(table: pd.DataFrame) -> str:
    lines = ["| tokens | one expert's 3 GEMMs: measured (ms) | kernel tables | error | MoE layer, balanced: "
             "measured per-expert (ms) | composed fused-MoE + router | error |", "|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        moe = (f"{r.measured_moe_ms:.4f} | {r.composed_moe_ms:.4f} | {r.moe_layer_error:+.0%}"
               if np.isfinite(r.measured_moe_ms) else f"- (an expert's share lies outside the measured token counts) "
                                                      f"| {r.composed_moe_ms:.4f} | -")
        lines.append(f"| {r.bucket} | {r.measured_expert_gemm_ms:.4f} | {r.table_expert_gemm_ms:.4f} | "
                     f"{r.expert_gemm_error:+.0%} | {moe} |")
    return "\n".join(lines)


def format_table(table: pd.DataFrame) -> str:
    lines = ["| TP | tokens | measured (ms/layer) | kernel tables | error | + servesim overhead | error | "
             "same four GEMMs: table vs measured | norms, rotary, activation: measured / servesim |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.tp} | {r.bucket} | {r.measured_ms:.4f} | {r.kernels_only_ms:.4f} | "
                     f"{r.kernels_only_error:+.0%} | {r.with_overhead_ms:.4f} | {r.with_overhead_error:+.0%} | "
                     f"{r.gemm_error:+.0%} | {r.other_ratio:.1f}x |")
    return "\n".join(lines)


def summary_errors(table: pd.DataFrame) -> dict:
    small = table[table["bucket"].isin(["1", "2-8", "9-64"])]
    return {k: float(np.mean(np.abs(small[k]))) for k in ("kernels_only_error", "with_overhead_error")}
