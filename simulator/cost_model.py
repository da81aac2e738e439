"""Step time from the batch's composition. Profiles (YAML data) choose a model and its numbers."""

from __future__ import annotations

import copy
import functools
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml
from typing import Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, ValidationError, model_validator

from servesim.workloads.settings import MAX_BLOCK_SIZE, Cost, Efficiency, Settings

from servesim.simulator.batch import BatchShape, decode_shape
from servesim.simulator.errors import ConfigError, first_error
from servesim.simulator.hardware import Hardware
from servesim.simulator.model_arch import ModelArchitecture


class CostModel:
    """step_time(shape) -> seconds. A pure function of the batch: same shape, same time."""

    name = "base"

    def step_time(self, shape: BatchShape) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def knee_tokens(self) -> int | None:
        """Tokens per step the linear layers take for the price of one (the weight read), if the model knows."""
        return None


class LinearCoefficients(Settings):
    step_overhead_ms: Cost = 0.0
    per_seq_ms: Cost = 0.0
    per_prefill_token_ms: Cost = 0.0
    per_decode_token_ms: Cost = 0.0
    per_token_ms: Cost = 0.0  # every scheduled token, above linear_floor_ms
    linear_floor_ms: Cost = 0.0  # the weights are read once a step however few tokens
    per_context_token_ms: Cost = 0.0  # KV tokens read by decodes
    per_spilled_context_token_ms: Cost = 0.0  # extra, for KV tokens beyond context_cache_tokens
    context_cache_tokens: NonNegativeFloat = 0.0  # decode KV that still fits a fast cache (CPUs show this cliff)
    per_attention_pair_ms: Cost = 0.0  # prefill (query, context) pairs
    # mixture of experts: per expert a MoE layer runs, E (1 - (1 - k/E)^tokens) of them for a step's tokens
    per_expert_ms: Cost = 0.0
    moe_experts: NonNegativeInt = 0
    moe_top_k: NonNegativeInt = 0
    moe_token_ranks: PositiveInt = 1  # expert parallelism over DP ranks: each MoE layer sees every rank's tokens

    @model_validator(mode="after")
    def _experts(self):
        if self.moe_top_k > self.moe_experts:
            raise ValueError(f"moe_top_k ({self.moe_top_k}) cannot exceed moe_experts ({self.moe_experts})")
        return self


class LinearCostModel(CostModel):
    """A sum of named per-step, per-sequence and per-token costs, with one roofline knee.

    ms = step_overhead + per_seq x seqs + per_prefill_token x prefill tokens
         + per_decode_token x decodes + max(linear_floor, per_token x tokens)
         + per_context_token x decode KV tokens
         + per_spilled_context_token x max(0, decode KV tokens - context_cache_tokens)
         + per_attention_pair x prefill pairs
    The teaching model is the first three terms; calibrated profiles fit the rest.
    """

    name = "linear"

    def __init__(self, c: LinearCoefficients):
        self.c = c
        self._k = (c.step_overhead_ms, c.per_seq_ms, c.per_prefill_token_ms, c.per_decode_token_ms,
                   c.per_token_ms, c.linear_floor_ms, c.per_context_token_ms, c.per_spilled_context_token_ms,
                   c.context_cache_tokens, c.per_attention_pair_ms)
        # the hot path is one bound method: a dense profile never pays for the MoE term
        self.step_time = self._moe_time if c.per_expert_ms and c.moe_experts else self._dense_time

    def knee_tokens(self) -> int | None:
        c = self.c
        return int(c.linear_floor_ms / c.per_token_ms) if c.per_token_ms > 0 and c.linear_floor_ms > 0 else None

    def _moe_time(self, shape: BatchShape) -> float:
        """A MoE profile: the dense terms plus the experts the step's tokens touch."""
        e, k = self.c.moe_experts, self.c.moe_top_k
        touched = e * (1.0 - (1.0 - k / e) ** ((shape.prefill_tokens + shape.decode_seqs) * self.c.moe_token_ranks))
        return self._dense_time(shape) + self.c.per_expert_ms * touched * 1e-3

    def _dense_time(self, shape: BatchShape) -> float:
        k0, k_seq, k_pre, k_dec, k_tok, floor, k_ctx, k_spill, cached, k_pair = self._k
        tokens = shape.prefill_tokens + shape.decode_seqs
        linear = k_tok * tokens
        ctx = shape.decode_context_tokens
        ms = (k0 + k_seq * shape.num_seqs + k_pre * shape.prefill_tokens + k_dec * shape.decode_seqs
              + (linear if linear > floor else floor) + k_ctx * ctx
              + (k_spill * (ctx - cached) if ctx > cached else 0.0) + k_pair * shape.prefill_attention_pairs)
        return ms * 1e-3


