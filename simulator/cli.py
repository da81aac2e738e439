"""servesim command line: every `servesim` command. Bad input: one line on stderr, exit code 2."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from pathlib import Path

from servesim.simulator.cli_args import (COUNT, FRACTION, JOBS, POSITIVE, REPLICAS, SEED, TOLERANCE,
                                       add_executor_arguments, nonempty_path, nonempty_text, number)
from servesim.simulator.cli_output import answer
from servesim.simulator.errors import ConfigError, printable
from servesim.workloads.settings import MAX_RATE, MAX_REQUESTS, MIN_RATE

SUMMARY_ROWS = [
    ("completed", "requests completed", "{:,}"),
    ("failed", "requests rejected", "{:,}"),
    ("duration", "duration (s)", "{:,.2f}"),
    ("offered_rate", "offered rate (req/s)", "{:,.2f}"),
    ("achieved_rate", "achieved rate (req/s)", "{:,.2f}"),
    ("request_throughput", "request throughput (req/s)", "{:,.2f}"),
    ("output_throughput", "output throughput (tok/s)", "{:,.1f}"),
    ("total_token_throughput", "total token throughput (tok/s)", "{:,.1f}"),
    ("mean_ttft_ms", "TTFT mean (ms)", "{:,.1f}"),
    ("median_ttft_ms", "TTFT median (ms)", "{:,.1f}"),
    ("p99_ttft_ms", "TTFT p99 (ms)", "{:,.1f}"),
    ("mean_tpot_ms", "TPOT mean (ms)", "{:,.2f}"),
    ("p99_tpot_ms", "TPOT p99 (ms)", "{:,.2f}"),
    ("mean_itl_ms", "ITL mean (ms)", "{:,.2f}"),
    ("p99_itl_ms", "ITL p99 (ms)", "{:,.2f}"),
    ("max_itl_ms", "ITL max (ms)", "{:,.2f}"),  # as the p99 (r158: a max below it)
    ("mean_e2el_ms", "E2E latency mean (ms)", "{:,.1f}"),
    ("p99_e2el_ms", "E2E latency p99 (ms)", "{:,.1f}"),
    ("num_preemptions", "preemptions", "{:,}"),
    ("prefix_cache_hit_rate", "prefix cache hit rate", "{:.1%}"),
    ("spec_decode_acceptance_rate", "draft acceptance rate", "{:.1%}"),
    ("load_imbalance", "load imbalance (busiest / mean)", "{:.2f}"),
    ("mean_batch_size", "running requests, mean", "{:,.1f}"),
    ("kv_cache_usage_peak", "KV cache usage, peak", "{:.1%}"),
    ("kv_cache_usage_mean", "KV cache usage, mean", "{:.1%}"),
    ("useful_work_fraction", "static batch useful-work fraction", "{:.1%}"),
    ("request_goodput", "goodput (req/s meeting their SLOs)", "{:,.2f}"),
    ("goodput_fraction", "requests meeting their SLOs", "{:.1%}"),
]


HUGE = 1e15  # past this a figure's digits say nothing (a rate over arrivals 1e-300 s apart): printed as 2e+300


def shown(value: float, fmt: str) -> str:
    """A number in its row's format, or in three significant digits where that would print hundreds of them."""
    return f"{value:.3g}" if isinstance(value, float) and abs(value) >= HUGE else fmt.format(value)


def format_summary(summary: dict) -> str:
    lines = []
    for key, label, fmt in SUMMARY_ROWS:
        v = summary.get(key)
        if v is None or key == "prefix_cache_hit_rate" and not summary.get("prefix_cache_queries"):
            continue  # (r175: "hit rate 0.0%" with prefix caching off, of no lookup)
        lines.append(f"  {label:<36} {shown(v, fmt)}")
    return "\n".join(lines)


def _describe(rs) -> str:
    e = rs.scenario.engine
    groups = 1 + rs.kv_layout.local_groups  # vLLM reports blocks // groups as tokens
    return (f"{rs.arch.name} ({rs.arch.dtype}) on {rs.hardware.name}, profile {rs.profile.name}; "
            f"max_num_batched_tokens={rs.max_num_batched_tokens}, max_num_seqs={rs.max_num_seqs}, "
            f"block_size={e.block_size}, {rs.num_gpu_blocks - 1:,} KV blocks "
            f"({(rs.num_gpu_blocks - 1) // groups * e.block_size:,} tokens"
            f"{f' in each of {groups} layer groups' if groups > 1 else ''}); policies: "
            f"{rs.scenario.policies.batching}/{rs.scenario.policies.queue}" + (
                f", {mode} preemption (vLLM V0's: vLLM {e.vllm_defaults} recomputes)"  # r133: said nowhere
                if (mode := rs.scenario.policies.preemption_mode) != "recompute" else "") + (
                f", victim {victim} (vLLM's is its queue's)"  # r174: a victim rule given was said nowhere
                if (victim := rs.scenario.policies.preemption_victim) is not None else ""))


_DROPPED_SAID = [False]  # whether the command said its dropped settings itself (else _dispatch does, after it)


def _say_dropped(args, sets: list[str] | None = None, axes=(), searched: tuple[str, ...] = (),
                 scenario: str | None = None) -> None:
    """The user's --sets (and the scenario's keys) a later whole-section --set or axis dropped: said once the
    command has done its work, so never beside an error line."""
    from servesim.simulator.config import dropped_sets, say_once

    _DROPPED_SAID[0] = True
    if not axes and (getattr(args, "grid", None) or getattr(args, "zip", None)):
        from servesim.simulator.sweep import _values

        axes = [(*_values(g, flag), flag) for flag, given in (("--grid", args.grid), ("--zip", getattr(args, "zip", [])))
                for g in given or []]
    say_once(dropped_sets(args.set if sets is None else sets, scenario or getattr(args, "scenario", None), axes,
                          searched))


@contextlib.contextmanager
def _window_flags_named(window: list[str]):
    """An error about a setting the user gave as a flag names the flag they typed, beside the setting."""
    try:
        yield
    except ConfigError as exc:
        key = exc.field.removeprefix("simulation.")
        if key in window and exc.field.startswith("simulation."):
            raise ConfigError(f"--{key.replace('_', '-')} (simulation.{key})", exc.message) from None
        raise


