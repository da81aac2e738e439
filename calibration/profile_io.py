"""Write fitted profiles: the cost model's coefficients plus where they came from and how wrong they are."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.calibration.fit import FitResult, fit_step_model, kv_floor_ms
from servesim.simulator.errors import JSON_ERRORS, ConfigError, first_error, json_problem, unique_keys
from servesim.simulator.files import (PLAIN_NAME, output_file, profile_file, read_settings_text, read_table,
                                      refuse_folder_name, where_looked)
from servesim.simulator.model_arch import WeightFormat
from servesim.workloads.settings import MAX_BLOCK_SIZE


def tolerance_for(p90_ape: float) -> float:
    """What `calibrate check` accepts: twice the held-out p90 error, never under 10% nor over what a profile
    takes (MAX_TOLERANCE: a fit that poor still loads, said to be unreliable where it is used)."""
    from servesim.simulator.cost_model import MAX_TOLERANCE

    return round(min(MAX_TOLERANCE, max(0.10, 2 * p90_ape)), 4)


def within_tolerance(mape: float, median_ratio: float, tolerance: float) -> bool:
    """What a check passes: the mean error within the profile's tolerance, and the typical prediction within a
    factor 1 + tolerance of the measurement either way. The second is what fails a profile that predicts too little:
    an under-prediction's error never passes 100%, so a tolerance above it alone passed a profile predicting 0 ms."""
    return bool(mape <= tolerance and 1 / (1 + tolerance) <= median_ratio <= 1 + tolerance)


def profile_dict(fit: FitResult, *, name: str, source: str, device: str, model: str, dtype: str,
                 tensor_parallel_size: int = 1, **extra) -> dict:
    return {
        "name": name,
        "cost_model": "linear",
        "source": source,
        "device": device,
        "model": model,
        "dtype": dtype,
        "tensor_parallel_size": tensor_parallel_size,
        "coefficients": {k: float(f"{v:.6g}") for k, v in fit.coefficients.items()},
        "held_out_error": {k: (round(v, 5) if isinstance(v, float) else v) for k, v in fit.held_out.items()}
        | {"train_mape": round(fit.train["mape"], 5), "train_points": fit.train["points"]},
        "tolerance": tolerance_for(fit.held_out["p90_ape"]),
        "shape_range": fit.shape_range,
    } | {k: v for k, v in extra.items() if v is not None}


# what makes two profiles the same deployment's: a built-in may be rewritten only with its own deployment's
_DEPLOYMENT = ("model", "device", "dtype", "kv_cache_dtype", "tensor_parallel_size", "expert_parallel_size",
               "moe_routing")


def _refuse_shadowing(profile: dict, path: Path) -> None:
    """A profile may not take a built-in profile's name, nor replace a built-in's file with another deployment's:
    `profile: auto` would then find an H200 Qwen3 profile under an H100 Llama name, or lose the H100's own."""
    from servesim.simulator.cost_model import builtin_profile_names, builtin_profiles_dir, load_profile

    folder = builtin_profiles_dir().resolve()
    name, target = str(profile.get("name")), path.resolve()
    if name in builtin_profile_names() and target != folder / f"{name}.yaml":
        raise ConfigError("--name", f"{name} is a built-in profile's name ({folder / f'{name}.yaml'}): give the "
                                    f"profile another name (--name NAME)")
    if target.parent == folder and target.is_file() and target.stem in builtin_profile_names():
        shipped = load_profile(target.stem).model_dump()
        if any(shipped.get(k) != profile.get(k) for k in _DEPLOYMENT):
            what = ", ".join(f"{k} {shipped.get(k)}" for k in _DEPLOYMENT if shipped.get(k) is not None)
            raise ConfigError("--out", f"{target} is the built-in profile of another deployment ({what}): write "
                                       f"this one under another name")


def write_profile(profile: dict, path: str | Path) -> Path:
    path = Path(path)
    _refuse_shadowing(profile, path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(profile, sort_keys=False))
    except OSError as exc:
        raise ConfigError("--out", f"cannot write the profile to {path}: {exc.strerror or exc}") from None
    return path