class RooflineCoefficients(Settings):
    memory_efficiency: Efficiency = 0.8
    compute_efficiency: Efficiency = 0.6
    step_overhead_ms: Cost = 1.0
    allreduce_latency_us: Cost = 8.0  # per all-reduce, at tensor parallel > 1


class RooflineCostModel(CostModel):
    """max(memory, compute) for the linear layers and for attention, plus a fixed overhead.

    Linear layers read every weight once per step and do 2 x params FLOPs per token (the LM head's per
    sequence, on its last token);
    attention reads each decode's KV context and does 4 x heads x head_dim x layers
    FLOPs per (query, context) pair.
    """

    name = "roofline"

    def __init__(self, arch: ModelArchitecture, hw: Hardware, c: RooflineCoefficients, tensor_parallel_size: int = 1,
                 expert_parallel: int | None = None, data_parallel_size: int = 1, routing: str = "balanced"):
        """With tensor parallelism each GPU does 1/tp of the work, and every layer adds two all-reduces of
        the step's activations (ring: 2 (tp - 1) / tp of the bytes over the GPU link, plus a latency); with expert
        parallelism over DP ranks every MoE layer adds a dispatch and a combine."""
        self.c = c
        tp = tensor_parallel_size
        bw = hw.memory_bandwidth_gbps * 1e9 * c.memory_efficiency
        flops = hw.peak_flops(arch.dtype) * c.compute_efficiency
        # a MoE step reads the dense weights and only the experts its tokens route to (ModelArchitecture.experts_touched).
        # With expert parallelism each GPU holds whole experts, 1/(TP x DP) of them, and runs the tokens of every DP
        # rank routed there (the ranks assumed equally loaded); without it each expert is split over the TP group.
        self._arch = arch if arch.is_moe else None
        self._weights_s = arch.step_weight_bytes_per_gpu(tp, expert_parallel) / bw
        self._expert_s = arch.expert_weight_bytes / max(arch.num_experts, 1) / (expert_parallel or tp) / bw
        self._token_ranks = data_parallel_size if expert_parallel else 1
        self._routing = routing  # skewed routing touches fewer distinct experts (moe.routing)
        self._linear_s_per_token = arch.linear_flops_per_token / tp / flops
        self._lm_head_s_per_seq = arch.lm_head_flops_per_seq / tp / flops  # vocabulary split over the TP group
        self._kv_s_per_token = arch.kv_bytes_per_token_per_gpu(tp) / bw
        # attention's math runs in its KV cache's dtype (bf16 beside fp8 weights unless the cache is fp8 too)
        attn_flops = hw.peak_flops(arch.kv_cache_dtype or arch.activation_dtype) * c.compute_efficiency
        self._attn_s_per_pair = arch.attention_flops_per_token_pair / tp / attn_flops
        self._overhead_s = c.step_overhead_ms * 1e-3
        link = hw.gpu_link_gbps * 1e9
        if tp > 1:
            per_token = arch.hidden_size * arch.dtype_bytes * 2 * (tp - 1) / tp / link
            self._allreduce = (2 * arch.num_hidden_layers * c.allreduce_latency_us * 1e-6,
                               2 * arch.num_hidden_layers * per_token)
        else:
            self._allreduce = (0.0, 0.0)
        ep = expert_parallel or 1
        if self._arch and ep > 1 and data_parallel_size > 1:
            # each MoE layer all-gathers every DP rank's tokens to the GPUs holding their experts and reduce-scatters
            # the results back (vLLM's allgather_reducescatter, composed from NCCL's tables where measured): rings
            # over the DP group (a rank's TP GPUs hold its tokens already: r174), each moving (dp - 1) / dp of the
            # gathered activations over the link (r165: free)
            dp = data_parallel_size
            gathered = dp * arch.hidden_size * arch.dtype_bytes * (dp - 1) / dp / link
            self._dispatch = (2 * arch.num_moe_layers * c.allreduce_latency_us * 1e-6,
                              2 * arch.num_moe_layers * gathered)
        else:
            self._dispatch = (0.0, 0.0)

    def knee_tokens(self) -> int | None:
        return int(self._weights_s / self._linear_s_per_token)

    def step_time(self, shape: BatchShape) -> float:
        tokens = shape.prefill_tokens + shape.decode_seqs
        weights = self._weights_s + (
            self._expert_s * self._arch.experts_touched(tokens * self._token_ranks, self._routing) if self._arch else 0.0)
        linear = max(weights, self._linear_s_per_token * tokens + self._lm_head_s_per_seq * shape.num_seqs)
        kv_read = self._kv_s_per_token * (shape.decode_context_tokens + shape.prefill_tokens)
        attn_compute = self._attn_s_per_pair * (shape.prefill_attention_pairs + shape.decode_context_tokens)
        latency, per_token = self._allreduce
        dispatch_latency, dispatch_per_token = self._dispatch
        return self._overhead_s + linear + max(kv_read, attn_compute) + latency + per_token * tokens + \
            dispatch_latency + dispatch_per_token * tokens


