"""`servesim validate vllm --server`: the truth through the path users run, `vllm serve` measured by
`vllm bench serve`, and profiles from three sources predicting workloads they did not see.

The server (vLLM's CPU build in its own venv, on 127.0.0.1, stopped at the end whatever happens) runs with the
step-logging scheduler. Each load level is a servesim workload written as vLLM's timed trace (exact arrival
times, lengths and shared-prefix blocks; a closed loop is all-at-once with `--max-concurrency`) and replayed by
`vllm bench serve --save-detailed`, N repeats; each result is then simulated with its own recorded send times and
lengths (calibration/run_comparison.py) under the engine's resolved settings, once per profile:

- `harness`: the scenario's profile (the torch harness, `calibrate run --engine torch`);
- `engine` (with --engine-profile): `calibrate run --engine vllm`, the engine timed over a designed grid;
- `fitted`: fitted by simulation (calibration/serving_fit.py) to the repeats of one level (`fit_on`), so every
  other level is out of sample.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pandas as pd
import yaml

from servesim.calibration.real_runs import attach_prefixes, read_run, request_summary
from servesim.calibration.run_comparison import comparison_table, simulate_run
from servesim.calibration.vllm_validate import (DRIVER, build_model, engine_flags, engine_sets, level_specs,
                                               read_engine_info, require_python)
from servesim.simulator.errors import ConfigError

CLI = Path(__file__).with_name("vllm_cli.py")
CHUNK = 16  # tokens per timed-trace hash id (servesim's content blocks are 16 tokens)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(python: str, model_dir: Path, flags: dict, out: Path, kv_gib: float, timeout_s: float = 600):
    """`vllm serve` on 127.0.0.1 with the step-logging scheduler; yields its base URL, always stops it."""
    port = _free_port()
    cmd = [python, str(CLI), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
           "--scheduler-cls", "vllm_driver.StepLoggingScheduler", "--disable-log-stats"]
    for k, v in flags.items():
        cmd += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
    env = os.environ | {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": f"{kv_gib:g}",
                        "SERVESIM_STEP_LOG": str(out / "engine-steps.jsonl"),
                        "SERVESIM_ENGINE_INFO": str(out / "engine-info.json"), "PYTHONPATH": str(DRIVER.parent)}
    (out / "engine-steps.jsonl").unlink(missing_ok=True)
    log = open(out / "vllm-serve.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise ConfigError("vllm", f"`vllm serve` exited ({proc.returncode}) while starting; see "
                                          f"{out / 'vllm-serve.log'}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > timeout_s:
                raise ConfigError("vllm", f"`vllm serve` not ready after {timeout_s:.0f} s; see {out / 'vllm-serve.log'}")
            time.sleep(1.0)
        (out / "server-startup.json").write_text(json.dumps({"startup_s": round(time.monotonic() - t0, 1)}))
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def bench(python: str, url: str, model_dir: Path, trace: Path, n: int, concurrency: int | None, result: Path,
          seed: int) -> Path:
    """One `vllm bench serve` replay of a timed trace; its --save-detailed result."""
    cmd = [python, str(CLI), "bench", "serve", "--backend", "vllm", "--base-url", url, "--model", str(model_dir),
           "--tokenizer", str(model_dir), "--dataset-name", "timed_trace", "--dataset-path", str(trace),
           "--timed-trace-chunk-hash-size", str(CHUNK), "--num-prompts", str(n), "--ignore-eos", "--save-result",
           "--save-detailed", "--result-dir", str(result.parent), "--result-filename", result.name,
           "--disable-tqdm", "--seed", str(seed)]
    if concurrency:  # a closed loop: every request ready at once, N in flight
        cmd += ["--no-self-timed", "--request-rate", "inf", "--max-concurrency", str(concurrency)]
    # vLLM draws each hash id's tokens from hash(id): a distinct hash seed per replay, so no run hits the prefix
    # cache another run left behind
    env = os.environ | {"HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": str(seed)}
    with open(result.with_suffix(".log"), "w") as log:
        p = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    if p.returncode or not result.is_file():
        raise ConfigError("vllm", f"`vllm bench serve` failed (exit {p.returncode}); see {result.with_suffix('.log')}")
    return result


def load_levels(path: str | Path) -> tuple[dict[str, list[str]], str | None]:
    """{name: [--set ...]} and the level the `fitted` profile is fitted on."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError("--levels", f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    levels = data.get("levels") if isinstance(data, dict) else None
    if not isinstance(levels, dict) or not levels or \
            not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in levels.values()):
        raise ConfigError("--levels", f"{path} must map levels: {{NAME: [KEY=VALUE, ...]}}")
    fit_on = data.get("fit_on")
    if fit_on is not None and fit_on not in levels:
        raise ConfigError("--levels", f"fit_on {fit_on!r} is not one of the levels ({', '.join(levels)})")
    return {str(k): v for k, v in levels.items()}, fit_on