def cmd_run(args, after=None) -> int:
    """`servesim run`; `after(result, out)` writes more results beside the run's (the vllm command's)."""
    from servesim.simulator.config import load, sets_give
    from servesim.simulator.engine import simulate

    window = [k for k in ("warmup_s", "cooldown_s", "warmup_requests", "cooldown_requests")
              if getattr(args, k, None) is not None]
    for k in window:  # a flag beside a --set of its setting: which? (r151: the flag won unsaid)
        if sets_give(args.set, f"simulation.{k}"):
            raise ConfigError(f"--{k.replace('_', '-')}", f"--set simulation.{k} gives it too: give one")
    with _window_flags_named(window):
        rs = load(args.scenario, args.set + [f"simulation.{k}={getattr(args, k)}" for k in window])
    from servesim.simulator.files import hold_folder, refuse_folder_over_inputs, refuse_sweep_point, refuse_writing_over
    from servesim.simulator.files import add_written, present, record_written, removed_note, written_before
    from servesim.simulator.metrics import OPTIONAL_RUN_FILES, RUN_FILES, check_window

    inputs = rs.input_files()  # checked before the run, not after: --out itself, and each file it would hold
    refuse_writing_over(args.out, "--out", inputs)
    refuse_folder_over_inputs(args.out, RUN_FILES, "--out", inputs)  # and an --out that cannot be a folder
    refuse_sweep_point(args.out, "--out")
    for name in OPTIONAL_RUN_FILES:  # written by this run, or removed as an earlier run's: never one it reads
        refuse_writing_over(Path(args.out) / name, "--out", inputs)
    source = rs.scenario.workload.source(rs.scenario.seed, rs.max_model_len)
    with _window_flags_named(window):
        check_window(rs.scenario.simulation, source.planned())
        created = not Path(args.out).exists()
        hold_folder(args.out, "--out")  # from the start, as sweep holds it (r175: a second run into the folder
        # meanwhile wrote its files, then the first replaced them, both exit 0)
        print(f"servesim: {source.describe()}; {_describe(rs)}", flush=True)  # with --json, on stderr
        try:
            result = simulate(rs, source, release_source=True)  # read afterwards for its counts only
        except BaseException:
            if created:  # a run that ends in an error leaves no folder it made
                with contextlib.suppress(OSError):
                    Path(args.out).rmdir()
            raise
    # the files a run wrote here before: its optional ones not written again are removed below (only those)
    earlier_run = written_before(Path(args.out))
    optional = OPTIONAL_RUN_FILES + _earlier_result_file(Path(args.out), earlier_run)
    gone = [n for n in optional if n in earlier_run and present(Path(args.out) / n)]  # go with the four files
    # then the warnings: none beside an error
    out = result.write(args.out, field="--out", caller_writes_optional=optional)
    extra = after(result, out) if after is not None else []
    if getattr(args, "prometheus", False):
        from servesim.simulator.vllm_metrics import write_prometheus

        extra += write_prometheus(result, out, rs.scenario.model if isinstance(rs.scenario.model, str) else rs.arch.name,
                                  rs.scenario.engine.vllm_defaults)  # the release's families and counting
    add_written(out, extra)  # listed as they are written: a cut while plotting left them unlisted, kept (r156)
    for w in result.warnings:
        print(printable(f"servesim: warning: {w}"), file=sys.stderr)
    _say_dropped(args)
    files = ["config.yaml", "summary.json", "requests.parquet", "steps.parquet", *extra]
    if args.plot:  # only when asked: importing matplotlib and drawing take longer than a small run
        from servesim.simulator.plots import latency_distributions

        latency_distributions(result, out / "latency.png")
        files.append("latency.png")
    stale = [n for n in gone if n not in files]  # an earlier run's, which this one did not write again
    record_written(out, written_before(out) | set(files))
    if stale:
        print(removed_note(out, stale), file=sys.stderr)
    if not answer(result.summary):
        print(format_summary(result.summary))
        print(f"results in {out}/ ({', '.join(files)})")
    return 0


def cmd_config(args) -> int:
    from servesim.simulator.config import load
    from servesim.simulator.files import dump_yaml

    rs = load(args.scenario, args.set)
    if (check_file := getattr(rs.scenario.workload, "check_file", None)) is not None:
        from servesim.simulator.config import say_once

        # a trace `run` could not read (r143), or not with its replay options (r151): refused here too, not replayed
        say_once(f"servesim: warning: {w}" for w in check_file(rs.scenario.seed, rs.max_model_len))
    if args.vllm:
        from servesim.simulator.vllm_command import serve_command

        line, notes = serve_command(rs.as_dict(), args.vllm_version)
        for note in notes:
            print(f"servesim: note: {note}", file=sys.stderr)
        if not answer({"command": line, "notes": notes}):
            print(line)
    elif not answer(rs.as_dict()):
        print(dump_yaml(rs.as_dict()), end="")
    if args.vllm_version is not None and not args.vllm:  # (r160: read by nothing, unsaid)
        from servesim.simulator.config import say_once

        say_once(["servesim: warning: --vllm-version has no effect without --vllm: it names the release whose "
                  "flags --vllm speaks (the scenario's own release is engine.vllm_defaults)"])
    _say_dropped(args)
    return 0


def cmd_vllm(args) -> int:
    """`servesim vllm serve MODEL [vLLM flags] [-- bench serve [flags]]`: a vLLM deployment and its benchmark client,
    simulated; the run's results, the command as read (vllm_command.json) and, with --save-result, vLLM's file."""
    from servesim.simulator.config import collected_warnings, load, override, say_once
    from servesim.simulator.files import dump_yaml
    from servesim.simulator.vllm_command import as_flag_error, read, refuse_overrides, split_command

    serve_argv, bench_argv = split_command(args.command)
    out_given, args.out = args.out is not None, args.out or "results/vllm"
    if args.config and args.quiet:  # (r166: it printed nothing, exit 0)
        raise ConfigError("--quiet", "with --config nothing is printed: --config prints the scenario YAML and runs "
                                     "nothing; leave one out")
    with collected_warnings() as said:  # said once the line is known good: a refused line is its one error line
        cmd = read(serve_argv, bench_argv, args.vllm_version)
        refuse_overrides(cmd, args.set, args.gpu is not None)
        if cmd.bench.save_result:
            from servesim.simulator.vllm_results import check_result_path

            check_result_path(cmd.bench, Path(args.out), [cmd.model])
        sets = [override(k, v) for k, v in cmd.settings.items()]
        if args.gpu is not None:
            sets.append(override("hardware.gpu", args.gpu))
        sets += args.set
        try:  # a line vLLM refuses (--max-num-active-seqs above max_num_seqs) is one line
            resolved = load(None, sets)
        except ConfigError as exc:  # a setting the pasted flags gave is said as those flags, --gpu as itself (r166)
            if exc.field == "hardware.gpu" and args.gpu is not None and not any(
                    s.split("=", 1)[0].strip() in ("hardware", "hardware.gpu") for s in args.set):
                raise ConfigError("--gpu", exc.message) from None
            raise as_flag_error(cmd, args.set, exc) from None
        cmd.check_resolved(resolved)
    say_once(said)
    try:
        if cmd.not_modelled:
            named = [k.replace("vllm bench serve ", "bench ").replace("vllm serve ", "") for k in cmd.not_modelled]
            print(f"servesim: warning: not modelled, recorded in vllm_command.json: {', '.join(named)}",
                  file=sys.stderr)  # a bench flag named as the bench's: both lines have a --port
        if args.config:
            for flag, given in (("--out", out_given), ("--plot", args.plot)):  # (r166: unsaid)
                if given:
                    say_once([f"servesim: warning: {flag} has no effect with --config: it prints the scenario YAML "
                              f"and runs nothing"])
            scenario = resolved.as_dict()
            if not answer(scenario):
                print(dump_yaml(scenario), end="")
            return 0
        return _run_vllm(args, cmd, sets, bool(bench_argv))
    except ConfigError as exc:  # a setting the pasted flags gave is said as those flags
        raise as_flag_error(cmd, args.set, exc) from None