class Overhead(Settings):
    """What a real engine's step costs beyond the kernels in the tables: the GPU kernels they leave out, CUDA-graph
    vs eager launches, and the host's CPU time (scheduler, input preparation, output processing). Evidence for the
    defaults: docs/calibration.md, "Host and framework overhead"."""

    gpu_per_layer_us: Cost = 0.0  # kernels outside the tables (norms, rotary, activation), per layer
    gpu_per_token_per_layer_ns: Cost = 0.0  # their part that grows with tokens (reference model, H100)
    gpu_per_seq_us: Cost = 0.0  # sampler over the vocabulary, per scheduled sequence
    eager_per_layer_us: Cost = 0.0  # GPU idle per layer waiting on launches when no CUDA graph covers it
    host_per_step_ms: Cost = 0.0  # CPU: schedule + prepare inputs + process outputs, per step
    host_per_seq_us: Cost = 0.0  # CPU: the same, per scheduled sequence


MAX_TOLERANCE = 10.0  # a profile's tolerance (relative error a check accepts): past 1000% it accepts anything


# what a profile's held_out_error records (calibration/profile_io.py, serving_fit.py write them; the run reads mape)
HELD_OUT_KEYS = ("mape", "p90_ape", "max_ape", "points", "what", "train_mape", "train_points")


