"""A simulated run as `vllm bench serve --save-result [--save-detailed]` writes a real one (vLLM 0.33.0 or 0.19.0).

Every key vLLM writes, in its order, with its meanings and units (vllm/benchmarks/serve.py): the run's
settings, the totals and rates over `duration`, per-request arrays (seconds) with --save-detailed, the
1-second peaks (`max_output_tokens_per_s`, `max_concurrent_requests`: requests overlapping a second, as
vLLM counts them), and mean/median/std/pNN of the metrics asked for (milliseconds). A script written for
real results reads these unchanged. servesim's own figures stay in summary.json.

Where a simulation has no counterpart the value is what vLLM writes in the same case: `generated_texts`
are empty strings (no text is generated), `rtfx` is 0.0 (no audio); a failed request (refused by the
engine) has ttft 0.0, no ITLs, output length 0 and its HTTP reason as error. With 0.33's `vllm serve
--enable-per-request-metrics`, --save-detailed also keeps each response's server_queue_times and server_ttfts.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np

from servesim.simulator.request import FINISHED
from servesim.simulator.vllm_command import METRICS, BenchOptions

# a refused request's error, as vLLM's API server answers it (response.reason)
HTTP_REASONS = {"prompt_too_long": "Bad Request", "max_tokens_too_large": "Bad Request",
                "min_tokens_above_max_tokens": "Bad Request"}  # the others: the engine's queue limits, 503
# the per-request arrays --save-detailed keeps, by release: 0.33 adds each request's latency and its wait for a
# --max-concurrency slot (queue_times: sent less due)
DETAILED = {"0.19.0": ("input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors"),
            "0.33.0": ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
                       "generated_texts", "errors")}
# of those, the ones written without --save-detailed too (0.33 deletes only the others)
KEPT = {"0.19.0": (), "0.33.0": ("latencies", "queue_times")}


def _percentile_key(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


def _per_request(result, due: dict | None, role_chunk: bool = False) -> dict:
    """Per request, in request order: vLLM's arrays, and which requests succeeded (ok, by row).
    due: each request's send time before a --max-concurrency limit held it (None: sent when due). role_chunk:
    vLLM 0.19's chat client takes the server's opening role chunk, sent with the first token, as that token and
    the first content chunk as a gap of ~0 after it: one gap more than its content chunks (r129)."""
    cols = result.request_columns
    n = len(cols["request_id"])
    order = np.argsort(cols["request_id"], kind="stable")
    ok = np.array([s == FINISHED for s in cols["status"]], dtype=bool)
    token_times: dict[int, np.ndarray] = dict(result.tokens.per_request())
    itls = [[] for _ in range(n)]
    for row, times in token_times.items():
        if ok[row]:
            itls[row] = [0.0] * role_chunk + np.diff(times).tolist()
    reasons = cols["finish_reason"]
    return {
        "order": order, "ok": ok,
        "input_lens": [int(cols["prompt_tokens"][i]) for i in order],
        "output_lens": [int(cols["output_tokens"][i]) if ok[i] else 0 for i in order],
        "ttfts": [float(cols["ttft"][i]) if ok[i] else 0.0 for i in order],
        "itls": [itls[i] for i in order],
        "latencies": [float(cols["e2el"][i]) if ok[i] else 0.0 for i in order],
        "start_times": [float(cols["arrival_time"][i]) for i in order],
        "queue_times": [float(cols["arrival_time"][i] - due[int(cols["request_id"][i])]) if due else 0.0
                        for i in order],
        "generated_texts": ["" for _ in order],
        "errors": ["" if ok[i] else HTTP_REASONS.get(reasons[i], "Service Unavailable")
                   if reasons[i] is not None else "Unfinished" for i in order],
    }


def _tokens_per_second_peak(per: dict) -> float:
    """vLLM's max_output_tokens_per_s: the successful requests' streamed chunks in one whole second from the first
    start, at its peak, each chunk's time rebuilt as its client does, from the start, the TTFT and the gaps (r139:
    0.19's chat role chunk, one more time a request, was left out: the peak was up to 6% low)."""
    ok = per["ok"][per["order"]]
    rows = [(s, t, i) for s, t, i, good in zip(per["start_times"], per["ttfts"], per["itls"], ok) if good]
    if not rows:
        return 0.0
    t0 = min(s for s, _, _ in rows)
    times = np.concatenate([np.cumsum([s + t, *i]) for s, t, i in rows])  # summed in vLLM's order
    return float(np.bincount(np.floor(times - t0).astype(np.int64)).max())