def _write_traces(scenario: str, sets: list[str], levels: dict, out: Path) -> list[tuple]:
    """Each level's requests as a timed trace for `vllm bench serve`: (name, trace, requests, concurrency)."""
    from servesim.simulator.config import load
    from servesim.workloads.traces import write_timed_trace

    plans = []
    for i, (name, extra) in enumerate(levels.items()):
        specs, concurrency = level_specs(load(scenario, sets + extra))
        sent = [dataclasses.replace(s, arrival_time=0.0) for s in specs] if concurrency else specs
        plans.append((name, write_timed_trace(sent, out / f"trace-{i}.jsonl", CHUNK), specs, concurrency))
    return plans


def _same_traces(scenario: str, sets: list[str], levels: dict, out: Path) -> list[tuple]:
    """--resimulate's plans: the traces the scenario and levels make, which must be those measured (the files
    beside the results), else refused before anything is written."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        plans = _write_traces(scenario, sets, levels, Path(tmp))
        for i, (name, trace, *_) in enumerate(plans):
            saved = out / f"trace-{i}.jsonl"
            if saved.is_file() and saved.read_bytes() != Path(trace).read_bytes():
                raise ConfigError("--resimulate", f"level {name}'s requests are not those measured in {saved}: "
                                                  f"give the scenario, levels and --set the measurements were made "
                                                  f"with")
    return [(name, out / f"trace-{i}.jsonl", specs, concurrency)
            for i, (name, _, specs, concurrency) in enumerate(plans)]


def _measure(python: str, rs, plans: list[tuple], results: dict, out: Path, kv_gib: float) -> None:
    """One vLLM server; a warm-up, then each level's repeats through `vllm bench serve`."""
    flags = engine_flags(rs)
    flags["enable_prefix_caching" if rs.scenario.engine.enable_prefix_caching else "no_enable_prefix_caching"] = True
    t0 = time.monotonic()
    with vllm_server(python, out / "model", flags, out, kv_gib) as url:
        warm = plans[0]
        bench(python, url, out / "model", warm[1], min(20, len(warm[2])), warm[3], out / "warmup.json", 1)
        for i, (name, trace, specs, concurrency) in enumerate(plans):
            for r, path in enumerate(results[name]):
                bench(python, url, out / "model", trace, len(specs), concurrency, path, 100 * (i + 1) + r)
    (out / "server-wall.json").write_text(json.dumps({"wall_s": round(time.monotonic() - t0, 1)}))


def _compare_levels(plans: list[tuple], runs: dict, profiles: dict, scenario: str, sets: list[str],
                    fit_on: str | None) -> tuple[pd.DataFrame, dict]:
    """Every level simulated with every profile against its real repeats: one table, and each profile's warnings."""
    rows, warnings = [], {label: set() for label in profiles}
    for name, _, _, _ in plans:
        reals = [r.summary() for r in runs[name]]
        table = None
        for label, prof in profiles.items():
            _, sim = simulate_run(runs[name][0], scenario, sets + ([f"profile={prof}"] if prof else []))
            warnings[label].update(f"{name}: {w}" for w in sim.summary.get("cost_model_warnings", []))
            t = comparison_table(reals, request_summary(sim.requests, sim.itls))
            t = t.rename(columns={"sim": f"sim_{label}", "error": f"error_{label}"})
            table = t if table is None else table.merge(t.drop(columns=["real", "real_spread"]), on="metric")
        rows.append(table.assign(level=name, out_of_sample_fitted=name != fit_on))
    table = pd.concat(rows, ignore_index=True)
    return table[["level"] + [c for c in table.columns if c != "level"]], warnings