class Profile(Settings):
    """A profile file: which cost model, its numbers, where they came from, how wrong they are."""

    name: str = Field(min_length=1)  # what runs and tables name it by (r147: "" was taken)
    cost_model: Literal["linear", "roofline"]
    source: str = "unknown"
    device: str = "any"
    gpu: str | None = None  # the built-in GPU (hardware.gpu) it was measured or composed for
    model: str = "any"
    dtype: str = "any"
    kv_cache_dtype: Literal["fp32", "fp16", "bf16", "fp8"] | None = None  # None: the activations' dtype
    tensor_parallel_size: PositiveInt = 1
    # a MoE profile composed for one expert layout and router skew (None: not recorded, not checked)
    expert_parallel_size: PositiveInt | None = None  # 1: experts split by TP only
    moe_routing: Literal["balanced", "power_law_1.01", "power_law_1.2"] | None = None
    coefficients: dict = {}
    overhead: Overhead | None = None  # None: the coefficients already hold everything (a measured engine or harness)
    held_out_error: dict | None = None
    description: str | None = None
    # written by `servesim calibrate`: what `calibrate check` needs to re-measure
    tolerance: float | None = Field(None, gt=0, le=MAX_TOLERANCE)  # the check fails when re-measured MAPE exceeds this
    block_size: int | None = Field(None, ge=1, le=MAX_BLOCK_SIZE)
    grid: str | None = None
    attention: str | None = None  # the harness's decode attention: gather (SDPA) or paged (Triton)
    architecture: dict | None = None
    hardware: dict | None = None
    measurements: str | None = None  # path of the raw measurements, relative to the profile
    # the largest batches it was fitted on; a key no check reads is refused, not ignored
    shape_range: dict[Literal["max_tokens", "max_seqs", "max_decode_context_tokens"], PositiveInt] | None = None
    engine_version: str | None = None  # the serving engine a fitted profile observed (vLLM 0.19.0)
    fitted: dict | None = None  # `calibrate fit` by simulation: terms, their start, the runs (calibration/serving_fit.py)

    @model_validator(mode="after")
    def _errors_are_errors(self):
        unknown = sorted(str(k) for k in (self.held_out_error or {}) if k not in HELD_OUT_KEYS)
        if unknown:  # r147: a misspelt MAPE silenced the unreliable-fit warning
            raise ValueError(f"held_out_error.{unknown[0]}: unknown key; a profile's held-out error holds "
                             f"{', '.join(HELD_OUT_KEYS)}")
        for key, value in (self.held_out_error or {}).items():  # mape, p90_ape, ...: what users read as its accuracy
            if "ape" in str(key) and value is not None and not (
                    isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf")):
                raise ValueError(f"held_out_error.{key} must be a non-negative number, got {value!r}")
            if "points" in str(key) and value is not None and not (  # (r160: -4 and "many" were printed as its
                    isinstance(value, int) and not isinstance(value, bool) and value >= 0):  # record)
                raise ValueError(f"held_out_error.{key} must be a count of points (an integer >= 0), got {value!r}")
        held = self.held_out_error or {}
        for part in ("mape", "p90_ape"):  # a mean or a percentile of errors past their largest (r175: "50%" of a
            if held.get(part) is not None and held.get("max_ape") is not None \
                    and held[part] > held["max_ape"] + 1e-3:  # profile whose largest error was 1%; a rounding's 1e-3)
                raise ValueError(f"held_out_error.{part} {held[part]:g} above max_ape {held['max_ape']:g}: no "
                                 f"{'mean' if part == 'mape' else 'percentile'} of errors passes their largest")
        one = [held[k] for k in ("mape", "p90_ape", "max_ape") if held.get(k) is not None]
        if held.get("points") == 1 and one and max(one) - min(one) > 1e-3:  # one point's error is all three (r176)
            raise ValueError(f"held_out_error over 1 point: its mape, p90_ape and max_ape are that point's error, "
                             f"got {', '.join(f'{v:g}' for v in one)}")
        for count, errors in (("points", ("mape", "p90_ape", "max_ape")), ("train_points", ("train_mape",))):
            given = [k for k in errors if held.get(k) is not None]  # r174: "MAPE 0.0% over 0 points" was taken
            if held.get(count) == 0 and given:  # as a measured error
                raise ValueError(f"held_out_error.{given[0]}: measured over 0 points ({count}: 0) it is no error; "
                                 f"leave it null")
        for key in ("runs", "held_out_runs", "run_records", "run_latencies"):  # what validate serving checks a run
            value = (self.fitted or {}).get(key)  # against (r135: a number crashed it, a text skipped the check)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise ValueError(f"fitted.{key} must be a list of texts (paths or digests), got {value!r}"[:300])
        return self


COEFFICIENTS = {"linear": LinearCoefficients, "roofline": RooflineCoefficients}  # each cost model's numbers


def _builtin_profiles():
    return resources.files("servesim.calibration") / "profiles"


def default_overhead() -> dict:
    """servesim's default overhead terms (calibration/overhead-defaults.yaml), for profiles composed from kernels."""
    data = yaml.safe_load((resources.files("servesim.calibration") / "overhead-defaults.yaml").read_text())
    return Overhead(**data).model_dump()


# libyaml's parser where PyYAML has it: the same safe constructor and resolver (the same values), parsed in C.
# A run scans every built-in profile to find its own, which took a small run longer than its simulation.
_SHIPPED_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=None)
def _builtin_profile_data(name: str):
    """A built-in profile's YAML, parsed once per process: `profile: auto` scans them all on every resolve."""
    return yaml.load((_builtin_profiles() / f"{name}.yaml").read_text(), Loader=_SHIPPED_YAML_LOADER)


