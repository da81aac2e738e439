"""`servesim calibrate import aiconfigurator`: compose step times from measured kernel tables.

NVIDIA's aiconfigurator-core ships per-kernel timings measured with vLLM's own kernels
on H100/H200 (../shared/data/gpu/aiconfigurator/, see its README). A step of a
Llama-architecture model is composed, per layer, of four GEMMs (QKV, O, gate/up, down),
prefill attention (FlashAttention, by batch x input length), decode attention over the
paged cache (by batch x KV length) and, at tensor parallel > 1, two all-reduces; plus
the LM head on each sequence's last token. The composed grid is then fitted with the
same `linear` cost model as measured runs, and the fit's held-out error is the
profile's. What the tables do not hold (norms, rotary embedding, activations, sampling,
CPU scheduling) is not in these profiles: they are kernel time, a lower bound.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype
from scipy.optimize import isotonic_regression

from servesim.calibration.fit import FitResult, fit_step_model, kv_floor_ms
from servesim.calibration.grid import STEP_KINDS, GridPoint, make_grid
from servesim.calibration.profile_io import profile_dict, write_profile
from servesim.simulator.cost_model import default_overhead
from servesim.simulator.errors import ConfigError, MissingKernelTable, TableGap
from servesim.simulator.local_attention import local_attention
from servesim.simulator.model_arch import DEFAULT_ROUTING, load_model

# Each table's newest measured version under <gpu>/ (GPUs were measured with different vLLM releases).
TABLES = {
    "gemm": ("gemm/vllm/*/gemm_perf.parquet", ["gemm_dtype", "kernel_source", "m", "n", "k", "latency"]),
    "context": ("attention/vllm/*/context_attention_perf.parquet",
                ["kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                 "kv_cache_dtype", "latency"]),
    "generation": ("attention/vllm/*/generation_attention_perf.parquet",
                   ["kernel_source", "batch_size", "step", "num_heads", "num_key_value_heads", "head_dim",
                    "kv_cache_dtype", "latency"]),
    # message_size counts elements, not bytes: NCCL's half rows at n match its int8 rows at 2n
    "allreduce": ("comm/vllm/*/custom_allreduce_perf.parquet", ["num_gpus", "message_size", "latency", "backend"]),
}
# the table's gemm_dtype and its kernels, most preferred first (the kernel vLLM picks for the format)
GEMM_KERNELS = {"bf16": ("bfloat16", ("torch.nn.functional.linear", "vllm_default")),
                "fp16": ("bfloat16", ("torch.nn.functional.linear", "vllm_default")),
                "fp8": ("fp8", ("CutlassFP8ScaledMMLinearKernel", "vllm_default")),
                "nvfp4": ("nvfp4", ("FlashInferCutlassNvFp4LinearKernel", "FlashInferCuteDslNvFp4LinearKernel"))}
KV_TABLE_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
# Fused-MoE layers (read only for mixture-of-experts models): by tokens, shape, top-k, experts, MoE TP/EP, routing
MOE_TABLE = ("moe/vllm/*/moe_perf.parquet", ["kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size",
                                             "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution",
                                             "latency"])
# the table's moe_dtype and kernels for a weight format, most preferred first (vLLM's fused-MoE choices)
# (a shape takes the first kernel timed for it at its EP, at any TP; later ones stand in for shapes the earlier
# were not timed for, never for one TP: a TP its kernel lacks is refused)
_BF16_MOE = ("vllm_unquantizedfusedmoe_triton_tritonexperts",  # Hopper and older
             "vllm_unquantizedfusedmoe_flashinfer_cutlass_flashinferexperts",  # what the Blackwell tables measured
             "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts",  # Blackwell, the shapes CUTLASS lacks
             "vllm_fused_moe",  # the A100 table's name for vLLM's Triton fused MoE (an older collector)
             "vllm_xpu_moe")  # Intel's
_FP8_BLOCK_MOE = ("vllm_fp8moe_triton_tritonexperts",  # Hopper (and Ada) under TP
                  "vllm_fp8moe_flashinfer_cutlass_flashinferexperts",  # Hopper under EP
                  "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",  # Blackwell
                  "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmodular")
# fp8 by scale layout (vLLM 0.19's fused_moe/oracle/fp8.py, r143): a block-scaled checkpoint's experts (DeepSeek,
# Qwen's -FP8; weight_block_size) read its fp8_block rows; per-tensor weights with dynamic activation scales
# (`-q fp8`), which only Triton's kernel takes, its per-tensor rows (Ada) or the block-scaled Triton kernel
# (Hopper), the other kernels standing in where no Triton kernel was timed; a ModelOpt checkpoint's static
# scales FlashInfer's kernels
MOE_KERNELS = {"bf16": (("bfloat16",), _BF16_MOE), "fp16": (("bfloat16",), _BF16_MOE),
               "fp8": (("fp8", "fp8_block"), ("vllm_modeloptfp8moe_triton_tritonexperts", *_FP8_BLOCK_MOE[:2],
                                              "vllm_modeloptfp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
                                              *_FP8_BLOCK_MOE[2:],
                                              "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts",
                                              "vllm_xpu_moe")),
               "fp8_block": (("fp8_block",), (*_FP8_BLOCK_MOE, "vllm_xpu_moe")),
               "fp8_static": (("fp8",), ("vllm_modeloptfp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
                                         "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts",
                                         "vllm_modeloptfp8moe_triton_tritonexperts", "vllm_xpu_moe")),
               # gpt-oss's MXFP4 experts: OpenAI's Triton kernel on Hopper, TRT-LLM's through FlashInfer on Blackwell,
               # Marlin's on Ada and the RTX PRO 6000 (r133: not read, so gpt-oss there was refused), Intel's own
               "mxfp4": (("w4a16_mxfp4",), ("vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
                                            "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_"
                                            "trtllmmxfp4expertsmonolithic",
                                            "vllm_gptossmxfp4moe_marlin_marlinexperts",
                                            "vllm_xpu_moe_mxfp4")),
               # ModelOpt NVFP4 experts, in vLLM 0.33's order (fused_moe/oracle/nvfp4.py): FlashInfer's TRT-LLM
               # kernels where the GPU runs them (B200, GB200, B300, GB300), else FlashInfer's CUTLASS (RTX PRO 6000).
               # (vLLM runs the modular TRT-LLM kernel under DP/EP all2all or EPLB; a shape the tables time with the
               # monolithic one only is priced with it there)
               "nvfp4": (("nvfp4",), ("vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_"
                                      "trtllmnvfp4expertsmonolithic",
                                      "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_"
                                      "trtllmnvfp4expertsmodular",
                                      "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_cutlass_flashinferexperts"))}
MOE_ROUTING = DEFAULT_ROUTING  # real routers are skewed; the tables measure balanced, 1.01 and 1.2 (moe.routing)
# DeepSeek's latent attention, one layer's whole vLLM module (projections, rotary, the MLA kernel, o_proj; the
# decode path's absorbed BMMs): prefill by batch x input length, decode by batch x KV length (`step`), per GPU heads
MLA_TABLES = {"context": ("mla/vllm/*/mla_context_module_perf.parquet", "isl"),
              "generation": ("mla/vllm/*/mla_generation_module_perf.parquet", "step")}
MLA_COLUMNS = ["kernel_source", "kv_cache_dtype", "gemm_type", "num_heads", "batch_size", "isl", "step", "latency"]
MLA_GEMM_TYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8_block", "nvfp4": "nvfp4"}
# NCCL collectives (expert parallelism's dispatch and combine): by op, GPUs and message size in elements
NCCL_TABLE = ("comm/nccl/*/nccl_perf.parquet", ["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"])


def _read_table(path: Path, cols: list[str]) -> pd.DataFrame:
    """A kernel table, refused by file and column unless every value it is read by is sound: a latency a positive
    number of ms, a shape column a number >= 1, a kind column text. A damaged shape crashed the composition
    (an empty backend, zero heads) or priced steps 2-3x wrong with exit 0 (a column of text sorted as text,
    negative sizes)."""
    if not path.is_file():
        raise ConfigError("kernel_tables", f"{path} is not a file")
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several kinds for damaged files
        raise ConfigError("kernel_tables", f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ConfigError("kernel_tables", f"{path} lacks column(s) {', '.join(missing)}")
    if df.empty:
        raise ConfigError("kernel_tables", f"{path} has no rows")
    lat = pd.to_numeric(df["latency"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)  # <NA> too (r150)
    bad = ~(np.isfinite(lat) & (lat > 0) & (lat <= 1e9))
    if bad.any():
        raise ConfigError("kernel_tables", f"{path}: {int(bad.sum())} of {len(df)} rows have a latency that is not a "
                                           f"positive number of ms (up to 1e9)")
    # the MLA prefill table records step 0 (no cached context); a table without windows measured full attention
    zero_ok = {"window_size"} | ({"step"} if path.name.startswith("mla_context") else set())
    for col in [c for c in cols if c != "latency"] + ["window_size"] * ("window_size" in df.columns):
        v = df[col]
        least = 0 if col in zero_ok else 1
        if col in TEXT_COLUMNS:  # a kind no row of the real tables spells so (empty, padded) matches nothing (r150)
            ok = v.map(lambda x: isinstance(x, str) and x != "" and x == x.strip()).to_numpy(bool)
            what = "text (not empty, no spaces around it)"
        elif is_numeric_dtype(v) and not is_bool_dtype(v):
            x = v.to_numpy(dtype=float, na_value=np.nan)
            ok, what = np.isfinite(x) & (x >= least), f"numbers >= {least}"
        else:
            ok, what = np.zeros(len(v), bool), f"numbers >= {least}"
        if not ok.all():
            row = int(np.argmax(~ok))
            raw = v.iloc[row]
            raise ConfigError("kernel_tables", f"{path}: column {col} must hold {what} (row {row + 1}: "
                                               f"{getattr(raw, 'item', lambda: raw)()!r:.40})")
    return df.assign(latency=lat)


TEXT_COLUMNS = {"gemm_dtype", "kernel_source", "kv_cache_dtype", "backend", "moe_dtype", "distribution", "gemm_type",
                "op_name", "nccl_dtype"}  # what a row is (a kernel, a dtype), compared as text


def _version_key(path: Path) -> tuple:
    return tuple(int(x) if x.isdigit() else 0 for x in path.parent.name.split("."))


def newest_table(gpu_dir: Path, pattern: str) -> Path | None:
    found = sorted(gpu_dir.glob(pattern), key=_version_key)
    return found[-1] if found else None


def _interp_scaled(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Linear inside the measured range; proportional beyond its top (a bigger kernel is as much slower)."""
    if x > xs[-1]:
        return float(ys[-1] * x / xs[-1])
    return float(np.interp(x, xs, ys))