def _earlier_result_file(out: Path, earlier: set[str]) -> tuple[str, ...]:
    """The vLLM result file an earlier `servesim vllm` run wrote in out (its vllm_command.json names it): an optional
    file of that run, as its metrics.prom is (r128: a 60-request result stayed beside a 20-request run's summary,
    listed as the new run's)."""
    if "vllm_command.json" not in earlier:
        return ()
    try:
        name = json.loads((out / "vllm_command.json").read_text(encoding="utf-8")).get("result_file")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return ()
    return (name,) if isinstance(name, str) and name in earlier and Path(name).name == name else ()


def _run_vllm(args, cmd, sets: list[str], client: bool) -> int:
    """client: a `-- bench serve` part was given, whose client prints vLLM's block."""
    from types import SimpleNamespace

    def after(result, out: Path) -> list[str]:
        from datetime import datetime

        from servesim.simulator.config import say_once
        from servesim.simulator.vllm_metrics import write_prometheus
        from servesim.simulator.vllm_results import bench_result, printed_block, write_bench_result

        written, result_file = ["vllm_command.json"], None
        date = datetime.now().strftime("%Y%m%d-%H%M%S")
        data = bench_result(result, cmd.bench, date=date, due=_due_times(sets))
        if client:  # vLLM's client prints its block as it ends: after servesim's own table
            block.append(printed_block(data, cmd.bench))
        if cmd.bench.save_result:
            path = write_bench_result(data, cmd.bench, out, date)
            result_file = str(path.name) if path.parent == out else str(path.absolute())  # --result-dir: the cwd's
            written.append(result_file)
        (out / "vllm_command.json").write_text(json.dumps(cmd.as_record() | {"argv": args.command, "set": args.set,
                                                                             "result_file": result_file},
                                                          indent=1, default=str) + "\n")
        if cmd.bench.server_counters:  # --disable-log-stats: vLLM makes no stat loggers, so no vllm: series
            written += write_prometheus(result, out, cmd.served_name, cmd.version, cmd.bench.histogram_buckets,
                                        cmd.bench.first_engine)
        else:
            say_once(["servesim: note: --disable-log-stats: vLLM exports no vllm: metrics, so metrics.prom and "
                      "prometheus.parquet are not written"])
        return written

    block: list[str] = []
    run_args = SimpleNamespace(scenario=None, set=sets, out=args.out, json=args.json, quiet=args.quiet,
                               plot=args.plot, prometheus=False)
    code = cmd_run(run_args, after)
    if block and not (args.json or args.quiet):
        print(block[0])
    return code


def _due_times(sets: list[str]) -> dict | None:
    """Each request's send time as the client planned it, before a --max-concurrency limit held it (vLLM's
    client queue); None without a limit. The workload drawn again: the same seed draws the same requests."""
    from servesim.simulator.config import load
    from servesim.workloads.source import ConcurrencyLimit

    rs = load(None, sets)
    source = rs.scenario.workload.source(rs.scenario.seed, rs.max_model_len)
    if not isinstance(source, ConcurrencyLimit):
        return None
    return {s.request_id: s.arrival_time for s in source.inner.initial()}


def cmd_capacity(args) -> int:
    from servesim.simulator.capacity_plan import ARGUMENTS, plan

    given = {name: getattr(args, name) for name in ARGUMENTS}
    try:
        p = plan(args.model, args.gpu, quantization=args.quantization, kv_cache_dtype=args.kv_cache_dtype,
                 disable_hybrid_kv_cache_manager=args.disable_hybrid_kv_cache_manager, vllm_version=args.vllm_version,
                 enforce_eager=args.enforce_eager, **given)
    except ConfigError as exc:  # the API's argument names, said as this command's flags
        if exc.field not in ARGUMENTS:
            raise
        message = exc.message
        for name, (flag, _) in ARGUMENTS.items():
            message = re.sub(rf"\b{name}\b", flag, message)
        raise ConfigError(ARGUMENTS[exc.field][0], message) from None
    for line in p.warnings:  # each time the command runs (say_once says a line once a process)
        print(printable(f"servesim: warning: {line}"), file=sys.stderr)
    if not answer(p.as_dict()):
        print("\n".join(p.lines()))
    return 0


def _scenario_specs(path: str, sets: list[str], writing: bool = False):
    """A scenario's up-front requests, and the files they came from. writing: they go to a file, where each
    request's priority is recorded, so the run's word that priorities have no effect (an fcfs queue) is not said,
    and the max_tokens each sends (its output length under workload.request_max_tokens), which the file keeps."""
    from servesim.simulator.config import collected_warnings, load, say_once
    from servesim.simulator.inert_settings import PRIORITIES_UNREAD

    with collected_warnings() as said:
        rs = load(path, sets)
    say_once(w for w in said if not (writing and PRIORITIES_UNREAD in w))
    src = rs.scenario.workload.source(rs.scenario.seed, rs.max_model_len)
    from servesim.workloads.source import ConcurrencyLimit, StaticSource

    if isinstance(src, ConcurrencyLimit):  # the requests as due: when each is sent depends on the run
        say_once(["servesim: warning: workload.max_concurrency: the times are when each request is due; a run "
                  "sends one only when fewer than that many are in flight"])
        src = src.inner
    specs = src.initial()

    if not isinstance(src, StaticSource):
        raise ConfigError("workload", f"{src.describe()}: requests depend on the simulation (closed loop or "
                                      f"sessions), so only their first requests exist before a run")
    # what a run says of them (r151: a trace read in ms, prompts cut, the count ending first: said by `run` alone)
    say_once(f"servesim: warning: {w}" for w in src.warnings)
    from dataclasses import replace

    w = rs.scenario.workload
    if not writing:  # described as a run serves them: what the API server answers 400 never runs (r178: a 0.19
        from servesim.simulator.engine import max_tokens_sent  # refusal was described cut to fit)
        from servesim.simulator.front_end import bad_request

        sent = max_tokens_sent(w, rs.scenario.engine)
        refused = [why for s in specs if (why := bad_request(s, rs.max_model_len, **sent))]
        if refused:
            from collections import Counter

            whys = ", ".join(f"{n:,} {why}" for why, n in Counter(refused).most_common())
            say_once([f"servesim: warning: a run's API server refuses {len(refused):,} of the {len(specs):,} "
                      f"requests (400: {whys}): described without them"])
            specs = [s for s in specs if not bad_request(s, rs.max_model_len, **sent)]
            if not specs:
                raise ConfigError("workload", "a run's API server refuses every request: nothing to describe")
    sends = getattr(w, "request_max_tokens", False)
    if getattr(w, "min_tokens", None):  # the answers as generated: vLLM holds the stop back until min_tokens
        specs = [replace(s, output_tokens=max(s.output_tokens, w.min_tokens))
                 if s.max_tokens is None and not sends else s for s in specs]
        if writing and sends:  # each sends max_tokens; the file has no min_tokens to send beside it
            say_once([f"servesim: warning: workload.min_tokens ({w.min_tokens}) is not in the file (a request "
                      f"record has no such field): give it again where the file is replayed"])
    if writing and sends:
        specs = [s if s.max_tokens is not None else replace(s, max_tokens=s.output_tokens) for s in specs]
    room = rs.max_model_len
    if not writing and room:  # described as generated: an answer ends at max_model_len (r152: 1,237 after 499)
        specs = [replace(s, output_tokens=room - s.prompt_tokens) if s.prompt_tokens < room < s.prompt_tokens
                 + s.output_tokens else s for s in specs]
    return specs, rs.input_files(), src.skipped  # the requests, the files they came from, the rows left out