def builtin_profiles_dir() -> Path:
    """The folder the built-in profiles are read from (calibration/profiles/ in a checkout)."""
    return Path(str(_builtin_profiles()))


def builtin_profile_names() -> list[str]:
    return sorted(p.name[:-5] for p in _builtin_profiles().iterdir() if p.name.endswith(".yaml"))


# what a profile was measured for (check_profile_fits compares them with the scenario's)
DEPLOYMENT_LABELS = ("device", "gpu", "model", "dtype", "kv_cache_dtype", "tensor_parallel_size",
                     "expert_parallel_size", "moe_routing")


def refuse_relabelled(profile: Profile) -> None:
    """A profile given whose `gpu` is not the GPU its `device` names (r147: an H100 profile relabelled b200-sxm
    timed a B200 run with H100 times). Not one `auto` composes from hardware.kernel_tables: that one is labelled
    with the scenario's GPU on purpose."""
    from servesim.simulator.hardware import gpu_for_device

    timed_on = gpu_for_device(profile.device) if profile.device else None
    if profile.gpu and timed_on and timed_on != profile.gpu:
        raise ConfigError("profile.gpu", f"{profile.gpu}, but profile {profile.name} was measured on {timed_on} "
                                         f"(its device: {profile.device}): a profile is its device's")
    # a built-in measured for one deployment, its other labels edited (r160: profile.model=qwen3-32b timed
    # Qwen3-32B with Llama-3.1-8B's kernels, 3.4x fast, unsaid). Not a user's profile of its name (another source),
    # nor a label a generic built-in leaves to the scenario (roofline's, teaching's: r161, refused as "measured")
    from servesim.simulator.model_arch import HF_IDS

    # found by its source, not its name: renamed in the same command (profile.name=mine) it is still that built-in's
    # measurement (r162); a user's own profile has a source of its own
    name = _builtin_by_source().get(profile.source)
    own = load_profile(name) if name else None
    if own is None or own.model in ("any", "from-scenario"):
        return
    for field in DEPLOYMENT_LABELS:
        was, now = getattr(own, field), getattr(profile, field)
        if field == "model":  # an HF id is its built-in's name (as check_profile_fits reads it)
            was, now = HF_IDS.get(was, was), HF_IDS.get(now, now)
        # a label removed is edited too (r163: kv_cache_dtype null timed a bf16 KV cache with fp8-KV kernels); but a
        # gpu unstated either side is its device's, checked above
        if now != was and not (field == "gpu" and (was is None or now is None)):
            raise ConfigError(f"profile.{field}", f"{getattr(profile, field)}, but built-in profile {name} "
                                                  f"was measured with {field} {getattr(own, field)}: a profile is "
                                                  f"its deployment's (leave profile unset for the scenario's own)"
                                                  + (f"; renamed {profile.name}, it keeps that built-in's source"
                                                     if profile.name != name else ""))


@functools.lru_cache(maxsize=1)
def _builtin_by_source() -> dict[str, str]:
    """Each built-in profile's source text and its name (every built-in's source is its own)."""
    return {load_profile(name).source: name for name in builtin_profile_names()}


def load_profile(spec: str | dict) -> Profile:
    """A built-in profile name, a path to a profile YAML, or an inline mapping."""
    if isinstance(spec, dict):
        data, where = spec, "scenario"
    else:
        path = Path(spec)
        if path.suffix in (".yaml", ".yml"):
            from servesim.simulator.files import load_yaml, read_settings_text

            where = str(path)
            data = load_yaml(read_settings_text(path, "profile"), "profile", where)
        else:
            f = _builtin_profiles() / f"{spec}.yaml"
            if not f.is_file():
                if path.exists() or len(path.parts) > 1:  # a path, not a name: say what a profile file is
                    raise ConfigError("profile", f"{spec!r} is not a profile: a profile file is YAML (.yaml or "
                                                 f".yml){'' if path.exists() else ', and this path does not exist'}")
                raise ConfigError("profile", f"unknown profile {spec!r}; built-in: {', '.join(builtin_profile_names())}, or a path to a profile YAML")
            data, where = copy.deepcopy(_builtin_profile_data(spec)), f"built-in {spec}"
    if not isinstance(data, dict):
        raise ConfigError("profile", f"{where} must hold a mapping")
    section = "profile"
    try:
        profile = Profile.model_validate(data)  # not **data: a key 1 is no keyword
        section = "profile.coefficients"
        COEFFICIENTS[profile.cost_model].model_validate(profile.coefficients)  # checked here, where the file is known
    except ValidationError as exc:
        field, msg = first_error(exc, section)
        raise ConfigError(field, f"{msg} (in {where})") from None
    return profile