def _rps_changes(o: BenchOptions, sends: list[float], date: str, duration: float) -> list[dict]:
    """vLLM's ramp-up log: the start rate at the start, then, as each request is sent (when it is due: before a
    --max-concurrency slot holds it), every whole requests-per-second the ramp passed since the last one, all
    stamped at that send: its clock while sending, which starts `duration` before the run's date (taken when it
    ends; r129: stamped from the date, the events lay after it)."""
    from datetime import timedelta

    r = o.ramp_up
    lo, hi, n = r["ramp_up_start_rps"], r["ramp_up_end_rps"], max(len(sends) - 1, 1)  # vLLM: the requests made
    base = datetime.strptime(date, "%Y%m%d-%H%M%S") - timedelta(seconds=duration)
    events, last = [{"rps": lo, "timestamp": base.isoformat()}], lo  # vLLM's clock starts before the first gap
    for i, t in enumerate(sorted(sends)):
        p = i / n
        rate = lo + (hi - lo) * p if r["ramp_up_strategy"] == "linear" else lo * (hi / lo) ** p
        if int(rate) > last:
            stamp = (base + timedelta(seconds=t)).isoformat()
            events += [{"rps": v, "timestamp": stamp} for v in range(last + 1, int(rate) + 1)]
            last = int(rate)
    return events


def _stats(name: str, values: list[float], percentiles: list[float], out: dict) -> None:
    v = np.asarray(values or [0.0], dtype=float)  # vLLM: np.mean(x or 0)
    out[f"mean_{name}_ms"] = float(np.mean(v) * 1000)
    out[f"median_{name}_ms"] = float(np.median(v) * 1000)
    out[f"std_{name}_ms"] = float(np.std(v) * 1000)
    for p in percentiles:
        out[f"p{_percentile_key(p)}_{name}_ms"] = float(np.percentile(v, p) * 1000)


