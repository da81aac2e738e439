"""The run under vLLM's Prometheus names: metrics.prom read by prometheus_client's own parser."""

import numpy as np
import pandas as pd
import pytest

from servesim.simulator.cli import main
from servesim.simulator.vllm_metrics import ITL_BUCKETS, TTFT_BUCKETS, buckets_1_2_5

parser = pytest.importorskip("prometheus_client.parser")


def test_metrics_prom_holds_vllms_families_with_the_runs_numbers(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--out", str(out), "--quiet", "--prometheus", "--set", "workload.num_requests=80",
                 "--set", "engine.max_model_len=8192", "--set", "cluster.replicas=2"]) == 0
    families = {f.name: f for f in parser.text_string_to_metric_families((out / "metrics.prom").read_text())}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions", "vllm:request_success",
                 "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                 "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                 "vllm:iteration_tokens_total", "vllm:request_prompt_tokens"):
        assert name in families, name
    req = pd.read_parquet(out / "requests.parquet")
    steps = pd.read_parquet(out / "steps.parquet")

    def samples(family, suffix, **labels):
        return [s for s in families[family].samples if s.name == family + suffix
                and all(s.labels.get(k) == v for k, v in labels.items())]

    for engine in ("0", "1"):
        mine = req[req.replica == int(engine)]
        buckets = samples("vllm:time_to_first_token_seconds", "_bucket", replica=engine)
        assert [float(s.labels["le"]) for s in buckets] == TTFT_BUCKETS + [float("inf")]
        assert [s.value for s in buckets] == [int((mine.ttft <= e).sum()) for e in TTFT_BUCKETS] + [len(mine)]
        [total] = samples("vllm:time_to_first_token_seconds", "_sum", replica=engine)
        assert total.value == pytest.approx(mine.ttft.sum())
        [gen] = samples("vllm:generation_tokens", "_total", replica=engine)
        assert gen.value == mine.output_tokens.sum()
        [prompt] = samples("vllm:prompt_tokens", "_total", replica=engine)
        assert prompt.value == mine.prompt_tokens.sum()
        [count] = samples("vllm:inter_token_latency_seconds", "_count", replica=engine)
        assert count.value == (mine.output_tokens - 1).sum()  # one gap per token after the first
        edges = [float(s.labels["le"]) for s in samples("vllm:request_prompt_tokens", "_bucket", replica=engine)]
        assert edges[:-1] == [float(b) for b in buckets_1_2_5(8192)] and edges[-2] == 5000.0
        success = {s.labels["finished_reason"]: s.value for s in samples("vllm:request_success", "_total",
                                                                           replica=engine)}
        assert list(success) == ["stop", "length", "abort", "error", "repetition"]  # vLLM makes every series
        # round 94: requests.parquet's finish_reason, per reason (every one had been counted "length")
        assert success == {r: float((mine.finish_reason == r).sum()) for r in success} and success["stop"] > 0
        [steps_count] = samples("vllm:iteration_tokens_total", "_count", replica=engine)
        assert steps_count.value == (steps.replica == int(engine)).sum()
    assert [float(s.labels["le"]) for s in samples("vllm:inter_token_latency_seconds", "_bucket", replica="0")][:-1] \
        == ITL_BUCKETS
    # the timeline: vLLM's gauges per step, its counters running up to the totals
    line = pd.read_parquet(out / "prometheus.parquet")
    assert len(line) == len(steps) and set(line.replica) == {0, 1} and set(line.engine) == {0}
    for engine, t in line.groupby("replica"):
        assert (np.diff(t["vllm:generation_tokens_total"]) >= 0).all()
        assert t["vllm:generation_tokens_total"].iloc[-1] == req[req.replica == engine].output_tokens.sum()
    assert line["vllm:num_requests_running"].max() <= steps.num_running.max()
    # r133: vLLM takes its stats once the step's finished requests have left (update_from_output): the gauges
    # after an engine's last step are 0, where they read that step's own batch and blocks
    finishing = req.groupby(["replica", "finish_time"]).size()
    for engine, t in line.groupby("replica"):
        assert t["vllm:num_requests_running"].iloc[-1] == 0 and t["vllm:kv_cache_usage_perc"].iloc[-1] == 0
        mine = steps[steps.replica == engine].reset_index(drop=True)
        left = mine.end.map(lambda e: finishing.get((engine, e), 0)).to_numpy()
        assert (t["vllm:num_requests_running"].to_numpy() == mine.num_running.to_numpy() - left).all()


