"""Metric definitions checked by hand on the teaching model (18 ms + 0.12 ms/seq + 0.03 ms/prefill token)."""

import numpy as np
import pytest

from servesim.simulator.config import load
from servesim.simulator.engine import simulate


def test_one_request_by_hand(run):
    r = run([(0.0, 100, 10)])
    req = r.requests.iloc[0]
    prefill = 18.0 + 0.12 + 0.03 * 100
    decode = 18.0 + 0.12
    assert req["ttft"] * 1000 == pytest.approx(prefill)
    assert req["e2el"] * 1000 == pytest.approx(prefill + 9 * decode)
    assert req["tpot"] * 1000 == pytest.approx(decode)
    assert len(r.itls) == 9 and np.allclose(r.itls * 1000, decode)
    s = r.summary
    assert s["mean_ttft_ms"] == pytest.approx(prefill)
    assert s["p99_itl_ms"] == pytest.approx(decode)
    assert s["total_output_tokens"] == 10 and s["completed"] == 1
    assert s["request_throughput"] == pytest.approx(1 / (req["e2el"]))
    assert len(r.steps) == 10 and r.steps["prefill_tokens"].tolist() == [100] + [0] * 9


def test_chunked_prefill_timeline_by_hand(run):
    r = run([(0.0, 100, 3), (0.0, 100, 2)], max_num_batched_tokens=150)
    a, b = r.requests.iloc[0], r.requests.iloc[1]
    s0 = 18 + 0.12 * 2 + 0.03 * 150  # a's prompt + 50 of b's
    s1 = 18 + 0.12 * 2 + 0.03 * 50   # a decodes, b's last 50 prompt tokens
    s2 = 18 + 0.12 * 2               # both decode
    assert a["ttft"] * 1000 == pytest.approx(s0)
    assert b["ttft"] * 1000 == pytest.approx(s0 + s1)
    assert a["e2el"] * 1000 == pytest.approx(s0 + s1 + s2)
    assert b["e2el"] * 1000 == pytest.approx(s0 + s1 + s2)
    assert b["queue_time"] == 0.0
    assert sorted(np.round(r.itls * 1000, 6)) == sorted(np.round([s1, s2, s2], 6))


def test_preemption_time_stays_inside_the_intervals(run):
    r = run([(0.0, 200, 400)] * 20, num_gpu_blocks_override=120, max_model_len=1024)
    pre = r.requests[r.requests["num_preemptions"] > 0]
    assert len(pre) > 0
    # a preempted request's longest gap spans its wait and recompute: far above a step
    assert (pre["max_itl"] > 5 * r.steps["duration"].median()).all()
    assert r.summary["max_itl_ms"] == pytest.approx(r.requests["max_itl"].max() * 1000)


def test_rejected_prompt_is_counted_not_dropped(run):
    r = run([(0.0, 100, 5), (0.0, 5000, 5)], max_model_len=4096)
    assert r.summary["completed"] == 1 and r.summary["failed"] == 1
    assert r.requests.iloc[1]["finish_reason"] == "prompt_too_long"


def test_summary_uses_vllm_bench_field_names(run):
    s = run([(0.0, 10, 5), (0.1, 20, 6)]).summary
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p90", "p99"):
            assert f"{stat}_{metric}_ms" in s
    for key in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                "request_throughput", "output_throughput", "total_token_throughput", "max_itl_ms",
                "num_preemptions", "kv_cache_usage_peak", "kv_cache_usage_mean"):
        assert key in s