def cmd_workload_describe(args) -> int:
    from servesim.workloads.traces import check_format, describe_file, describe_trace

    if args.file.lower().endswith((".yaml", ".yml")):  # r137: S.YAML was read as a trace
        if args.format is not None:
            raise ConfigError("--format", "applies to a trace file; a scenario's workload names its own format")
        specs, _, skipped = _scenario_specs(args.file, args.set)
        d = describe_trace(specs, skipped=skipped)  # a trace's skipped rows, as describing the file says (r159)
    else:
        if args.set:
            raise ConfigError("--set", "settings apply to a scenario YAML; a trace file is described as it is")
        if args.format is not None:  # checked here, before the file: building the parser stays pandas-free
            check_format(args.format, "--format")
        d = describe_file(args.file, args.format)
    _say_dropped(args, scenario=args.file if args.set else None)
    if answer(d):
        return 0
    for key, value in d.items():
        if isinstance(value, dict):
            print(f"  {key:<22} " + ", ".join(f"{k} {v:,.0f}" if isinstance(v, (int, float)) else f"{k} {v}"
                                            for k, v in value.items()))
        elif isinstance(value, float):
            print(f"  {key:<22} {shown(value, '{:,.3f}')}")
        else:
            print(f"  {key:<22} {value if value is not None else '-'}")
    return 0


def cmd_workload_write(args) -> int:
    from servesim.simulator.files import named_for, output_file
    from servesim.workloads.traces import write_jsonl

    named_for(args.out, "--out", "a workload is written as servesim's JSON lines", (".jsonl", ".json"), only=False)
    specs, inputs, _ = _scenario_specs(args.scenario, args.set, writing=True)
    write_jsonl(specs, output_file(args.out, "--out", inputs))
    _say_dropped(args)
    if not answer({"requests": len(specs), "out": args.out}):
        print(f"{len(specs):,} requests written to {args.out}")
    return 0


def cmd_sweep(args) -> int:
    from servesim.simulator.sweep import expand, first_seed, sweep, table_warnings

    points = expand(args.grid, args.zip, args.seeds, first_seed(args.scenario, args.set, args.base_seed),
                    fixed=args.set)
    table = sweep(args.scenario, args.set, points, args.out, args.jobs, args.executor, args.ray_address,
                  progress=not (args.no_progress or args.quiet or args.json), out_field="--out")
    _say_dropped(args)
    failed = int(table["error"].notna().sum()) if "error" in table else 0
    for line in table_warnings(table, args.out, failed_said=True):  # (the failed ones: an error line below)
        print(line, file=sys.stderr)
    if not answer(table):
        print(f"{len(table)} runs ({failed} failed): {args.out}/sweep.parquet, {args.out}/sweep.csv, runs in "
              f"{args.out}/runs/")
    if failed:  # the table says which and why; the exit code must too
        print(f"servesim: error: {failed} of {len(table)} sweep runs failed (column `error` of {args.out}/sweep.csv)",
              file=sys.stderr)
        return 1
    return 0


def _search_each_point(args, kind: str, **options) -> int:
    """One search per grid point: print and save the table (its answer, bracket and SLO metrics per point)."""
    from servesim.simulator.search import ANSWERS, search_grid, unconfirmed

    answer, _, filename, _ = ANSWERS[kind]
    if args.out:  # before the search's minutes: its table must not replace a file any of its points reads
        from servesim.simulator.files import add_written, hold_folder, refuse_folder_over_inputs
        from servesim.simulator.search import grid_inputs

        refuse_folder_over_inputs(args.out, [filename], "--out", grid_inputs(kind, args.scenario, args.set, args.grid))
    table = search_grid(kind, args.scenario, args.set, args.slo, args.grid, **options)
    if args.out:
        out = Path(args.out)  # checked before the search: a folder, or one to make
        out.mkdir(parents=True, exist_ok=True)
        hold_folder(out, "--out")
        table.to_csv(out / filename, index=False)
        add_written(out, [filename])
    _print_table(table)
    _say_dropped(args, searched=(ANSWERS[kind][3], "workload.time_scale"))
    doubted = table[table[answer].notna() & table["reason"].notna()] if "reason" in table else table.iloc[:0]
    for line in unconfirmed(answer, list(doubted["reason"]), len(table)):  # (r151: "not stable", exit 0, no word)
        print(line, file=sys.stderr)
    unmet = int(table[answer].isna().sum())
    if unmet:  # no value met the SLOs: an answer, but not a success, so the exit code says it
        print(f"servesim: error: no {answer.replace('_', ' ')} found at {unmet} of {len(table)} point(s): "
              f"{table.loc[table[answer].isna(), 'reason'].dropna().iloc[0]}"
              f"{' (and others: column `reason`)' if unmet > 1 else ''}",
              file=sys.stderr)
        return 1
    return 0


def cmd_search_max_rate(args) -> int:
    return _search_each_point(args, "max-rate", low=args.low, high=args.high, tolerance=args.tolerance)


def cmd_search_replicas(args) -> int:
    return _search_each_point(args, "replicas", rate=args.rate, most=args.max)


RECOMMEND_COLUMNS = ["rank", "status", "gpu", "gpus", "replicas", "usd_per_million_output_tokens", "usd_per_hour",
                     "rps_per_gpu", "p99_ttft_ms", "p99_tpot_ms", "headroom", "meets_at_band_edge", "cost_model_trust",
                     "reason"]