def bench_result(result, o: BenchOptions, detailed: bool | None = None, date: str | None = None,
                 due: dict | None = None) -> dict:
    """The result dict `vllm bench serve --save-result` writes, for this run and these client options (due: as
    _per_request's)."""
    s, cols = result.summary, result.request_columns
    per = _per_request(result, due, role_chunk=o.vllm_version == "0.19.0" and o.backend == "openai-chat")
    ok = per["ok"]
    date = date or datetime.now().strftime("%Y%m%d-%H%M%S")
    out: dict = {"date": date, "endpoint_type": o.backend,
                 "backend": o.backend, "label": o.label, "model_id": o.model_id, "tokenizer_id": o.tokenizer_id,
                 "num_prompts": o.num_prompts}
    for item in o.metadata:  # KEY=VALUE, as text, after num_prompts (a later key of vLLM's own wins)
        key, _, value = item.partition("=")
        out[key.strip()] = value.strip()
    out["request_rate"] = o.request_rate if o.request_rate < math.inf else "inf"
    out["burstiness"] = o.burstiness
    out["max_concurrency"] = o.max_concurrency
    if o.ramp_up:
        out.update(o.ramp_up)
    # vLLM's clock starts before its first send (which waits a gap of its own): servesim's duration starts at the
    # first arrival, so the time before it is added and the rates are over the whole
    lead = float(cols["arrival_time"].min()) if len(cols["arrival_time"]) else 0.0
    scale = s["duration"] / (s["duration"] + lead)
    out["duration"] = s["duration"] + lead
    out["completed"] = s["completed"]
    out["failed"] = int((~ok).sum())
    out["total_input_tokens"] = s["total_input_tokens"]
    out["total_output_tokens"] = s["total_output_tokens"]
    out["request_throughput"] = s["request_throughput"] * scale
    out["request_goodput"] = s["request_goodput"] * scale if o.goodput else None
    out["output_throughput"] = s["output_throughput"] * scale
    out["total_token_throughput"] = s["total_token_throughput"] * scale
    if o.save_detailed if detailed is None else detailed:
        out.update({k: per[k] for k in DETAILED[o.vllm_version]})
    else:  # vLLM deletes the others' names, a --metadata key of one of them too (r129)
        server = ("server_queue_times", "server_ttfts") if o.vllm_version != "0.19.0" else ()
        for key in (*DETAILED[o.vllm_version], *server):
            if key not in KEPT[o.vllm_version]:
                out.pop(key, None)
        out.update({k: per[k] for k in KEPT[o.vllm_version]})
    out["max_output_tokens_per_s"] = _tokens_per_second_peak(per)
    out["max_concurrent_requests"] = s["max_concurrent_requests"]  # vLLM's 1-second count (metrics.py)
    out["rtfx"] = 0.0
    if o.server_metrics and ok.any() and (o.save_detailed if detailed is None else detailed):
        # the server's own timings: queued to first scheduled, first scheduled to first token (vLLM's
        # build_per_request_timing_metrics); a refused request's response has none
        first = cols["first_scheduled_time"]
        out["server_queue_times"] = [float(cols["queue_time"][i]) if ok[i] else None for i in per["order"]]
        out["server_ttfts"] = [float(cols["first_token_time"][i] - first[i]) if ok[i] else None
                               for i in per["order"]]
    if o.ramp_up:
        # stamped from the run's clock, whatever --metadata wrote as the file's date
        out["rps_change_events"] = _rps_changes(o, list(due.values()) if due else per["start_times"], date,
                                                out["duration"])
    if o.server_counters and s.get("spec_decode_num_drafts"):  # from the server's counters: a rate in percent
        out["spec_decode_acceptance_rate"] = 100 * s["spec_decode_acceptance_rate"]
        out["spec_decode_acceptance_length"] = s["spec_decode_acceptance_length"]
        out["spec_decode_num_drafts"] = s["spec_decode_num_drafts"]
        out["spec_decode_draft_tokens"] = s["spec_decode_draft_tokens"]
        out["spec_decode_accepted_tokens"] = s["spec_decode_accepted_tokens"]
        out["spec_decode_per_position_acceptance_rates"] = s["spec_decode_per_position_acceptance_rates"]
    good = np.flatnonzero(ok)
    outputs = cols["output_tokens"]
    values = {
        "ttft": [float(cols["ttft"][i]) for i in good],
        "tpot": [float((cols["e2el"][i] - cols["ttft"][i]) / (outputs[i] - 1)) for i in good if outputs[i] > 1],
        "itl": [g for gaps in per["itls"] for g in gaps],  # pooled over requests, as vLLM does (failed: none)
        "e2el": [float(cols["e2el"][i]) for i in good],
    }
    if o.max_concurrency is not None:  # 0.33: the client's queue, when a limit makes one
        queued = [float(cols["arrival_time"][i] - due[int(cols["request_id"][i])]) if due else 0.0 for i in good]
        values["client_queue_time"] = queued
        if o.request_rate < math.inf:
            values["e2el_including_client_queue"] = [e + q for e, q in zip(values["e2el"], queued)]
    for name in METRICS[o.vllm_version]:  # vLLM's fixed order, whatever the order asked
        if name in o.percentile_metrics and name in values:
            _stats(name, values[name], o.metric_percentiles, out)
    return out


