"""A run under vLLM's Prometheus metric names (vllm/v1/metrics/loggers.py of 0.19.0 and 0.33.0: the same names
and bucket edges for what is written here), for dashboards built on a real server's /metrics.

- `prometheus.parquet`: the step timeline as vLLM's gauges and counters, one row per engine step (`time` in
  simulated seconds, `engine` the replica): `vllm:num_requests_running`, `vllm:num_requests_waiting`,
  `vllm:kv_cache_usage_perc` (a fraction, as vLLM's despite the name), and the running totals
  `vllm:num_preemptions_total`, `vllm:prompt_tokens_total` (a request's prompt counted at its first token, as
  vLLM counts it when prefill ends), `vllm:generation_tokens_total` (tokens, drafts accepted included: the
  run's output tokens).
- `metrics.prom`: the text exposition a scrape at the run's end returns: those counters,
  `vllm:prompt_tokens_by_source{source}` and `vllm:prompt_tokens_cached` (0.33 also by cache tier,
  `vllm:prompt_tokens_cached_by_source`, and each request's preemptions, `vllm:request_num_preemptions`), prefix-cache
  queries and hits, the
  gauges' last values, and vLLM's histograms with its bucket edges (TTFT, inter-token latency, per-request
  TPOT, end to end, queue, prefill, decode and inference time, prompt and generation lengths, tokens per
  iteration as vLLM's IterationStats counts them), labelled `model_name` and `engine` as vLLM labels them;
  under speculative decoding the spec-decode counters; for 0.33, `vllm:admission_rejections{reason}` (requests
  refused 503 by max_num_queued_reqs / max_num_queued_tokens). Written with prometheus_client, the library
  vLLM exports with.
- Disaggregated (cluster.prefill_replicas): what happens before the first token (the prompt computed, its
  prefix-cache lookups, queue, prefill time and TTFT to the prefill engine's own token, which the proxy discards)
  counts on the prefill engine, with that token among its generated ones; the decode engine counts the
  prompt again as `external_kv_transfer`, as a vLLM decode instance counts the KV it loads, and the rest. Each
  request is observed once, split so; vLLM's instances each observe it whole (the prefill one as a 1-token
  request), which is not modelled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servesim.simulator.request import FINISHED

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0]
REQUEST_TIME_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                        240.0, 480.0, 960.0, 1920.0, 7680.0]
ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
REQUEST_NUM_PREEMPTIONS_BUCKETS = [1, 2, 3, 4, 5, 10, 20]  # 0.33 only


def buckets_1_2_5(largest: int) -> list[int]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_model_len."""
    out, exponent = [], 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > largest:
                return out
            out.append(value)
        exponent += 1


