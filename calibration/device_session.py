"""One call on a lent GPU: record the device, calibrate, fit, replay at three loads, compare.

A lent GPU comes for a few minutes, one call at a time, with a hard limit per call and at
most eight files back. So the whole job is one prepared command (calibration/device_session.sh
on the device; this module directly on the CPU, which the tests do). Each stage writes into a
work directory; after each stage the directory is packed again into OUT/session.tar.gz, with
the headline files beside it: a call cut off at its limit still returns what it finished.

Stages: the device (pynvml, nvidia-smi, torch/CUDA versions); the harness over the grid and
its fit with held-out error; measured replay of a short workload at three fractions of the
saturation the fitted profile predicts, with the simulator on the same workload; the fitted
profile against the reference (imported third-party tables), component by component, and
both profiles' predictions for every batch the replay really ran.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

import numpy as np

from servesim.simulator.cli_args import COUNT, THREADS, number
from servesim.simulator.files import PLAIN_NAME

HEADLINE = {  # files copied beside the bundle (the call brings back eight files, log.txt included)
    "summary.md": "summary.md", "device.json": "device.json", "calibration/profile.yaml": "profile.yaml",
    "compare.csv": "compare.csv", "replay/table.csv": "replay-table.csv", "steps.png": "steps.png",
}
NVIDIA_SMI_QUERY = "name,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,driver_version,power.limit"


def _nvidia_smi(*args: str) -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi failed: {exc}"


def stage_device(a, work: Path, state: dict) -> dict:
    import torch

    from servesim.calibration.hardware_info import describe

    info = {"servesim_device": a.device, "hardware": describe(a.device, a.threads), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if a.device != "cpu" else None}
    if a.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(a.device))
        info["capability"] = f"{props.major}.{props.minor}"
        info["multiprocessors"] = props.multi_processor_count
    if a.device.startswith("cuda"):
        try:
            info["ceilings"] = measure_ceilings(torch, torch.device(a.device))
        except Exception as exc:  # a reading that failed is noted, not fatal
            info["ceilings"] = {"error": f"{type(exc).__name__}: {exc}"}
    smi = _nvidia_smi(f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv")
    if smi is not None:
        info["nvidia_smi"] = smi.strip().splitlines()
        (work / "nvidia-smi.txt").write_text(_nvidia_smi("-q") or "")
    (work / "device.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    state["device_name"] = info["hardware"].get("name", a.device)
    return {"name": state["device_name"], "torch": info["torch"], "cuda": info["torch_cuda"]}


def measure_ceilings(torch, device) -> dict:
    """The card's two ceilings as found (METHOD: measure, don't quote the datasheet): a bf16 8192^3
    matrix product on random data, and a 1 GiB device-to-device copy counting bytes read and written.
    Medians of ten, after three warm-ups."""
    def timed(fn, n=10, warm=3):
        for _ in range(warm):
            fn()
        ts = []
        for _ in range(n):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) / 1e3)
        return float(np.median(ts))

    n = 8192
    x, y = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    mm = timed(lambda: x @ y)
    src = torch.randn(2**29, device=device, dtype=torch.bfloat16)  # 1 GiB
    dst = torch.empty_like(src)
    cp = timed(lambda: dst.copy_(src))
    del x, y, src, dst
    torch.cuda.empty_cache()
    return {"bf16_matmul_tflops": round(2 * n**3 / mm / 1e12, 1), "copy_tb_per_s": round(2 * 2**30 / cp / 1e12, 2)}


def _short_device(name: str, device: str) -> str:
    """'NVIDIA H200' -> 'h200': how the shipped profiles are named."""
    if not device.startswith("cuda"):
        return "cpu"
    words = [w for w in name.lower().split() if w not in ("nvidia", "tesla")]
    return words[0] if words else "cuda"


def stage_kernels(a, work: Path, state: dict) -> dict:
    """Which decode attention the calibration runs: the paged kernel where it computes what SDPA over the
    gathered contexts does and is faster on the grid's attention points, else the gather."""
    import pandas as pd
    import torch

    from servesim.calibration.grid import make_grid
    from servesim.calibration.harness import Harness, memory_plan
    from servesim.calibration.torch_model import check_attention
    from servesim.simulator.errors import ConfigError
    from servesim.simulator.model_arch import load_model

    if a.attention != "auto":
        state["attention"] = a.attention
        return {"attention": a.attention, "why": "--attention"}
    try:
        check_attention("paged", a.device)
    except ConfigError as exc:
        state["attention"] = "gather"
        return {"attention": "gather", "why": exc.message}
    arch = load_model(a.model)
    grid = a.grid or ("gpu" if a.device.startswith("cuda") else "cpu")
    pts = [p for p in make_grid(grid, arch.max_position_embeddings) if p.kind == "attention"]
    pts, _, _ = memory_plan(arch, a.device, a.dtype, pts)
    h = Harness(arch, a.device, a.dtype, 16, pts, a.threads, attention="paged")
    batch = h.build(max(pts, key=lambda p: p.max_kv_tokens))
    q = torch.randn(batch.decode_rows.numel(), arch.num_attention_heads, arch.head_dim, device=h.device,
                    dtype=h.model.k_cache.dtype)
    out = {}
    with torch.no_grad():
        for kind in ("gather", "paged"):
            h.model.attention_kind = kind
            out[kind] = h.model.decode_attention(0, q, batch).float()
    err = float((out["paged"] - out["gather"]).norm() / out["gather"].norm())
    rows = []
    for p in pts:
        for kind in ("gather", "paged"):
            h.model.attention_kind = kind
            rows.append(h.measure(p, a.warmup, a.repeats) | {"attention": kind})
    t = pd.DataFrame(rows)
    t.to_csv(work / "attention-kernels.csv", index=False)
    wide = t.pivot_table(index=["batch", "context"], columns="attention", values="time_ms")
    ratio = float((wide["paged"] / wide["gather"]).median())
    state["attention"] = "paged" if err < 2e-2 and ratio < 1.0 else "gather"
    return {"attention": state["attention"], "paged_vs_gather_relative_error": err,
            "paged_over_gather_time_median": ratio, "points": len(pts)}