def default_filename(o: BenchOptions, date: str) -> str:
    """vLLM's name: {label or backend}-{rate}qps[-concurrency{N}]-{model}-{date}.json (ramp-up: its range)."""
    base = o.model_id.split("/")[-1] if o.model_id else "model"
    rate = str(float(o.request_rate)) if o.request_rate < math.inf else "inf"
    name = o.label or o.backend
    if o.ramp_up:
        head = (f"{name}-ramp-up-{o.ramp_up['ramp_up_strategy']}-{o.ramp_up['ramp_up_start_rps']}qps-"
                f"{o.ramp_up['ramp_up_end_rps']}qps")
    else:
        head = f"{name}-{rate}qps"
    if o.max_concurrency is not None:
        head += f"-concurrency{o.max_concurrency}"
    return f"{head}-{base}-{date}.json"


# what `servesim vllm` itself writes in --out: the result file never takes one of these names there
RUN_FILES = ("config.yaml", "summary.json", "requests.parquet", "steps.parquet", "vllm_command.json",
             "prometheus.parquet", "metrics.prom", "latency.png", "latency.svg")


NAME_MAX = 255  # bytes in one file name (Linux, macOS)


def check_result_path(o: BenchOptions, out: Path, inputs=()) -> None:
    """Before the run, as vLLM would fail only after it: --result-filename and --label are names (vLLM joins them
    to --result-dir or the working folder; here a `/` or `..` would write outside --out or --result-dir), the
    file is none of the run's own files or inputs, and --result-dir is a folder that can be made."""
    from servesim.simulator.errors import ConfigError
    from servesim.simulator.files import refuse_below_a_file, refuse_link, refuse_writing_over

    # the label names the file only without --result-filename, and an empty one is none (vLLM's serve.py: `if
    # args.result_filename`, `label or args.backend`); a label heads a name, so only a separator makes it a path
    flag, name = ("--result-filename", o.result_filename) if o.result_filename else ("--label", o.label)
    if name and (name in (".", "..") and flag == "--result-filename" or "/" in name or "\\" in name or "\0" in name):
        raise ConfigError(f"vllm bench serve {flag}", f"{name!r} is not a file name: vLLM would write that path, "
                                                      f"servesim writes only in --result-dir (default: --out): give "
                                                      f"the folder there and the name here")
    longest = len((o.result_filename or default_filename(o, "20261206-120000")).encode())  # a date's length
    if name and longest > NAME_MAX:  # the file system refuses the name, after the run had it checked only then
        raise ConfigError(f"vllm bench serve {flag}", f"the result file's name would be {longest} bytes, more than "
                                                      f"the {NAME_MAX} a file name may have: give a shorter one")
    folder = Path(o.result_dir) if o.result_dir else out
    if o.result_dir:
        field = "vllm bench serve --result-dir"
        if folder.exists() and not folder.is_dir():
            raise ConfigError(field, f"{folder} is not a directory")
        refuse_below_a_file(folder, field, f"{{parent}} is not a directory")
    if not o.result_filename:
        return
    field = "vllm bench serve --result-filename"
    path = folder / o.result_filename
    from servesim.simulator.files import RUN_MANIFEST

    own = folder.resolve() == out.resolve() or (folder / RUN_MANIFEST).is_file()  # this run's, or another's folder
    if own and o.result_filename in (*RUN_FILES, RUN_MANIFEST):  # (r152: the manifest was overwritten, and
        # --result-dir into another run's folder replaced its summary.json)
        raise ConfigError(field, f"{o.result_filename} is one of a servesim run's own files in {folder}: give "
                                 f"another name")
    if path.is_dir():
        raise ConfigError(field, f"{path} is a directory: give a file name")
    refuse_link(path, field)
    refuse_writing_over(path, field, inputs)