def _first_steps(runs, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows with a token, the step, in the steps table's order, of each one's first token)."""
    b = runs.bounds
    rows = np.flatnonzero(b[1:] > b[:-1])
    return rows, offsets[rows] + runs.values[b[rows]]


def _step_tokens(result, version: str = "0.33.0") -> dict[str, np.ndarray]:
    """Per step (all replicas' steps, in the steps table's order), as vLLM's IterationStats counts them:
    `generated`, tokens generated (one per request given a token, a prefill engine's discarded one too, plus the
    drafts it accepted, less those past its stop); `prompt`, the prompts of the requests whose prefill ended in it
    (vLLM counts a prompt with its first token); `computed`, the part of those prompts the step computed (less the prefix-cache hit); `cached`, that hit
    (`local`), or the prompt a disaggregated decode engine received over the KV transfer (`external`: vLLM's
    decode instance counts the prompt again, as loaded, at its own first token); `recomputed`, prompts wholly in
    the cache, whose last token is computed again."""
    steps = result.step_columns
    n = len(steps["end"][:])
    generated = steps["spec_accepted"][:].astype(np.int64)
    for _, at, _ in result.tokens._blocks():
        np.add.at(generated, at, 1)
    for step, k in result.discarded_tokens.items():
        generated[step] -= k
    cols, tok = result.request_columns, result.tokens
    prompt_len, cached = cols["prompt_tokens"].astype(np.int64), cols["cached_tokens"].astype(np.int64)
    out = {"generated": generated, **{k: np.zeros(n, dtype=np.int64) for k in ("prompt", "computed", "local",
                                                                              "external", "recomputed")}}
    split = tok.prefill_runs is not None  # disaggregated: every request's prompt is computed on a prefill engine
    rows, at = _first_steps(tok.prefill_runs, tok.prefill_offsets) if split else _first_steps(tok.runs, tok.offsets)
    if split:  # the prefill engine's token, which the proxy discards, is one it generated
        np.add.at(generated, at, 1)
    np.add.at(out["prompt"], at, prompt_len[rows])
    np.add.at(out["computed"], at, prompt_len[rows] - cached[rows])
    np.add.at(out["local"], at, cached[rows])
    np.add.at(out["recomputed"], at, (cached[rows] + 1 == prompt_len[rows]).astype(np.int64))  # a whole-prompt hit
    if split:  # and the decode engine counts it again at its first token: pulled, or in its own prefix cache
        rows, at = _first_steps(tok.runs, tok.offsets)
        pulled = cols["pulled_tokens"][rows].astype(np.int64)
        np.add.at(out["prompt"], at, prompt_len[rows])
        np.add.at(out["external"], at, pulled)
        if version == "0.19.0":  # its cached tokens are the prompt less the last, computed again (the local part
            np.add.at(out["local"], at, prompt_len[rows] - pulled - 1)  # -1 where none: 0.19's local hit adds it back)
            np.add.at(out["computed"], at, 1)
            np.add.at(out["recomputed"], at, 1)
        else:  # 0.33 counts what it had at admission: its local hit and the tokens to pull, nothing computed
            np.add.at(out["local"], at, prompt_len[rows] - pulled)
    return out


def timeline(result, tokens: dict | None = None) -> "pd.DataFrame":
    """tokens: _step_tokens(result), when the caller has it already (the token expansion is a run's largest)."""
    import pandas as pd

    steps = result.step_columns
    tokens = tokens if tokens is not None else _step_tokens(result)
    running, usage = np.array(steps["num_running"][:]), np.array(steps["kv_usage"][:], dtype=float)
    for step, (n, used) in result.step_after.items():  # vLLM's stats are taken once the step's finishers left
        running[step], usage[step] = n, used
    t = pd.DataFrame({"time": steps["end"][:], "engine": steps["replica"][:],
                      "vllm:num_requests_running": running,
                      "vllm:num_requests_waiting": steps["num_waiting"][:],
                      "vllm:kv_cache_usage_perc": usage,
                      "preempted": steps["num_preempted"][:], "prompt": tokens["prompt"],
                      "generated": tokens["generated"]})
    t = t.sort_values(["time", "engine"], kind="stable").reset_index(drop=True)
    totals = t.groupby("engine")[["preempted", "prompt", "generated"]].cumsum()
    t["vllm:num_preemptions_total"] = totals["preempted"]
    t["vllm:prompt_tokens_total"] = totals["prompt"]
    t["vllm:generation_tokens_total"] = totals["generated"]
    return t.drop(columns=["preempted", "prompt", "generated"])


def _histogram(family, labels: list[str], values: np.ndarray, edges: list[float]) -> None:
    values = values[~np.isnan(values)]
    counts = np.searchsorted(np.sort(values), edges, side="right")  # observations <= each edge, as `le` means
    family.add_metric(labels, [(_le(e), int(c)) for e, c in zip(edges, counts)] + [("+Inf", int(len(values)))],
                      float(values.sum()))


def _le(edge: float) -> str:
    """prometheus_client's own formatting of an edge (floatToGoString): 0.001, 1.0, 8192.0, 1e+06 (r129: 1e6 and
    up were written 1000000.0)."""
    from prometheus_client.utils import floatToGoString

    return floatToGoString(float(edge))


# servesim's refusal reasons (engine.Replica.admission_error) under vLLM 0.33's admission_rejections reasons
# vLLM's FinishReason labels (v1/engine/__init__.py FINISH_REASON_STRINGS, both releases), each series made at start
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
ADMISSION_REASONS = {"max_num_queued_reqs": "queue_full", "max_num_queued_tokens": "queued_tokens_full"}


# vLLM 0.33's histogram bucket families (v1/metrics/buckets.py BucketFamilyKey), which --custom-histogram-buckets
# may replace; the families of the histograms written here
BUCKET_FAMILIES = ("request_latency", "time_to_first_token", "inter_token_latency", "iteration_tokens",
                   "request_params_n", "request_num_preemptions", "request_tokens", "kv_cache_residency")


def _instances(result) -> tuple[int, bool]:
    """(DP ranks of an instance, whether there are several instances). vLLM labels an engine by its DP rank in its
    own instance (from the server's first rank under external or hybrid balancing); each of several instances
    (cluster.replicas, prefill replicas: DP 1) has its own /metrics, told apart here by the `replica` label a scrape
    of several targets adds (r176: replica x DP slots were labelled engine 0-7 at -dp 4)."""
    cluster = result.config.get("cluster") or {}
    dp = 1 if cluster.get("prefill_replicas") else (result.config.get("engine") or {}).get("data_parallel_size") or 1
    return dp, (cluster.get("replicas") or 1) + (cluster.get("prefill_replicas") or 0) > 1


def exposition(result, model_name: str, version: str = "0.33.0", line=None, per_step: dict | None = None,
               buckets: dict | None = None, first_engine: int = 0) -> str:
    """The /metrics text of the run's end, per engine (replica); line and per_step: the timeline and the step
    tokens, when the caller has them already; buckets: a family's edges in place of its defaults (0.33's
    --custom-histogram-buckets); first_engine: the DP rank of the first engine (an API server under external or
    hybrid balancing reaches ranks from its own, and vLLM labels them so)."""
    from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
    from prometheus_client.exposition import generate_latest

    cols, steps = result.request_columns, result.step_columns
    per_step = per_step if per_step is not None else _step_tokens(result, version)
    line = line if line is not None else timeline(result, per_step)
    step_engine = steps["replica"][:]
    # every engine the run had, an idle one too: vLLM registers an engine's metrics at start-up (r175: a replica
    # the router never chose was missing from the scrape)
    cluster = result.config.get("cluster") or {}
    dp, several = _instances(result)
    reached = cluster.get("dp_ranks_reached") or dp  # the ranks this API server manages (others: another node's)
    every = {i for i in range(result.summary.get("replicas", 1)) if dp == 1 or i % dp < reached}
    engines = sorted({int(e) for e in np.unique(steps["replica"][:])} | every)
    names = ["model_name", "engine"] + (["replica"] if several else [])

    def tag(e: int) -> list[str]:
        return [model_name, str(e % dp + first_engine)] + ([str(e // dp)] if several else [])

    max_model_len = int(result.config["engine"]["max_model_len"] or 1)
    # the engine observes each output as it is produced: a cut run's unfinished requests too (r145)
    itl_rows = result.tokens.itls(unfinished=True) if result.tokens is not None else result.itls
    finished = np.array([s == FINISHED for s in cols["status"]], dtype=bool)

    def family_edges(family: str, default: list) -> list:
        return (buckets or {}).get(family) or default

    def families():
        gauges = {"vllm:num_requests_running": "Number of requests in model execution batches.",
                  "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
                  "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage."}
        for name, doc in gauges.items():
            g = GaugeMetricFamily(name, doc, labels=names)
            for e in engines:  # after the last request ended all are 0 (a run cut short: its last step's)
                mine = line[line["engine"] == e]
                g.add_metric(tag(e), float(mine[name].iloc[-1]) if len(mine) and result.cut else 0.0)
            yield g
        counters = {"vllm:num_preemptions": "Cumulative number of preemption from the engine.",
                    "vllm:prompt_tokens": "Number of prefill tokens processed.",
                    "vllm:generation_tokens": "Number of generation tokens processed."}
        for name, doc in counters.items():
            c = CounterMetricFamily(name, doc, labels=names)
            for e in engines:
                mine = line[line["engine"] == e]
                c.add_metric(tag(e), float(mine[f"{name}_total"].iloc[-1]) if len(mine) else 0.0)
            yield c
        local_hit = per_step["local"] + (per_step["recomputed"] if version == "0.19.0" else 0)
        sources = {"local_compute": per_step["computed"], "local_cache_hit": local_hit,
                   "external_kv_transfer": per_step["external"]}
        c = CounterMetricFamily("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                                labels=names + ["source"])
        for e in engines:
            for source, values in sources.items():
                c.add_metric(tag(e) + [source], float(values[step_engine == e].sum()))
        yield c
        c = CounterMetricFamily("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).",
                                labels=names)
        for e in engines:
            c.add_metric(tag(e), float((per_step["local"] + per_step["external"])[step_engine == e].sum()))
        yield c
        if version == "0.19.0":  # 0.19's count of a whole-prompt hit's last token, computed again
            c = CounterMetricFamily("vllm:prompt_tokens_recomputed", "Number of cached tokens recomputed for forward "
                                    "pass.", labels=names)
            for e in engines:
                c.add_metric(tag(e), float(per_step["recomputed"][step_engine == e].sum()))
            yield c
        replica = cols["replica"]
        # the phases before the first token ran where the prompt was computed: a prefill replica when disaggregated
        prefill_engine = np.where(cols["prefill_replica"] >= 0, cols["prefill_replica"], replica)
        # a request's prefix-cache lookups: a decode engine's, where it pulled a prompt, and the rest where computed
        lookups = {c: (cols[c], np.zeros(len(replica), dtype=np.int64)) for c in ("prefix_queries", "prefix_hits")}
        if "pulled_tokens" in cols and result.config["engine"]["enable_prefix_caching"]:
            pulled, prompt = cols["pulled_tokens"], cols["prompt_tokens"]
            decode = {"prefix_queries": np.where(pulled > 0, prompt, 0),
                      "prefix_hits": np.where(pulled > 0, prompt - pulled, 0)}
            lookups = {c: (cols[c] - decode[c], decode[c]) for c in lookups}

        def looked_up(column: str, e: int) -> float:
            own, at_decode = lookups[column]
            return float(own[prefill_engine == e].sum() + at_decode[replica == e].sum())
        if version != "0.19.0":  # 0.33's hit tokens by cache tier: the device's prefix hits, a P/D decode's loads p2p
            c = CounterMetricFamily("vllm:prompt_tokens_cached_by_source", "Prefix-cache hit tokens by the cache tier "
                                    "that supplied them.", labels=names + ["source"])
            for e in engines:
                tiers = {"device": looked_up("prefix_hits", e), "host": 0,
                         "p2p": per_step["external"][step_engine == e].sum(), "disk": 0, "external_unspecified": 0}
                for source, value in tiers.items():
                    c.add_metric(tag(e) + [source], float(value))
            yield c
        for name, doc, column in (("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of "
                                   "queried tokens.", "prefix_queries"),
                                  ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached "
                                   "tokens.", "prefix_hits")):
            c = CounterMetricFamily(name, doc, labels=names)
            for e in engines:
                c.add_metric(tag(e), looked_up(column, e))
            yield c
        yield from _spec_decode_counters(result, engines, tag, names)
        if version != "0.19.0":  # 0.33's API server counts the requests its queue limits refuse
            c = CounterMetricFamily("vllm:admission_rejections", "Number of admission attempts rejected by a queue "
                                    "limit, by reason.", labels=["model_name", "reason"])
            reasons = list(cols["finish_reason"])
            for reason, ours in ADMISSION_REASONS.items():
                c.add_metric([model_name, reason], float(reasons.count(ours)))
            yield c
        ok = CounterMetricFamily("vllm:request_success", "Count of successfully processed requests.",
                                 labels=names + ["finished_reason"])
        reason = np.asarray(cols["finish_reason"], dtype=object)
        # disaggregated: the prefill engine's one-token request (capped there), and its token's time, the first
        # where the prompt was computed (the client never sees it); else each request's first token
        legs = np.zeros(len(replica), dtype=bool)
        first_token = cols["first_token_time"].astype(float)
        if result.tokens.prefill_runs is not None:
            rows, at = _first_steps(result.tokens.prefill_runs, result.tokens.prefill_offsets)
            legs[rows] = True
            first_token[rows] = steps["end"][:][at]
        for e in engines:  # every FinishReason of vLLM's, each request under its own (stop, or length where capped)
            for label in FINISH_REASONS:
                done = (finished & (replica == e) & (reason == label)).sum()
                if label == "length":
                    done += (legs & (cols["prefill_replica"] == e)).sum()
                ok.add_metric(tag(e) + [label], float(done))
        yield ok
        first = cols["first_scheduled_time"]
        latency = family_edges("request_latency", REQUEST_TIME_BUCKETS)
        itl = family_edges("inter_token_latency", ITL_BUCKETS)
        tokens = family_edges("request_tokens", buckets_1_2_5(max_model_len))
        per_request = {
            "vllm:time_to_first_token_seconds": ("Histogram of time to first token in seconds.",
                                                 first_token - cols["arrival_time"],
                                                 family_edges("time_to_first_token", TTFT_BUCKETS)),
            "vllm:e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.", cols["e2el"],
                                                 latency),
            "vllm:request_queue_time_seconds": ("Histogram of time spent in WAITING phase for request.",
                                                cols["queue_time"], latency),
            "vllm:request_inference_time_seconds": ("Histogram of time spent in RUNNING phase for request.",
                                                    cols["finish_time"] - first, latency),
            "vllm:request_prefill_time_seconds": ("Histogram of time spent in PREFILL phase for request.",
                                                  first_token - first, latency),
            "vllm:request_decode_time_seconds": ("Histogram of time spent in DECODE phase for request.",
                                                 cols["finish_time"] - cols["first_token_time"], latency),
            "vllm:request_time_per_output_token_seconds": ("Histogram of time_per_output_token_seconds per request.",
                                                           np.nan_to_num(cols["tpot"], nan=0.0), itl),
            "vllm:request_prompt_tokens": ("Number of prefill tokens processed.",
                                           cols["prompt_tokens"].astype(float), tokens),
            "vllm:request_generation_tokens": ("Number of generation tokens processed.",
                                               cols["output_tokens"].astype(float), tokens),
        }
        if version != "0.19.0":
            per_request["vllm:request_num_preemptions"] = (
                "Histogram of the number of times a request was preempted.", cols["num_preemptions"].astype(float),
                family_edges("request_num_preemptions", REQUEST_NUM_PREEMPTIONS_BUCKETS))
        before_first_token = {"vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds",
                              "vllm:request_prefill_time_seconds", "vllm:request_prompt_tokens"}
        for name, (doc, values, edges) in per_request.items():
            h = HistogramMetricFamily(name, doc, labels=names)
            # a prefill engine observes its own one-token request, whatever the decode engine did with it after
            where, seen = (prefill_engine, finished | legs) if name in before_first_token else (replica, finished)
            if name == "vllm:time_to_first_token_seconds":  # observed at the first token, finished or not (r145)
                seen = seen | np.isfinite(first_token)
            for e in engines:
                _histogram(h, tag(e), np.asarray(values, dtype=float)[seen & (where == e)], edges)
            yield h
        h = HistogramMetricFamily("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                                  labels=names)
        if len(engines) == 1:
            _histogram(h, tag(engines[0]), np.asarray(itl_rows, dtype=float), itl)
        else:  # gaps by the engine each request ran on
            _itl_by_engine(h, result, engines, itl, tag)
        yield h
        h = HistogramMetricFamily("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                  labels=names)
        # vLLM's IterationStats: prompts whose prefill ended in the step (0.19: whole; 0.33: the computed part)
        # plus the tokens generated; not the tokens scheduled (a prefill chunk counts when its prompt ends)
        per_iteration = (per_step["prompt"] if version == "0.19.0" else per_step["computed"]) + per_step["generated"]
        # observed only for a step that returned outputs (async_llm: no IterationStats without one): one of partial
        # prefill chunks alone returns none, and counted 0 (r129: 80 observed where vLLM observes 40)
        outputs = per_iteration > 0
        for e in engines:
            _histogram(h, tag(e), per_iteration[(step_engine == e) & outputs].astype(float),
                       family_edges("iteration_tokens", ITERATION_TOKEN_BUCKETS))
        yield h

    class Collector:
        def collect(self):
            yield from families()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return generate_latest(registry).decode()


def _spec_decode_counters(result, engines: list[int], tag, names: list[str]):
    """vLLM's spec-decode counters, registered as the engine starts with a speculative config, at 0 until a draft
    is verified (vllm/v1/spec_decode/metrics.py; r146: left out of a run whose drafts never came)."""
    from prometheus_client.core import CounterMetricFamily

    counts = dict(enumerate(result.speculation))
    spec = result.config.get("speculative") or {}
    if spec.get("method", "none") == "none" and not any(counts.values()):
        return
    replica = result.step_columns["replica"][:]
    totals = {"vllm:spec_decode_num_drafts": ("Number of spec decoding drafts.", lambda e, c: c["num_drafts"]),
              "vllm:spec_decode_num_draft_tokens": ("Number of draft tokens.",
                                                    lambda e, c: result.step_columns["spec_drafts"][:][replica == e].sum()),
              "vllm:spec_decode_num_accepted_tokens": ("Number of accepted tokens.",
                                                       lambda e, c: result.step_columns["spec_accepted"][:][replica == e].sum())}
    for name, (doc, value) in totals.items():
        c = CounterMetricFamily(name, doc, labels=names)
        for e in engines:
            c.add_metric(tag(e), float(value(e, counts[e])) if counts.get(e) else 0.0)
        yield c
    c = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                            labels=names + ["position"])
    k = max((len(v["accepted_per_position"]) for v in counts.values() if v),
            default=int(spec.get("num_speculative_tokens") or 0))
    for e in engines:
        per = (counts.get(e) or {}).get("accepted_per_position", [])
        for pos in range(k):
            c.add_metric(tag(e) + [str(pos)], float(per[pos]) if pos < len(per) else 0.0)
    yield c


def _itl_by_engine(h, result, engines: list[int], edges: list, tag) -> None:
    replica = result.request_columns["replica"]
    gaps: dict[int, list[np.ndarray]] = {e: [] for e in engines}
    for row, times in result.tokens.per_request():  # a cut run's unfinished requests too, as vLLM observes them
        gaps.setdefault(int(replica[row]), []).append(np.diff(times))
    for e in engines:
        _histogram(h, tag(e), np.concatenate(gaps[e]) if gaps[e] else np.zeros(0), edges)


def write_prometheus(result, out: Path, model_name: str, version: str = "0.33.0", buckets: dict | None = None,
                     first_engine: int = 0) -> list[str]:
    """prometheus.parquet and metrics.prom in `out` (buckets, first_engine: as exposition's); their names, for the
    run's file list."""
    per_step = _step_tokens(result, version)  # once, for both files
    line = timeline(result, per_step)
    dp, several = _instances(result)
    if several:  # several instances: metrics.prom's labels
        line.insert(2, "replica", line["engine"] // dp)
    line.assign(engine=line["engine"] % dp + first_engine).to_parquet(out / "prometheus.parquet", index=False)
    (out / "metrics.prom").write_text(exposition(result, model_name, version, line, per_step, buckets, first_engine))
    return ["prometheus.parquet", "metrics.prom"]
