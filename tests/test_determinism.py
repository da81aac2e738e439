"""Same inputs, same output, bit for bit; the fast paths (decode runs, the decode cohort) change nothing but speed."""

import pandas as pd
import pytest

from servesim.simulator.config import load
from servesim.simulator.engine import simulate

SCENARIOS = {
    "default": [],
    "preempting": ["engine.num_gpu_blocks_override=600", "engine.max_model_len=4096"],
    "static": ["policies.batching=static", "policies.static_batch_size=32"],
    "priority": ["policies.queue=priority", "workload.priorities=[0, 1, 2]", "engine.num_gpu_blocks_override=800",
                 "engine.max_model_len=4096"],
    "sjf-teaching": ["policies.queue=sjf", "profile=teaching", "engine.max_num_seqs=24"],
    "no-chunking": ["engine.enable_chunked_prefill=false", "engine.max_num_seqs=64", "engine.max_model_len=8192"],
    "closed-loop": ["workload.arrival={process: closed_loop, concurrency: 48, think_time_s: 0.5}"],
    "sessions": ["workload={type: sessions, num_sessions: 40, think_time_s: {dist: exponential, mean: 2}}"],
    "swap": ["policies.preemption_mode=swap", "engine.num_gpu_blocks_override=600", "engine.max_model_len=4096",
             "engine.swap_space=0.05"],
    "reservation": ["policies.admission.reserve=quantile", "engine.num_gpu_blocks_override=600",
                    "engine.max_model_len=4096"],
    "cluster": ["cluster.replicas=3", "cluster.router=least_outstanding", "workload.arrival.rate=30"],
    # routers that read a replica's blocks and decode context: a run applied at its end showed them stale
    "cluster-least-kv": ["cluster.replicas=2", "cluster.router=least_kv", "workload.arrival.rate=30"],
    "cluster-predicted-completion": ["cluster.replicas=2", "cluster.router=predicted_completion",
                                     "workload.arrival.rate=30"],
    "disaggregated": ["cluster.replicas=2", "cluster.prefill_replicas=1", "workload.arrival.rate=15"],
    "cluster-closed-loop": ["cluster.replicas=2", "workload.arrival={process: closed_loop, concurrency: 40}"],
    "long-prefill-threshold": ["engine.long_prefill_token_threshold=256", "engine.max_num_batched_tokens=1024"],
    "prefix-sharing": ["workload.shared_prefix={tokens: 1000, count: 3}", "engine.num_gpu_blocks_override=1500",
                       "engine.max_model_len=8192", "engine.block_size=32"],
    "gamma-bursts": ["workload.arrival={process: gamma, rate: 12, cv: 4}", "engine.num_gpu_blocks_override=900",
                     "engine.max_model_len=4096"],
    # round 96: 0.19 counts a KV-blocked head's lookup at every step, which a decode run had skipped
    "0.19-blocked-lookups": ["engine.vllm_defaults=0.19.0", "engine.num_gpu_blocks_override=600",
                             "engine.max_model_len=4096", "workload.shared_prefix={tokens: 512, count: 2}"],
}


def _run(sets):
    return simulate(load(None, ["workload.num_requests=300", "workload.arrival.rate=12"] + sets))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_decode_runs_equal_step_by_step(name):
    fast = _run(SCENARIOS[name])
    slow = _run(SCENARIOS[name] + ["simulation.decode_runs=false"])
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    assert fast.summary == slow.summary
    assert fast.summary["completed"] + fast.summary["failed"] == len(fast.requests) > 0


@pytest.mark.parametrize("sets", [["simulation.max_sim_time_s=3"],
                                  ["cluster.replicas=2", "workload.arrival.rate=30", "simulation.max_sim_time_s=2.5"]])
def test_decode_runs_equal_step_by_step_up_to_a_cut(sets):
    """A decode run whose last step outlasted max_sim_time_s was lost whole: 437 steps logged against 489, tokens
    made before the cut missing from requests.parquet."""
    fast, slow = _run(sets), _run(sets + ["simulation.decode_runs=false"])
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    assert fast.summary == slow.summary and fast.summary["unfinished"] > 0