def stage_calibrate(a, work: Path, state: dict) -> dict:
    from servesim.calibration.harness import run_calibration
    from servesim.calibration.profile_io import fit_directory

    name = a.name or f"{_short_device(state.get('device_name', ''), a.device)}-{a.model}-{a.dtype}-tp1-harness"
    out = run_calibration(a.model, a.device, a.dtype, work / "calibration", grid=a.grid, warmup=a.warmup,
                          repeats=a.repeats, threads=a.threads, progress=True,
                          attention=state.get("attention", "gather"))
    path, fit = fit_directory(out, name=name)
    state["profile"] = str(path)
    meta = json.loads((out / "run.json").read_text())
    return {"profile": name, "attention": meta["attention"], "points": meta["points"], "skipped_points": len(meta["skipped_points"]),
            "measure_s": meta["wall_s"], "held_out": fit.held_out, "coefficients": fit.coefficients}


def stage_replay(a, work: Path, state: dict) -> dict:
    from servesim.calibration.validate import auto_loads, step_errors, validate_replay
    from servesim.simulator.config import load
    from servesim.simulator.cost_model import load_profile

    sets = list(a.set) + [f"profile={state['profile']}"]
    gpu = load_profile(state["profile"]).gpu  # the device measured, as its run.json names it: simulate that GPU
    if gpu and not any(s.startswith("hardware.gpu=") for s in a.set):
        sets.append(f"hardware.gpu={gpu}")
    rs = load(a.scenario, sets)
    fractions = tuple(float(f) for f in a.loads.split(","))
    loads = auto_loads(rs, sets, a.scenario, rates=fractions, concurrencies=())
    command = ["validate", "replay", a.scenario, "--device", a.device, "--loads", ",".join(loads)] \
        + [x for s in sets for x in ("--set", s)]
    table, steps, tol = validate_replay(a.scenario, sets, a.device, a.threads, work / "replay", loads,
                                        command=command, deadline=state["deadline"] - a.level_reserve_s)
    import pandas as pd

    replayed = pd.read_parquet(work / "replay" / "replayed-steps.parquet")
    ref = load(a.scenario, list(a.set) + [f"profile={a.reference}"])
    state["replayed"] = replayed
    state["models"] = {f"harness ({rs.profile.name})": rs.cost_model, f"reference ({ref.profile.name})": ref.cost_model}
    summary = json.loads((work / "replay" / "summary.json").read_text())
    return {"loads": summary["loads"], "skipped_for_time": summary["skipped_for_time"],
            "harness_profile_on_replayed_steps": steps, "tolerance": tol,
            "reference_profile_on_replayed_steps": step_errors(ref.cost_model, replayed),
            "mean_abs_error_run_metrics": float(table["error"].abs().mean())}