def cmd_recommend(args) -> int:
    from servesim.simulator.recommend import axes_from, run
    from servesim.simulator.search import parse_slos

    from servesim.simulator.config import flag_settings

    sets = flag_settings(args.set, [("--model", "model", args.model)])
    axes = axes_from({"hardware.gpu": args.gpu, "engine.tensor_parallel_size": args.tp, "disaggregation": args.disagg},
                     args.grid)
    slo_specs = list(args.slo)
    if args.goodput:  # vLLM's per-request goodput: every request in one class with these targets, and a share
        from servesim.simulator.config import override
        from servesim.simulator.vllm_command import goodput_targets

        if any(spec.split("=", 1)[0].strip() == "goodput_fraction" for spec in slo_specs):
            raise ConfigError("--slo", "goodput_fraction with --goodput is --goodput-share: give that instead")
        if any(s.split("=", 1)[0].strip() == "workload.slo_classes" or s.startswith("workload.slo_classes.") or
               (s.split("=", 1)[0].strip() == "workload" and "slo_classes" in s) for s in sets):
            raise ConfigError("--goodput", "its targets are the workload's one SLO class: leave out --set "
                                           "workload.slo_classes (or give the classes and --slo goodput_fraction=...)")
        targets = goodput_targets(args.goodput, "--goodput", unique=True)
        sets.append(override("workload.slo_classes", {"goodput": targets}))
        slo_specs.append(f"goodput_fraction={0.99 if args.goodput_share is None else args.goodput_share!r}")
    elif args.goodput_share is not None:
        raise ConfigError("--goodput-share", "the share of requests meeting --goodput's targets: give --goodput")
    table, report, files = run(args.scenario, sets, axes, parse_slos(slo_specs), args.rate, args.out, args.prices,
                               args.tolerance, args.jobs, args.top,
                               progress=not (args.no_progress or args.quiet or args.json), executor=args.executor,
                               ray_address=args.ray_address)
    from servesim.simulator.recommend import NAMED_FLAGS, SET_BY_THE_SEARCH

    _say_dropped(args, sets, [(k, v, NAMED_FLAGS.get(k, "--grid")) for k, v in axes.items()], SET_BY_THE_SEARCH)
    met = int((table["status"] == "meets").sum())
    load_text, prices = report["load"], report["prices"]
    if not answer(report):
        shown = [k for k in axes if k != "hardware.gpu"]  # the other axes: which candidate each row is
        cols = [c for c in RECOMMEND_COLUMNS[:3] + shown + RECOMMEND_COLUMNS[3:] if c in table]
        print(table[cols].to_string(index=False, float_format=lambda v: f"{v:,.3g}"))
        print(f"{met} of {len(table)} candidates carry {load_text} within the SLOs; prices: "
              f"{prices['note'] or prices['table']}")
        banded = table.loc[table["status"] == "meets", "meets_at_band_edge"].dropna()
        if len(banded):  # the simulation has been faster than real servers: would the SLOs survive that?
            print(f"{int(banded.astype(bool).sum())} of {len(banded)} still meet them at their cost model's error "
                  f"band edge (the real server as much slower as the worst measured case: "
                  f"simulator/data/cost-model-bands.yaml)")
        for c in report["commands"]:
            print(f"rank {c['rank']}, {c['replicas']} {c.get('role', '')}{' ' * bool(c.get('role'))}"
                  f"replica{'s' * (c['replicas'] != 1)} of:\n  {c['command']}")
            for note in c["notes"]:
                print(f"  note: {note}")
        print(f"written to {args.out}/ ({', '.join(files)})")
    if not met:
        print(f"servesim: error: no candidate carries {load_text} within the SLOs (column `reason` of "
              f"{args.out}/recommend.csv)", file=sys.stderr)
        return 1
    return 0


def cmd_plot(args) -> int:
    from servesim.simulator.plots import plot_results

    files = plot_results(args.results, args.kind, args.out, args.x, args.by, args.title)
    if not answer({"files": files}):
        print("written: " + ", ".join(str(f) for f in files))
    return 0


def cmd_bench(args) -> int:
    from servesim.simulator.bench import run_bench

    return run_bench(args)


class _StoreOnce(argparse._StoreAction):
    """A one-value flag: given again, the repeat is noted (main says it) rather than taken unsaid (r155:
    `--gpu-memory-gib 80 --gpu-memory-gib 40` computed with 40, no word)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given", {})
        if self.dest in given:
            namespace.__dict__.setdefault("_repeated", []).append((option_string, given[self.dest], values))
        given[self.dest] = values
        super().__call__(parser, namespace, values, option_string)


def _say_repeated(args) -> None:
    """Flags, and --set keys, given twice: the last stands (as argparse and vLLM take them), said."""
    from servesim.simulator.config import say_once

    said = [f"servesim: warning: {flag} is given twice ({first} and {last}): the last stands"
            for flag, first, last in getattr(args, "_repeated", [])]
    keys = [s.split("=", 1)[0].strip() for s in getattr(args, "set", None) or [] if isinstance(s, str) and "=" in s]
    said += [f"servesim: warning: --set {k} is given {keys.count(k)} times: the last stands"
             for k in dict.fromkeys(keys) if keys.count(k) > 1]
    say_once(said)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and exit 2, like every other bad input."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.prog != "servesim":  # a subcommand's: --debug after it too (`servesim run --debug`), set only if given
            self.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    def parse_known_args(self, args=None, namespace=None):
        """A command's list of files may go on after its options (`compare REAL --tolerance 0.1 SIM`)."""
        ns, extras = super().parse_known_args(args, namespace)
        lists = [a for a in self._actions if not a.option_strings and a.nargs in ("+", "*")]
        if len(lists) == 1 and extras and not any(e.startswith("-") for e in extras):
            setattr(ns, lists[0].dest, [*(getattr(ns, lists[0].dest) or []), *extras])
            extras = []
        if extras and not any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            self.error(f"unrecognized arguments: {' '.join(extras)}")  # named by its command (r151: by servesim's)
        return ns, extras

    def error(self, message: str):
        where = self.prog.removeprefix("servesim").strip()
        line = f"servesim: error: {where + ': ' if where else ''}{message} (see {self.prog} --help)"
        self.exit(2, printable(line) + "\n")


def _add_run(sub) -> None:
    """`servesim run`."""
    r = sub.add_parser("run", help="simulate a scenario and write its results")
    r.add_argument("scenario", nargs="?", help="scenario YAML (default: the built-in default scenario)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting, e.g. --set engine.max_num_seqs=64 (repeatable)")
    r.add_argument("--out", type=nonempty_path, default="results/run", help="output directory (default: results/run)")
    r.add_argument("--json", action="store_true", help="print the summary as JSON, alone on stdout (the run's "
                                                         "description goes to stderr)")
    r.add_argument("--quiet", action="store_true", help="print nothing but errors (the results are in --out)")
    for flag, key, what in (("--warmup-s", "warmup_s", "leave out requests arriving in the first S seconds"),
                            ("--cooldown-s", "cooldown_s", "leave out requests arriving in the last S seconds"),
                            ("--warmup-requests", "warmup_requests", "leave out the first N requests to arrive"),
                            ("--cooldown-requests", "cooldown_requests", "leave out the last N requests to arrive")):
        r.add_argument(flag, dest=key, metavar="S" if key.endswith("_s") else "N",  # read as numbers, not YAML
                       type=number(float if key.endswith("_s") else int),  # (r176: 0x10 was 16, 1_0 was 10)
                       help=f"the summary's steady state: {what} (simulation.{key})")
    r.add_argument("--prometheus", action="store_true", help="also write the run under vLLM's Prometheus names: "
                                                               "prometheus.parquet (per step) and metrics.prom")
    r.add_argument("--plot", action="store_true", help="also draw latency.png (TTFT and inter-token latency "
                                                         "distributions; matplotlib costs ~0.8 s, so it is asked for)")
    r.set_defaults(func=cmd_run)


