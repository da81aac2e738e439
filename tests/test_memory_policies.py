"""Load shedding (vLLM's queue limits) and the preemption victim rule, on small scenarios."""

import pytest

from simulator.config import load
from simulator.engine import simulate

OVERLOAD = ["model=llama-3-8b", "profile=teaching", "hardware.gpu=generic-80gb", "engine.max_num_seqs=16",
            "workload.num_requests=400", "workload.arrival.rate=12",
            "workload.prompt_tokens={dist: uniform, low: 50, high: 150}",
            "workload.output_tokens={dist: uniform, low: 50, high: 150}"]


def test_queue_limit_bounds_ttft_of_accepted_requests_and_counts_rejections():
    free = simulate(load(None, OVERLOAD))
    shed = simulate(load(None, OVERLOAD + ["engine.max_num_queued_reqs=40"]))
    s = shed.summary
    assert s["failed"] > 50 and s["completed"] + s["failed"] == 400
    assert set(shed.requests.loc[shed.requests.status == "rejected", "finish_reason"]) == {"queue_full"}
    assert (shed.steps.num_running + shed.steps.num_waiting).max() <= 40  # unfinished + 1 > limit is refused
    assert s["p99_ttft_ms"] < 0.3 * free.summary["p99_ttft_ms"]
    assert free.summary["failed"] == 0


def test_queued_token_limit():
    shed = simulate(load(None, OVERLOAD + ["engine.max_num_queued_tokens=3000"]))
    rejected = shed.requests[shed.requests.status == "rejected"]
    assert len(rejected) > 0 and set(rejected.finish_reason) == {"queued_tokens_full"}
    assert shed.summary["p99_ttft_ms"] < simulate(load(None, OVERLOAD)).summary["p99_ttft_ms"]


def test_rejections_fail_goodput():
    r = simulate(load(None, OVERLOAD + ["engine.max_num_queued_reqs=40", "workload.slo_classes={all: {e2el_ms: 1e9}}"]))
    assert r.summary["goodput_fraction"] == pytest.approx(r.summary["completed"] / 400)


PRESSURE = ["model=llama-3-8b", "profile=teaching", "hardware.gpu=generic-80gb", "engine.max_model_len=2048",
            "engine.num_gpu_blocks_override=260", "engine.max_num_seqs=64", "engine.enable_prefix_caching=false",
            "workload.num_requests=200", "workload.arrival.rate=6",
            "workload.prompt_tokens={dist: uniform, low: 100, high: 400}",
            "workload.output_tokens={dist: uniform, low: 200, high: 600}"]


def test_preempt_count_rule_stops_repeated_preemption_of_one_request():
    last = simulate(load(None, PRESSURE)).summary
    fair = simulate(load(None, PRESSURE + ["policies.preemption_victim=fewest_preemptions"])).summary
    assert last["num_preemptions"] > 20 and last["max_preemptions_per_request"] >= 3
    assert fair["max_preemptions_per_request"] < last["max_preemptions_per_request"]
    assert fair["completed"] == last["completed"] == 200