def _prom(result, version: str = "0.33.0") -> dict:
    """(family sample name, engine[, source]) -> value of the run's metrics.prom; the engine is the instance's
    `replica` label where there are several (each at DP 1 here, its own engine 0: r176)."""
    from servesim.simulator.vllm_metrics import exposition

    return {(s.name, s.labels.get("replica", s.labels.get("engine")), s.labels.get("source") or s.labels.get("le")
             or s.labels.get("finished_reason")): s.value
            for f in parser.text_string_to_metric_families(exposition(result, "m", version)) for s in f.samples}


def test_speculative_decoding_counts_tokens_generated_not_steps():
    """A verify step adds 1 + the accepted drafts, less those past the request's stop (vLLM trims them from
    the output but counts them accepted): generation_tokens equals the run's output tokens."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate
    from servesim.simulator.vllm_metrics import timeline

    r = simulate(load(None, ["workload.num_requests=60", "workload.arrival.rate=8", "speculative.method=fixed",
                             "speculative.num_speculative_tokens=4", "speculative.acceptance_rate=0.8"]))
    out = int(r.request_columns["output_tokens"].sum())
    token_steps = sum(len(steps) for _, steps, _ in r.tokens._blocks())
    accepted = int(r.step_columns["spec_accepted"].sum())
    assert token_steps < out < token_steps + accepted  # drafts added tokens, and some were past a stop
    assert sum(r.discarded_tokens.values()) == token_steps + accepted - out
    prom = _prom(r)
    assert prom[("vllm:generation_tokens_total", "0", None)] == out
    assert prom[("vllm:spec_decode_num_accepted_tokens_total", "0", None)] == accepted
    assert timeline(r)["vllm:generation_tokens_total"].iloc[-1] == out


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_a_step_of_partial_prefill_chunks_alone_is_no_iteration_and_big_edges_are_written_as_vllm_writes_them(
        version):
    """r129: vLLM makes IterationStats only for a step that returned outputs; a step of partial prefill chunks
    returns none, and was observed as 0 tokens (80 where vLLM observes 40). An edge of 1e6 or more is written as
    prometheus_client writes it (1e+06), not 1000000.0."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate
    from servesim.simulator.vllm_metrics import exposition

    r = simulate(load(None, ["workload.num_requests=10", "workload.arrival.rate=1", "engine.max_num_batched_tokens=2048",
                             "workload.prompt_tokens={dist: fixed, value: 10000}", "engine.enable_prefix_caching=false",
                             "workload.output_tokens={dist: fixed, value: 4}"]))
    prom = _prom(r, version)
    steps = r.steps
    first_tokens = set(r.requests.first_token_time)
    outputs = (steps.decode_seqs > 0) | steps.end.isin(first_tokens)  # a token generated, or a prompt's first
    assert 0 < outputs.sum() < len(steps)
    assert prom[("vllm:iteration_tokens_total_count", "0", None)] == outputs.sum()
    # one token: a lone decode, beside which a partial chunk counts nothing
    assert prom[("vllm:iteration_tokens_total_bucket", "0", "1.0")] == ((steps.decode_seqs == 1) & ~steps.end.isin(
        first_tokens)).sum()
    from servesim.simulator.vllm_metrics import _le

    assert [_le(x) for x in (0.001, 1, 8192, 1e6, 2e7)] == ["0.001", "1.0", "8192.0", "1e+06", "2e+07"]


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_iteration_tokens_and_prompt_sources_are_vllms_iteration_stats(version):
    """vLLM observes per iteration the prompts whose prefill ended (0.33: their computed part; 0.19: whole)
    plus the tokens generated; prompt tokens split by source, the cached ones local hits."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    r = simulate(load(None, ["workload.num_requests=60", "workload.arrival.rate=8", "engine.enable_prefix_caching=true",
                             "workload.shared_prefix={tokens: 1024, count: 2}"]))
    cols = r.request_columns
    prompt, cached, out = (int(cols[c].sum()) for c in ("prompt_tokens", "cached_tokens", "output_tokens"))
    assert 0 < cached < prompt
    prom = _prom(r, version)
    recomputed = int((cols["cached_tokens"] + 1 == cols["prompt_tokens"]).sum()) if version == "0.19.0" else 0
    assert prom[("vllm:iteration_tokens_total_sum", "0", None)] == out + (prompt if version == "0.19.0"
                                                                           else prompt - cached)
    assert prom[("vllm:iteration_tokens_total_count", "0", None)] == len(r.step_columns["end"])
    assert prom[("vllm:prompt_tokens_total", "0", None)] == prompt
    assert prom[("vllm:prompt_tokens_by_source_total", "0", "local_compute")] == prompt - cached
    assert prom[("vllm:prompt_tokens_by_source_total", "0", "local_cache_hit")] == cached + recomputed
    assert prom[("vllm:prompt_tokens_by_source_total", "0", "external_kv_transfer")] == 0
    assert prom[("vllm:prompt_tokens_cached_total", "0", None)] == cached
    # round 95: 0.19's counter of those recomputed tokens (0.33 has none)
    assert prom.get(("vllm:prompt_tokens_recomputed_total", "0", None)) == (recomputed if version == "0.19.0" else None)
    # round 99: 0.33's hits by cache tier, the device's the prefix-cache hits (0.19 has no such counter)
    tiers = {src: prom.get(("vllm:prompt_tokens_cached_by_source_total", "0", src))
             for src in ("device", "host", "p2p", "disk", "external_unspecified")}
    assert tiers == ({src: None for src in tiers} if version == "0.19.0" else
                     {"device": cols["prefix_hits"].sum(), "host": 0, "p2p": 0, "disk": 0, "external_unspecified": 0})


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_each_requests_preemptions_are_observed_at_its_end(version):
    """Round 99: 0.33's vllm:request_num_preemptions (each finished request's count, edges 1..20) was not written,
    though --custom-histogram-buckets took its family; 0.19 has no such histogram."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate
    from servesim.simulator.vllm_metrics import exposition

    r = simulate(load(None, ["workload.num_requests=60", "workload.arrival.rate=50", "engine.max_model_len=4096",
                             "engine.num_gpu_blocks_override=300"]))
    cols = r.request_columns
    n = cols["num_preemptions"]
    assert n.max() >= 2
    prom = _prom(r, version)
    if version == "0.19.0":
        assert not any(k[0].startswith("vllm:request_num_preemptions") for k in prom)
        return
    assert prom[("vllm:request_num_preemptions_count", "0", None)] == len(n)
    assert prom[("vllm:request_num_preemptions_sum", "0", None)] == n.sum()
    assert [prom[("vllm:request_num_preemptions_bucket", "0", le)] for le in ("1.0", "2.0", "20.0", "+Inf")] == \
        [(n <= 1).sum(), (n <= 2).sum(), (n <= 20).sum(), len(n)]
    custom = exposition(r, "m", buckets={"request_num_preemptions": [3.0]})
    assert 'vllm:request_num_preemptions_bucket{engine="0",le="3.0",model_name="m"} %.1f' % (n <= 3).sum() in custom