def stage_compare(a, work: Path, state: dict) -> dict:
    from servesim.calibration.compare import compare_profiles, format_table

    t = compare_profiles(state["profile"], a.reference)
    t.to_csv(work / "compare.csv", index=False)
    (work / "compare.md").write_text(f"A = {t.attrs['a']}, B = {t.attrs['b']}\n\n{format_table(t)}\n")
    if "replayed" in state:
        steps_plot(state["replayed"], state["models"], work / "steps.png", state.get("device_name", a.device))
    return {"a": t.attrs["a"], "b": t.attrs["b"],
            "ratios": {r.what: (None if np.isnan(r.a_over_b) else round(float(r.a_over_b), 3)) for r in t.itertuples()}}


def steps_plot(replayed, models: dict, path: Path, device: str) -> None:
    """Each replayed batch: its measured time against what each profile predicted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servesim.calibration.validate import predicted_durations

    meas = replayed["duration"].to_numpy() * 1e3
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    for label, m in models.items():
        pred = predicted_durations(m, replayed) * 1e3
        ape = np.mean(np.abs(pred - meas) / meas)
        ax.scatter(meas, pred, s=6, alpha=0.5, label=f"{label}: MAPE {ape:.0%}")
    lo, hi = meas.min() * 0.8, meas.max() * 1.25
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="predicted = measured")
    ax.set(xscale="log", yscale="log", xlabel="measured step time (ms)", ylabel="predicted step time (ms)",
           title=f"{len(meas):,} replayed steps on {device}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _free_device_memory(device: str) -> None:
    """The harness's model and KV pool are gone after its stage; hand their memory back before the replay's."""
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


STAGES = [("device", stage_device), ("kernels", stage_kernels), ("calibrate", stage_calibrate), ("replay", stage_replay),
          ("compare", stage_compare)]


def write_summary(work: Path, summary: dict) -> None:
    (work / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    lines = [f"# Device session: {summary['args']['model']} on {summary.get('device_name', summary['args']['device'])}",
             "", f"started {summary['started']}, {summary['elapsed_s']:.0f} s so far", ""]
    for name, st in summary["stages"].items():
        status = "ok" if st.get("ok") else "FAILED: " + st.get("error", "")
        lines.append(f"- **{name}** ({st.get('seconds', 0):.0f} s): {status}")
    ker = summary["stages"].get("kernels", {})
    if ker.get("ok"):
        lines += ["", f"Decode attention: {ker['attention']}" + (
            f" (paged kernel vs gather: relative error {ker['paged_vs_gather_relative_error']:.1e}, median time ratio "
            f"{ker['paged_over_gather_time_median']:.2f} over {ker['points']} attention points)"
            if "points" in ker else f" ({ker['why']})") + "."]
    cal = summary["stages"].get("calibrate", {})
    if cal.get("ok"):
        h = cal["held_out"]
        lines += ["", f"Fit: {cal['points']} points ({cal['skipped_points']} over the memory budget), held-out MAPE "
                      f"{h['mape']:.1%}, p90 {h['p90_ape']:.1%}."]
    rep = summary["stages"].get("replay", {})
    if rep.get("ok"):
        hs, rf = rep["harness_profile_on_replayed_steps"], rep["reference_profile_on_replayed_steps"]
        lines += ["", f"Replay at {', '.join(rep['loads'])}: {hs['steps']:,} real steps. Per-step MAPE: harness profile "
                      f"{hs['mape']:.1%} (median predicted/measured {hs['median_ratio_predicted_to_measured']:.2f}), "
                      f"reference {rf['mape']:.1%} ({rf['median_ratio_predicted_to_measured']:.2f}). "
                      f"Run metrics, simulation vs replay: mean |error| {rep['mean_abs_error_run_metrics']:.1%}."]
    if (work / "compare.md").is_file():
        lines += ["", (work / "compare.md").read_text()]
    (work / "summary.md").write_text("\n".join(lines) + "\n")


def pack(work: Path, out: Path) -> None:
    """The bundle and the headline files, rewritten whole (a half-written file would come back broken)."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".session.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(work, arcname="session")
    tmp.replace(out / "session.tar.gz")
    for src, dst in HEADLINE.items():
        if (work / src).is_file():
            shutil.copyfile(work / src, out / dst)


MAX_BUNDLE_BYTES = 4 << 30  # a session's files are megabytes; more is not a bundle this script wrote