def test_itl_statistics_count_finished_requests_only():
    """As vllm bench: a run cut by max_sim_time_s pooled its unfinished requests' gaps into the ITL figures."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    base = ["seed=2", "workload.num_requests=100", "workload.arrival.rate=20",
            "workload.prompt_tokens={dist: fixed, value: 1000}", "workload.output_tokens={dist: fixed, value: 500}"]
    none_done = simulate(load(None, base + ["simulation.max_sim_time_s=0.5"])).summary
    assert none_done["completed"] == 0 and none_done["mean_itl_ms"] is None and none_done["max_itl_ms"] is None
    cut = simulate(load(None, base + ["simulation.max_sim_time_s=7"]))
    s, req = cut.summary, cut.requests
    done = req[req.status == "finished"]
    assert 0 < s["completed"] < 100 and s["unfinished"] > 0
    pooled = (done.e2el - done.ttft).sum() / (done.output_tokens - 1).sum()
    assert s["mean_itl_ms"] == pytest.approx(pooled * 1000, rel=1e-9)
    assert s["duration"] == pytest.approx(7 - req.arrival_time.min())  # rates over the window simulated
    assert s["request_throughput"] == pytest.approx(s["completed"] / s["duration"])


def test_useful_work_counts_each_replicas_static_batches_apart():
    """batch_id restarts on every replica: grouping by it alone merged batches of different replicas (0.461
    against 0.570)."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    r = simulate(load(None, ["workload.num_requests=24", "policies.batching=static", "policies.static_batch_size=4",
                             "cluster.replicas=2", "workload.arrival.process=burst"]))
    done = r.requests[r.requests["status"] == "finished"]
    g = done.groupby(["replica", "batch_id"])["output_tokens"]
    assert r.summary["useful_work_fraction"] == float(g.sum().sum() / (g.size() * g.max()).sum())
    merged = done.groupby("batch_id")["output_tokens"]
    assert r.summary["useful_work_fraction"] != float(merged.sum().sum() / (merged.size() * merged.max()).sum())


@pytest.mark.parametrize("sets", [["workload.num_requests=120", "engine.num_gpu_blocks_override=300",
                                   "engine.max_model_len=4096"],  # preemptions: runs break
                                  ["workload.num_requests=60", "cluster.replicas=1", "cluster.prefill_replicas=1"]])
def test_itl_statistics_from_step_counts_equal_those_of_every_token(sets, monkeypatch):
    """Issue 18's memory: the summary reads the ITLs as step gaps and their counts, expanded a block of whole
    requests at a time, not as one float per token; the figures equal those of the full expansion, whatever the
    block's size in tokens."""
    from servesim.simulator.metrics import TokenTimes, latency_stats

    full = simulate(load(None, sets))
    itls = full.itls
    want: dict = {}
    latency_stats("itl", itls, want)
    assert full.summary["num_preemptions"] > 0 or "cluster.prefill_replicas=1" in sets
    for block in (1, 7, 4096, 1 << 18):  # tokens
        monkeypatch.setattr(TokenTimes, "BLOCK", block)
        r = simulate(load(None, sets))
        values, counts = r.itl_distribution
        assert counts.sum() == len(itls) and sorted(np.repeat(values, counts)) == sorted(itls)
        assert np.array_equal(r.tokens.itls(), itls)
        got: dict = {}
        latency_stats("itl", values, got, weights=counts)
        assert got == pytest.approx(want, rel=1e-12)
        assert r.summary["max_itl_ms"] == itls.max() * 1000
        assert np.array_equal(r.requests["max_itl"].to_numpy(), full.requests["max_itl"].to_numpy(), equal_nan=True)


def test_goodput_fraction_is_over_the_requests_that_ended():
    """Round 26: a run cut by max_sim_time_s counted its unfinished requests as failing their SLOs (27% beside 32 of
    33 finished requests good). A rejection fails them; an unfinished request is in neither count."""
    rs = load(None, ["workload.num_requests=150", "workload.arrival.rate=40", "engine.max_num_seqs=16",
                     "engine.max_num_queued_reqs=5", "simulation.max_sim_time_s=3",
                     "workload.slo_classes={gold: {ttft_ms: 60, tpot_ms: 12}, bronze: {weight: 2, ttft_ms: 200}}"])
    r = simulate(rs)
    req, s = r.requests, r.summary
    ended = req[req.status.isin(["finished", "rejected"])]
    assert s["unfinished"] > 0 and s["failed"] > 0
    assert s["goodput_fraction"] == pytest.approx(ended["good"].mean())
    for name, c in s["slo_classes"].items():
        mine = ended[ended.slo_class == name]
        assert c["goodput_fraction"] == pytest.approx(mine["good"].mean())


@pytest.mark.parametrize("classes, said", [
    ("{a: {weight: 1}}", ["a"]), ("{a: {weight: 1, priority: 0}, b: {ttft_ms: 100}}", ["a"]),
    ("{b: {ttft_ms: 100}}", []),
])
def test_an_slo_class_without_a_target_is_said_to_count_every_request_good(classes, said, capsys):
    """r128: a class with no target judged nothing: goodput_fraction 1.0 and no word."""
    r = simulate(load(None, ["workload.num_requests=20", f"workload.slo_classes={classes}"]))
    err = capsys.readouterr().err
    assert [n for n in ("a", "b") if f"workload.slo_classes.{n} sets no target" in err] == said
    if classes == "{a: {weight: 1}}":
        assert r.summary["goodput_fraction"] == 1.0