EXTRAPOLATION_FACTOR = 2.0  # a run's batches may exceed the profile's fitted range this much before a warning
_RANGE_LABELS = {"max_tokens": "tokens in a step", "max_seqs": "sequences in a step",
                 "max_decode_context_tokens": "decode KV tokens in a step"}


def extrapolation_warnings(profile: Profile, largest: dict[str, float], who: str = "this run") -> list[str]:
    """One line for each batch dimension a run (or `who`) took beyond EXTRAPOLATION_FACTOR x what the profile
    was fitted on."""
    out = []
    for key, limit in (profile.shape_range or {}).items():
        seen = largest.get(key, 0)
        if limit and seen > EXTRAPOLATION_FACTOR * limit:
            out.append(f"profile {profile.name} was fitted on steps of at most {limit:,} {_RANGE_LABELS.get(key, key)}; "
                       f"{who} reached {int(seen):,}, so those step times are extrapolated")
    return out


MIN_STEP_S = 1e-9  # 1 ns (1e-6 ms, the shortest step time calibrate fit takes): below it a step is no GPU's


def refuse_zero_step(kernels: "CostModel", name: str) -> None:
    """A profile whose one-token step, prefill or decode, takes no time (or less than MIN_STEP_S: a clock it times
    never moves, r129's 1e-300 ms hung a closed loop), and a comparison of it says 0 ms. A decode step is timed too:
    a profile of prefill terms alone gave every decode for free (r129)."""
    for what, shape in (("one-token prefill", BatchShape(1, 1, 1, 0, 0)), ("one-sequence decode", decode_shape(1, 1))):
        t = kernels.step_time(shape)  # seconds
        if not t >= MIN_STEP_S:
            raise ConfigError("profile.coefficients", f"{name} predicts "
                                                      f"{'zero time' if t <= 0 else f'{t * 1e3:.3g} ms'} for a {what} "
                                                      f"step" + ("" if t <= 0 else f" (less than {MIN_STEP_S * 1e3:g} "
                                                                                   f"ms)"))