def test_same_seed_same_result_other_seed_other_result():
    a, b = _run(["seed=7"]), _run(["seed=7"])
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    assert a.summary == b.summary
    c = _run(["seed=8"])
    assert c.summary["mean_ttft_ms"] != a.summary["mean_ttft_ms"]


def test_decode_runs_actually_skip_steps():
    # a saturated batch with nothing arriving: most steps are advanced as runs
    from servesim.simulator.engine import build

    rs = load(None, ["workload.num_requests=64", "workload.arrival.process=burst", "workload.arrival.rate=null"])
    sim = build(rs)
    calls = 0
    sched = sim.replicas[0].scheduler
    original = sched.schedule

    def counting(now):
        nonlocal calls
        calls += 1
        return original(now)

    sched.schedule = counting
    sim.env.run()
    assert calls < len(sim.replicas[0].log) / 5


def test_an_override_that_changes_nothing_changes_no_result(tmp_path):
    """A --set rewrote the scenario in sorted key order, and SLO classes are drawn in the file's order: a no-op
    `--set seed=3` gave other requests other classes (116 against 115 completed)."""
    from servesim.simulator.config import override

    scenario = tmp_path / "slo.yaml"
    scenario.write_text("seed: 3\nworkload:\n  num_requests: 120\n  arrival: {process: poisson, rate: 40}\n"
                        "  slo_classes: {gold: {weight: 1, ttft_ms: 300}, bronze: {weight: 3}, none: {weight: 1}}\n")
    plain = simulate(load(str(scenario))).requests
    for sets in (["seed=3"], [override("workload.slo_classes", {"gold": {"weight": 1, "ttft_ms": 300},
                                                                 "bronze": {"weight": 3}, "none": {"weight": 1}})]):
        again = simulate(load(str(scenario), sets)).requests
        assert again["slo_class"].tolist() == plain["slo_class"].tolist()
        pd.testing.assert_frame_equal(again, plain)
    swapped = simulate(load(str(scenario), [override("workload.slo_classes", {"bronze": {"weight": 3}, "gold": {
        "weight": 1, "ttft_ms": 300}, "none": {"weight": 1}})])).requests
    assert swapped["slo_class"].tolist() != plain["slo_class"].tolist()  # the order is the user's, and it counts


def _fast_and_slow(sets, specs):
    from servesim.simulator.engine import build, collect, run_to_end

    out = []
    for extra in ([], ["simulation.decode_runs=false"]):
        rs = load(None, sets + extra)
        sim = build(rs, specs)
        run_to_end(sim, rs)
        out.append((sim, collect(sim, rs)))
    return out


def test_a_prompt_whose_last_chunk_is_one_token_gets_its_first_token_time():
    """With long_prefill_token_threshold=256 a 257-token prompt's second chunk is one token, shaped like a decode:
    the decode cohort took it in as a decoder and its first token time was lost (NaN TTFT)."""
    from servesim.workloads.spec import RequestSpec

    specs = [RequestSpec(0, 0.0, 3000, 40), RequestSpec(1, 0.0, 257, 30), RequestSpec(2, 0.01, 513, 20)]
    (_, fast), (_, slow) = _fast_and_slow(["engine.long_prefill_token_threshold=256"], specs)
    assert fast.requests["first_token_time"].notna().all()
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)


def test_the_decode_cohort_carries_most_request_steps(monkeypatch):
    """The fast path is in use: most request-steps of a busy run are the cohort's (not in the step's list)."""
    from servesim.simulator.scheduler import Scheduler

    seen = {"implicit": 0, "explicit": 0}
    original = Scheduler._update_after_schedule

    def counting(self, out):
        seen["implicit"] += out.implicit
        seen["explicit"] += len(out.reqs)
        return original(self, out)

    monkeypatch.setattr(Scheduler, "_update_after_schedule", counting)
    _run([])
    assert seen["implicit"] > 4 * seen["explicit"] > 0