def unpack(bundle: str | Path, results_root: str | Path = "results/fidelity",
           profiles: str | Path = Path(__file__).resolve().parent / "profiles") -> tuple[Path, Path]:
    """What came back, into the repository: the bundle under results/fidelity/device-PROFILE/, the
    fitted profile among the built-in ones (the package's calibration/profiles/, from any folder; its
    `measurements` pointing at the unpacked parquet).
    The bundle is untrusted: its profile name must be one plain path component and no shipped profile's
    (re-unpacking a session replaces that session's own profile), every member is extracted into a fresh folder
    before anything is replaced, nothing outside results_root is ever removed, and nothing is written through a
    link."""
    from servesim.simulator.errors import ConfigError
    from servesim.simulator.files import linked, load_yaml

    bundle = Path(bundle)
    try:
        tar = tarfile.open(bundle, "r:gz")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise ConfigError("bundle", f"cannot read {bundle}: {exc}") from None
    with tar:
        try:
            members = tar.getmembers()
        except (OSError, tarfile.TarError, EOFError) as exc:
            raise ConfigError("bundle", f"{bundle} is a broken archive: {exc}") from None
        if sum(m.size for m in members) > MAX_BUNDLE_BYTES:
            raise ConfigError("bundle", f"{bundle} unpacks to more than {MAX_BUNDLE_BYTES >> 30} GiB")
        names = {m.name: m for m in members}
        prof_member = names.get("session/calibration/profile.yaml")
        if prof_member is None or not prof_member.isfile():
            raise ConfigError("bundle", f"{bundle} holds no fitted profile (session/calibration/profile.yaml): "
                                        "the calibration stage did not finish")
        try:
            text = tar.extractfile(prof_member).read().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError("bundle", f"session/calibration/profile.yaml is not UTF-8 (byte {exc.start}: "
                                        f"{exc.reason})") from None
        prof = load_yaml(text, "bundle", "session/calibration/profile.yaml")
        name = prof.get("name") if isinstance(prof, dict) else None
        if not isinstance(name, str) or not PLAIN_NAME.match(name):
            raise ConfigError("bundle", f"profile name {name!r} is not a plain name (letters, digits, '_', '.', '+', '-')")
        from servesim.simulator.cost_model import load_profile

        try:  # a profile run would refuse must not land among the built-ins, where `auto` reads every one
            load_profile({k: v for k, v in prof.items() if k != "measurements"})
        except ConfigError as exc:
            raise ConfigError("bundle", f"its profile is not one servesim runs: {exc}") from None
        root = Path(results_root).resolve()
        from servesim.simulator.files import present, refuse_package_files

        refuse_package_files(root, "bundle")  # run from inside the package, results/ would land among its files
        dest = root / f"device-{name}"
        target = Path(profiles) / f"{name}.yaml"
        _check_profile_target(target, dest, name)
        if dest.resolve().parent != root:  # a symlink planted where the folder goes
            raise ConfigError("bundle", f"{dest} does not lie in {root}")
        for folder, field in ((root, "results"), (target.parent, "profiles")):  # before anything moves (r150: a
            if present(folder) and not folder.is_dir():  # file there was a traceback, or
                raise ConfigError(field, f"{folder} is not a folder")  # left the session unpacked, its profile not)
            if any(p.exists() and not p.is_dir() for p in folder.parents):
                raise ConfigError(field, f"{folder} lies below a file")
        fresh = root / f".device-{name}.unpacking"  # all of it first: a bad member leaves what was there
        if fresh.is_symlink() or fresh.is_file():
            fresh.unlink()
        elif fresh.exists():
            shutil.rmtree(fresh)
        try:
            fresh.mkdir(parents=True)
            for m in members:
                if m.name.startswith("session/") and (m.isfile() or m.isdir()):
                    m.name = m.name[len("session/"):]
                    try:
                        tar.extract(m, fresh, filter="data")
                    except tarfile.FilterError as exc:
                        raise ConfigError("bundle", f"refused member {m.name!r}: {exc}") from None
                    except OSError as exc:  # a member below a file, a name the file system refuses
                        raise ConfigError("bundle", f"cannot unpack member {m.name!r}: {exc.strerror or exc}") from None
        except BaseException:
            shutil.rmtree(fresh, ignore_errors=True)
            raise
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)
    os.replace(fresh, dest)
    prof["measurements"] = os.path.relpath(dest / "calibration" / "measurements.parquet", target.parent.resolve())
    import yaml

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(prof, sort_keys=False))
    except OSError as exc:
        raise ConfigError("profiles", f"cannot write {target}: {exc.strerror or exc}") from None
    if linked(target):
        raise ConfigError("profiles", f"{target} became a link while unpacking")
    return dest, target