class RunRecord(BaseModel):
    """What `calibrate run` records in run.json and a fit writes into the profile: checked, since a hand-edited
    or damaged record would otherwise become a profile no run can load (model: 5, dtype: fp99)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)

    model: str | None = None
    dtype: WeightFormat | None = None
    device: str | None = None
    harness: str | None = None
    engine_version: str | None = None
    grid: str | None = None
    attention: str | None = None
    block_size: int | None = Field(None, ge=1, le=MAX_BLOCK_SIZE)
    architecture: dict | None = None
    hardware: dict[str, str | int | float | bool | list | None] | None = None


def read_run_record(path: Path) -> dict:
    """run.json beside the measurements: a JSON object whose fields a profile takes, or one line naming it."""
    if not path.is_file():
        raise ConfigError(str(path), "is not a regular file (calibrate run writes run.json as a JSON object)")
    text = read_settings_text(path, str(path))  # its own line on a file that is not UTF-8 or too big
    try:
        data = json.loads(text, object_pairs_hook=unique_keys)
    except JSON_ERRORS as exc:
        raise ConfigError(str(path), f"not a JSON document ({json_problem(exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), f"must hold a JSON object, got {type(data).__name__}")
    try:
        RunRecord.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(*first_error(exc, str(path))) from None
    return data


def read_measurements(src: str | Path) -> tuple[pd.DataFrame, dict, Path]:
    """A calibration directory (measurements.parquet + run.json) or a parquet/CSV file."""
    src = Path(src)
    meta: dict = {}
    if src.is_dir():
        src = src / "measurements.parquet"
    run = src.parent / "run.json"
    if src.name == "measurements.parquet" and run.exists():  # the harness's folder, given or its table in it
        meta = read_run_record(run)
    if not src.is_file():  # (r143: /dev/null was "not found")
        raise ConfigError("measurements", f"{src} is not a regular file" if src.exists() else
                          f"file not found: {src}{where_looked(src)}")
    if src.suffix == ".jsonl":  # an engine step log (calibration/real_runs.py): batch shapes and step times
        from servesim.calibration.real_runs import read_run

        run = read_run(src)
        if run.steps is None:
            raise ConfigError(str(src), f"{run.kind} records hold no step times; fit them by simulation with "
                                        f"`servesim calibrate fit {src} --scenario S` (docs/calibration.md)")
        return run.steps, meta, src
    return read_table(src, "measurements"), meta, src


def measured_labels(meta: dict, path: Path, model: str | None, dtype: str | None,
                    gpu: str | None) -> tuple[str, str, str | None]:
    """The model, dtype and GPU a fitted profile claims. The simulator takes a profile for exactly these, so each
    must be one it knows, and none may contradict what run.json recorded of the measurement: a CPU table
    labelled llama-3.1-8b on an H200 would time H200 runs with a CPU's numbers. A CUDA device run.json names
    as a built-in GPU is the profile's GPU without --gpu (else an H100 profile timed H200 runs unsaid)."""
    from servesim.simulator.hardware import builtin_gpu_names, gpu_for_device
    from servesim.simulator.model_arch import WeightFormat, load_model

    if not (model or meta.get("model")) or not (dtype or meta.get("dtype")):
        raise ConfigError("--model", f"{path} does not say which model and dtype it measured (no run.json beside "
                                     f"it): give --model and --dtype (and --gpu, --tp)")
    if model is not None and model != meta.get("model"):
        try:
            model = load_model(model).name  # an HF id or a config.json: the name a scenario's model carries
        except ConfigError as exc:
            raise ConfigError("--model", exc.message) from None
        if meta.get("model") and model != meta["model"]:
            raise ConfigError("--model", f"{path} measured {meta['model']} (run.json), not {model}")
    dtypes = WeightFormat.__args__
    if dtype is not None and dtype not in dtypes:
        raise ConfigError("--dtype", f"one of {', '.join(dtypes)}, got {dtype!r}")
    if dtype is not None and meta.get("dtype") and dtype != meta["dtype"]:
        raise ConfigError("--dtype", f"{path} measured {meta['dtype']} (run.json), not {dtype}")
    hw = meta.get("hardware") or {}
    recorded = gpu_for_device(hw["name"]) if hw.get("kind") == "cuda" and hw.get("name") else None
    if gpu is not None:
        if gpu not in builtin_gpu_names():
            raise ConfigError("--gpu", f"unknown GPU {gpu!r}; built-in: {', '.join(builtin_gpu_names())}")
        if hw.get("kind") == "cpu" or meta.get("device") == "cpu":
            raise ConfigError("--gpu", f"{path} was measured on the CPU ({hw.get('name', 'run.json')}), not on {gpu}")
        if recorded and gpu != recorded:
            raise ConfigError("--gpu", f"{path} was measured on {hw['name']} ({recorded}), not on {gpu}")
    return model or meta["model"], dtype or meta["dtype"], gpu or recorded


