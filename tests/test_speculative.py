"""Speculative decoding (essay 003 and vLLM's accounting): fixed k pays off at low load and costs
throughput under load; adaptive k keeps the gain and drops the cost."""

import pytest

from servesim.simulator.config import load
from servesim.simulator.engine import simulate
from servesim.simulator.errors import ConfigError

BASE = ["profile=roofline", "workload.num_requests=1500",
        "workload.prompt_tokens={dist: lognormal, median: 200, sigma: 0.5, max: 1000}",
        "workload.output_tokens={dist: lognormal, median: 300, sigma: 0.4, max: 1000}",
        "speculative.acceptance_rate=0.6"]


def run(rate, method):
    return simulate(load(None, BASE + [f"workload.arrival.rate={rate}", f"speculative.method={method}"]))


def test_low_load_speculation_cuts_tpot_and_adaptive_matches_fixed():
    none, fixed, adaptive = (run(2, m).summary for m in ("none", "fixed", "adaptive"))
    assert fixed["mean_tpot_ms"] < 0.7 * none["mean_tpot_ms"]
    assert adaptive["mean_tpot_ms"] == pytest.approx(fixed["mean_tpot_ms"], rel=0.02)
    # 0.6 per draft over k = 4: (0.6 + 0.36 + 0.216 + 0.13) / 4 accepted
    assert fixed["spec_decode_acceptance_rate"] == pytest.approx(0.326, abs=0.03)


def test_under_load_fixed_k_loses_throughput_and_adaptive_does_not():
    none, fixed, adaptive = (run(120, m).summary for m in ("none", "fixed", "adaptive"))
    assert fixed["output_throughput"] < 0.9 * none["output_throughput"]  # verification competes with real work
    assert adaptive["output_throughput"] >= none["output_throughput"]
    assert adaptive["output_throughput"] > 1.2 * fixed["output_throughput"]


def test_accounting_is_exact():
    r = run(10, "fixed")
    req, steps = r.requests, r.steps
    assert (req.status == "finished").all()
    # every request still produces exactly its output length; several tokens can come in one step
    outs = simulate(load(None, BASE + ["workload.arrival.rate=10"])).requests.output_tokens
    assert (req.output_tokens.to_numpy() == outs.to_numpy()).all()
    assert steps.spec_accepted.sum() <= steps.spec_drafts.sum()
    assert r.summary == run(10, "fixed").summary  # deterministic for a seed


def test_acceptance_distribution_is_validated():
    with pytest.raises(ConfigError, match="speculative.acceptance_distribution: needs k \\+ 1 = 3 probabilities"):
        load(None, ["speculative={method: fixed, num_speculative_tokens: 2, acceptance_distribution: [0.5, 0.5]}"])
    r = simulate(load(None, BASE + ["workload.arrival.rate=2", "workload.num_requests=200",
                                    "speculative={method: fixed, num_speculative_tokens: 2, "
                                    "acceptance_distribution: [0, 0, 1]}"])).summary
    assert r["spec_decode_acceptance_rate"] == 1.0


def test_fewer_drafts_than_k_take_the_distributions_tail():
    """Of k' < k drafts offered (adaptive k under load, a budget, the context's end), the accepted run is
    min(X, k'): a distribution whose first k' + 1 entries are zero crashed (0 / 0), and renormalising them moved
    the tail's mass onto shorter runs."""
    import numpy as np

    from servesim.simulator.config import SpeculativeSettings
    from servesim.simulator.speculation import acceptance_sampler

    sp = SpeculativeSettings(method="fixed", num_speculative_tokens=4, acceptance_distribution=[0, 0, 0.2, 0.3, 0.5])
    accept = acceptance_sampler(sp, 0)
    assert {accept(1) for _ in range(50)} == {1}  # X >= 2 always: one draft offered, one accepted
    draws = np.array([accept(3) for _ in range(4000)])
    assert set(draws) == {2, 3} and abs((draws == 3).mean() - 0.8) < 0.03  # P(X >= 3) = 0.3 + 0.5
    r = simulate(load(None, BASE + ["workload.arrival.process=burst", "workload.num_requests=100",
                                    "speculative={method: adaptive, acceptance_distribution: [0, 0, 0.2, 0.3, 0.5]}"]))
    assert r.summary["completed"] == 100 and r.summary["spec_decode_acceptance_rate"] > 0.5


def test_each_draft_position_is_accepted_as_the_run_of_successes_says():
    """vLLM's per-position acceptance: the draft at position i counts when all i before it were accepted, so with a
    per-token rate a, position i is accepted a^(i+1) of the time."""
    s = run(2, "fixed").summary
    rates = s["spec_decode_per_position_acceptance_rates"]
    assert rates == pytest.approx([0.6 ** (i + 1) for i in range(4)], abs=0.02)
    assert s["spec_decode_acceptance_length"] == pytest.approx(1 + sum(rates))
    assert "spec_decode_num_drafts" not in run(2, "none").summary


def test_a_prompts_last_chunk_verifies_no_drafts():
    """Issue 16: a prompt whose last chunk is one token was scheduled as a decode with k drafts and "accepted"
    them, so its first step gave 4 tokens. vLLM drafts only after a request's token (spec_token_ids come from
    the step before), so that step computes the one token and samples one."""
    r = simulate(load(None, ["workload.num_requests=1", "workload.prompt_tokens={dist: fixed, value: 2049}",
                             "workload.output_tokens={dist: fixed, value: 20}", "engine.max_num_batched_tokens=2048",
                             "speculative={method: fixed, num_speculative_tokens: 3, acceptance_rate: 1.0}"]))
    assert list(r.steps.scheduled_tokens[:3]) == [2048, 1, 4]
    assert list(r.requests.token_runs[0]) == [1, 6]  # 1 token, then 4 a step: 20 in six steps, not five