def _add_config(sub) -> None:
    """`servesim config`."""
    cfg = sub.add_parser("config", help="print a scenario with every default resolved (what `run` would simulate)")
    cfg.add_argument("scenario", nargs="?")
    cfg.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    cfg.add_argument("--vllm", action="store_true", help="print the `vllm serve` command line that deploys it")
    _add_vllm_version(cfg, scenarios=True)
    cfg.set_defaults(func=cmd_config)


def _add_capacity(sub) -> None:
    """`servesim capacity`: the flags are capacity_plan's ARGUMENTS."""
    c = sub.add_parser("capacity", help="KV-cache capacity arithmetic: how many requests fit")
    c.add_argument("--model", default="llama-3-8b", type=nonempty_text, help="built-in model name or architecture file")
    c.add_argument("--gpu", default="generic-80gb", type=nonempty_text, help="built-in GPU (default: generic-80gb)")
    from servesim.simulator.capacity_plan import ARGUMENTS as CAPACITY
    from servesim.simulator.config import KV_CACHE_DTYPES, QUANTIZED_FORMATS

    def cap(name: str, *names: str, **kw):
        c.add_argument(CAPACITY[name][0], *names, type=CAPACITY[name][1], **kw)

    cap("gpu_memory_gib", help="device memory, overrides --gpu")
    cap("gpu_memory_utilization", default=0.92, help="as a scenario's engine.gpu_memory_utilization (default 0.92 "
                                                      "under either --vllm-version, as a run's; vLLM 0.19's own "
                                                      "flag default is 0.9)")
    c.add_argument("--quantization", choices=list(QUANTIZED_FORMATS), help="as engine.quantization: the linear layers' format")
    c.add_argument("--kv-cache-dtype", default="auto", choices=["auto", *KV_CACHE_DTYPES])
    cap("weights_gib", help="weight memory per GPU (default: from the architecture)")
    cap("reserved_memory_gib", help="what vLLM's start-up profile takes per GPU besides weights and KV cache, as its "
                                    "log reports it (default: servesim's estimate, from the two flags below)")
    cap("max_num_seqs", help="as vllm serve's: sizes the sampler warm-up vLLM profiles (default: vLLM's for the GPU)")
    cap("max_num_batched_tokens", help="as vllm serve's: sizes the forward pass vLLM profiles (default: vLLM's)")
    from servesim.simulator.vllm_command import VLLM_VERSION, VLLM_VERSIONS

    c.add_argument("--vllm-version", choices=VLLM_VERSIONS, default=VLLM_VERSION,
                   help="the release whose defaults and start-up profile to take (0.19 subtracts no CUDA graph "
                        "estimate)")
    c.add_argument("--enforce-eager", action="store_true", help="as vllm serve's: no CUDA graphs, none profiled")
    cap("tensor_parallel_size", "-tp", default=1, help="GPUs sharing the weights and each token's KV heads (vLLM's name)")
    cap("block_size", help="tokens per KV block (default: vLLM's for the model and GPU, 16 but for latent "
                           "attention's backends)")
    c.add_argument("--disable-hybrid-kv-cache-manager", action=argparse.BooleanOptionalAction, default=None,
                   help="local-attention models: every layer keeps the whole context (default: vLLM's choice)")
    cap("max_model_len", help="contiguous reservation per request, as vllm serve reads it: 32768, 32k, 32K, or -1/auto "
                             "(the longest one request's KV fits the pool); default: the model's")
    cap("tokens_per_request", help="default 1800, or the shared prefix plus the private tokens")
    cap("shared_prefix_tokens")
    cap("private_tokens")
    c.set_defaults(func=cmd_capacity)


def _add_output_flags(p, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON, alone on stdout")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors (no progress, no warnings)")


def _print_table(table) -> None:
    """A command's table on stdout: as JSON records with --json, else as text."""
    if not answer(table):
        print(table.to_string(index=False, float_format=lambda v: f"{v:,.3f}"))


def _add_sweep(sub) -> None:
    """`servesim sweep`."""
    sw = sub.add_parser("sweep", help="run the product of setting grids in parallel; one tidy table out")
    sw.add_argument("scenario", nargs="?")
    sw.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...", help="an axis (repeatable)")
    sw.add_argument("--zip", action="append", default=[], metavar="KEY=V1,V2,...",
                    help="settings varied together, one axis (repeatable, same lengths)")
    sw.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="fixed for every run")
    sw.add_argument("--seeds", type=COUNT, default=1, help="runs per point, seeds base-seed .. base-seed+N-1")
    sw.add_argument("--base-seed", type=SEED, help="the first seed (default: the scenario's `seed`, with --set)")
    sw.add_argument("--jobs", type=JOBS, default=os.cpu_count() or 1, help="worker processes (at most 256)")
    add_executor_arguments(sw)
    sw.add_argument("--out", type=nonempty_path, default="results/sweep")
    sw.add_argument("--no-progress", action="store_true")
    _add_output_flags(sw, "the table's rows")
    sw.set_defaults(func=cmd_sweep)


def _add_search(sub) -> None:
    """`servesim search max-rate|replicas`."""
    se = sub.add_parser("search", help="search a setting for the best value meeting SLOs")
    ssub = se.add_subparsers(dest="search_command", required=True)
    def search_parser(name: str, help_: str, out_file: str):
        sp = ssub.add_parser(name, help=help_)
        sp.add_argument("scenario", nargs="?")
        sp.add_argument("--slo", action="append", default=[], metavar="METRIC_STAT_ms=TARGET",
                        help="e.g. ttft_p99_ms=500 (repeatable; all must hold)")
        sp.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...", help="one search per point")
        sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
        sp.add_argument("--out", type=nonempty_path, help=f"directory for {out_file}")
        _add_output_flags(sp, "the table's rows")
        return sp

    mr = search_parser("max-rate", "the highest arrival rate meeting every SLO (bisection), per grid point",
                       "max_rate.csv")
    mr.add_argument("--low", type=POSITIVE, default=0.05, help="a rate expected to meet the SLOs (req/s; default 0.05)")
    mr.add_argument("--high", type=POSITIVE, help="a rate expected to fail (default: found by doubling)")
    mr.add_argument("--tolerance", type=TOLERANCE, default=0.05,
                    help="stop when the bracket is this narrow (relative)")
    mr.set_defaults(func=cmd_search_max_rate)
    rp = search_parser("replicas", "the fewest replicas meeting every SLO at a given rate", "replicas.csv")
    rp.add_argument("--rate", type=POSITIVE, help="arrival rate, req/s (default: the scenario's)")
    rp.add_argument("--max", type=REPLICAS, default=256, help="give up beyond this many replicas")
    rp.set_defaults(func=cmd_search_replicas)