def test_0_19_counts_the_recomputed_last_token_of_a_cached_prompt(tmp_path):
    """A prompt of a cached 512-token prefix and one token more: 0.19's PromptTokenStats counts that last token as
    a recomputed cached one (cached + 1 == prompt length)."""
    out = tmp_path / "run"
    assert main(["vllm", "--vllm-version", "0.19.0", "--out", str(out), "--quiet", "serve",
                 "meta-llama/Llama-3.1-8B-Instruct", "--", "bench", "serve", "--dataset-name", "prefix_repetition",
                 "--prefix-repetition-prefix-len", "512", "--prefix-repetition-suffix-len", "1",
                 "--prefix-repetition-num-prefixes", "2", "--num-prompts", "20", "--request-rate", "5"]) == 0
    req = pd.read_parquet(out / "requests.parquet")
    whole = int((req.cached_tokens + 1 == req.prompt_tokens).sum())
    families = {f.name: f for f in parser.text_string_to_metric_families((out / "metrics.prom").read_text())}
    assert whole > 0 and families["vllm:prompt_tokens_recomputed"].samples[0].value == whole


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_disaggregation_counts_the_prompt_where_it_was_computed(version):
    """The prefill engine computes the prompt (its cache lookups, queue, prefill time, TTFT and a token the proxy
    discards); the decode engine looks the prompt up in its own prefix cache, counts the rest as pulled over the
    KV transfer, and generates every token the client gets, as vLLM's P/D instances count them (issue 16, r111:
    the decode engine's own lookups and hits had been left out, and 0.19's last token computed again)."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    r = simulate(load(None, ["workload.num_requests=60", "workload.arrival.rate=8", "cluster.replicas=2",
                             "cluster.prefill_replicas=1", "engine.enable_prefix_caching=true",
                             "workload.shared_prefix={tokens: 1024, count: 2}"]))
    cols = r.request_columns
    done = np.array([s == "finished" for s in cols["status"]])
    assert done.all() and (cols["prefill_replica"] == 0).all() and set(cols["replica"]) == {1, 2}
    prompt, cached, out, pulled = (int(cols[c].sum()) for c in ("prompt_tokens", "cached_tokens", "output_tokens",
                                                                 "pulled_tokens"))
    assert 0 < pulled <= prompt - 50 * 1024  # the decode engines had the shared prefixes (after their first)
    prom = _prom(r, version)
    for name, source in (("vllm:prompt_tokens_by_source_total", "external_kv_transfer"),
                         ("vllm:prompt_tokens_by_source_total", "local_compute"),
                         ("vllm:prompt_tokens_by_source_total", "local_cache_hit"),
                         ("vllm:prompt_tokens_cached_total", None), ("vllm:prompt_tokens_recomputed_total", None),
                         ("vllm:prompt_tokens_total", None), ("vllm:prefix_cache_queries_total", None),
                         ("vllm:prefix_cache_hits_total", None),
                         ("vllm:generation_tokens_total", None), ("vllm:e2e_request_latency_seconds_count", None),
                         ("vllm:request_success_total", "stop"), ("vllm:time_to_first_token_seconds_count", None),
                         ("vllm:request_prefill_time_seconds_count", None),
                         ("vllm:request_queue_time_seconds_count", None)):  # the decode engines together
        if (name, "1", source) in prom:
            prom[(name, "1", source)] += prom[(name, "2", source)]
    assert prom[("vllm:prompt_tokens_total", "0", None)] == prompt
    assert prom[("vllm:prompt_tokens_by_source_total", "0", "local_compute")] == prompt - cached
    assert prom[("vllm:prompt_tokens_by_source_total", "1", "external_kv_transfer")] == pulled
    assert prom[("vllm:prompt_tokens_total", "1", None)] == prompt
    assert prom[("vllm:prefix_cache_queries_total", "1", None)] == prompt  # the decode engine's own lookups
    assert prom[("vllm:prefix_cache_hits_total", "1", None)] == prompt - pulled
    assert prom[("vllm:prefix_cache_queries_total", "0", None)] + prompt == cols["prefix_queries"].sum()
    assert prom[("vllm:prefix_cache_hits_total", "0", None)] == cached > 0
    assert prom[("vllm:prompt_tokens_by_source_total", "1", "local_cache_hit")] == prompt - pulled
    if version == "0.19.0":  # the prompt less its last token was cached, and that token computed again
        assert prom[("vllm:prompt_tokens_by_source_total", "1", "local_compute")] == 60
        assert prom[("vllm:prompt_tokens_recomputed_total", "1", None)] == 60
        assert prom[("vllm:prompt_tokens_cached_total", "1", None)] == prompt - 60
    else:  # 0.33 counts what it had at admission: nothing to compute
        assert prom[("vllm:prompt_tokens_by_source_total", "1", "local_compute")] == 0
        assert prom[("vllm:prompt_tokens_cached_total", "1", None)] == prompt
        prom[("vllm:prompt_tokens_cached_by_source_total", "1", "p2p")] += \
            prom[("vllm:prompt_tokens_cached_by_source_total", "2", "p2p")]
        assert prom[("vllm:prompt_tokens_cached_by_source_total", "1", "p2p")] == pulled  # the decode engine's loads
        assert prom[("vllm:prompt_tokens_cached_by_source_total", "0", "device")] == cached
    # each request's token on the prefill engine, which the proxy discards; the client's all come from decode
    assert prom[("vllm:generation_tokens_total", "0", None)] == done.sum()
    assert prom[("vllm:generation_tokens_total", "1", None)] == out
    for family in ("vllm:time_to_first_token_seconds", "vllm:request_prefill_time_seconds",
                   "vllm:request_queue_time_seconds"):
        assert prom[(family + "_count", "0", None)] == done.sum() and prom[(family + "_count", "1", None)] == 0
    # the prefill engine's TTFT ends at its own token, before the transfer and the decode engine's first token
    engine_ttft = prom[("vllm:time_to_first_token_seconds_sum", "0", None)]
    assert 0 < engine_ttft < (cols["ttft"][done].sum()) - 1e-6
    assert prom[("vllm:e2e_request_latency_seconds_count", "1", None)] == done.sum()
    assert prom[("vllm:request_success_total", "1", "stop")] == done.sum()  # no max_tokens sent: the output's own end
    # r111: the prefill engine's request is a one-token one (the proxy's max_tokens=1), capped there
    assert prom[("vllm:request_success_total", "0", "length")] == done.sum()
    assert prom[("vllm:request_success_total", "0", "stop")] == 0


def test_a_prefill_engine_observes_the_requests_it_prefilled_whatever_decode_did():
    """r112: a request refused at the decode replica (its queue limit) kept its prefill engine's request_success
    but not that engine's TTFT, queue, prefill-time and prompt histograms."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    r = simulate(load(None, ["cluster.prefill_replicas=2", "cluster.replicas=1", "workload.num_requests=200",
                             "workload.arrival.rate=80", "engine.max_num_queued_reqs=5"]))
    prom = _prom(r)
    assert r.summary["failed"] > 100
    for e in ("0", "1"):
        legs = prom[("vllm:request_success_total", e, "length")]
        assert legs > 50
        for family in ("vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds",
                       "vllm:request_prefill_time_seconds", "vllm:request_prompt_tokens"):
            assert prom[(family + "_count", e, None)] == legs