def fit_directory(src: str | Path, out: str | Path | None = None, name: str | None = None,
                  holdout: float = 0.2, seed: int = 0, model: str | None = None, dtype: str | None = None,
                  gpu: str | None = None, tp: int | None = None,
                  kv_cache_dtype: str | None = None) -> tuple[Path, FitResult]:
    """Fit a profile; it says what it was measured on (run.json's record, or the labels given), so the
    simulator can refuse it for anything else."""
    df, meta, path = read_measurements(src)
    model_path = Path(model) if model and Path(model).exists() else None  # the labels below name the model
    model, dtype, gpu = measured_labels(meta, path, model, dtype, gpu)
    # the KV cache timed: run.json's (its model's, else the activations'), else as given, else the activations'
    # (r147: a bare table's was none, so the profile was taken for every KV dtype)
    timed_kv = ((meta.get("architecture") or {}).get("kv_cache_dtype") if meta else None) or \
        (dtype if dtype in ("fp32", "fp16", "bf16") else None)
    if kv_cache_dtype and meta and kv_cache_dtype != timed_kv:
        raise ConfigError("--kv-cache-dtype", f"{kv_cache_dtype}, but {path.parent / 'run.json'} records the KV cache "
                                              f"its harness timed ({timed_kv}): leave it out")
    arch = _check_model_fits(meta, model, tp, df)
    if meta.get("device") and tp not in (None, 1):  # calibrate run's harnesses time one device (calibrate check too)
        raise ConfigError("--tp", f"{tp}: {path} was measured on one device ({meta['device']}, run.json); a TP-{tp} "
                                  f"profile would time {tp} GPUs, their all-reduces left out, with one's numbers")
    if out:
        refuse_folder_name(out, "--out")
    out = Path(out) if out else path.parent / "profile.yaml"
    predictions = out.parent / f"{out.stem}.predictions.parquet"
    # the model's own file too (--model m.yaml, or a folder's config.json): read for the fit, never replaced by it
    read = [path, path.parent / "run.json"] + ([model_path, model_path / "config.json"] if model_path else [])
    for written in (out, predictions):
        if written.resolve() == path.resolve() or (path.parent / "run.json").resolve() == written.resolve():
            raise ConfigError("--out", f"{written} is the fit's own input ({path}); write the profile elsewhere")
        output_file(written, "--out", read, profile=True)  # nor a hard or symbolic link to one of them
    profile_file(out, "--out")
    device = meta.get("device", gpu or "unknown")
    if name is None and not PLAIN_NAME.match(f"{device.split(':')[0]}-{model}-{dtype}"):  # named from run.json
        raise ConfigError("--name", f"the profile's default name {device.split(':')[0]}-{model}-{dtype!s:.60} is "
                                    f"not a plain name (run.json's device or model): give --name")
    # a GPU's table: no KV cache knee and no KV token read faster than its datasheet bandwidth, as a composition's
    # (r171: a user's H100 table fitted a knee at 605 tokens, the KV reads below it free, where README says none)
    on_gpu = gpu is not None and not str(meta.get("device", "cuda")).startswith("cpu")
    floor = kv_floor_ms(arch, gpu, kv_cache_dtype or timed_kv, tp) if on_gpu else 0.0
    fit = fit_step_model(df, holdout=holdout, seed=seed, source=str(path), cache_knee=not on_gpu,
                         context_floor_ms=floor)
    if floor and fit.coefficients.get("per_context_token_ms", 0.0) <= floor * (1 + 1e-6):  # r178: raised unsaid
        from servesim.simulator.config import say_once

        say_once([f"servesim: warning: the steps read each decode KV token no slower than {gpu}'s datasheet "
                  f"bandwidth allows ({floor:.3g} ms a token, {kv_cache_dtype or timed_kv or 'the model'}'s KV "
                  f"bytes): the fit holds that cost at its floor (steps timed on another GPU, in another unit, or "
                  f"with another KV cache dtype?)"])
    if "experts_touched" in df.columns and arch is not None:  # what per_expert_ms is priced over, as an import
        fit.coefficients |= {"moe_experts": arch.num_experts, "moe_top_k": arch.experts_per_token}  # writes (r129)
    hw = meta.get("hardware", {})
    prof = profile_dict(
        fit, name=name or f"{device.split(':')[0]}-{model}-{dtype}",
        source=(f"servesim calibrate run --engine vllm: {model} {dtype} on {meta.get('engine_version')}'s engine, "
                f"{meta.get('grid', '?')} grid, block {meta.get('block_size')}, "
                if meta.get("harness") == "vllm" else
                f"servesim calibrate run: {model} {dtype} on {hw.get('name', device)}, torch {hw.get('torch', '?')}, "
                f"{meta.get('grid', '?')} grid, {meta.get('attention', 'gather')} attention, " if meta else
                f"fitted to the step times of {path.name} (no run.json: not a calibrate run; an engine's step log or "
                f"a table), {model} {dtype} on {device}, ")  # what was fitted, not a harness that never ran
               + f"{fit.held_out['points'] + fit.train['points']} step points"
               + (f", {hw.get('date', '?')}" if meta else ""),
        device=hw.get("name", device), model=model, dtype=dtype, gpu=gpu, tensor_parallel_size=tp or 1,
        # the KV cache the harness timed (its model's, else the activations'): a run with another is refused
        kv_cache_dtype=kv_cache_dtype or timed_kv,
        block_size=meta.get("block_size"), grid=meta.get("grid"), attention=meta.get("attention"), architecture=meta.get("architecture"),
        engine_version=meta.get("engine_version"), hardware=hw or None, measurements=str(path.resolve().relative_to(out.parent.resolve()))
        if path.resolve().is_relative_to(out.parent.resolve()) else str(path.resolve()))
    write_profile(prof, out)
    fit.predictions.to_parquet(predictions, index=False)
    return out, fit