def _add_recommend(sub) -> None:
    """`servesim recommend`."""
    r = sub.add_parser("recommend", help="the cheapest deployment carrying a traffic within its SLOs: GPUs, "
                                         "parallelism and settings searched, ranked by $ per million tokens")
    r.add_argument("scenario", nargs="?", help="the traffic and the engine (default: the built-in default scenario)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--model", help="the model (as --set model=...): a built-in name, an HF id or a config.json")
    r.add_argument("--rate", type=POSITIVE, help="the traffic to carry, req/s (default: the scenario's arrival rate)")
    r.add_argument("--slo", action="append", default=[], metavar="METRIC_STAT_ms=TARGET",
                   help="e.g. ttft_p99_ms=500 (repeatable; all must hold, with no request refused)")
    r.add_argument("--goodput", nargs="+", action="extend", metavar="KEY:MS",  # repeated, added up (r130)
                   help="vLLM's goodput targets per request, e.g. ttft:500 tpot:50 (with --slo or alone; repeatable)")
    r.add_argument("--goodput-share", type=FRACTION, help="the share of requests that must meet --goodput's "
                                                            "targets (default 0.99)")
    r.add_argument("--gpu", metavar="G1,G2,...", help="GPUs to try (hardware.gpu names; default: the scenario's)")
    r.add_argument("--tp", metavar="N1,N2,...", help="tensor parallel sizes to try (default: the scenario's)")
    r.add_argument("--disagg", metavar="P:D,...", help="prefill/decode disaggregation to try: prefill:decode "
                                                       "replicas of a unit (1:1,1:2), or none (default: the "
                                                       "scenario's)")
    r.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="another axis of the space, e.g. engine.max_num_batched_tokens=2048,8192 (repeatable)")
    r.add_argument("--prices", help="price table YAML (default: simulator/data/gpu-prices.yaml, list prices of a date)")
    r.add_argument("--tolerance", type=TOLERANCE, default=0.1, help="each capacity search's bracket (relative)")
    r.add_argument("--jobs", type=JOBS, default=1, help="candidates searched in parallel (worker processes)")
    add_executor_arguments(r)
    r.add_argument("--top", type=number(int, ge=1, le=100), default=3, help="vllm serve lines for the best N")
    r.add_argument("--out", type=nonempty_path, default="results/recommend")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=cmd_recommend)


def _add_plot(sub) -> None:
    """`servesim plot`."""
    pl = sub.add_parser("plot", help="plots of a sweep, a search or one run (PNG and SVG)")
    pl.add_argument("results", help="a sweep or search output directory, or a run's output directory (timeline)")
    from servesim.simulator.plots import PLOT_KINDS

    pl.add_argument("--kind", required=True, choices=PLOT_KINDS)
    pl.add_argument("--x", help="the load axis (sweep column; default workload.arrival.rate): latency-vs-rate "
                                "and goodput")
    pl.add_argument("--by", default=None, help="one line per value of this sweep column")
    pl.add_argument("--title")
    pl.add_argument("--out", type=nonempty_path, help="output path (a .png or .svg ending is dropped: both are "
                                                       "written; another image ending is refused), or a folder to "
                                                       "put it in (default: beside the results)")
    pl.set_defaults(func=cmd_plot)


def _add_workload(sub) -> None:
    """`servesim workload describe|write`."""
    w = sub.add_parser("workload", help="inspect a trace or a scenario's workload, or save it as JSONL")
    wsub = w.add_subparsers(dest="workload_command", required=True)
    wd = wsub.add_parser("describe", help="rows, duration, rate, length percentiles, prefix reuse")
    wd.add_argument("file", help="a trace file (format inferred) or a scenario YAML")
    wd.add_argument("--format", help="trace format, when it cannot be inferred (docs: Workloads)")
    wd.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="with a scenario YAML")
    wd.set_defaults(func=cmd_workload_describe)
    ww = wsub.add_parser("write", help="save a scenario's generated requests as JSONL (the readers take it back)")
    ww.add_argument("scenario", nargs="?", help="scenario YAML (default: the built-in default)")
    ww.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ww.add_argument("--out", type=nonempty_path, required=True)
    ww.set_defaults(func=cmd_workload_write)


def _add_calibration(sub) -> None:
    """`servesim calibrate|validate|compare`, from calibration/cli.py."""
    from servesim.calibration.cli import add_parser as add_calibrate
    from servesim.calibration.cli import add_compare_parser, add_validate_parser

    add_calibrate(sub)
    add_validate_parser(sub)
    add_compare_parser(sub)


def _add_bench(sub) -> None:
    """`servesim bench`."""
    b = sub.add_parser("bench", help="simulator speed: simulated requests and seconds per wall second")
    b.add_argument("--requests", type=number(int, ge=1, le=MAX_REQUESTS), help="requests to simulate (default: 10,000)")
    b.add_argument("--workload", choices=("sharegpt", "azure-conv"), default="sharegpt",
                   help="sharegpt: ShareGPT-like lengths at 10 req/s (near saturation); azure-conv: the Azure 2023 "
                        "conversation trace's lengths at 80%% of the capacity measured for them")
    b.add_argument("--trace", type=nonempty_path, help="the Azure conversation trace for --workload azure-conv "
                                                      "(default: ../shared/data/traces/azure2023/AzureLLMInferenceTrace_conv.csv)")
    b.add_argument("--rate", type=number(float, ge=MIN_RATE, le=MAX_RATE),  # said as the flag (r129)
                   help="arrival rate, req/s (default: 10 for sharegpt, near the default deployment's saturation; "
                        "80%% of the measured capacity for azure-conv)")
    b.add_argument("--repeats", type=number(int, ge=1, le=100), default=3, help="runs to take the median of")
    b.add_argument("--step-by-step", action="store_true", help="turn the fast paths off (decode runs, the decode cohort), to measure what they save")
    b.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting of the bench scenario")
    b.set_defaults(func=cmd_bench)


def _add_vllm_version(p, scenarios: bool = False) -> None:
    """scenarios: the command prints a scenario, which names its release (engine.vllm_defaults) by default."""
    from servesim.simulator.vllm_command import VLLM_VERSION, VLLM_VERSIONS

    p.add_argument("--vllm-version", choices=VLLM_VERSIONS, default=None if scenarios else VLLM_VERSION,
                   help="the vLLM release whose flags to speak (default: the scenario's engine.vllm_defaults)"
                   if scenarios else f"the vLLM release whose flags and result files to speak (default {VLLM_VERSION}, "
                                     f"the release whose scheduler servesim reproduces)")


