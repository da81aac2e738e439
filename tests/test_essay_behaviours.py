"""Behaviours the background essay (002) reports, reproduced on its teaching cost model."""

from pathlib import Path

from servesim.simulator.config import load
from servesim.simulator.engine import simulate

ESSAY = Path(__file__).parents[1] / "docs" / "scenarios" / "essay-batching.yaml"


def summary(*sets):
    return simulate(load(ESSAY, list(sets))).summary


def test_continuous_batching_cuts_ttft_and_raises_throughput_at_a_price_in_tpot():
    cont = summary("policies.batching=continuous")
    static = summary("policies.batching=static")
    assert cont["completed"] == static["completed"] == 40
    assert static["mean_ttft_ms"] > 3 * cont["mean_ttft_ms"]  # several-fold (the essay: 6.2x)
    assert cont["request_throughput"] > 1.3 * static["request_throughput"]  # the essay: +57%
    assert cont["mean_tpot_ms"] > static["mean_tpot_ms"]  # fuller batches decode each token slower
    assert 0 < static["useful_work_fraction"] < 1 and cont["useful_work_fraction"] is None


def test_doubling_the_arrival_rate_raises_ttft_for_the_same_prompts():
    at6 = summary("workload.arrival.rate=6")
    at12 = summary("workload.arrival.rate=12")
    assert at12["mean_ttft_ms"] > 1.5 * at6["mean_ttft_ms"]


def _long_prompt_run(run, chunked: bool, budget: int):
    # eight chatty requests decode; at t=1 s a 6,000-token prompt arrives
    rows = [(0.0, 50, 400)] * 8 + [(1.0, 6000, 5)]
    result = run(rows, enable_chunked_prefill=chunked, max_num_batched_tokens=budget, max_num_seqs=16)
    others = result.requests[result.requests["prompt_tokens"] == 50]
    return others["max_itl"].max(), result.itls.mean()


def test_a_long_prompt_stalls_everyone_without_chunked_prefill(run):
    worst, mean = _long_prompt_run(run, chunked=False, budget=8192)
    assert worst > 8 * mean  # one 6,000-token prefill step: 18 + 0.03 x 6000 ms vs ~19 ms decodes


def test_chunked_prefill_bounds_the_gap_by_the_token_budget(run):
    budget = 512
    worst, _ = _long_prompt_run(run, chunked=True, budget=budget)
    bound_ms = 18.0 + 0.12 * 9 + 0.03 * budget  # the teaching model's step at a full budget, 9 sequences
    assert worst * 1000 <= bound_ms + 1e-9
    unchunked, _ = _long_prompt_run(run, chunked=False, budget=8192)
    assert unchunked > 4 * worst


def test_a_small_pool_preempts_and_every_request_still_completes(run):
    rows = [(0.0, 200, 400)] * 20
    result = run(rows, num_gpu_blocks_override=120, max_model_len=1024)
    s = result.summary
    assert s["num_preemptions"] > 0 and s["preempted_requests"] > 0
    assert s["completed"] == 20 and (result.requests["output_tokens"] == 400).all()
    assert s["kv_cache_usage_peak"] > 0.9