def test_goodput_fraction_of_no_request_that_ended_is_none():
    """Round 27: a run cut before any request ended reported 0.0 (read as "none met the SLOs"), not 0/0."""
    rs = load(None, ["workload.num_requests=20", "workload.arrival.rate=60", "simulation.max_sim_time_s=0.02",
                     "workload.slo_classes={chat: {ttft_ms: 200}}"])
    s = simulate(rs).summary
    assert s["completed"] + s["failed"] == 0 and s["goodput_fraction"] is None
    assert s["slo_classes"]["chat"]["goodput_fraction"] is None


def test_busy_fraction_is_the_whole_runs_with_a_warm_up(run):
    """Round 69: the whole run's busy time was divided by the measured window's span (0.856 for 10 requests of
    which 8 warm up, where the engine is busy 10%); it is the run's, as the README says of step figures."""
    rows = [(float(i), 100, 5) for i in range(10)]
    plain = run(rows).summary["busy_fraction"]
    assert run(rows, ["simulation.warmup_requests=8"]).summary["busy_fraction"] == plain < 0.2


def test_max_concurrent_requests_counts_only_the_seconds_that_change():
    """vLLM's per-second count, summed where a span starts or ends: two requests 9e8 s apart needed a 13 GiB
    array of every second between them (round 69). Equal to the dense count on random spans."""
    from servesim.simulator.metrics import concurrent_per_second

    rng = np.random.default_rng(0)
    starts, e2els = rng.uniform(0, 50, 300), rng.exponential(3, 300)
    first, last = np.floor(starts - starts.min()).astype(int), np.floor(starts + e2els - starts.min()).astype(int)
    dense = np.zeros(last.max() + 2, dtype=int)
    np.add.at(dense, first, 1)
    np.add.at(dense, last + 1, -1)
    assert concurrent_per_second(starts, e2els) == np.cumsum(dense).max()
    assert concurrent_per_second(np.array([0.0, 9e8]), np.array([0.1, 0.1])) == 1


def test_goodput_use_is_at_most_one_exactly_where_the_share_is_met():
    """recommend's headroom under a goodput SLO: the request at the share's place, by its worst latency over its
    class's targets, uses at most all of them exactly where that share of requests meets them (a window's
    requests only, as the summary counts them)."""
    import servesim

    for window in ({}, {"simulation.warmup_requests": 20}):
        r = servesim.simulate(None, {"workload.num_requests": 200, "workload.arrival.rate": 10, "profile": "teaching",
                                     "workload.slo_classes": {"a": {"ttft_ms": 150, "tpot_ms": 40},
                                                              "b": {"e2el_ms": 3000}}} | window)
        fraction = r.summary["goodput_fraction"]
        assert 0.1 < fraction < 1  # some miss: the shares below and above it are told apart
        for share in (0.05, 0.5, fraction, min(1.0, fraction + 0.01), 1.0):
            assert (r.goodput_use(share) <= 1) == (fraction >= share), share
        assert r.goodput_use(0.5) <= r.goodput_use(0.9)
    for share in (float("nan"), 5, -1, 0, "0.5"):  # round 106: a ValueError, an IndexError, a value for -1
        with pytest.raises(servesim.ConfigError, match="share"):
            r.goodput_use(share)


def test_round_145_vllm_stamps_a_request_scheduled_as_its_scheduler_plans_the_step():
    """vLLM's SCHEDULED timestamp is taken in schedule(), which under async scheduling plans step N+1 as step N
    starts: a request computed in step 3 is stamped at step 2's start, so its queue time is shorter and its
    prefill time (first token - scheduled) a step longer than servesim's stamp at step 3's start made them (the
    default scenario's mean queue time 13.2 ms where vLLM's definition gives 6.3)."""
    import servesim

    specs = [servesim.RequestSpec(0, 0.0, 2000, 10), servesim.RequestSpec(1, 0.001, 100, 10)]  # 1 lands in step 1
    for asynchronous, computed_in in ((True, 2), (False, 1)):  # async: admitted a step later, planned at step 2
        r = servesim.simulate(None, {"engine.async_scheduling": asynchronous}, requests=specs)
        starts, late = r.steps["start"].tolist(), r.requests.set_index("request_id").loc[1]
        assert late["first_scheduled_time"] == starts[1]  # both plan it as step 2 starts
        assert late["first_token_time"] == starts[computed_in + 1]  # the end of the step that computes it