# each metric's short name and section header in the client's printed block (benchmarks/serve.py)
PRINTED = {"ttft": ("TTFT", "Time to First Token"), "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
           "itl": ("ITL", "Inter-token Latency"), "e2el": ("E2EL", "End-to-end Latency"),
           "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
           "e2el_including_client_queue": ("E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency")}


def printed_block(data: dict, o: BenchOptions) -> str:
    """The "Serving Benchmark Result" block `vllm bench serve` prints as it ends, from its result dict, line for
    line as its client formats it, so a script reading the client's output reads servesim's (r139: servesim
    printed only its own table, whose duration starts at the first arrival, not before the first gap)."""
    def line(label: str, value, fmt: str = "{:<10.2f}") -> str:
        return ("{:<40} " + fmt).format(label, value)

    def header(text: str, c: str) -> str:
        return "{s:{c}^{n}}".format(s=text, n=50, c=c)

    out = [header(" Serving Benchmark Result ", "="), line("Successful requests:", data["completed"], "{:<10}"),
           line("Failed requests:", data["failed"], "{:<10}")]
    if o.max_concurrency is not None:
        out.append(line("Maximum request concurrency:", o.max_concurrency, "{:<10}"))
    if o.request_rate != math.inf:
        out.append(line("Request rate configured (RPS):", o.request_rate))
    out += [line("Benchmark duration (s):", data["duration"]),
            line("Total input tokens:", data["total_input_tokens"], "{:<10}"),
            line("Total generated tokens:", data["total_output_tokens"], "{:<10}"),
            line("Request throughput (req/s):", data["request_throughput"])]
    if data["request_goodput"] is not None:
        out.append(line("Request goodput (req/s):", data["request_goodput"]))
    out += [line("Output token throughput (tok/s):", data["output_throughput"]),
            line("Peak output token throughput (tok/s):", data["max_output_tokens_per_s"]),
            line("Peak concurrent requests:", data["max_concurrent_requests"]),
            line("Total token throughput (tok/s):", data["total_token_throughput"])]
    for name in METRICS[o.vllm_version]:
        if f"mean_{name}_ms" in data:
            short, title = PRINTED[name]
            out += [header(title, "-"), line(f"Mean {short} (ms):", data[f"mean_{name}_ms"]),
                    line(f"Median {short} (ms):", data[f"median_{name}_ms"])]
            out += [line(f"P{w} {short} (ms):", data[f"p{w}_{name}_ms"])
                    for w in map(_percentile_key, o.metric_percentiles)]
    if "spec_decode_num_drafts" in data:
        out += [header("Speculative Decoding", "-"),
                line("Acceptance rate (%):", data["spec_decode_acceptance_rate"]),
                line("Acceptance length:", data["spec_decode_acceptance_length"]),
                *(line(label, int(data[key]), "{:<10}") for label, key in (
                    ("Drafts:", "spec_decode_num_drafts"), ("Draft tokens:", "spec_decode_draft_tokens"),
                    ("Accepted tokens:", "spec_decode_accepted_tokens")))]
        if per_position := data["spec_decode_per_position_acceptance_rates"]:
            out += ["Per-position acceptance (%):",
                    *(line(f"  Position {i}:", rate * 100) for i, rate in enumerate(per_position))]
    return "\n".join(out + ["=" * 50])


def write_bench_result(data: dict, o: BenchOptions, default_dir: Path, date: str) -> Path:
    """The result file (bench_result's dict, made at `date`) where vLLM would put it: --result-dir (default: the
    run's --out here, where vLLM uses the working folder) / --result-filename (default vLLM's name, of that date,
    whatever --metadata wrote as the file's); --append-result adds a JSON line."""
    folder = Path(o.result_dir) if o.result_dir else default_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (o.result_filename or default_filename(o, date))
    if o.append_result and path.is_file() and path.stat().st_size:
        with path.open("a") as f:
            f.write("\n" + json.dumps(data))
    else:
        path.write_text(json.dumps(data))
    return path
