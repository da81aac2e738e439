"""`profile: auto`: the cost model for the scenario's model x GPU x dtype x KV dtype x TP, chosen for the user.

In order: a built-in profile measured or composed for exactly that deployment; a profile composed on the fly
from the GPU's kernel tables (../shared/data/gpu/aiconfigurator/ or $SERVESIM_KERNEL_TABLES), cached on disk
($SERVESIM_CACHE_DIR, default ~/.cache/servesim) so only the first run pays the few seconds; or, for a GPU with
no tables, the roofline with a warning. The answer says which (`cost_model_source` in summary.json).

Composing runs calibration code (the kernel-table importer). It is imported here only when a composition is
needed, as the CLI imports `servesim calibrate`: calibration depends on the simulator, not the reverse.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from servesim.simulator.cost_model import (Profile, builtin_profile_names, default_overhead, load_profile,
                                            refuse_relabelled)
from servesim.simulator.errors import ConfigError, MissingKernelTable, TableGap
from servesim.simulator.files import file_part
from servesim.simulator.hardware import Hardware
from servesim.simulator.model_arch import DEFAULT_ROUTING, ModelArchitecture

COMPOSER_VERSION = 11  # bump when the composition changes, so cached profiles are rebuilt
# the importer's field names -> the scenario setting a user changes
_FIELDS = {"dtype": "engine.quantization", "kv_cache_dtype": "engine.kv_cache_dtype",
           "tp": "engine.tensor_parallel_size", "model": "model", "gpu": "hardware.gpu",
           "kernel_tables": "hardware.kernel_tables", "grid": "model.max_position_embeddings"}


@dataclass(frozen=True)
class Selection:
    profile: Profile
    source: str  # one line for summary.json's cost_model_source
    warning: str | None = None


def cost_model_kind(source: str, profile: Profile | None = None) -> str:
    """What a cost model's latencies rest on, the kinds whose error against real runs is known apart
    (simulator/data/cost-model-bands.yaml): "roofline" (datasheet peaks), "kernel tables" (vendor-measured
    kernels composed, built-in or on the fly), "measured" (timed on the device, or fitted to the user's runs) or
    "hand-set" (a profile fitted to nothing, such as teaching's three constants: r159, called measured)."""
    if (profile is not None and profile.cost_model == "roofline") or source.startswith("roofline"):
        return "roofline"
    if profile is None and source.startswith("built-in profile ") and len(source.split()) > 2:
        profile = load_profile(source.split()[2])
    if "kernel tables" in source or (profile is not None and "kernel tables" in profile.source):
        return "kernel tables"
    return "hand-set" if profile is not None and profile.held_out_error is None else "measured"


def kernel_tables_root() -> Path | None:
    """$SERVESIM_KERNEL_TABLES, else ../shared/data/gpu/aiconfigurator beside the project or the working directory."""
    env = os.environ.get("SERVESIM_KERNEL_TABLES")
    if env:
        return Path(env)
    from servesim.simulator.files import shared_data

    p = shared_data("gpu", "aiconfigurator")
    return p if p is not None and p.is_dir() else None


def cache_dir() -> Path:
    """$SERVESIM_CACHE_DIR, else ~/.cache/servesim: a home that is empty or relative (HOME=) names no folder of
    the user's, so the working folder's .cache/ stands in for none (r154: it wrote there)."""
    given = os.environ.get("SERVESIM_CACHE_DIR")
    if given:
        return Path(given) / "profiles"
    try:
        home = Path.home()
    except (RuntimeError, KeyError):  # no HOME and no password entry
        home = Path()
    return (home if home.is_absolute() else Path("/nonexistent-home")) / ".cache" / "servesim" / "profiles"


def _kv(arch: ModelArchitecture) -> str:
    return arch.kv_cache_dtype or arch.activation_dtype


def _builtin_match(arch: ModelArchitecture, gpu: str | None, tp: int, tables: str | None) -> Profile | None:
    """The built-in profile of this deployment, composed from the GPU's own kernel tables: other tables named
    (hardware.kernel_tables) are composed instead, as for a model without one."""
    from servesim.simulator.hardware import builtin_gpu_table

    if not gpu or tables != (builtin_gpu_table().get(gpu) or {}).get("kernel_tables"):
        return None
    for name in builtin_profile_names():
        p = load_profile(name)
        if (p.gpu and p.gpu == gpu and p.model == arch.name and p.dtype == arch.dtype
                and p.tensor_parallel_size == tp and (p.kv_cache_dtype or p.dtype) == _kv(arch)
                and p.overhead is not None and _shaped_as_builtin(arch)):
            return p
    return None


FORMATS = {"dtype", "kv_cache_dtype", "quant_method"}  # what the profile's own fields match (engine.quantization,
# kv_cache_dtype; the checkpoint's method, which its dtype says)


def _shaped_as_builtin(arch: ModelArchitecture) -> bool:
    """Whether `arch` is the built-in model of its name, layer for layer: a profile timed that model, and an
    architecture edited under its name (--set model.num_hidden_layers=16) is another model."""
    from servesim.simulator.model_arch import load_model

    try:
        builtin = load_model(arch.name)
    except ConfigError:
        return False
    return arch.model_dump(exclude=FORMATS) == builtin.model_dump(exclude=FORMATS)


SHAPE_FIELDS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "num_experts", "experts_per_token",
                "moe_intermediate_size")  # what a step's time follows, where a profile records the model it timed


def _past_the_peak(p: Profile) -> str | None:
    """A roofline efficiency above 1: faster than the datasheet's peak bandwidth or FLOP/s, which no GPU is (r160:
    100 timed Llama-3.1-8B's decode at 1 ms on an H200, where reading its weights takes 3.3). A fit may land a little
    above 1, so it is said, not refused."""
    over = [f"{k} {p.coefficients[k]:g}" for k in ("memory_efficiency", "compute_efficiency")
            if p.cost_model == "roofline" and isinstance(p.coefficients.get(k), (int, float))
            and p.coefficients[k] > 1]
    if not over:
        return None
    return (f"servesim: warning: profile {p.name}'s {' and '.join(over)} above 1: its steps run faster than the "
            f"GPU's datasheet peak (an efficiency is achieved / peak)")


def _timed_another_shape(p: Profile, arch: ModelArchitecture, builtin: bool) -> str | None:
    """A profile named for the scenario's model, but measured on another shape of it (an architecture edited under
    its name: --set model.num_hidden_layers=16 ran at the 32-layer model's step times, unsaid, round 89): refused
    where the profile records the shape it timed (the harness's) or is built in (the built-in model's), said where
    it records none (a user's fit of the built-in, most likely)."""
    if p.model != arch.name:
        return None  # another model, or any: check_profile_fits decides
    if isinstance(p.architecture, dict):
        timed = {k: p.architecture.get(k) for k in SHAPE_FIELDS if k in p.architecture}
        where = "the shape it records"
    else:
        from servesim.simulator.model_arch import load_model

        try:
            model = load_model(arch.name)
        except ConfigError:
            return None
        timed = {k: getattr(model, k, None) for k in SHAPE_FIELDS}
        where = "the built-in model's shape"
    off = [f"{k} {v} (the scenario's {getattr(arch, k, None)})" for k, v in timed.items()
           if getattr(arch, k, None) != v]
    if not off:  # the same shape (a length or a format edited: the profile's own checks decide)
        return None
    why = f"profile {p.name} timed {arch.name} at {where}: {', '.join(off)}"
    if builtin or isinstance(p.architecture, dict):
        raise ConfigError("profile", f"{why}; the scenario's edited model is another (leave profile unset to compose "
                                     f"its own)")
    return f"servesim: warning: {why}; its step times are that model's (leave profile unset to compose the edited one)"


def _tables_fingerprint(folder: Path) -> str:
    """Sizes and times of the tables: a changed table rebuilds the cached profile."""
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*.parquet")):
        st = f.stat()
        h.update(f"{f.relative_to(folder)}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()


def _portable(path: Path) -> str:
    """A path as the same text on any machine: under the shared data as ../shared/data/..., under the home
    folder as ~/...; results written with it (summary.json's cost_model_source) do not carry one machine's."""
    from servesim.simulator.files import shared_data

    shared = shared_data()
    for base, shown in ((shared, "../shared/data"), (Path.home(), "~")):
        if base is not None:
            try:
                return f"{shown}/{path.resolve().relative_to(base.resolve()).as_posix()}"
            except ValueError:
                continue
    return str(path)


def _compose(arch: ModelArchitecture, gpu: str, folder: str, root: Path, tp: int, dp: int = 1,
             expert_parallel: bool = False, routing: str = DEFAULT_ROUTING, fallback: bool = False) -> Selection:
    """The composed profile, cached; `fallback`: a missing kind of table is left to the caller (the roofline)."""
    overhead = (resources.files("servesim.calibration") / "overhead-defaults.yaml").read_text()
    layout = [tp] + ([dp, "ep"] if expert_parallel else [])  # a dense or EP-less key is what it always was
    if arch.is_moe and routing != DEFAULT_ROUTING:
        layout.append(routing)
    key = json.dumps([COMPOSER_VERSION, arch.model_dump(mode="json"), gpu, folder, *layout,
                      _tables_fingerprint(root / folder), overhead], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    ep_part = (f"-dp{dp}-ep{tp * dp}" if expert_parallel else "") + \
        (f"-{routing}" if arch.is_moe and routing != DEFAULT_ROUTING else "")
    path = cache_dir() / f"{gpu}-{file_part(arch.name)}-{arch.dtype}-kv{_kv(arch)}-tp{tp}{ep_part}-{digest}.yaml"
    source = f"composed from the {folder} kernel tables ({_portable(root / folder)}), cached as {path.name}"
    cached = _read_cached(path)
    if cached is not None:
        return Selection(cached, source)
    from servesim.calibration.aiconfigurator import compose_profile  # calibration code, only when a composition is needed

    try:
        prof, _ = compose_profile(root, folder, arch, arch.dtype, tp, _kv(arch), hardware_key=gpu, dp=dp,
                                  expert_parallel=expert_parallel, routing=routing)
    except ConfigError as exc:
        if fallback and isinstance(exc, MissingKernelTable):
            raise
        field = _FIELDS.get(exc.field, exc.field)
        hint = "; profile=roofline gives a datasheet estimate instead" if isinstance(exc, TableGap) or field in (
            "hardware.kernel_tables", "model.max_position_embeddings") else ""
        raise ConfigError(field, f"cannot compose a profile for {arch.name} on {gpu}: {exc.message}{hint}") from None
    _write_cached(path, prof)
    return Selection(Profile(**prof), source)


# bf16 experts as vLLM 0.19 runs them: Triton, unless VLLM_USE_FLASHINFER_MOE_FP16=1 (fused_moe/oracle/unquantized.py;
# 0.33 prefers FlashInfer's off Hopper); the Blackwell tables time only FlashInfer's (r148: B200's MoE read about half
# H200's Triton time, unsaid)
_OPT_IN_MOE = "vllm_unquantizedfusedmoe_flashinfer_"


def opt_in_moe_warning(profile: Profile, is_0_19: bool) -> str | None:
    if not is_0_19 or _OPT_IN_MOE not in profile.source:
        return None
    return (f"servesim: warning: profile {profile.name}'s bf16 experts are timed with FlashInfer's fused-MoE kernels "
            f"(the only bf16 ones its tables hold), which vLLM 0.19 runs only with VLLM_USE_FLASHINFER_MOE_FP16=1 (by "
            f"default its Triton kernel, not timed on this GPU; 0.33 runs FlashInfer's): MoE layers may be short")


MLA_TABLE_MODEL = "deepseek-v3"  # the one model the kernel tables' latent-attention module rows time
MLA_SHAPE = ("hidden_size", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


def mla_shape_warning(arch, profile: Profile) -> str | None:
    """A latent-attention model of another shape than the tables' rows, composed from them: its MLA layers are
    timed as DeepSeek-V3's at the same heads a GPU (r151: a kv_lora_rank of 1,024 halved the KV pool, and no step
    took a microsecond longer, unsaid)."""
    if not getattr(arch, "is_mla", False) or "kernel tables" not in profile.source:
        return None
    from servesim.simulator.model_arch import load_model

    ref = load_model(MLA_TABLE_MODEL)
    differ = [f"{k} {getattr(arch, k)}" for k in MLA_SHAPE if getattr(arch, k) != getattr(ref, k)]
    if not differ:
        return None
    return (f"servesim: warning: the kernel tables time latent attention with DeepSeek-V3's module alone: "
            f"{arch.name}'s {', '.join(differ)} (DeepSeek-V3: "
            f"{', '.join(f'{k} {getattr(ref, k)}' for k in MLA_SHAPE if getattr(arch, k) != getattr(ref, k))}) are "
            f"timed at its shape, for the same heads a GPU; its KV cache is sized by its own")


def faster_than_memory(profile: Profile, cost_model, arch: ModelArchitecture, hw: Hardware, tp: int, ep: int | None,
                       dp: int, routing: str) -> str | None:
    """A decode step the cost model times under what reading its weights and KV once at the datasheet bandwidth
    takes: no kernel does that, so the profile is not this model's on this GPU, or lacks a term (r165: a file cut
    after per_token_ms ran llama-3.1-8b at 3.1 ms TPOT on an H100, whose weights take 4.8 ms to read). Every
    measured and composed profile here is at least 1.1x it."""
    from servesim.simulator.batch import BatchShape
    from servesim.simulator.cost_model import RooflineCoefficients, RooflineCostModel

    # the reads alone: compute and links made free (r181: an edited bf16_tflops or gpu_link_gbps raised this floor,
    # said as the bandwidth's, beside the word that the edit had no effect on the profile)
    free = {k: 1e9 for k in ("bf16_tflops", "fp8_tflops", "fp4_tflops", "gpu_link_gbps") if getattr(hw, k) is not None}
    bare = RooflineCostModel(arch, hw.model_copy(update=free),
                             RooflineCoefficients(memory_efficiency=1, compute_efficiency=1, step_overhead_ms=0,
                                                  allreduce_latency_us=0), tp, ep, dp, routing)
    for seqs, context in ((1, 1), (64, 2048)):
        shape = BatchShape(seqs, 0, 0, seqs, seqs * context)
        took, floor = cost_model.step_time(shape), bare.step_time(shape)
        if took < floor:
            missing = [k for k in ("linear_floor_ms", "per_token_ms", "per_context_token_ms")
                       if profile.cost_model == "linear" and k not in profile.coefficients]
            return (f"servesim: warning: profile {profile.name} times a decode step of {seqs} sequence"
                    f"{'s' if seqs > 1 else ''} at {context:,} token{'s' if context > 1 else ''} of context in "
                    f"{took * 1e3:.3g} ms, under the {floor * 1e3:.3g} ms a "
                    f"{hw.name} takes to read {arch.name}'s weights and that KV once at its datasheet bandwidth "
                    f"({hw.memory_bandwidth_gbps:g} GB/s): its coefficients are not this model's on this GPU"
                    + (f" (it gives no {', '.join(missing)}: 0)" if missing else ""))
    return None


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_PARSED: dict[str, Profile] = {}  # checksum of a cached profile's text -> the profile: a search resolves the
# same deployment hundreds of times, and parsing its YAML was a tenth of each small run


def _read_cached(path: Path) -> Profile | None:
    """A cached profile exactly as it was written (its checksum beside it), else None: it is rebuilt."""
    from servesim.simulator.files import MAX_SETTINGS_BYTES

    try:
        beside = path.with_suffix(".sha256")
        if not all(p.is_file() and p.stat().st_size <= MAX_SETTINGS_BYTES for p in (path, beside)):
            return None  # a FIFO or a device there is never read (r155: a FIFO hung every run of the deployment)
        text = path.read_text()
        checksum = _checksum(text)
        if beside.read_text().strip() != checksum:
            return None
        if checksum not in _PARSED:
            if len(_PARSED) >= 256:
                _PARSED.clear()
            _PARSED[checksum] = Profile(**yaml.safe_load(text))
        return _PARSED[checksum].model_copy(deep=True)
    except Exception:  # missing, damaged, edited, a directory: never trusted
        return None


def _write_cached(path: Path, prof: dict) -> None:
    text = yaml.safe_dump(prof, sort_keys=False)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    target = path.parent  # what the failure was writing (r175: its .sha256's was said to be the profile's; r176:
    try:  # a file where the cache folder goes was said as the profile)
        path.parent.mkdir(parents=True, exist_ok=True)
        for target, content in ((path, text), (path.with_suffix(".sha256"), _checksum(text) + "\n")):
            tmp.write_text(content)
            tmp.replace(target)  # atomic: parallel sweeps never read half a file; whatever is there (a FIFO,
            # r155) is replaced, never written through
    except OSError as exc:  # a read-only home (a container, a batch job): the run goes on, composing it each time
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        from servesim.simulator.config import say_once

        why = "a file is there, not a folder" if isinstance(exc, (FileExistsError, NotADirectoryError)) \
            and target == path.parent else exc.strerror or exc
        say_once([f"servesim: warning: cannot cache the composed profile at {target} ({why}): "
                  f"every run composes it again (a few seconds); set SERVESIM_CACHE_DIR to a folder it can write"])


@functools.lru_cache(maxsize=1)
def roofline_fallback() -> dict:
    """The fallback's kernel coefficients, fitted to the GPUs that have kernel tables (calibration/roofline_fit.py;
    r162: assumed efficiencies and no time per step ran 12% under the measured kernels, a fallback GPU ahead of a
    faster measured one)."""
    return yaml.safe_load(resources.files("servesim.simulator.data").joinpath("roofline-fallback.yaml").read_text())


def _roofline(arch: ModelArchitecture, gpu: str | None, hw: Hardware, why: str) -> Selection:
    fitted = roofline_fallback()
    held = fitted["held_out_error"]
    prof = Profile(name=f"roofline-{gpu or hw.name}", cost_model="roofline",
                   source=f"datasheet roofline, its coefficients {fitted['source']}",
                   coefficients=dict(fitted["coefficients"]), overhead=default_overhead(), gpu=gpu,
                   held_out_error=dict(held), description="fallback: no measured kernels for this GPU")
    warn = (f"servesim: warning: {why}; step times come from the roofline model (datasheet bandwidth and FLOP/s at "
            f"efficiencies fitted to the GPUs with kernel tables, {held['mape']:.0%} off their kernels with each GPU "
            f"left out, plus default overhead), not from measurements")
    return Selection(prof, f"roofline fallback ({why})", warn)


def select_profile(spec: str | dict, arch: ModelArchitecture, gpu: str | None, hw: Hardware, tp: int,
                   expert_parallel: int | None = None, routing: str = DEFAULT_ROUTING) -> Selection:
    if spec != "auto":
        p = load_profile(spec)
        refuse_relabelled(p)
        builtin = isinstance(spec, str) and spec in builtin_profile_names()
        where = f"built-in profile {p.name}" if builtin else \
            f"profile {p.name} ({'inline' if isinstance(spec, dict) else Path(spec).resolve()})"  # from any folder
        said = [w for w in (_timed_another_shape(p, arch, builtin), _past_the_peak(p)) if w]
        return Selection(p, where, "\n".join(said) or None)
    # no built-in profile is expert-parallel or composed at another routing
    p = None if expert_parallel or (arch.is_moe and routing != DEFAULT_ROUTING) else \
        _builtin_match(arch, gpu, tp, hw.kernel_tables)
    if p is not None:
        return Selection(p, f"built-in profile {p.name}")
    if not hw.kernel_tables:
        return _roofline(arch, gpu, hw, f"{gpu or 'this GPU'} has no measured kernel tables")
    if arch.dtype in ("w4a16", "fp32") or not hw.has_tensor_cores_for(arch.dtype):
        what = {"w4a16": "4-bit weight-only GEMMs (AWQ/GPTQ)", "fp32": "fp32 models"}.get(
            arch.dtype, f"weight-only {arch.dtype} GEMMs (Marlin)")
        return _roofline(arch, gpu, hw, f"no kernel tables time {what}")
    root = kernel_tables_root()
    if root is None or not (root / hw.kernel_tables).is_dir():
        where = f"{root / hw.kernel_tables}" if root else "../shared/data/gpu/aiconfigurator (set SERVESIM_KERNEL_TABLES)"
        return _roofline(arch, gpu, hw, f"no built-in profile for {arch.name} {arch.dtype} tp{tp} on {gpu}, and "
                                        f"its kernel tables are not at {where}")
    if not (expert_parallel or arch.is_mla):
        return _compose(arch, gpu, hw.kernel_tables, root, tp, routing=routing)
    # expert parallelism needs NCCL's collectives, latent attention the MLA module tables, which fewer GPUs have:
    # without such a table the roofline, said so; a table that lacks the shape asked for is refused, as above
    what = "expert-parallel layers" if expert_parallel else f"{arch.name}'s latent-attention layers"
    try:
        return _compose(arch, gpu, hw.kernel_tables, root, tp, (expert_parallel or tp) // tp, bool(expert_parallel),
                        routing, fallback=True)
    except MissingKernelTable as exc:
        return _roofline(arch, gpu, hw, f"cannot compose {what}: {exc.message}")