def test_custom_histogram_buckets_replace_a_familys_edges(tmp_path):
    """Round 95: 0.33's --custom-histogram-buckets was recorded as not modelled and metrics.prom kept the default
    edges; vLLM draws every histogram of a family listed from the given bounds (v1/metrics/buckets.py)."""
    out = tmp_path / "run"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", "meta-llama/Llama-3.1-8B-Instruct",
                 "--custom-histogram-buckets", '{"time_to_first_token": [0.5, 1.0], "request_latency": ["2", 10]}',
                 "--", "bench", "serve", "--num-prompts", "5"]) == 0
    families = {f.name: f for f in parser.text_string_to_metric_families((out / "metrics.prom").read_text())}

    def edges(name):
        return [s.labels["le"] for s in families[name].samples if s.name == name + "_bucket"]

    assert edges("vllm:time_to_first_token_seconds") == ["0.5", "1.0", "+Inf"]
    for name in ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"):
        assert edges(name) == ["2.0", "10.0", "+Inf"]
    assert len(edges("vllm:inter_token_latency_seconds")) == len(ITL_BUCKETS) + 1  # not listed: the defaults
    assert "custom_histogram_buckets" not in (out / "vllm_command.json").read_text().split('"not_modelled"')[1]


@pytest.mark.parametrize("value, says", [
    ('{"bogus": [1]}', "unknown bucket family 'bogus'"),
    ('{"time_to_first_token": [2, 1]}', "must be strictly increasing"),
    ('{"time_to_first_token": []}', "bucket list must not be empty"),
    ('{"request_tokens": [0, 8]}', "bounds must be finite and greater than 0"),
    ('5', "a JSON object is expected"),
    ('{"time_to_first_token": [0.5, true]}', "bound True must be a number, not a boolean"),  # round 96
    ('{"request_tokens": "x"}', "a JSON object of bucket family -> list of bounds"),
])
def test_custom_histogram_buckets_vllm_refuses_are_refused(value, says, tmp_path, capsys):
    assert main(["vllm", "--out", str(tmp_path / "r"), "serve", "meta-llama/Llama-3.1-8B-Instruct",
                 "--custom-histogram-buckets", value, "--", "bench", "serve", "--num-prompts", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--custom-histogram-buckets: " in err[0] and says in err[0], err


def test_disable_log_stats_writes_no_vllm_metrics(tmp_path, capsys):
    """Round 95: with --disable-log-stats vLLM makes no stat loggers (its /metrics has no vllm: series); servesim
    wrote every series all the same."""
    out = tmp_path / "run"
    assert main(["vllm", "--out", str(out), "serve", "meta-llama/Llama-3.1-8B-Instruct", "--disable-log-stats", "--",
                 "bench", "serve", "--num-prompts", "3"]) == 0
    assert not (out / "metrics.prom").exists() and not (out / "prometheus.parquet").exists()
    assert "--disable-log-stats: vLLM exports no vllm: metrics" in capsys.readouterr().err


@pytest.mark.parametrize("line, engines", [
    (["-dp", "2", "--data-parallel-rank", "1"], ["1"]),  # an external balancer's rank
    (["-dp", "4", "--data-parallel-size-local", "2", "--data-parallel-hybrid-lb", "--data-parallel-start-rank", "2"],
     ["2", "3"]),  # hybrid balancing: this node's ranks
    (["-dp", "2"], ["0", "1"]),  # the internal balancer: every rank
])
def test_engines_are_labelled_by_their_dp_rank(tmp_path, line, engines):
    """Round 95: under external or hybrid balancing the server's engines were labelled 0..n-1; vLLM labels each by
    its DP rank (the client's engine_ranks_managed), so scrapes of several nodes keep them apart."""
    out = tmp_path / "run"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", "Qwen/Qwen3-30B-A3B", "-ep", *line, "--", "bench",
                 "serve", "--random-input-len", "256", "--random-output-len", "16", "--num-prompts", "8"]) == 0
    families = {f.name: f for f in parser.text_string_to_metric_families((out / "metrics.prom").read_text())}
    assert [s.labels["engine"] for s in families["vllm:num_requests_running"].samples] == engines
    assert sorted(pd.read_parquet(out / "prometheus.parquet").engine.astype(str).unique()) == engines


