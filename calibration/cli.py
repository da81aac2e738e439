"""`servesim calibrate run|fit|check|import`: imported only when asked, so `servesim run` needs no torch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servesim.simulator.model_arch import DEFAULT_ROUTING, ROUTINGS
from servesim.simulator.cli_output import answer
from servesim.simulator.cli_args import COUNT, OPEN_FRACTION, POSITIVE, SEED, THREADS, nonempty_path, number, plain_name
from servesim.workloads.settings import MAX_BLOCK_SIZE, MAX_TOKENS
from servesim.simulator.errors import printable


def _add_run(csub) -> None:
    """`servesim calibrate run`."""
    r = csub.add_parser("run", help="time forward passes and paged attention over a grid (needs torch)")
    r.add_argument("--model", required=True, help="built-in model name or architecture file")
    r.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    r.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    r.add_argument("--out", type=nonempty_path, required=True, help="directory for measurements.parquet and run.json")
    r.add_argument("--grid", help="quick, cpu or gpu (default: cpu on the CPU, gpu on CUDA)")
    r.add_argument("--block-size", type=number(int, ge=1, le=MAX_BLOCK_SIZE),  # r129: measured, then refused by
                   help="KV block size (default: 16 for torch, 128 for vLLM's CPU engine)")  # its own fit's run.json
    r.add_argument("--warmup", type=number(int, ge=0), default=2)
    r.add_argument("--repeats", type=COUNT, default=5)
    r.add_argument("--threads", type=THREADS, help="CPU threads, up to this machine's (default: torch's default, "
                                                  "fixed for the run)")
    r.add_argument("--max-kv-gib", type=POSITIVE,
                   help="skip grid points whose KV cache exceeds this (default on CUDA: free memory less weights)")
    r.add_argument("--attention", default="gather", choices=["gather", "paged"],
                   help="decode attention: SDPA over gathered contexts, or the Triton kernel reading the pool in place "
                        "(CUDA)")
    r.add_argument("--engine", default="auto", choices=["auto", "torch", "vllm"],
                   help="vllm: time vLLM's own engine over the grid (its step log); torch: servesim's torch model; "
                        "auto (default): vllm when --vllm-python can import vLLM")
    r.add_argument("--vllm-python", default=".vllm-venv/bin/python", help="the Python with vLLM (`make vllm-env`)")
    r.add_argument("--kv-gib", type=POSITIVE, default=1.0, help="vllm: VLLM_CPU_KVCACHE_SPACE for the engine")
    r.add_argument("--fit", action="store_true", help="also fit the profile (as `calibrate fit OUT`)")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=cmd_run)


def _add_fit(csub) -> None:
    """`servesim calibrate fit`."""
    f = csub.add_parser("fit", help="fit a profile from measurements or real serving runs; reports the held-out error")
    f.add_argument("measurements", nargs="+",
                   help="a `calibrate run` directory, a parquet/CSV of step measurements, an engine step log (JSONL), "
                        "or real serving runs (lifecycle records, `vllm bench serve --save-detailed` JSON): "
                        "these are fitted by simulation")
    f.add_argument("--scenario", help="real runs: the engine settings they were served with (scenario YAML)")
    f.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="real runs: settings on top of the run's own record and the scenario")
    f.add_argument("--held-out", action="append", default=[], metavar="RUN",
                   help="real runs kept out of the fit and used for its held-out error (default: the later 30%% "
                        "of each run's requests)")
    f.add_argument("--terms", help="real runs: comma-separated terms to fit (default: memory_scale,compute_scale,"
                                   "gpu_per_layer_us; docs/calibration.md lists them)")
    f.add_argument("--max-evals", type=COUNT, help="real runs: simulations the optimiser may run (default 60)")
    f.add_argument("--out", type=nonempty_path, help="profile YAML (default: profile.yaml beside the measurement tables; for real runs "
                   "results/profiles/NAME.yaml); "
                   "beside it go the fit's per-point predictions (measurement tables: NAME.predictions.parquet) "
                   "or each held-out quantile (real runs: NAME.held-out.csv)")
    f.add_argument("--name", type=plain_name, help="profile name")
    f.add_argument("--holdout", type=OPEN_FRACTION, help="measurement tables: the share held out (default 0.2)")
    f.add_argument("--model", help="the model measured (default: from run.json; required without it)")
    f.add_argument("--dtype", help="its dtype: bf16, fp8, ... (default: from run.json)")
    f.add_argument("--kv-cache-dtype", choices=["fp32", "fp16", "bf16", "fp8"],
                   help="measurement tables: the KV cache it timed (default: from run.json, else the activations' "
                        "dtype), so the profile is refused for another")
    f.add_argument("--gpu", help="the built-in GPU it ran on (hardware.gpu), so the profile is refused on others")
    f.add_argument("--tp", type=COUNT, help="tensor-parallel degree (default 1)")
    f.add_argument("--seed", type=SEED, default=0)
    f.set_defaults(func=cmd_fit)


def _add_check(csub) -> None:
    """`servesim calibrate check`."""
    c = csub.add_parser("check", help="re-measure a sample of a profile's grid; exit 1 beyond its tolerance")
    c.add_argument("profile")
    c.add_argument("--device", default="cpu")
    c.add_argument("--points", type=COUNT, default=8)
    c.add_argument("--seed", type=SEED, default=0)
    c.add_argument("--repeats", type=COUNT, default=5)
    c.add_argument("--threads", type=THREADS)
    c.set_defaults(func=cmd_check)


def _add_compare(csub) -> None:
    """`servesim calibrate compare`."""
    m = csub.add_parser("compare", help="two linear profiles component by component (overhead, GEMM, attention)")
    m.add_argument("a", help="profile A (built-in name or YAML path)")
    m.add_argument("b", help="profile B")
    m.add_argument("--out", type=nonempty_path, help="also write the table as CSV")
    m.set_defaults(func=cmd_compare)


def _add_import(csub) -> None:
    """`servesim calibrate import`."""
    i = csub.add_parser("import", help="compose profiles from third-party kernel tables")
    i.add_argument("source", choices=["aiconfigurator"])
    i.add_argument("--data", type=nonempty_path, help="the tables' root directory (default: "
                                                      "$SERVESIM_KERNEL_TABLES, else ../shared/data/gpu/aiconfigurator "
                                                      "beside the project, as `run` finds them)")
    i.add_argument("--gpu", required=True, help="a built-in GPU with tables (h100-sxm, b200-sxm, ...) or a table "
                                                "folder under --data (h100_sxm)")
    i.add_argument("--model", required=True)
    i.add_argument("--dtype", choices=["bf16", "fp8", "nvfp4"],
                   help="linear layers (fp8: W8A8 per-tensor; nvfp4: W4A4, Blackwell tables); default: the model's")
    i.add_argument("--kv-cache-dtype", choices=["bf16", "fp8"], help="default: bf16")
    i.add_argument("--tp", type=COUNT, default=1, help="tensor-parallel degree")
    i.add_argument("--data-parallel-size", "--dp", type=COUNT, default=1,
                   help="with --enable-expert-parallel: the DP ranks whose tokens meet at each GPU's experts")
    i.add_argument("--enable-expert-parallel", action="store_true",
                   help="MoE: whole experts over TP x DP GPUs, with the all-gather dispatch and reduce-scatter combine")
    i.add_argument("--moe-routing", choices=list(ROUTINGS),
                   help="MoE: the expert load imbalance the fused-MoE timings are read at (as moe.routing)")
    i.add_argument("--out", type=nonempty_path, required=True, help="profile YAML to write")
    i.add_argument("--name", type=plain_name, help="profile name")
    i.set_defaults(func=cmd_import)


def add_parser(sub) -> None:
    cal = sub.add_parser("calibrate", help="measure a device, fit a profile, check it, or import kernel tables")
    csub = cal.add_subparsers(dest="calibrate_command", required=True)
    _add_run(csub)
    _add_fit(csub)
    _add_check(csub)
    _add_compare(csub)
    _add_import(csub)


def add_validate_parser(sub) -> None:
    v = sub.add_parser("validate", help="measure how far the simulator is from real runs")
    vsub = v.add_subparsers(dest="validate_command", required=True)
    r = vsub.add_parser("replay", help="simulation vs measured replay (real forward passes) of the same workload")
    r.add_argument("scenario", nargs="?", help="scenario YAML (its profile is the one validated)")
    r.add_argument("--profile", help="profile to validate (same as --set profile=...)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--device", default="cpu")
    r.add_argument("--threads", type=THREADS)
    r.add_argument("--attention", choices=["gather", "paged"], help="decode attention (default: the profile's)")
    r.add_argument("--loads", help="comma-separated rate=R (open loop) and concurrency=N (closed loop) levels, "
                                    "or auto: four of each, up to about 90%% of the predicted saturation "
                                    "(default: as-configured, the scenario's own load)")
    r.add_argument("--out", type=nonempty_path, default="results/fidelity/replay")
    r.set_defaults(func=cmd_validate_replay)
    vv = vsub.add_parser("vllm", help="simulation vs a real vLLM engine (CPU build, `make vllm-env`) on this machine")
    vv.add_argument("scenario")
    vv.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    vv.add_argument("--vllm-python", default=".vllm-venv/bin/python")
    vv.add_argument("--repeats", type=COUNT, default=3)
    vv.add_argument("--loads", help="as for validate replay (auto: four open-loop rates, four concurrencies)")
    vv.add_argument("--kv-gib", type=POSITIVE, default=1.0, help="VLLM_CPU_KVCACHE_SPACE for the engine")
    vv.add_argument("--server", action="store_true",
                    help="through `vllm serve` (HTTP on 127.0.0.1), measured by `vllm bench serve`; needs --levels")
    vv.add_argument("--levels", help="server mode: YAML {levels: {NAME: [KEY=VALUE, ...]}, fit_on: NAME}")
    vv.add_argument("--resimulate", action="store_true",
                    help="server mode: simulate the measurements already in --out again (no server)")
    vv.add_argument("--engine-profile", help="server mode: also simulate with this profile (e.g. from "
                                             "`calibrate run --engine vllm`)")
    vv.add_argument("--out", type=nonempty_path, default="results/fidelity/vllm")
    vv.set_defaults(func=cmd_validate_vllm)
    sv = vsub.add_parser("serving", help="simulate public real-GPU vLLM runs (../shared/data/serving) and compare")
    sv.add_argument("--data", type=nonempty_path, help="root of the runs (each with vllm/requests.jsonl; default: "
                                                       "../shared/data/serving beside the project, as run finds it)")
    sv.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="applied to every run")
    sv.add_argument("--out", type=nonempty_path, default="results/fidelity/gpu")
    sv.add_argument("--leave-one-out", action="store_true",
                    help="also fit the overhead terms by simulation on all runs but one and predict that one")
    sv.add_argument("--terms", help="terms the leave-one-out fits (default: the fit's defaults)")
    sv.set_defaults(func=cmd_validate_serving)
    lv = vsub.add_parser("layers", help="per-layer composition vs measured per-operator H100 timings")
    lv.add_argument("--data", type=nonempty_path, help="the per-layer timings' root (default: "
                                                       "../shared/data/gpu/layer-profiles beside the project)")
    lv.add_argument("--tables", type=nonempty_path, help="the kernel tables' root (default: "
                                                         "../shared/data/gpu/aiconfigurator beside the project)")
    lv.add_argument("--out", type=nonempty_path, default="results/fidelity/layers")
    lv.set_defaults(func=cmd_validate_layers)


def add_compare_parser(sub) -> None:
    c = sub.add_parser("compare", help="a real serving run against its simulation; exit 1 beyond --tolerance")
    c.add_argument("runs", nargs="+", metavar="RUN",
                   help="REAL [REAL ...] [SIM]: real run(s), lifecycle records (a folder or JSONL) or `vllm bench serve --save-detailed` "
                        "JSON; several are repeats of one workload (their spread is reported and allowed). A "
                        "servesim results folder last is the simulation to compare with; otherwise the first real "
                        "run is simulated (same arrivals, lengths and settings)")
    c.add_argument("--scenario", help="the engine settings the run was served with (scenario YAML)")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    c.add_argument("--profile", help="cost model to simulate with (same as --set profile=...)")
    c.add_argument("--tolerance", type=OPEN_FRACTION, default=0.10,
                   help="largest |relative error| a statistic may have, on top of the real repeats' spread (0.1 = 10%%)")
    c.add_argument("--trace", help="the trace the run replayed (e.g. vLLM's timed trace with hash_ids): its shared "
                                   "prefixes, which result files do not record, so prefix caching is simulated")
    c.add_argument("--hash-block-tokens", type=number(int, ge=1, le=MAX_TOKENS),
                   help="tokens per hash id in --trace (default: detected)")
    c.add_argument("--out", type=nonempty_path, default="results/compare")
    c.set_defaults(func=cmd_compare_runs)


def cmd_compare_runs(args) -> int:
    from servesim.calibration.run_comparison import compare_runs, is_results_dir

    unread = ["servesim: warning: --hash-block-tokens has no effect without --trace"] \
        if args.hash_block_tokens and not args.trace else []
    reals, sim = list(args.runs), None
    if len(reals) > 1 and is_results_dir(reals[-1]):
        sim = reals.pop()
        given = [flag for flag, value in (("--scenario", args.scenario), ("--set", args.set),
                                          ("--profile", args.profile), ("--trace", args.trace)) if value]
        # they shape a simulation, and this one is given already: not read (r160: --trace was, and refused the
        # command beside a warning that it had no effect); said once the comparison is made
        unread += [f"servesim: warning: {flag} has no effect: {sim} is the simulation compared (it ran with its own "
                   f"settings)" for flag in given]
    from servesim.simulator.config import flag_settings, say_once

    sets = flag_settings(args.set, [("--profile", "profile", args.profile)])
    table, report = compare_runs(reals, sim, args.scenario, sets, args.tolerance, args.out, command=args.argv,
                                 trace=None if sim else args.trace, hash_block_tokens=args.hash_block_tokens)
    say_once(unread)
    cols = [c for c in ("metric", "real", "real_spread", "sim", "error", "pass") if c in table]
    if answer(report | {"table": table, "out": args.out}):
        return 0 if report["passed"] else 1
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    print(f"simulated on {report['cost_model_source']}" if report["cost_model_source"] else "")
    for w in report["cost_model_warnings"]:
        print(f"warning: {w}")
    verdict = "PASS" if report["passed"] else f"FAIL ({len(report['failed_metrics'])} beyond it: " \
                                             f"{', '.join(report['failed_metrics'][:6])}{' ...' * (len(report['failed_metrics']) > 6)})"
    print(f"tolerance {args.tolerance * 100:.4g}%: {verdict}; written to {args.out}/")
    return 0 if report["passed"] else 1


# server mode's own flags (r166: without --server they were ignored, and --resimulate's seconds of simulation
# became minutes of a real engine)
SERVER_FLAGS = (("--levels", "levels"), ("--resimulate", "resimulate"), ("--engine-profile", "engine_profile"))


def _check_vllm_mode(args) -> None:
    """A flag of the other mode is refused before an engine or server starts, never ignored."""
    from servesim.simulator.errors import ConfigError

    if args.server and args.loads is not None:
        raise ConfigError("--loads", "is for the engine run without --server; server mode's loads are its "
                                     "--levels file's levels")
    for flag, dest in SERVER_FLAGS:
        if not args.server and getattr(args, dest) not in (None, False):
            raise ConfigError(flag, "is for server mode: give --server with it (without --server the engine "
                                    "runs in this process, at --loads)")


def cmd_validate_vllm(args) -> int:
    _check_vllm_mode(args)
    if args.server:
        return _validate_vllm_server(args)
    from servesim.calibration.vllm_validate import validate_vllm

    from servesim.calibration.validate import parse_loads

    loads = parse_loads(args.loads)
    table, summary = validate_vllm(args.scenario, args.set, args.vllm_python, args.repeats, loads, args.kv_gib,
                                   args.out, command=args.argv)
    if answer({"summary": summary, "table": table, "out": args.out}):
        return 0
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    e = summary["engine_profile_fit"]["held_out"]
    print(f"engine-step profile: held-out MAPE {e['mape']:.1%} over {summary['engine_profile_fit']['steps']:,} steps")
    print("mean |error| over all rows: " + ", ".join(f"{k} profile {v:.1%}" for k, v in summary["mean_abs_error"].items())
          + f"; real runs' own spread {summary['mean_real_spread']:.1%}")
    print(f"written to {args.out}/")
    return 0


def _validate_vllm_server(args) -> int:
    from servesim.calibration.vllm_server import validate_vllm_server
    from servesim.simulator.errors import ConfigError

    if not args.levels:
        raise ConfigError("--levels", "server mode needs a levels file (docs/fidelity.md shows one)")
    table, summary = validate_vllm_server(args.scenario, args.set, args.vllm_python, args.repeats, args.levels,
                                          args.kv_gib, args.out, args.engine_profile, command=args.argv,
                                          resimulate=args.resimulate)
    cols = [c for c in table.columns if c in ("level", "metric", "real", "real_spread") or c.startswith("error_")]
    if answer({"summary": summary, "table": table, "out": args.out}):
        return 0
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    print("mean |error| over latency cells: " + ", ".join(f"{k} {v:.1%}" for k, v in summary["mean_abs_error"].items())
          + f"; out of sample for the fitted profile: {summary['mean_abs_error_out_of_sample'].get('fitted', float('nan')):.1%}"
          + f"; real repeats' spread {summary['mean_real_spread']:.1%}")
    print(f"written to {args.out}/")
    return 0


def _shared(given: str | None, *parts: str) -> str:
    """A data flag's value, else ../shared/data/<parts> beside the project or the working directory, as `run` and
    `bench` find it (r160: read relative to the working directory only)."""
    from servesim.simulator.files import shared_data

    if given is not None:
        return given
    relative, found = Path("..", "shared", "data", *parts), shared_data(*parts)
    # as the working directory names it where it is that one (results record it: the same text on any machine)
    return str(relative if found is None or relative.resolve() == Path(found).resolve() else found)


def cmd_validate_serving(args) -> int:
    from servesim.calibration.serving_fidelity import validate_serving

    terms = [t.strip() for t in args.terms.split(",")] if args.terms else None
    if terms and not args.leave_one_out:
        print("servesim: warning: --terms has no effect without --leave-one-out (only that fits terms)",
              file=sys.stderr)
    table, runs = validate_serving(_shared(args.data, "serving"), args.out, args.set, command=args.argv,
                                   leave_one_out=args.leave_one_out, terms=terms)
    if answer({"runs": runs, "table": table, "out": args.out}):
        return 0
    for r in runs:
        if "skipped" in r:
            print(f"{r['run']}: skipped ({r['skipped']})")
            continue
        t = table[table["run"] == r["run"]]
        print(f"{r['run']} ({r['requests']} requests; {r['cost_model_source']})")
        if "leave_one_out" in r:
            lo = r["leave_one_out"]
            print(f"  sim_fitted: {', '.join(f'{k}={v:g}' for k, v in lo['terms'].items())}, fitted on "
                  f"{', '.join(lo['fitted_on'])} ({lo['evaluations']} simulations, {lo['wall_s']} s)")
        print(t.drop(columns="run").to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    plots = [p for r in runs for p in r.get("plots", [])]
    kinds = [f"{k}-*.png" for k in ("cdf", "timeline") if any(p.startswith(k + "-") for p in plots)]
    print(f"written to {args.out}/ (table.csv, summary.json, bands.yaml, command.txt{''.join(', ' + k for k in kinds)})")
    return 0


def cmd_validate_layers(args) -> int:
    from servesim.calibration.layer_check import check_layers, check_moe_layers, format_moe_table, format_table
    from servesim.calibration.validate import write_command

    data, tables = _shared(args.data, "gpu", "layer-profiles"), _shared(args.tables, "gpu", "aiconfigurator")
    table = check_layers(data, tables, args.out)
    moe = check_moe_layers(data, tables, args.out)
    write_command(Path(args.out), args.argv)
    if answer({"table": table, "moe_table": moe, "out": args.out}):
        return 0
    print(format_table(table))
    print()
    print(format_moe_table(moe))
    print(f"written to {args.out}/ (table.csv, per-token-count.csv, moe-table.csv, moe-per-token-count.csv, "
          f"command.txt)")
    return 0


def cmd_validate_replay(args) -> int:
    from servesim.calibration.validate import parse_loads, validate_replay

    from servesim.simulator.config import flag_settings

    sets = flag_settings(args.set, [("--profile", "profile", args.profile)])
    loads = parse_loads(args.loads)
    table, steps, tol = validate_replay(args.scenario, sets, args.device, args.threads, args.out, loads,
                                        command=args.argv, attention=args.attention)
    from servesim.calibration.profile_io import within_tolerance

    ok = within_tolerance(steps["mape"], steps["median_ratio_predicted_to_measured"], tol)
    if answer({"steps": steps, "tolerance": tol, "ok": ok, "table": table, "out": args.out}):
        return 0 if ok else 1
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    print(f"per-step: profile vs measured time over {steps['steps']:,} replayed steps: MAPE {steps['mape']:.1%}, "
          f"p90 {steps['p90_ape']:.1%}, median predicted/measured {steps['median_ratio_predicted_to_measured']:.2f} "
          f"(tolerance {tol:.1%}, and a factor {1 + tol:.2f} either way): {'OK' if ok else 'FAIL'}")
    print(f"written to {args.out}/ (table.csv, summary.json, command.txt, cdf-*.png)")
    return 0 if ok else 1


def _warn_poor_fit(mape: float, what: str) -> None:
    """A held-out error past UNRELIABLE_MAPE said where the fit is made, as each run on the profile says it (the
    harness's fits sit at 2-15%)."""
    from servesim.simulator.config import UNRELIABLE_MAPE

    if mape > UNRELIABLE_MAPE:
        print(f"servesim: warning: the held-out MAPE is {mape:.0%}: this profile predicts {what} it was not fitted "
              f"on poorly", file=sys.stderr)


def _print_fit(path, fit, extra: dict | None = None) -> None:
    h = fit.held_out
    _warn_poor_fit(h["mape"], "steps")
    if answer((extra or {}) | {"profile": path, "held_out": h, "train": fit.train, "coefficients": fit.coefficients}):
        return
    print(f"profile written to {path}")
    print(f"  held-out error over {h['points']} points: MAPE {h['mape']:.1%}, p90 {h['p90_ape']:.1%}, "
          f"max {h['max_ape']:.1%} (train MAPE {fit.train['mape']:.1%} over {fit.train['points']})")
    print("  coefficients: " + ", ".join(f"{k}={v:.4g}" for k, v in fit.coefficients.items()))


def _check_calibration_out(args) -> None:
    """--out is a folder the measurement fills (and --fit writes profile.yaml in): checked before the minutes of
    timing, named as --out, and never the --model file's folder."""
    from servesim.calibration.validate import make_out_dir

    make_out_dir(args.out, [args.model] if args.model and Path(args.model).exists() else [])


def cmd_run(args) -> int:
    from servesim.calibration.vllm_harness import run_vllm_calibration, vllm_importable

    has_vllm = args.engine != "torch" and vllm_importable(args.vllm_python)
    if args.engine == "vllm" or args.engine == "auto" and has_vllm:
        from servesim.simulator.errors import ConfigError

        if not has_vllm:
            raise ConfigError("--vllm-python", f"{args.vllm_python} cannot import vLLM: build it with `make vllm-env`")
        _check_calibration_out(args)
        out = run_vllm_calibration(args.model, args.dtype, args.out, args.vllm_python, args.grid or "cpu",
                                   block_size=args.block_size or 128, kv_gib=args.kv_gib)
        meta = json.loads((out / "run.json").read_text())
        what = f"{meta['points']} engine steps over {meta['levels']} grid levels logged"
    else:
        from servesim.calibration.harness import run_calibration

        _check_calibration_out(args)
        out = run_calibration(args.model, args.device, args.dtype, args.out, grid=args.grid,
                              block_size=args.block_size or 16, warmup=args.warmup, repeats=args.repeats,
                              threads=args.threads, progress=not args.no_progress, max_kv_gib=args.max_kv_gib,
                              attention=args.attention)
        meta = json.loads((out / "run.json").read_text())
        what = f"{meta['points']} points measured"
        meta["device"] = meta["hardware"].get("name")
    run = {"measured": what, "wall_s": meta["wall_s"], "device": meta["device"], "out": out / "measurements.parquet"}
    if args.fit:
        from servesim.calibration.profile_io import fit_directory

        print(f"{what} in {meta['wall_s']} s on {meta['device']}: {out / 'measurements.parquet'}")
        _print_fit(*fit_directory(out), extra={"run": run})
    elif not answer({"run": run}):
        print(f"{what} in {meta['wall_s']} s on {meta['device']}: {out / 'measurements.parquet'}")
    return 0


def cmd_fit(args) -> int:
    from servesim.calibration.profile_io import fit_directory
    from servesim.calibration.real_runs import PER_REQUEST, detect

    _refuse_simulations(args)
    first = args.measurements[0]
    if Path(first).suffix in (".json", ".jsonl") or Path(first).is_dir() and not (Path(first) / "run.json").exists():
        if detect(first) in PER_REQUEST:
            return _fit_serving(args)
    if len(args.measurements) > 1 or args.held_out:
        from servesim.simulator.errors import ConfigError

        raise ConfigError("measurements", "several sources and --held-out are for real serving runs; step "
                                          "measurements are fitted one table at a time")
    unread = [flag for flag, given in (("--terms", args.terms is not None), ("--max-evals", args.max_evals is not None),
                                       ("--set", args.set), ("--scenario", args.scenario)) if given]
    if unread:  # a table's fit is a least-squares fit of its own coefficients: nothing simulated (round 89)
        print(f"servesim: warning: {', '.join(unread)} ha{'s' if len(unread) == 1 else 've'} no effect on a "
              f"measurement table: only real serving runs are fitted by simulating them", file=sys.stderr)
    holdout = 0.2 if args.holdout is None else args.holdout
    path, fit = fit_directory(first, args.out, args.name, holdout, args.seed, model=args.model, dtype=args.dtype,
                              gpu=args.gpu, tp=args.tp, kv_cache_dtype=args.kv_cache_dtype)
    if said := _faster_than_its_gpu(path):
        print(said, file=sys.stderr)
    _print_fit(path, fit)
    return 0


def _faster_than_its_gpu(path) -> str | None:
    """A fit whose decode steps beat reading the weights on the GPU it names is said when it is fitted, where a unit
    is mistaken (r171: a table in seconds, fitted as milliseconds, made an H100 profile 600x too fast, said only by
    the runs on it)."""
    from servesim.simulator.config import HardwareSettings, _hardware, checkpoint_quantization, with_formats
    from servesim.simulator.cost_model import build_cost_model, load_profile
    from servesim.simulator.errors import ConfigError
    from servesim.simulator.model_arch import WEIGHT_BITS, load_model
    from servesim.simulator.profile_select import faster_than_memory

    profile = load_profile(str(path))
    if profile.gpu is None or profile.model == "any":
        return None
    unit = " (a table timed in seconds, read as milliseconds? time_ms is milliseconds)"
    try:
        arch, hw = load_model(profile.model), _hardware(HardwareSettings(gpu=profile.gpu))
        # in the formats it was timed in (r172: an fp8 fit was built as the bf16 model, and refused)
        quantization = {"fp8": "fp8", "nvfp4": "modelopt_fp4", "w4a16": "awq"}.get(profile.dtype)
        arch = with_formats(arch, quantization if checkpoint_quantization(arch) is None else None,
                            "fp8" if profile.kv_cache_dtype == "fp8" else "auto")
        if arch.dtype != profile.dtype and profile.dtype in WEIGHT_BITS:  # fp16, fp32, mxfp4 (r173: judged as bf16)
            arch = arch.model_copy(update={"dtype": profile.dtype})
    except ConfigError:  # a label the simulator cannot check it against: the runs on it check what they can
        return None
    try:
        model = build_cost_model(profile, arch, hw, profile.tensor_parallel_size, profile.gpu)
    except ConfigError as exc:  # the fit itself no run takes (a step of no time); another refusal is a run's
        return f"servesim: warning: no run takes this profile: {exc.message}{unit}" \
            if exc.field == "profile.coefficients" else None
    said = faster_than_memory(profile, model, arch, hw, profile.tensor_parallel_size, None, 1, "balanced")
    return said and said + unit


def _refuse_simulations(args) -> None:
    """A servesim results folder is no data to fit to (r166: fit said compare's advice, to give it last)."""
    from servesim.calibration.run_comparison import is_results_dir
    from servesim.simulator.errors import ConfigError

    what = ("a servesim results folder is a simulation's output, which cannot be fitted from: give real serving "
            "runs (lifecycle records, `vllm bench serve --save-detailed` JSON) or step measurements (a `calibrate "
            "run` folder, a table, an engine step log)")
    for path in filter(is_results_dir, args.measurements):
        raise ConfigError(path, what)
    for path in filter(is_results_dir, args.held_out):
        raise ConfigError("--held-out", f"{path}: {what}")


def _fit_serving(args) -> int:
    from servesim.calibration.profile_io import write_profile
    from servesim.calibration.real_runs import read_run
    from servesim.calibration.serving_fit import DEFAULT_MAX_EVALS, fit_serving

    train = [read_run(p) for p in args.measurements]
    held = [read_run(p) for p in args.held_out]
    from servesim.simulator.config import flag_settings

    sets = flag_settings(args.set, [("--model", "model", args.model), ("--gpu", "hardware.gpu", args.gpu),
                                    ("--tp", "engine.tensor_parallel_size", args.tp)])
    from servesim.simulator.errors import ConfigError

    for flag, given in (("--dtype", args.dtype), ("--kv-cache-dtype", args.kv_cache_dtype)):
        if given:
            raise ConfigError(flag, "a real run's dtypes are the model's, engine.quantization's and "
                                    "engine.kv_cache_dtype's: give them with --set (docs/calibration.md)")
    terms = [t.strip() for t in args.terms.split(",")] if args.terms is not None else None
    if terms == [""]:
        raise ConfigError("--terms", "is empty")
    if args.holdout is not None:  # the measurement tables' split; real runs hold out runs, or each run's later 30%
        print("servesim: warning: --holdout has no effect on real serving runs: "
              + ("--held-out runs are the held-out data" if held else "the fit scores each run's first 70% of "
                 "requests and reports its later 30%; give --held-out runs for another split"), file=sys.stderr)
    if args.seed:  # the tables' split is seeded; runs are split by the runs given (or each run's later 30%)
        print("servesim: warning: --seed has no effect on real serving runs: nothing in their fit is drawn",
              file=sys.stderr)
    from servesim.simulator.files import file_part, output_file, profile_file

    inputs = [f for r in train + held for f in r.files()] + [args.scenario]  # not the folders: a profile may go there
    from servesim.simulator.config import input_files, load_scenario

    try:  # and a model or profile file the settings name
        inputs += input_files(load_scenario(args.scenario, sets))
    except ConfigError:
        pass  # the fit names what is wrong with them
    if args.out:  # refused before the fit's minutes, not after
        output_file(args.out, "--out", inputs, profile=True)
        output_file(Path(args.out).with_suffix(".held-out.csv"), "--out", inputs, profile=True)
        profile_file(args.out, "--out")
    from servesim.calibration.serving_fit import DEPLOYMENT_SETTINGS

    try:
        fit = fit_serving(train, held, args.scenario, sets, terms,
                          DEFAULT_MAX_EVALS if args.max_evals is None else args.max_evals)
    except ConfigError as exc:  # a setting --gpu, --model or --tp gave is said as that flag (r166: hardware.gpu)
        flag = DEPLOYMENT_SETTINGS.get(exc.field)
        if flag is None or getattr(args, flag[2:]) is None:
            raise
        raise ConfigError(flag, exc.message) from None
    if args.name:
        fit.profile["name"] = args.name
    out = Path(args.out) if args.out else Path("results/profiles") / f"{file_part(str(fit.profile['name']))}.yaml"
    if not args.out:  # the default, named by the fit: checked now
        output_file(out, "--out", inputs, profile=True)
        output_file(out.with_suffix(".held-out.csv"), "--out", inputs, profile=True)
    write_profile(fit.profile, out)
    fit.held_out_table.to_csv(out.with_suffix(".held-out.csv"), index=False)
    h = fit.held_out
    _warn_poor_fit(h["mape"], "latency quantiles")
    if answer({"profile": out, "held_out_quantiles": out.with_suffix(".held-out.csv"), "terms": fit.terms,
               "start": fit.start, "evaluations": fit.evaluations, "wall_s": fit.wall_s, "held_out": h,
               "train_error": fit.train_error}):
        return 0
    print(f"fitted {', '.join(f'{k}={v:g}' for k, v in fit.terms.items())} in {fit.evaluations} simulations "
          f"({fit.wall_s} s); start: {', '.join(f'{k}={v:g}' for k, v in fit.start.items())}")
    print(f"held-out error on {h['what']}: mean {h['mape']:.1%}, p90 {h['p90_ape']:.1%}, max {h['max_ape']:.1%} "
          f"over {h['points']} quantiles (train {fit.train_error:.1%})")
    print(f"profile written to {out} (each held-out quantile: {out.with_suffix('.held-out.csv')})")
    return 0


def cmd_check(args) -> int:
    from servesim.calibration.check import check_profile

    table, mape, tol = check_profile(args.profile, args.device, args.points, args.seed, repeats=args.repeats,
                                     threads=args.threads)
    from servesim.calibration.check import median_ratio
    from servesim.calibration.profile_io import within_tolerance

    ratio = median_ratio(table)
    ok = within_tolerance(mape, ratio, tol)
    if not answer({"mape": mape, "median_ratio_predicted_to_measured": ratio, "tolerance": tol, "ok": ok,
                   "points": table}):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        print(f"re-measured MAPE {mape:.1%}, median predicted/measured {ratio:.2f}, against tolerance {tol:.1%} "
              f"(and a factor {1 + tol:.2f} either way): {'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


IMPORT_FLAGS = {"gpu": "--gpu", "model": "--model", "dtype": "--dtype", "tp": "--tp", "kv_cache_dtype": "--kv-cache-dtype",
                "kernel_tables": "--data"}


def cmd_import(args) -> int:
    from servesim.calibration.aiconfigurator import import_profile, table_gpus
    from servesim.simulator.errors import ConfigError

    if args.data_parallel_size > 1 and not args.enable_expert_parallel:
        raise ConfigError("--data-parallel-size", "above 1 only with --enable-expert-parallel "
                                                  "(a DP rank without it runs the TP profile as is)")
    from servesim.simulator.profile_select import kernel_tables_root

    if args.moe_routing is not None:  # given for a dense model it said nothing (r146), as --enable-expert-parallel
        from servesim.simulator.model_arch import load_model

        if not (arch := load_model(args.model)).is_moe:
            raise ConfigError("--moe-routing", f"{arch.name} is a dense model: it has no router")
    from servesim.simulator.files import output_file, profile_file

    if args.out:  # its name first: it needs no tables
        profile_file(args.out, "--out")
    data = args.data or kernel_tables_root() or "../shared/data/gpu/aiconfigurator"
    if not table_gpus(data):  # before --out is checked against it (r166: "--out lies inside the kernel tables")
        root = Path(data)
        why = ("no such folder" if not root.exists() else "a file, not a folder" if not root.is_dir() else
               "a GPU's folder: give the root that holds it" if (root / "gemm").is_dir() else
               "it holds no GPU's folder of tables (h100_sxm/gemm/, ...)")
        raise ConfigError("--data", f"no kernel tables under {data}: {why}")
    if args.out and Path(args.out).resolve().is_relative_to(Path(data).resolve()):
        raise ConfigError("--out", f"{args.out} lies inside the kernel tables {data}: a profile there would replace "
                                   f"a table, or be read as one; write it elsewhere")
    # never over the model file (or a file in the model's folder) it reads, nor through a link
    output_file(args.out, "--out", [args.model] if Path(args.model).exists() else [], profile=True)
    try:
        path, fit = import_profile(data, args.gpu, args.model, args.dtype, args.tp, args.out, args.name,
                                   kv_dtype=args.kv_cache_dtype, dp=args.data_parallel_size,
                                   expert_parallel=args.enable_expert_parallel,
                                   routing=args.moe_routing or DEFAULT_ROUTING)
    except ConfigError as exc:  # the composer's names for what this command's flags give
        flag = IMPORT_FLAGS.get(exc.field)
        if flag is None:
            raise
        raise ConfigError(flag, exc.message) from None
    _print_fit(path, fit)
    return 0


def cmd_compare(args) -> int:
    from servesim.calibration.compare import compare_profiles, format_table

    if args.out:
        from servesim.simulator.files import named_for, output_file

        named_for(args.out, "--out", "the comparison is written as CSV", (".csv",))
        output_file(args.out, "--out", [args.a, args.b])
    t = compare_profiles(args.a, args.b)
    for w in t.attrs["warnings"]:
        print(printable(f"servesim: warning: {w}"), file=sys.stderr)
    if args.out:
        t.to_csv(args.out, index=False)
    if answer({"a": t.attrs["a"], "b": t.attrs["b"], "table": t, "out": args.out}):
        return 0
    print(f"A = {t.attrs['a']}, B = {t.attrs['b']}")
    print(format_table(t))
    if args.out:
        print(f"written to {args.out}")
    return 0