def _sizes(a: pd.DataFrame, table: str, num_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """A collective's (message sizes, latencies): two sizes at least, or every message is priced from one in
    proportion (r129: a 128-element all-reduce scaled to a step's, 500 times the token cost)."""
    if a["message_size"].nunique() < 2:
        raise ConfigError("kernel_tables", f"{table} times one message size only for {num_gpus} GPUs: it cannot "
                                           f"scale to other messages")
    return a["message_size"].to_numpy(float), a["latency"].to_numpy(float)


def _bracket(v: float, grid: np.ndarray) -> tuple[float, float, float]:
    """(low, high, weight of high) in log space; (top, top, 0) beyond the top."""
    if v >= grid[-1]:
        return grid[-1], grid[-1], 0.0
    if v <= grid[0]:
        return grid[0], grid[0], 0.0
    i = int(np.searchsorted(grid, v))
    lo, hi = grid[i - 1], grid[i]
    return lo, hi, float((np.log(v) - np.log(lo)) / (np.log(hi) - np.log(lo)))


def _surface(x: pd.DataFrame, xcol: str, scale: float):
    """A (batch x length) latency surface in log space, holes filled, for bilinear lookup."""
    piv = x.groupby(["batch_size", xcol])["latency"].median().unstack().sort_index()
    # The tables are triangular (large batch x long sequence was not measured). Attention
    # over twice the sequences costs twice as much, so a hole is twice the cell above it.
    vals, rows = piv.to_numpy(float, copy=True), piv.index.to_numpy()
    for i in range(1, len(rows)):
        hole = np.isnan(vals[i]) & ~np.isnan(vals[i - 1])
        vals[i, hole] = vals[i - 1, hole] * rows[i] / rows[i - 1]
    piv = pd.DataFrame(vals, index=piv.index, columns=piv.columns)
    piv = piv.interpolate(axis=1, limit_direction="both").interpolate(axis=0, limit_direction="both")
    return piv.index.to_numpy(float), piv.columns.to_numpy(float), np.log(piv.to_numpy(float)), scale


def _surface_ms(surface, batch: float, length: float, quadratic: bool) -> float:
    bs, ls, logt, scale = surface
    b_lo, b_hi, wb = _bracket(batch, bs)
    l_lo, l_hi, wl = _bracket(length, ls)
    i = {v: j for j, v in enumerate(bs)}
    j = {v: q for q, v in enumerate(ls)}
    v = ((1 - wb) * (1 - wl) * logt[i[b_lo], j[l_lo]] + wb * (1 - wl) * logt[i[b_hi], j[l_lo]]
         + (1 - wb) * wl * logt[i[b_lo], j[l_hi]] + wb * wl * logt[i[b_hi], j[l_hi]])
    t = float(np.exp(v)) * scale * max(1.0, batch / bs[-1])
    if length > ls[-1]:  # prefill attention is quadratic in length, decode linear
        t *= (length / ls[-1]) ** (2 if quadratic else 1)
    return t


def _fp8_layout(arch) -> str:
    """Which of MOE_KERNELS' fp8 kinds a model's fp8 experts are."""
    if arch.weight_block_size:
        return "fp8_block"
    return "fp8_static" if arch.quant_method == "modelopt" else "fp8"


def table_gpus(root: str | Path) -> list[str]:
    """The GPU folders of tables (each with gemm/) under a root; none for a root that is no folder."""
    try:
        return sorted(p.name for p in Path(root).iterdir() if (p / "gemm").is_dir())
    except OSError:  # no folder, or one that cannot be listed
        return []


class KernelTables:
    """One GPU's measured kernel tables, each at its newest vLLM version."""

    def __init__(self, root: str | Path, gpu: str):
        if not gpu or "/" in gpu or gpu in (".", ".."):
            raise ConfigError("gpu", f"{gpu!r} is not a kernel-table folder name (e.g. h100_sxm)")
        if not Path(root).is_dir():
            raise ConfigError("kernel_tables", f"no kernel tables root at {root}")
        self.dir = Path(root) / gpu
        if not self.dir.is_dir():
            have = table_gpus(root)
            raise ConfigError("gpu", f"no kernel tables at {self.dir}" + (f"; found: {', '.join(have)}" if have else ""))
        self.gpu = gpu
        self.t, self.versions = {}, {}
        for key, (pattern, cols) in TABLES.items():
            path = newest_table(self.dir, pattern)
            if path is None:
                raise ConfigError("kernel_tables", f"missing table {self.dir / pattern}")
            df = _read_table(path, cols)
            if key in ("context", "generation") and "window_size" not in df.columns:
                df = df.assign(window_size=0)  # older collections measured full attention only
            self.t[key], self.versions[key] = df, path.parent.name
        self.device = str(self.t["gemm"]["device"].iloc[0]) if "device" in self.t["gemm"] else gpu
        self._gemm_curves: dict = {}
        self._moe_curves: dict = {}
        self.moe_kernels: set[str] = set()  # the fused-MoE kernels read (a composed profile's source names them)

    # -- fused MoE ------------------------------------------------------------------
    def _optional_table(self, key: str, spec: tuple[str, list[str]], why: str) -> pd.DataFrame:
        """A table only some models need, read the first time one does."""
        if key not in self.t:
            path = newest_table(self.dir, spec[0])
            if path is None:
                raise MissingKernelTable("kernel_tables", f"missing table {self.dir / spec[0]} ({why})")
            self.t[key], self.versions[key] = _read_table(path, spec[1]), path.parent.name
        return self.t[key]

    def moe_ms(self, tokens: float, arch, dtype: str, tp: int, routing: str = MOE_ROUTING, ep: int = 1) -> float:
        """One fused-MoE layer (routed experts) for `tokens` tokens: every expert split over the TP group, or
        with expert parallelism (ep > 1) this GPU's 1/ep of the experts, whole, over the tokens dispatched."""
        fmt = _fp8_layout(arch) if dtype == "fp8" else dtype
        key = (arch.hidden_size, arch.moe_intermediate_size or arch.intermediate_size, arch.experts_per_token,
               arch.num_experts, tp, fmt, routing, ep)
        if key not in self._moe_curves:
            m = self._optional_table("moe", MOE_TABLE, "a MoE model needs it")
            dtypes, kernels = MOE_KERNELS.get(fmt, ((), ()))
            shown = {"fp8_block": "fp8 block-scaled (the tables' fp8_block)",
                     "fp8_static": "fp8 with static scales (ModelOpt's)"}.get(fmt, dtype)  # as the messages say it
            m = m[(m["hidden_size"] == key[0]) & (m["inter_size"] == key[1]) & (m["topk"] == key[2])
                  & (m["num_experts"] == key[3]) & (m["moe_ep_size"] == ep) & (m["distribution"] == routing)]
            at_tp = m[m["moe_tp_size"] == tp]
            # the shape's kernel whatever the TP: where vLLM's was not timed at this TP another format's kernel
            # stood in, 3x slower (r143: Qwen3-30B-A3B fp8's step doubled from TP 2 to TP 4)
            m = m[m["moe_dtype"].isin(dtypes)]
            found = next((k for k in kernels if (m["kernel_source"] == k).any()), None)
            if found is None and not at_tp.empty and not at_tp["moe_dtype"].isin(dtypes).any():
                raise ConfigError("dtype", f"no {shown} fused-MoE timings in {self.dir} for {arch.name}'s experts "
                                           f"at MoE TP {tp}" + (f" EP {ep}" if ep > 1 else "") + " (timed in "
                                           f"{', '.join(sorted(set(at_tp['moe_dtype'])))})")
            other = sorted(set(at_tp["kernel_source"]) - set(kernels))
            timed = sorted(set(m.loc[m["kernel_source"] == found, "moe_tp_size"]))
            m = m[(m["kernel_source"] == found) & (m["moe_tp_size"] == tp)]
            if m.empty:
                raise ConfigError("kernel_tables", f"no fused-MoE timings in {self.dir} for {arch.name}'s experts "
                                                   f"(hidden {key[0]}, expert {key[1]}, top {key[2]} of {key[3]}) "
                                                   f"in {shown} at MoE TP {tp}" + (f" EP {ep}" if ep > 1 else "")
                                                   + f", {routing} routing" + (
                                                       f" ({found} is timed at MoE TP {', '.join(map(str, timed))} "
                                                       f"only)" if found else
                                                       f" with a kernel servesim reads (timed only with "
                                                       f"{', '.join(other)})" if other else ""))
            m = m.groupby("num_tokens", as_index=False)["latency"].median().sort_values("num_tokens")
            # more tokens route to at least the experts fewer did: a skewed routing's rows, each one draw of it,
            # dip (r174: Mixtral's 256-token prefill composed 8% cheaper than a 64-token one), so the curve is
            # their least-squares non-decreasing fit
            rising = isotonic_regression(m["latency"].to_numpy(float)).x
            self._moe_curves[key] = (m["num_tokens"].to_numpy(float), rising)
            self.moe_kernels.add(found)
        xs, ys = self._moe_curves[key]
        return _interp_scaled(tokens, xs, ys) if tokens >= xs[0] else float(ys[0])

    @property
    def vllm_versions(self) -> str:
        v = sorted(set(self.versions.values()), key=lambda x: tuple(int(p) for p in x.split(".") if p.isdigit()))
        return "/".join(v)

    # -- GEMM -------------------------------------------------------------------
    def _gemm_table(self, dtype: str):
        if dtype not in self._gemm_curves:
            if dtype not in GEMM_KERNELS:
                raise ConfigError("dtype", f"no kernel tables for {dtype} weights; tables cover {', '.join(GEMM_KERNELS)}")
            gd, kernels = GEMM_KERNELS[dtype]
            g = self.t["gemm"]
            g = g[g["gemm_dtype"] == gd]
            kernel = next((k for k in kernels if (g["kernel_source"] == k).any()), None)
            if kernel is None:
                raise ConfigError("dtype", f"no {dtype} GEMM timings in {self.dir} (this GPU's tables hold "
                                           f"{', '.join(sorted(self.t['gemm']['gemm_dtype'].unique()))})")
            g = g[g["kernel_source"] == kernel]
            curves = {nk: (x["m"].to_numpy(float), x["latency"].to_numpy(float))
                      for nk, x in (g.sort_values("m").groupby(["n", "k"]))}
            if max(len(m) for m, _ in curves.values()) < 2:
                raise ConfigError("kernel_tables", f"the {dtype} GEMM table in {self.dir} times one token count only")
            for col, what in (("n", "output width"), ("k", "input width")):  # r129: one k priced every k as it
                if g[col].nunique() < 2:
                    raise ConfigError("kernel_tables", f"the {dtype} GEMM table in {self.dir} times one {col} "
                                                       f"({what}) only: it cannot scale to other layers")
            self._gemm_curves[dtype] = (curves, np.sort(g["n"].unique()).astype(float),
                                        np.sort(g["k"].unique()).astype(float))
        return self._gemm_curves[dtype]

    def gemm_ms(self, m: int, n: int, k: int, dtype: str) -> float:
        curves, ns, ks = self._gemm_table(dtype)
        n_lo, n_hi, wn = _bracket(n, ns)
        k_lo, k_hi, wk = _bracket(k, ks)
        logs, weights = [], []
        for nn, w1 in ((n_lo, 1 - wn), (n_hi, wn)):
            for kk, w2 in ((k_lo, 1 - wk), (k_hi, wk)):
                if w1 * w2 == 0:
                    continue
                curve = curves.get((int(nn), int(kk)))
                if curve is None:  # the one hole in the table: take the nearest measured shape
                    nn2, kk2 = min(curves, key=lambda c: abs(np.log(c[0] / nn)) + abs(np.log(c[1] / kk)))
                    curve = curves[(nn2, kk2)]
                logs.append(np.log(_interp_scaled(m, *curve)))
                weights.append(w1 * w2)
        t = float(np.exp(np.dot(weights, logs) / np.sum(weights)))
        # beyond the grid's largest n or k, time grows in proportion
        return t * max(1.0, n / ns[-1]) * max(1.0, k / ks[-1])

    # -- attention ----------------------------------------------------------------
    @lru_cache(maxsize=64)
    def _attn_surface(self, table: str, heads: int, kv_heads: int, head_dim: int, kv_dtype: str):
        df = self.t[table]
        xcol = "isl" if table == "context" else "step"
        full = df[df["window_size"] == 0]  # full attention; windowed rows time sliding-window kernels
        if full.empty:  # r129: said as a KV dtype missing, "measured: bf16, fp8"
            raise ConfigError("kernel_tables", f"no full-attention rows (window_size 0) in the {table} attention "
                                               f"table of {self.dir}")
        have = sorted({k for k, v in KV_TABLE_DTYPES.items() if v in set(full["kv_cache_dtype"]) and k != "fp16"})
        df = full[full["kv_cache_dtype"] == KV_TABLE_DTYPES.get(kv_dtype, kv_dtype)]
        if df.empty:
            raise ConfigError("kv_cache_dtype", f"no {table} attention timings with a {kv_dtype} KV cache in "
                                                f"{self.dir} (measured: {', '.join(have) or 'none'})")
        if not (df["head_dim"] == head_dim).any():
            raise ConfigError("model", f"no {table} attention timings for head_dim {head_dim} in {self.dir} (measured: "
                                       f"{', '.join(str(d) for d in sorted(df['head_dim'].unique()))})")
        df = df[df["head_dim"] == head_dim]
        # the kernel vLLM's backend uses for this cache: the one measured over the whole grid
        kernel = df["kernel_source"].value_counts().sort_index().idxmax()
        df = df[df["kernel_source"] == kernel]
        combos = df[["num_heads", "num_key_value_heads"]].drop_duplicates()
        # the same heads if measured, else the nearest, scaled by what the kernel's time follows: a prefill's
        # by its query heads (math), a decode's by its KV heads (the cache it reads: the tables' decode times
        # barely move with query heads; r143: an MHA model's 32 KV heads were read as 8, its decode 4x cheap)
        q, kv = np.log(combos["num_heads"] / heads).abs(), np.log(combos["num_key_value_heads"] / kv_heads).abs()
        decode = table == "generation"
        combos = combos.assign(d=q + 10 * kv if decode else 10 * q + kv)
        h, kvh = combos.sort_values(["d", "num_heads"]).iloc[0][["num_heads", "num_key_value_heads"]]
        x = df[(df["num_heads"] == h) & (df["num_key_value_heads"] == kvh)]
        return _surface(x, xcol, kv_heads / float(kvh) if decode else heads / float(h))

    def _attn_ms(self, table: str, batch: float, length: float, heads: int, kv_heads: int, head_dim: int,
                 kv_dtype: str = "bf16") -> float:
        return _surface_ms(self._attn_surface(table, heads, kv_heads, head_dim, kv_dtype), batch, length,
                           quadratic=table == "context")

    @lru_cache(maxsize=16)
    def _mla_surface(self, phase: str, heads: int, kv_dtype: str, weights: str):
        pattern, xcol = MLA_TABLES[phase]
        df = self._optional_table(f"mla_{phase}", (pattern, MLA_COLUMNS), "latent attention needs it")
        kv, gemm = KV_TABLE_DTYPES.get(kv_dtype, kv_dtype), MLA_GEMM_TYPES.get(weights, weights)
        # not TRT-LLM's ragged prefill, which vLLM runs only when asked (attention_config.
        # use_trtllm_ragged_deepseek_prefill, False by default): the Blackwell tables time it beside FlashAttention at
        # the same points, and their median priced an fp8-KV prefill 6-9% long (r148)
        x = df[(df["kv_cache_dtype"] == kv) & (df["gemm_type"] == gemm) & (df["kernel_source"] != "TRTLLM_RAGGED")]
        if x.empty:
            have = sorted(set(zip(df["kv_cache_dtype"], df["gemm_type"])))
            raise ConfigError("kernel_tables", f"no MLA {phase} timings with a {kv} KV cache and {gemm} projections in "
                                               f"{self.dir} (measured: {', '.join(f'{a}/{b}' for a, b in have)})")
        # every kernel measured: vLLM's MLA backend hands short prefills to its decode kernel, long ones to
        # FlashAttention, and the table records whichever ran at each length
        if not (x["num_heads"] == heads).any():
            raise ConfigError("kernel_tables", f"no MLA {phase} timings for {heads} heads a GPU in {self.dir} "
                                               f"(measured: {', '.join(str(h) for h in sorted(x['num_heads'].unique()))})")
        return _surface(x[x["num_heads"] == heads], xcol, 1.0)

    def mla_ms(self, phase: str, batch: float, length: float, heads: int, kv_dtype: str, weights: str) -> float:
        """One latent-attention layer, projections included: prefill of `batch` x `length` tokens ("context"), or
        `batch` decodes over `length` KV tokens ("generation")."""
        return _surface_ms(self._mla_surface(phase, heads, kv_dtype, weights), batch, length,
                           quadratic=phase == "context")

    def context_attention_ms(self, batch, isl, heads, kv_heads, head_dim, kv_dtype="bf16") -> float:
        return self._attn_ms("context", batch, isl, heads, kv_heads, head_dim, kv_dtype)

    def generation_attention_ms(self, batch, kv_len, heads, kv_heads, head_dim, kv_dtype="bf16") -> float:
        return self._attn_ms("generation", batch, kv_len, heads, kv_heads, head_dim, kv_dtype)

    # -- communication ------------------------------------------------------------
    def nccl_ms(self, op: str, elements: float, num_gpus: int) -> float:
        """An NCCL collective over `num_gpus` GPUs of `elements` 16-bit values (message_size counts elements)."""
        a = self._optional_table("nccl", NCCL_TABLE, "expert parallelism's dispatch and combine need it")
        ours = a[(a["op_name"] == op) & (a["num_gpus"] == num_gpus)]
        a = ours[ours["nccl_dtype"] == "half"]
        if a.empty:  # r129: a missing 16-bit dtype was said as a GPU count measured, "(measured: 2, 4, 8)"
            measured = self.t["nccl"][self.t["nccl"]["op_name"] == op]
            counts = ", ".join(str(n) for n in sorted(measured["num_gpus"].unique())) or "no"
            dtypes = ", ".join(sorted(map(str, ours["nccl_dtype"].unique())))
            why = f"no 16-bit (half) rows: dtypes {dtypes}" if len(ours) else f"measured for {counts} GPUs"
            raise ConfigError("kernel_tables", f"no NCCL {op} timings for {num_gpus} GPUs in {self.dir} ({why})")
        a = a.groupby("message_size", as_index=False)["latency"].median().sort_values("message_size")
        return _interp_scaled(elements, *_sizes(a, f"the NCCL {op} table in {self.dir}", num_gpus))

    def allreduce_ms(self, elements: float, num_gpus: int) -> float:
        """vLLM's custom all-reduce of `elements` activations, captured in a CUDA graph where measured."""
        a = self.t["allreduce"]
        a = a[a["num_gpus"] == num_gpus]
        if a.empty:
            have = ", ".join(str(n) for n in sorted(self.t["allreduce"]["num_gpus"].unique()))
            raise TableGap("tp", f"no all-reduce timings for {num_gpus} GPUs in {self.dir} (measured: {have})")
        backend = next((b for b in ("vllm_graph", "vllm_eager") if (a["backend"] == b).any()), None)
        if backend is None:  # r129: an empty curve was an internal error
            raise ConfigError("kernel_tables", f"no vLLM custom all-reduce timings (backend vllm_graph or vllm_eager) "
                                               f"for {num_gpus} GPUs in {self.dir} (backends: "
                                               f"{', '.join(sorted(map(str, a['backend'].unique())))})")
        a = a[a["backend"] == backend].sort_values("message_size")
        return _interp_scaled(elements, *_sizes(a, f"the all-reduce table in {self.dir}", num_gpus))


def _attention_ms(t: KernelTables, point: GridPoint, heads: int, kvh: int, d: int, kv: str, local=None) -> float:
    """One layer's attention kernels for a grid point; in a local layer, over what its window or chunk keeps
    (prefill scaled by the (query, key) pairs the window leaves)."""
    shape = point.shape
    attn = 0.0
    if point.kind == "prefill":
        full = t.context_attention_ms(point.batch, point.tokens, heads, kvh, d, kv)
        n = point.tokens
        attn += full if local is None else full * local.pairs(0, n) / (n * (n + 1) // 2)
    elif point.kind == "mixed":  # a chunk after cached context: the full prefill with as many (query, key) pairs
        pairs = shape.prefill_attention_pairs if local is None else local.pairs(point.context, point.tokens)
        attn += t.context_attention_ms(1, np.sqrt(2.0 * pairs), heads, kvh, d, kv)
    if shape.decode_seqs:
        kv_len = point.context + 1 if local is None else local.span(point.context)
        attn += t.generation_attention_ms(shape.decode_seqs, kv_len, heads, kvh, d, kv)
    return attn


def _mla_attention_ms(t: KernelTables, point: GridPoint, heads: int, kv: str, weights: str) -> float:
    """One latent-attention layer for a grid point, projections included. A chunk of n tokens after c cached is the
    module over n fresh tokens (its projections, its own pairs) plus the pairs it adds, priced at the rate the
    module's time grows from n to c + n tokens. (aiconfigurator scales the c + n prefill to the chunk's pairs,
    projections included: r151, 16 tokens after 4,080 cost a 21st of 16 fresh ones.)"""
    shape = point.shape
    attn = 0.0
    if point.kind == "prefill":
        attn += t.mla_ms("context", point.batch, point.tokens, heads, kv, weights)
    elif point.kind == "mixed":
        n, full = point.tokens, point.context + point.tokens
        fresh = t.mla_ms("context", 1, n, heads, kv, weights)
        own, whole = n * (n + 1) / 2, full * (full + 1) / 2
        grown = max(t.mla_ms("context", 1, full, heads, kv, weights) - fresh, 0.0)  # the tables' noise aside
        attn += fresh if whole <= own else fresh + grown * (shape.prefill_attention_pairs - own) / (whole - own)
    if shape.decode_seqs:
        attn += t.mla_ms("generation", shape.decode_seqs, point.context + 1, heads, kv, weights)
    return attn


def compose_step_ms(t: KernelTables, arch, point: GridPoint, dtype: str, tp: int, kv_dtype: str | None = None,
                    ep: int = 1, dp: int = 1, routing: str = MOE_ROUTING) -> dict:
    """Kernel time of one engine step, by component (ms). With expert parallelism over ep = TP x DP GPUs, the
    DP ranks step together (equally loaded): a MoE layer dispatches every rank's tokens to the GPUs holding
    their experts and combines the results over the DP group (dispatch_ms), vLLM's allgather_reducescatter
    backend, timed as NCCL's; with one
    DP rank vLLM dispatches nothing (its do_naive_dispatch_combine needs dp_size > 1)."""
    if arch.num_attention_heads % tp:
        raise ConfigError("tp", f"{arch.num_attention_heads} attention heads do not split over tp={tp}")
    kv = kv_dtype or arch.kv_cache_dtype or arch.activation_dtype
    h, d, inter = arch.hidden_size, arch.head_dim, arch.intermediate_size
    heads, kvh = arch.num_attention_heads // tp, max(1, arch.num_key_value_heads // tp)
    shape = point.shape
    tokens = shape.prefill_tokens + shape.decode_seqs
    g = t.gemm_ms
    if arch.is_mla:  # the latent-attention module (below) holds its own projections
        gemm = g(tokens, 2 * inter // tp, h, dtype) + g(tokens, h, inter // tp, dtype)
    else:
        gemm = (g(tokens, (heads + 2 * kvh) * d, h, dtype) + g(tokens, h, heads * d, dtype)
                + g(tokens, 2 * inter // tp, h, dtype) + g(tokens, h, inter // tp, dtype))
    moe = wire = 0.0
    if arch.is_moe:  # MoE layers: the fused routed experts, the router, the shared experts
        shared = arch.shared_expert_intermediate_size or arch.num_shared_experts * (arch.moe_intermediate_size or inter)
        experts = arch.expert_dtype or dtype
        if ep > 1:  # this GPU's experts, whole, over every rank's tokens
            routed = t.moe_ms(tokens * dp, arch, experts, 1, routing, ep)
            if dp > 1:  # the ranks' tokens meet at each GPU's experts, then go home, over the DP group (a DP
                # rank's TP GPUs hold its tokens already: r174; vLLM's AgRsAll2AllManager). With one rank, vLLM's
                # experts see the TP group's shared tokens and the layer's all-reduce sums them (r143)
                dispatched = tokens * dp * h
                wire = t.nccl_ms("all_gather", dispatched, dp) + t.nccl_ms("reduce_scatter", dispatched, dp)
        else:
            routed = t.moe_ms(tokens, arch, experts, tp, routing)
        moe = routed + g(tokens, arch.num_experts, h, "bf16") + \
            (g(tokens, 2 * shared // tp, h, dtype) + g(tokens, h, shared // tp, dtype) if shared else 0.0)
    if arch.is_mla:  # the latent-attention module replaces the QKV and O projections and the attention kernel
        attn = _mla_attention_ms(t, point, heads, kv, dtype)
    else:
        attn = _attention_ms(t, point, heads, kvh, d, kv)
    local = local_attention(arch)
    if local is not None:  # its local layers read their window or chunk only
        w = local.local_layers / local.layers
        attn = (1 - w) * attn + w * _attention_ms(t, point, heads, kvh, d, kv, local)
    comm = 2 * t.allreduce_ms(tokens * h, tp) if tp > 1 else 0.0  # the step's activations, in elements
    lm_head = g(shape.num_seqs, arch.vocab_size // tp, h, "bf16")  # vLLM quantizes the decoder's linear layers only
    layers = arch.num_hidden_layers
    if arch.is_moe:  # its MoE layers run the experts where a dense layer runs its MLP
        mlp = g(tokens, 2 * inter // tp, h, dtype) + g(tokens, h, inter // tp, dtype)
        gemm = gemm - mlp + (arch.num_moe_layers * moe + arch.num_dense_layers * mlp) / layers
    dispatch = arch.num_moe_layers * wire if arch.is_moe else 0.0
    return {"gemm_ms": layers * gemm + lm_head, "attention_ms": layers * attn, "allreduce_ms": layers * comm,
            "dispatch_ms": dispatch, "time_ms": layers * (gemm + attn + comm) + lm_head + dispatch}


def compose_profile(data: str | Path, gpu: str, model, dtype: str, tp: int, kv_dtype: str | None = None,
                    name: str | None = None, grid: str = "gpu", hardware_key: str | None = None,
                    dp: int = 1, expert_parallel: bool = False, routing: str = MOE_ROUTING) -> tuple[dict, FitResult]:
    """A profile dict (kernel fit + default host overhead) for one model x GPU x dtype x KV dtype x TP (x DP with
    expert parallelism)."""
    arch = load_model(model)
    if tp < 1:
        raise ConfigError("tp", "must be >= 1")
    kv = kv_dtype or arch.kv_cache_dtype or arch.activation_dtype
    t = KernelTables(data, gpu)
    pts = [p for p in make_grid(grid, arch.max_position_embeddings) if p.kind in STEP_KINDS]
    ep = tp * dp if expert_parallel else 1
    if expert_parallel and not arch.is_moe:
        raise ConfigError("--enable-expert-parallel", f"{arch.name} is a dense model: it has no experts to spread")
    if routing != MOE_ROUTING and not arch.is_moe:
        raise ConfigError("--moe-routing", f"{arch.name} is a dense model: it has no router")
    ranks = dp if ep > 1 else 1  # the tokens a MoE layer sees per token of this rank's step
    rows = [p.row() | compose_step_ms(t, arch, p, dtype, tp, kv, ep, dp, routing) for p in pts]
    local = local_attention(arch)
    if local is not None:  # fit on the shapes the scheduler reports for it (layer-averaged attention)
        rows = [r | p.local_shape(local)._asdict() for r, p in zip(rows, pts)]
    table = pd.DataFrame(rows)
    if arch.is_moe:  # the fit gets the experts each step touches (calibration/fit.py)
        table["experts_touched"] = [arch.experts_touched(ranks * (p.shape.prefill_tokens + p.shape.decode_seqs))
                                    for p in pts]
    # a GPU's: no KV cache knee, and no decode KV token read faster than its datasheet bandwidth (a local-attention
    # model's shapes are layer-averaged: its context is not every layer's)
    measured_on = table_folder(gpu)[1]  # the GPU the tables were measured on: its bandwidth, not that of another
    floor = 0.0 if measured_on is None else kv_floor_ms(arch, measured_on, kv, tp)  # GPU they are composed for
    # (r167: an L4's under H100 timings)
    fit = fit_step_model(table, source=f"{gpu} kernel tables", cache_knee=False, context_floor_ms=floor)
    if arch.is_moe:
        fit.coefficients |= {"moe_experts": arch.num_experts, "moe_top_k": arch.experts_per_token} | (
            {"moe_token_ranks": ranks} if ranks > 1 else {})
    kv_note = f", {kv} KV cache" if kv != arch.activation_dtype else ""
    ep_note = (f"-dp{dp}-ep{ep}" if ep > 1 else "") + (f"-{routing}" if arch.is_moe and routing != MOE_ROUTING else "")
    prof = profile_dict(
        fit, name=name or f"{hardware_key or gpu}-{arch.name}-{dtype}{'-kv' + kv if kv_note else ''}-tp{tp}{ep_note}",
        source=f"aiconfigurator-core 0.12.0 kernel tables ({t.device}, vLLM {t.vllm_versions} kernels; Apache-2.0), "
               f"composed per layer for {arch.name} {dtype}{kv_note} tp{tp}{ep_note} over the {grid} grid"
               + (f", fused MoE from {', '.join(sorted(t.moe_kernels))}" if t.moe_kernels else "")
               + "; plus servesim's default host overhead (docs/calibration.md)",
        device=t.device, model=arch.name, dtype=dtype, tensor_parallel_size=tp, grid=grid,
        block_size=16, gpu=hardware_key, kv_cache_dtype=kv, overhead=default_overhead(),
        expert_parallel_size=ep if arch.is_moe else None, moe_routing=routing if arch.is_moe else None)
    return prof, fit


def import_profile(data: str | Path, gpu: str, model: str, dtype: str, tp: int, out: str | Path,
                   name: str | None = None, grid: str = "gpu", kv_dtype: str | None = None, dp: int = 1,
                   expert_parallel: bool = False, routing: str = MOE_ROUTING) -> tuple[Path, FitResult]:
    """`servesim calibrate import aiconfigurator`: gpu is a table folder (h100_sxm) or a built-in GPU (h100-sxm)."""
    folder, key = table_folder(gpu)
    arch = load_model(model)
    if dtype and arch.expert_dtype and dtype != arch.dtype:  # as `run` refuses engine.quantization for it
        raise ConfigError("--dtype", f"{arch.name}'s checkpoint is already quantized ({arch.expert_dtype} experts, "
                                     f"{arch.dtype} elsewhere): leave --dtype out, as no run could use the profile")
    dtype = dtype or arch.dtype  # DeepSeek ships fp8: its own format unless told otherwise
    prof, fit = compose_profile(data, folder, model, dtype, tp, kv_dtype, name or Path(out).stem, grid, key, dp,
                                expert_parallel, routing)
    return write_profile(prof, out), fit


def table_folder(gpu: str) -> tuple[str, str | None]:
    """(table folder, built-in GPU key) for either spelling."""
    from servesim.simulator.hardware import builtin_gpu_table

    table = builtin_gpu_table()
    if gpu in table:
        folder = table[gpu].get("kernel_tables")
        if not folder:
            raise ConfigError("gpu", f"{gpu} has no kernel tables; GPUs with tables: "
                                     f"{', '.join(k for k, v in table.items() if v.get('kernel_tables'))}")
        return folder, gpu
    key = next((k for k, v in table.items() if v.get("kernel_tables") == gpu), None)
    return gpu, key