def _check_model_fits(meta: dict, model: str, tp: int | None, df):
    """The TP degree must split the model's heads, and per-expert times need a mixture-of-experts model, touching
    no more experts than it has. The architecture is run.json's where recorded (a model measured from its own
    config.json), else the model's; returned (None: one this machine cannot load)."""
    from servesim.simulator.config import check_tensor_parallel
    from servesim.simulator.model_arch import load_model

    if tp is not None and tp < 1:
        raise ConfigError("--tp", f"must be >= 1, got {tp}")
    recorded = isinstance(meta.get("architecture"), dict)
    try:
        arch = load_model(meta["architecture"] if recorded else model)
    except ConfigError as exc:
        if recorded:  # run.json's own architecture, which the profile keeps: a damaged one is named here
            raise ConfigError("run.json", f"architecture: {exc}") from None
        return None  # a model this machine cannot load (run.json's own name for it): nothing to check against
    from servesim.simulator.model_arch import HF_IDS, builtin_model_names

    named, builtins = HF_IDS.get(model, model), builtin_model_names()
    if recorded and named != arch.name and named in builtins and arch.name in builtins:  # (r147: a run refused the
        # profile as "the scenario's edited model", unedited)
        raise ConfigError("run.json", f"model {model} contradicts the architecture it records ({arch.name}'s): "
                                      f"which was timed?")
    if tp:
        check_tensor_parallel(arch, tp, "--tp")  # vLLM's rule, as a run checks it
    if "experts_touched" in df.columns:
        if not arch.is_moe:
            raise ConfigError("measurements", f"the table has experts_touched, but {arch.name} has no experts")
        most = float(df["experts_touched"].max())
        if most > arch.num_experts:
            raise ConfigError("measurements", f"experts_touched reaches {most:g}, more than {arch.name}'s "
                                              f"{arch.num_experts} experts")
    return arch
