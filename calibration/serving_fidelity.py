"""`servesim validate serving` (`make fidelity-gpu`): simulate public real-GPU vLLM runs, compare per request.

Each run in ../shared/data/serving/ (see its README) is a real vLLM server with its engine arguments
(`vllm/meta.json`), one row per request (`vllm/requests.jsonl`: arrival, queued, scheduled, first and last
token times) and a once-a-second log of running and waiting requests (`vllm/timeseries.csv`). servesim
replays the same arrivals and lengths with the same engine settings, on the cost model `profile: auto`
picks for that GPU (kernel tables plus the default overhead, or the roofline where the GPU has no tables):
nothing is fitted to the run it is compared with. Reported: mean / p50 / p90 / p99 of TTFT, TPOT, queue time,
prefill and E2E latency side by side, their CDFs, and running / waiting over time.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd

from servesim.calibration.real_runs import RealRun, first_copy, read_run, request_summary
from servesim.calibration.run_comparison import comparison_table, mean_abs_error, plot_comparison, simulate_run
from servesim.simulator.errors import ConfigError
from servesim.simulator.files import clear_earlier, plot_file, replace_written

VALIDATE_FILES = ("table.csv", "summary.json", "bands.yaml", "command.txt")  # and a plot set a run

# the runs' folder names -> servesim's built-in GPUs
GPUS = {"RTX4090": "rtx-4090", "RTXPRO6000": "rtx-pro-6000"}


def find_runs(root: str | Path) -> list[Path]:
    root = Path(root)
    if not root.is_dir():  # named as --data, the flag that gives it (r166: "serving")
        raise ConfigError("--data", f"{root} is a file, not a folder of runs (each with vllm/requests.jsonl)"
                          if root.exists() else f"no serving runs at {root}: no such folder")
    return sorted(p.parent.parent for p in root.rglob("vllm/requests.jsonl"))


def load_run(path: Path, root: Path, gpu_given: bool = False) -> tuple[RealRun, str | None]:
    """A run folder -> its requests and settings (its meta.json plus the GPU its folder names), or why it is
    not simulated. gpu_given: --set hardware.gpu names the GPU of a run that records none (r129: it was ignored,
    and the folder above the run was said to be no GPU)."""
    run = read_run(path, name=str(path.relative_to(root)))
    kw = run.meta.get("engine_kwargs")
    if not isinstance(kw, dict) or not {"max_num_seqs", "max_num_batched_tokens"} <= set(kw):
        raise ConfigError("serving", f"{path / 'vllm' / 'meta.json'} lacks engine_kwargs with max_num_seqs and "
                                     f"max_num_batched_tokens")
    # the GPU its meta.json records (read_run maps it), else the one its folder names (the public runs' layout)
    recorded = any(s.startswith("hardware.gpu=") for s in run.sets)
    gpu = GPUS.get(path.parent.name)
    if not any(s.startswith("model=") for s in run.sets):
        return run, f"no built-in model for {kw.get('model')}"
    if not (recorded or gpu or gpu_given):
        return run, (f"its meta.json records no GPU and its folder's parent ({path.parent.name}) names none of "
                     f"{', '.join(GPUS)}: give --set hardware.gpu=NAME")
    run.sets = ([] if recorded or not gpu else [f"hardware.gpu={gpu}"]) + run.sets  # profile: the default, auto
    return run, None


def plot_stems(names: list[str], root: Path) -> list[str]:
    """Each run's plot files' stem: its path under the root with dashes for slashes (the root's own name for a root
    that is the run), made unique: a/b and a-b had written one cdf-a-b.png, the second over the first."""
    stems, seen = [], set()
    for name in names:
        stem = (Path(root).resolve().name if name == "." else name.replace("/", "-")) or "run"
        unique, n = stem, 1
        while unique in seen:
            n += 1
            unique = f"{stem}-{n}"
        seen.add(unique)
        stems.append(unique)
    return stems


def load_runs(root: str | Path, sets: list[str] | None = None) -> tuple[list[RealRun], list[dict]]:
    """Every run under root that servesim can simulate, and a line for each one it cannot (sets: --set's, which
    may name the GPU)."""
    root = Path(root)
    runs, skipped = [], []
    gpu_given = any(s.split("=", 1)[0].strip() == "hardware.gpu" for s in sets or [])
    for path in find_runs(root):
        run, skip = load_run(path, root, gpu_given)
        if skip:
            skipped.append({"run": run.name, "skipped": skip})
        else:
            runs.append(run)
    if not runs:
        why = "; ".join(f"{r['run']}: {r['skipped']}" for r in skipped) or "none found"
        raise ConfigError("--data", f"no run under {root} could be simulated ({why})")
    if copy := first_copy(runs):  # r147: its error counted twice in every band
        raise ConfigError("--data", f"{copy[0].name} holds the same records as {copy[1]}: a copy of one run would "
                                    f"count twice in the error bands; give each run once")
    return runs, skipped


def _sets_profile(setting: str) -> bool:
    """A --set of the profile or of one of its fields."""
    key = setting.split("=", 1)[0].strip()
    return key == "profile" or key.startswith("profile.")


def run_table(run: RealRun, sims: dict) -> pd.DataFrame:
    """Real vs each simulation ({label: RunResult}): one row per statistic, a sim_/error_ column pair each."""
    base = None
    for label, result in sims.items():
        t = comparison_table([run.summary()], request_summary(result.requests, result.itls)).drop(columns="real_spread")
        t = t.rename(columns={"sim": label, "error": "error" + label[3:]})
        base = t if base is None else base.merge(t.drop(columns="real"), on="metric", sort=False)
    return base.assign(run=run.name)[["run"] + list(base.columns)]


def fitted_on(profile, run) -> str | None:
    """How a profile was fitted (calibrate fit) to a run, or None: its records' bytes, its requests' latencies
    however written (r135), the path the fit was given, or a copy of a fitted run scaled, cut or reordered (r154:
    x1.006 passed). An error there is in sample (r134)."""
    fitted = profile.fitted or {}
    given = fitted.get("runs") or []
    names = {Path(p).resolve() for p in given}
    mine = {Path(run.path).resolve(), Path(run.records or run.path).resolve()}
    if names & mine:
        return f"was fitted to {run.path} (its fitted.runs)"
    if run.content in (fitted.get("run_records") or []):
        return f"was fitted to {run.path}'s records (the same bytes; its fitted.runs: {', '.join(map(str, given))})"
    if run.latency_digest in (fitted.get("run_latencies") or []):  # (r168: said as fitted.runs, the path it lacked)
        return (f"was fitted to {run.path}'s requests (the same latencies, written as "
                f"{', '.join(map(str, given)) or 'another file'})")
    for path in names:
        try:
            factor = run.scaled_copy_of(read_run(path)) if path.exists() else None
        except (ConfigError, OSError):
            factor = None
        if factor is not None:
            return (f"was fitted to {path}, whose requests {run.path}'s are, their latencies within 0.2% of x "
                    f"{factor:.4g} each")
    return None


def _check_not_fitted_on(profile, run) -> None:
    """validate serving reports errors out of sample: a run a profile was fitted to is refused."""
    if (how := fitted_on(profile, run)) is not None:
        raise ConfigError("profile", f"{profile.name} {how}: its error there is in sample; validate serving reports "
                                     f"the error on runs a profile was not fitted to")


def validate_serving(root: str | Path, out: str | Path, sets: list[str] | None = None,
                     command: list[str] | None = None, leave_one_out: bool = False,
                     terms: list[str] | None = None, max_evals: int = 40) -> tuple[pd.DataFrame, list[dict]]:
    """Every run on the cost model `profile: auto` picks; with leave_one_out, also on terms fitted by simulation
    to the other runs (calibration/serving_fit.py), never to the run predicted."""
    from servesim.calibration.error_bands import error_bands, write_bands
    from servesim.calibration.serving_fit import fit_serving
    from servesim.calibration.validate import make_out_dir, write_command
    from servesim.simulator.config import collected_warnings
    from servesim.simulator.profile_select import cost_model_kind

    root = Path(root)
    out = make_out_dir(out, [root, *(p / "vllm" for p in find_runs(root))])  # not among any run's records
    runs, report = load_runs(root, sets)
    if leave_one_out and len(runs) < 2:
        raise ConfigError("--leave-one-out", f"needs at least 2 runs that can be simulated; {root} has {len(runs)}")
    tables = []
    stems = plot_stems([r.name for r in runs], root)
    for i, run in enumerate(runs):
        try:
            rs, result = simulate_run(run, None, sets)
        except ConfigError as exc:  # which run the settings do not fit (r129: named none)
            raise ConfigError(exc.field, f"{exc.message} (run {run.name})") from None
        _check_not_fitted_on(rs.profile, run)
        sims = {"sim": result}
        if rs.profile.overhead is not None:  # what the overhead terms are worth: the same run on kernel time alone
            inline = rs.profile.model_dump(mode="json") | {"overhead": None}  # the profile the run used, --set or not
            kernels = dataclasses.replace(run, sets=[s for s in run.sets if not _sets_profile(s)]
                                          + [f"profile={json.dumps(inline)}"])
            with collected_warnings():  # about this variant's profile (no overhead terms), not the user's run
                sims["sim_kernels_only"] = simulate_run(kernels, None,
                                                        [s for s in sets or [] if not _sets_profile(s)])[1]
        fit = None
        if leave_one_out:
            try:
                fit = fit_serving([r for j, r in enumerate(runs) if j != i], [run], None, sets, terms, max_evals,
                                  transfer=True)
            except ConfigError as exc:  # said of this command's input: it has no --held-out
                if exc.field != "--held-out":
                    raise
                raise ConfigError("--data", f"{exc.message} (--leave-one-out holds each run out in turn: give each "
                                            f"run once)") from None
            sims["sim_fitted"] = fit.held_out_results[0]
        t = run_table(run, sims)
        tables.append(t)
        if not i:  # as it writes its first file: none of an earlier run's left beside a rerun's cut (r155)
            clear_earlier(out, VALIDATE_FILES, plot_file)
        plots = plot_comparison(run, result.requests, None, result.steps, out, stems[i])
        report.append({"run": run.name, "settings": run.sets + list(sets or []), "plots": [p.name for p in plots],
                       "cost_model_source": rs.cost_model_source,
                       "cost_model_kind": cost_model_kind(rs.cost_model_source, rs.profile), "requests": len(run.specs),
                       "mean_abs_error": mean_abs_error(t)}
                      | ({"leave_one_out": {"fitted_on": [r.name for j, r in enumerate(runs) if j != i],
                                            "terms": fit.terms, "evaluations": fit.evaluations, "wall_s": fit.wall_s,
                                            "mean_abs_error": mean_abs_error(t, "error_fitted")}} if fit else {}))
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(out / "table.csv", index=False)
    (out / "summary.json").write_text(json.dumps({"source": str(root), "runs": report}, indent=2))
    write_bands(out / "bands.yaml", error_bands(table, report), str(root))  # each kind's known error
    write_command(out, command)
    replace_written(out, [*VALIDATE_FILES, *(name for r in report for name in r["plots"])], plot_file)
    return table, report