def _flat(kernels: "CostModel") -> bool:
    """Whether a one-token step costs what an 8,192-token prefill and a 256-sequence decode do."""
    one = kernels.step_time(BatchShape(1, 1, 1, 0, 0))
    return one == kernels.step_time(BatchShape(1, 8192, 8192 * 8193 // 2, 0, 0)) == \
        kernels.step_time(decode_shape(256, 256 * 4096))


def linear_model(profile: Profile) -> "LinearCostModel":
    """A linear profile's cost model; a coefficient out of range is one line naming it."""
    try:
        return LinearCostModel(LinearCoefficients(**profile.coefficients))
    except ValidationError as exc:
        raise ConfigError(*first_error(exc, "profile.coefficients")) from None


def check_profile_fits(profile: Profile, arch: ModelArchitecture, tensor_parallel_size: int,
                       gpu: str | None = None, token_ranks: int = 1, expert_parallel: int | None = None,
                       routing: str | None = None) -> None:
    """A profile measured for one model, GPU, dtype, KV dtype, TP degree, expert layout or router skew says
    nothing about another."""
    from servesim.simulator.hardware import gpu_for_device
    from servesim.simulator.model_arch import HF_IDS

    generic = ("any", "from-scenario")
    if profile.model not in generic and HF_IDS.get(profile.model, profile.model) != arch.name:  # r129: an HF id
        raise ConfigError("profile", f"{profile.name} was measured for model {profile.model}, but the scenario's "
                                     f"model is {arch.name}")
    # a profile without `gpu` whose device is a built-in GPU was measured on it (r129: H100 tables renamed timed a
    # B200 run without a word)
    measured_on = profile.gpu or (gpu_for_device(profile.device) if profile.device else None)
    if measured_on and gpu and measured_on != gpu:
        raise ConfigError("profile", f"{profile.name} was measured on {measured_on}"
                                     + ("" if profile.gpu else f" (its device: {profile.device})")
                                     + f", but hardware.gpu is {gpu} (leave profile unset to get {gpu}'s own)")
    if profile.dtype not in generic and profile.dtype != arch.dtype:
        raise ConfigError("profile", f"{profile.name} was measured in {profile.dtype}, but the scenario's model runs "
                                     f"in {arch.dtype}" + (" (set engine.quantization)" if arch.dtype in ("bf16", "fp16") else ""))
    kv = arch.kv_cache_dtype or arch.activation_dtype
    if profile.model not in generic and profile.kv_cache_dtype and profile.kv_cache_dtype != kv:
        raise ConfigError("profile", f"{profile.name} was measured with a {profile.kv_cache_dtype} KV cache, but "
                                     f"engine.kv_cache_dtype gives {kv}")
    if profile.model not in generic and profile.tensor_parallel_size != tensor_parallel_size:
        raise ConfigError("profile", f"{profile.name} was measured at tensor_parallel_size="
                                     f"{profile.tensor_parallel_size}, but engine.tensor_parallel_size is "
                                     f"{tensor_parallel_size}")
    c = profile.coefficients
    if c.get("per_expert_ms") and c.get("moe_experts"):  # its expert term prices a routing of its own
        experts, top_k = int(c["moe_experts"]), int(c.get("moe_top_k") or 0)
        if not arch.is_moe:
            raise ConfigError("profile", f"{profile.name} prices expert reads (moe_experts {experts}), but "
                                         f"{arch.name} is a dense model")
        if (experts, top_k) != (arch.num_experts, arch.experts_per_token):
            raise ConfigError("profile", f"{profile.name} prices top-{top_k} of {experts} experts, but {arch.name} "
                                         f"routes each token to {arch.experts_per_token} of {arch.num_experts}")
    ranks = int(profile.coefficients.get("moe_token_ranks", 1))  # composed for DP ranks sharing experts
    if arch.is_moe and profile.model not in generic and profile.cost_model == "linear" and ranks != token_ranks:
        said = f"data_parallel_size={ranks} with expert parallelism" if ranks > 1 else "no expert parallelism"
        raise ConfigError("profile", f"{profile.name} was composed for {said}, but the scenario's MoE layers see "
                                     f"{token_ranks} DP rank(s)' tokens (engine.data_parallel_size, "
                                     f"engine.enable_expert_parallel)")
    ep = expert_parallel or 1
    if arch.is_moe and profile.expert_parallel_size and profile.expert_parallel_size != ep:
        said = lambda n: f"expert parallelism over {n} GPUs" if n > 1 else "no expert parallelism"  # noqa: E731
        raise ConfigError("profile", f"{profile.name} was composed for {said(profile.expert_parallel_size)}, but the "
                                     f"scenario has {said(ep)} (engine.enable_expert_parallel)")
    if arch.is_moe and profile.moe_routing and routing and profile.moe_routing != routing:
        raise ConfigError("profile", f"{profile.name} was composed at {profile.moe_routing} routing, but moe.routing "
                                     f"is {routing}")


# gpu_per_token_per_layer_ns was measured on H100 (3,350 GB/s) for Llama-2-7B: hidden 4096, 32 query and 32 KV heads
# of 128, intermediate 11008; of its 357 us a layer at 4,096 tokens, the two norms take 134, rotary 84, SiLU-and-mul 139
REFERENCE_BANDWIDTH_GBPS = 3350.0
_NORMS, _ROTARY, _ACTIVATION = 134 / 357, 84 / 357, 139 / 357


def activation_traffic(arch: ModelArchitecture, tensor_parallel_size: int = 1) -> float:
    """A token's bytes through the non-GEMM kernels of one layer, relative to the reference model: the norms see
    the whole hidden state on every GPU; rotary embedding (query and key heads) and the activation
    (intermediate size) are split over the TP group."""
    tp = tensor_parallel_size
    rotary = (arch.num_attention_heads + arch.num_key_value_heads) * arch.head_dim / tp / (64 * 128)
    return (_NORMS * arch.hidden_size / 4096 + _ROTARY * rotary + _ACTIVATION * arch.intermediate_size / tp / 11008)


class OverheadCostModel(CostModel):
    """Kernel time (any cost model) plus the engine's overhead terms.

    GPU time = kernels + layers x (per_layer + tokens x per_token_per_layer) + seqs x per_seq, plus
    layers x eager_per_layer for a step no CUDA graph covers (the GPU idles while the CPU launches kernels that
    run shorter than their launch). Host time =
    per_step + seqs x per_seq. Synchronous scheduling pays both one after the other; asynchronous scheduling
    prepares the next step while this one runs, so the slower of the two sets the pace.
    """

    name = "overhead"

    def __init__(self, kernels: CostModel, o: Overhead, arch: ModelArchitecture, hw: Hardware,
                 cudagraph_max_tokens: int, async_scheduling: bool, tensor_parallel_size: int = 1):
        self.kernels, self.o = kernels, o
        self._kernel_time = kernels.step_time
        num_layers = arch.num_hidden_layers
        self._layer_s = num_layers * o.gpu_per_layer_us * 1e-6
        traffic = activation_traffic(arch, tensor_parallel_size) * REFERENCE_BANDWIDTH_GBPS / hw.memory_bandwidth_gbps
        self._token_s = num_layers * o.gpu_per_token_per_layer_ns * 1e-9 * traffic
        self._gpu_seq_s = o.gpu_per_seq_us * 1e-6
        self._eager_s = num_layers * o.eager_per_layer_us * 1e-6
        self._graph_tokens = cudagraph_max_tokens
        self._host_step_s = o.host_per_step_ms * 1e-3
        self._host_seq_s = o.host_per_seq_us * 1e-6
        self.async_scheduling = async_scheduling

    def knee_tokens(self) -> int | None:
        return self.kernels.knee_tokens()

    def parts(self, shape: BatchShape) -> tuple[float, float, float]:
        """(kernel, other GPU, host) seconds of one step."""
        tokens = shape.prefill_tokens + shape.decode_seqs
        kernel = self._kernel_time(shape)
        gpu = kernel + self._layer_s + self._token_s * tokens + self._gpu_seq_s * shape.num_seqs
        if tokens > self._graph_tokens:  # no CUDA graph: the GPU waits on the launches of short kernels
            gpu += self._eager_s
        return kernel, gpu - kernel, self._host_step_s + self._host_seq_s * shape.num_seqs

    def step_time(self, shape: BatchShape) -> float:
        kernel, other, host = self.parts(shape)
        gpu = kernel + other
        if self.async_scheduling:
            return gpu if gpu > host else host
        return gpu + host


def build_cost_model(profile: Profile, arch: ModelArchitecture, hw: Hardware, tensor_parallel_size: int = 1,
                     gpu: str | None = None, cudagraph_max_tokens: int = 0, async_scheduling: bool = False,
                     expert_parallel: int | None = None, data_parallel_size: int = 1,
                     routing: str = "balanced") -> CostModel:
    check_profile_fits(profile, arch, tensor_parallel_size, gpu, data_parallel_size if expert_parallel else 1,
                       expert_parallel, routing)
    try:
        if profile.cost_model == "linear":
            kernels: CostModel = linear_model(profile)
        elif profile.cost_model == "roofline":
            kernels = RooflineCostModel(arch, hw, RooflineCoefficients(**profile.coefficients), tensor_parallel_size,
                                        expert_parallel, data_parallel_size, routing)
        else:
            raise ConfigError("profile.cost_model", f"unknown cost model {profile.cost_model!r}; known: linear, roofline")
    except ValidationError as exc:
        raise ConfigError(*first_error(exc, "profile.coefficients")) from None
    refuse_zero_step(kernels, profile.name)
    if profile.cost_model == "linear" and _flat(kernels):  # r143: its other terms were taken as 0 unsaid
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: profile {profile.name} takes the same time for every step, whatever its "
                  f"tokens and sequences: its coefficients hold no per-token or per-sequence term (a term left "
                  f"out is 0)"])
    if profile.overhead is None:
        return kernels
    return OverheadCostModel(kernels, profile.overhead, arch, hw, cudagraph_max_tokens, async_scheduling,
                             tensor_parallel_size)