def _check_profile_target(target: Path, dest: Path, name: str) -> None:
    """The profile may replace only an earlier unpacking of this session (its measurements point into `dest`), never
    a shipped profile, and never through a link."""
    from servesim.simulator.errors import ConfigError
    from servesim.simulator.files import linked, load_yaml

    if linked(target):
        raise ConfigError("bundle", f"{target} is a link: a profile is written as a file of its own, never through "
                                    f"a link; remove it")
    if target.exists():
        try:
            earlier = load_yaml(target.read_text(), "profile", str(target))
        except (OSError, UnicodeDecodeError, ConfigError):
            earlier = None
        measured = earlier.get("measurements") if isinstance(earlier, dict) else None
        if not (isinstance(measured, str) and Path(measured).parts[-3:-2] == (dest.name,)):
            raise ConfigError("bundle", f"profile name {name!r} is a built-in profile's ({target}): a session "
                                        f"replaces only its own; run it with another --name")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m servesim.calibration.device_session", description=__doc__.splitlines()[0])
    p.add_argument("--out", help="where the bundle and headline files go ($OUT on the device)")
    p.add_argument("--unpack", metavar="BUNDLE", help="instead: put a returned session.tar.gz into the repository "
                                                        "(results/fidelity/device-PROFILE/, calibration/profiles/)")
    p.add_argument("--work", help="work directory (default: a fresh folder under /tmp)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default="llama-3.1-8b")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--grid", help="calibration grid (default: gpu on CUDA, cpu on the CPU)")
    p.add_argument("--warmup", type=number(int, ge=0), default=2)
    p.add_argument("--repeats", type=COUNT, default=5)
    p.add_argument("--threads", type=THREADS)
    p.add_argument("--attention", default="auto", choices=["auto", "gather", "paged"],
                   help="decode attention for the calibration and replay (auto: the paged kernel where it is right "
                        "and faster)")
    p.add_argument("--name", help="fitted profile's name (default: DEVICE-MODEL-DTYPE-tp1-harness)")
    p.add_argument("--scenario", default="docs/scenarios/replay-h200-llama-3.1-8b.yaml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="scenario overrides")
    p.add_argument("--loads", default="0.3,0.6,0.9", help="replay rates as fractions of the predicted saturation")
    p.add_argument("--reference", default="h200-llama-3.1-8b-bf16-tp1", help="profile to compare with")
    p.add_argument("--budget-s", type=number(float, ge=0), default=360,
                   help="seconds from the start by which the session should end: no replay level starts after "
                        "budget - level-reserve")
    p.add_argument("--level-reserve-s", type=number(float, ge=0), default=90, help="seconds one replay level may take")
    a = p.parse_args(argv)
    if not a.out and not a.unpack:
        p.error("--out is required (or --unpack BUNDLE)")
    return a


def main(argv=None) -> int:
    a = parse(argv)
    if a.unpack:
        from servesim.simulator.errors import ConfigError

        try:
            dest, prof = unpack(a.unpack)
        except ConfigError as exc:
            print(f"device_session: error: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:  # what the checks above did not foresee: still one line
            print(f"device_session: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"unpacked into {dest}/; profile {prof}")
        return 0
    t0 = time.monotonic()
    work = Path(a.work) if a.work else Path(f"/tmp/servesim-session-{int(time.time())}")
    work.mkdir(parents=True, exist_ok=True)
    out = Path(a.out)
    state = {"deadline": t0 + a.budget_s}
    summary = {"started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "args": vars(a),
               "stages": {}, "elapsed_s": 0.0}
    for name, stage in STAGES:
        s0 = time.monotonic()
        print(f"== {name} ({s0 - t0:.0f} s)", flush=True)
        try:
            result = {"ok": True} | stage(a, work, state)
        except Exception as exc:  # later stages may still run; the bundle says what failed and why
            traceback.print_exc()
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0],
                      "traceback": traceback.format_exc()}
        summary["stages"][name] = result | {"seconds": round(time.monotonic() - s0, 1)}
        _free_device_memory(a.device)
        summary["device_name"] = state.get("device_name")
        summary["elapsed_s"] = time.monotonic() - t0
        write_summary(work, summary)
        pack(work, out)
    print((work / "summary.md").read_text())
    return 0 if all(s["ok"] for s in summary["stages"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