def validate_vllm_server(scenario: str, sets: list[str], python: str, repeats: int, levels_path: str,
                         kv_gib: float, out: str | Path, engine_profile: str | None = None,
                         command: list[str] | None = None, resimulate: bool = False) -> tuple[pd.DataFrame, dict]:
    from servesim.calibration.serving_fit import fit_serving
    from servesim.calibration.validate import make_out_dir, write_command
    from servesim.simulator.config import load

    if not resimulate:  # the engine's Python and the model it serves: only to measure (r129: --resimulate, which
        require_python(python)  # reads the saved measurements alone, needed vLLM's venv)
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ConfigError("--repeats", f"must be >= 1, got {repeats}")
    levels, fit_on = load_levels(levels_path)
    rs = load(scenario, sets)
    out = make_out_dir(out, rs.input_files() + [levels_path])
    if not resimulate:
        build_model(python, rs.arch, out)
    if resimulate:  # the measurements of an earlier run of this command: simulate them again (new profiles),
        plans = _same_traces(scenario, sets, levels, out)  # never writing over the traces they replayed (r135)
    else:
        plans = _write_traces(scenario, sets, levels, out)
    results = {name: [out / f"bench-{i}-r{r}.json" for r in range(repeats)] for i, (name, *_) in enumerate(plans)}
    if resimulate:
        missing = [str(p) for ps in results.values() for p in ps if not p.is_file()]
        if missing or not (out / "engine-info.json").is_file():
            raise ConfigError("--resimulate", f"no earlier measurements in {out} ({(missing or ['engine-info.json'])[0]} "
                                              f"missing): run without --resimulate first")
    else:
        _measure(python, rs, plans, results, out, kv_gib)
    info = read_engine_info(out / "engine-info.json")
    sim_sets = sets + engine_sets(info) + ["engine.async_scheduling=false"]
    runs = {name: [attach_prefixes(read_run(p, name=f"{name} r{j}"), specs) for j, p in enumerate(results[name])]
            for name, _, specs, _ in plans}

    profiles: dict[str, str | None] = {"harness": None}
    if engine_profile:
        profiles["engine"] = engine_profile
    fit = None
    if fit_on:
        fit = fit_serving(runs[fit_on], [], scenario, sim_sets)
        from servesim.calibration.profile_io import write_profile

        write_profile(fit.profile, out / "fitted-profile.yaml")
        profiles["fitted"] = str(out / "fitted-profile.yaml")
        print(f"fitted profile written to {out / 'fitted-profile.yaml'} (fitted on level {fit_on})")

    table, warnings = _compare_levels(plans, runs, profiles, scenario, sim_sets, fit_on)
    table.to_csv(out / "table.csv", index=False)
    lat = table[table["metric"].str.contains("TTFT|TPOT|ITL|E2EL")]
    summary = {"server": json.loads((out / "server-startup.json").read_text())
               | json.loads((out / "server-wall.json").read_text()) | info,
               "levels": {n: extra for n, extra in levels.items()}, "repeats": repeats, "fit_on": fit_on,
               "profiles": {k: v or "the scenario's" for k, v in profiles.items()},
               "mean_abs_error": {k: float(lat[f"error_{k}"].abs().mean()) for k in profiles},
               "mean_abs_error_out_of_sample": {k: float(lat.loc[lat["out_of_sample_fitted"], f"error_{k}"].abs().mean())
                                                for k in profiles},
               "mean_real_spread": float(lat["real_spread"].mean()),
               "cost_model_warnings": {k: sorted(v) for k, v in warnings.items()},
               "fitted": None if fit is None else {"terms": fit.terms, "held_out": fit.held_out,
                                                   "evaluations": fit.evaluations, "wall_s": fit.wall_s}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    write_command(out, command)
    return table, summary