def _add_vllm(sub) -> None:
    """`servesim vllm serve ...`."""
    v = sub.add_parser("vllm", help="simulate a pasted `vllm serve MODEL ...` (and `-- bench serve ...`) command line",
                       description="servesim vllm [options] serve MODEL [vllm serve flags] [-- bench serve "
                                   "[vllm bench serve flags]]: the flags of the vLLM release --vllm-version names; "
                                   "those servesim does not model are recorded and named in a warning")
    _add_vllm_version(v)
    v.add_argument("--gpu", type=nonempty_text,
                   help="the GPU vLLM runs on (vLLM's command does not say): a name of hardware.gpu "
                                 "(default: the scenario's, h200-sxm)")
    v.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a servesim setting beyond vLLM's flags, e.g. --set speculative.acceptance_rate=0.6")
    v.add_argument("--out", type=nonempty_path, default=None,
                   help="output directory (default: results/vllm); vLLM's result file goes here unless "
                        "--result-dir says otherwise")
    v.add_argument("--config", action="store_true", help="print the equivalent scenario YAML, run nothing")
    v.add_argument("--json", action="store_true", help="print the summary as JSON, alone on stdout")
    v.add_argument("--quiet", action="store_true", help="print nothing but errors (the results are in --out)")
    v.add_argument("--plot", action="store_true", help="also draw latency.png")
    v.add_argument("command", nargs=argparse.REMAINDER, metavar="serve MODEL ...",
                   help="`serve MODEL [flags]`, then optionally `-- bench serve [flags]`")
    v.set_defaults(func=cmd_vllm)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="servesim", description="Discrete-event simulator of LLM inference serving.")
    p.add_argument("--debug", action="store_true", help="show the traceback of an internal error (a bug)")
    sub = p.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_vllm(sub)
    _add_config(sub)
    _add_capacity(sub)
    _add_sweep(sub)
    _add_search(sub)
    _add_recommend(sub)
    _add_plot(sub)
    _add_workload(sub)
    _add_calibration(sub)
    _add_bench(sub)
    for leaf in _leaves(p):  # every command answers --json and --quiet alike (simulator/cli_output.py)
        for action in leaf._actions:  # a one-value flag given twice is said (the last stands, as argparse keeps it)
            if type(action) is argparse._StoreAction and action.option_strings:
                action.__class__ = _StoreOnce
        if "--json" not in leaf._option_string_actions:
            leaf.add_argument("--json", action="store_true", help="print the command's answer as JSON, alone on "
                                                                    "stdout (its text goes to stderr)")
        if "--quiet" not in leaf._option_string_actions:
            leaf.add_argument("--quiet", action="store_true", help="print nothing but errors")
    return p


def _leaves(parser: argparse.ArgumentParser):
    """The parsers of the commands themselves (those with no subcommands below them)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):
            yield from _leaves(child)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a usage error (one line already printed) or --help: its code, not an exception
        return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    args.argv = argv  # the exact command, for results that record how they were made
    from servesim.simulator.cli_output import STDOUT_CLOSED

    if STDOUT_CLOSED[0] and getattr(args, "json", False):  # r154: the answer went nowhere, exit 0
        print("servesim: error: --json: stdout is closed: the answer would go nowhere", file=sys.stderr)
        return 2
    from servesim.simulator.config import QUIET

    QUIET[0] = bool(getattr(args, "quiet", False))
    _say_repeated(args)
    try:
        fresh = _missing_folders(getattr(args, "out", None))
    except OSError as exc:  # a name too long for the file system, a path through a file: no command can write there
        print(printable(f"servesim: error: --out: {args.out}: {exc.strerror or exc}"), file=sys.stderr)
        return 2
    rc = 3
    from servesim.simulator.files import folders_held

    try:
        with folders_held():
            rc = _dispatch(args)
    finally:
        QUIET[0] = False  # the command's alone: a caller in the same process (the API, a test) hears warnings
        if rc != 0:  # a failed command leaves no empty results folder behind it
            _remove_if_empty(fresh)
    return rc


def _missing_folders(out) -> list[Path]:
    """--out and those of its parents that do not exist yet, outermost first."""
    from servesim.simulator.files import present

    if not out:
        return []
    missing = []
    for p in (Path(out), *Path(out).parents):
        if present(p):
            break
        missing.append(p)
    return missing[::-1]


def _interrupted(exc: KeyboardInterrupt) -> int:
    from servesim.simulator.interrupts import Terminated

    print(f"servesim: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}", file=sys.stderr)
    return 143 if isinstance(exc, Terminated) else 130


def _remove_if_empty(folders: list[Path]) -> None:
    for p in reversed(folders):
        try:
            if p.is_dir() and not p.is_symlink() and not any(p.iterdir()):
                p.rmdir()
        except OSError:
            return


def _dispatch(args) -> int:
    from servesim.simulator.cli_output import command_output

    try:
        with command_output(getattr(args, "json", False), getattr(args, "quiet", False)):
            _DROPPED_SAID[0] = False
            rc = args.func(args)
            if not _DROPPED_SAID[0] and isinstance(getattr(args, "set", None), list):  # (r158: compare, validate,
                _say_dropped(args)  # calibrate and bench dropped a section's keys unsaid)
            return rc
    except ConfigError as exc:
        print(printable(f"servesim: error: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BrokenPipeError:  # the reader of stdout left (`| head`): not an error of --out; as a tool SIGPIPE ends
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        except (OSError, ValueError):
            pass
        return 141
    except Exception as exc:  # a bug, never bad input: one line, exit 3, the traceback on request
        if args.debug:
            raise
        if isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop from"):  # pathlib's, Python < 3.13
            print(printable(f"servesim: error: {str(exc).removeprefix('Symlink loop from ')}: too many levels of "
                            f"symbolic links (a loop)"), file=sys.stderr)
            return 2
        if isinstance(exc, OSError) and exc.errno is not None:  # a path given that cannot be read or written
            from servesim.simulator.files import working_folder

            if not exc.filename and working_folder() is None:  # r154: blamed on --out
                print("servesim: error: the current directory no longer exists: a relative path cannot be "
                      "read; give absolute paths or run from a folder that exists", file=sys.stderr)
                return 2
            where = f"{exc.filename}: " if exc.filename else "--out: " if getattr(args, "out", None) else ""
            print(printable(f"servesim: error: {where}{exc.strerror or exc}"), file=sys.stderr)
            return 2
        print(printable(f"servesim: internal error: {type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}; rerun with --debug for the traceback"),
              file=sys.stderr)
        return 3
    except BaseException as exc:  # not an Exception: a library's panic a signal caused (pyo3's, r156)
        from servesim.simulator.interrupts import as_interrupt

        if isinstance(exc, (SystemExit, GeneratorExit)) or (signal := as_interrupt(exc)) is None:
            raise
        return _interrupted(signal)


if __name__ == "__main__":
    sys.exit(main())