def test_run_prometheus_writes_the_releases_metrics(tmp_path):
    """Round 97: `run --prometheus` wrote 0.33's families whatever engine.vllm_defaults said."""
    for release, has in (("0.19.0", "vllm:prompt_tokens_recomputed"), ("0.33.0", "vllm:admission_rejections")):
        out = tmp_path / release
        assert main(["run", "--out", str(out), "--quiet", "--prometheus", "--set", "workload.num_requests=10",
                     "--set", f"engine.vllm_defaults={release}"]) == 0
        text = (out / "metrics.prom").read_text()
        other = "vllm:admission_rejections" if release == "0.19.0" else "vllm:prompt_tokens_recomputed"
        assert has in text and other not in text


def test_round_145_a_cut_run_observes_its_running_requests_first_tokens_and_gaps(tmp_path):
    """vLLM's engine observes a TTFT at each request's first token and an inter-token latency at every later
    output, finished or not; metrics.prom kept finished requests only, so a run cut by max_sim_time_s counted
    174 prompts and 44,440 tokens but 159 TTFTs and 40,032 gaps."""
    import re

    from servesim.simulator.cli import main

    assert main(["run", "--prometheus", "--quiet", "--out", str(tmp_path), "--set",
                 "simulation.max_sim_time_s=20"]) == 0
    prom = (tmp_path / "metrics.prom").read_text()

    def value(name: str) -> float:
        return float(re.search(rf"^vllm:{name}{{[^}}]*}} (\S+)$", prom, re.M).group(1))

    requests = pd.read_parquet(tmp_path / "requests.parquet")
    started = int(requests["first_token_time"].notna().sum())
    assert started > int((requests["status"] == "finished").sum())  # the cut leaves some running
    assert value("time_to_first_token_seconds_count") == started
    assert value("inter_token_latency_seconds_count") == value("generation_tokens_total") - started


def test_round_146_spec_decode_counters_read_0_before_any_draft(tmp_path):
    """vLLM registers the spec-decode counters as the engine starts with a speculative config: a run of one-token
    outputs, which verifies no draft, scrapes them at 0 (servesim left them out)."""
    from servesim.simulator.cli import main

    assert main(["run", "--prometheus", "--quiet", "--out", str(tmp_path), "--set", "workload.num_requests=4",
                 "--set", "workload.output_tokens={dist: fixed, value: 1}", "--set", "speculative.method=fixed",
                 "--set", "speculative.num_speculative_tokens=3", "--set", "speculative.acceptance_rate=0.5"]) == 0
    prom = (tmp_path / "metrics.prom").read_text()
    assert 'vllm:spec_decode_num_drafts_total{engine="0",model_name="llama-3.1-8b"} 0.0' in prom
    assert prom.count("vllm:spec_decode_num_accepted_tokens_per_pos_total{") == 3
