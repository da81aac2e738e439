"""Routers across replicas (issue 8's routing part): prefix affinity against round robin and
predicted completion, on small clusters."""

import json

import pandas as pd
import pytest

from servesim.simulator.config import load
from servesim.simulator.engine import simulate
from servesim.simulator.errors import ConfigError
from servesim.workloads.spec import RequestSpec

BASE = ["cluster.replicas=4", "workload.num_requests=600", "workload.arrival.rate=24",
        "workload.prompt_tokens={dist: lognormal, median: 150, sigma: 0.5, max: 1000}",
        "workload.output_tokens={dist: lognormal, median: 150, sigma: 0.5, max: 600}",
        "engine.num_gpu_blocks_override=2200", "engine.max_model_len=8192"]


def run(router, prefixes):
    return simulate(load(None, BASE + [f"workload.shared_prefix={{tokens: 6000, count: {prefixes}}}",
                                       f"cluster.router={router}"])).summary


def test_prefix_affinity_beats_round_robin_on_shared_prefixes():
    rr, pa = run("round_robin", 8), run("prefix_affinity", 8)
    # eight 6,000-token system prompts do not all stay cached on every replica: affinity keeps each on one
    assert pa["prefix_cache_hit_rate"] > rr["prefix_cache_hit_rate"] + 0.2
    assert pa["mean_ttft_ms"] < 0.2 * rr["mean_ttft_ms"]


def test_predicted_completion_leaves_a_saturated_replica():
    pa, pc = run("prefix_affinity", 1), run("predicted_completion", 1)
    # one hot prefix: affinity sends everything to the replica that holds it
    assert pa["replica_completed"]["0"] == 600 and pa["load_imbalance"] == 4.0
    assert pc["load_imbalance"] < 1.3 and pc["mean_ttft_ms"] < 0.6 * pa["mean_ttft_ms"]
    assert pc["prefix_cache_hit_rate"] > 0.9  # the prefix gets cached on every replica it uses


def test_prefix_affinity_without_a_prefix_cache_says_it_routes_as_least_outstanding(capsys):
    """r128: with engine.enable_prefix_caching off, its criterion reads 0 everywhere (the tie-break routes), unsaid."""
    small = ["cluster.replicas=2", "workload.num_requests=40", "workload.arrival.rate=30",
             "workload.shared_prefix={tokens: 2000, count: 4}"]
    said = "servesim: warning: cluster.router=prefix_affinity routes as least_outstanding: engine.enable_prefix_caching"
    runs = {}
    for caching in ("true", "false"):
        for router in ("prefix_affinity", "least_outstanding"):
            runs[caching, router] = simulate(load(None, small + [f"engine.enable_prefix_caching={caching}",
                                                                 f"cluster.router={router}"])).requests
            assert (said in capsys.readouterr().err) == (caching == "false" and router == "prefix_affinity")
    assert runs["false", "prefix_affinity"].equals(runs["false", "least_outstanding"])
    assert not runs["true", "prefix_affinity"].equals(runs["true", "least_outstanding"])


def test_least_kv_and_least_outstanding_balance():
    for router in ("least_kv", "least_outstanding"):
        s = run(router, 8)
        assert s["completed"] == 600 and s["load_imbalance"] < 1.4  # least_kv 1.33: its KV reads lag a step


def test_vllm_dp_scores_ranks_as_vllms_balancer_does():
    """DPLBAsyncMPClient: 0.33 adds 6 x waiting x (KV usage - 0.5) to the unfinished count of a rank over half
    full; 0.19 weighs waiting 4 to running's 1. Ties go to the lowest rank."""
    from types import SimpleNamespace as Rank

    from servesim.policies.routing import make_router

    def pick(loads, old=False):
        return make_router("vllm_dp", len(loads), vllm_0_19=old).choose(None, loads)

    kv_bound = [Rank(unfinished=4, waiting=2, kv_usage=0.9), Rank(unfinished=6, waiting=0, kv_usage=0.2)]
    assert pick(kv_bound) == 1 and pick(kv_bound, old=True) == 1  # 0.33: 4 + 4.8 > 6; 0.19: 10 > 6
    roomy = [Rank(unfinished=4, waiting=2, kv_usage=0.3), Rank(unfinished=5, waiting=0, kv_usage=0.2)]
    assert pick(roomy) == 0 and pick(roomy, old=True) == 1  # 0.33: 4 < 5 (no penalty at 30%); 0.19: 10 > 5
    assert pick([Rank(unfinished=2, waiting=0, kv_usage=0.0)] * 3) == 0


def test_data_parallel_ranks_are_balanced_as_vllm_balances_them(capsys):
    """A deployment's DP ranks sit behind vLLM's balancer whatever router is in front of the replicas (round 82:
    `servesim vllm -dp 2` routed them round-robin; round 83: over replicas x ranks as one pool, a full deployment
    kept taking requests while another sat idle). Idle ranks tie: 0.33 rotates the scan's start, 0.19 does not."""
    light = ["engine.data_parallel_size=2", "workload.num_requests=20", "workload.arrival.rate=1",
             "workload.prompt_tokens={dist: fixed, value: 256}", "workload.output_tokens={dist: fixed, value: 16}"]
    per_rank = {v: simulate(load(None, light + [f"engine.vllm_defaults={v}"])).summary["replica_completed"]
                for v in ("0.33.0", "0.19.0")}
    assert per_rank == {"0.33.0": {"0": 10, "1": 10}, "0.19.0": {"0": 17, "1": 3}}
    default = simulate(load(None, light)).requests
    assert default.equals(simulate(load(None, light + ["cluster.router=least_kv"])).requests)
    assert "cluster.router has no effect: one replica takes every request (vLLM's own balancer" in \
        capsys.readouterr().err
    burst = ["workload.num_requests=10", "workload.arrival.process=burst", "engine.max_num_queued_reqs=1",
             "cluster.replicas=2", "engine.data_parallel_size=2"]
    s = simulate(load(None, burst)).summary  # each deployment queues one: the front router spreads them
    assert s["completed"] == 2 and s["replica_completed"] == {"0": 1, "1": 0, "2": 1, "3": 0}


@pytest.mark.parametrize("refusal", ["engine.max_num_queued_reqs=1", "engine.max_model_len=600"])
def test_round_165_a_request_the_api_server_refuses_does_not_move_the_dp_balancer(refusal):
    """vLLM 0.33's balancer moves its scan's start on for each request it routes, and a request answered 503 (queue
    limits) or 400 (no room for its output) never reaches it: the admitted ones, each arriving at idle ranks,
    alternate. r165: the refused moved it on too, so the admitted went to rank request_id % 2 (6 and 3 of 9)."""
    sets = ["engine.data_parallel_size=2", "workload.num_requests=200", "workload.arrival.rate=20",
            "workload.prompt_tokens={dist: uniform, low: 100, high: 2000}", refusal,
            "workload.output_tokens={dist: uniform, low: 10, high: 400}", "workload.clip_to_max_model_len=false"]
    if "max_model_len" in refusal:  # 400s only: requests far apart, so that every admitted one finds idle ranks
        sets += ["workload.arrival.rate=0.05", "workload.num_requests=30"]
    req = simulate(load(None, sets)).requests.sort_values("arrival_time")
    done = req[req["status"] == "finished"]
    assert 2 < len(done) < len(req)
    assert done["replica"].tolist() == [i % 2 for i in range(len(done))]


def test_only_the_dp_ranks_the_api_server_reaches_take_requests(capsys):
    """Round 84: vLLM's hybrid and external balancing (cluster.dp_ranks_reached) reach this node's ranks only; the
    bench client's traffic went to every rank of the deployment (capacity overstated by -dp / local size)."""
    light = ["engine.data_parallel_size=4", "workload.num_requests=20", "workload.arrival.rate=1",
             "workload.prompt_tokens={dist: fixed, value: 256}", "workload.output_tokens={dist: fixed, value: 16}"]
    for reached, spread in ((2, {"0": 10, "1": 10, "2": 0, "3": 0}), (1, {"0": 20, "1": 0, "2": 0, "3": 0})):
        s = simulate(load(None, light + [f"cluster.dp_ranks_reached={reached}"])).summary
        assert s["replica_completed"] == spread
    two = ["cluster.replicas=2", "cluster.dp_ranks_reached=1"]
    assert simulate(load(None, light + two)).summary["replica_completed"] == \
        {**{str(i): 0 for i in range(8)}, "0": 10, "4": 10}  # the router picks the replica, rank 0 serves it
    with pytest.raises(ConfigError, match="cluster.dp_ranks_reached: 5 above engine.data_parallel_size 4"):
        load(None, light + ["cluster.dp_ranks_reached=5"])
    capsys.readouterr()
    load(None, light + ["cluster.dp_ranks_reached=4"])
    assert "cluster.dp_ranks_reached has no effect: it reaches every one of the 4 DP rank(s)" in capsys.readouterr().err


def test_tensor_parallel_profiles_include_the_all_reduce_and_split_the_work():
    """TP 2 lowers step time per the communication table: the imported H200 Qwen3-32B profiles."""
    from servesim.simulator.batch import BatchShape, decode_shape

    tp1 = load(None, ["model=qwen3-32b", "profile=h200-qwen3-32b-bf16-tp1", "engine.max_model_len=8192"])
    tp2 = load(None, ["model=qwen3-32b", "profile=h200-qwen3-32b-bf16-tp2", "engine.max_model_len=8192",
                      "engine.tensor_parallel_size=2"])
    for shape in (decode_shape(64, 64 * 2000), BatchShape(1, 2048, 2048 * 2049 // 2, 0, 0)):
        t1, t2 = tp1.cost_model.step_time(shape), tp2.cost_model.step_time(shape)
        assert 0.45 * t1 < t2 < 0.9 * t1  # half the work per GPU, plus two all-reduces per layer
    assert tp2.num_gpu_blocks > 2 * tp1.num_gpu_blocks  # half the weights per GPU leaves more for KV


DISAGG = ["workload.num_requests=400", "workload.arrival.rate=8",
          "workload.prompt_tokens={dist: lognormal, median: 3000, sigma: 0.6, max: 7000}",
          "workload.output_tokens={dist: lognormal, median: 300, sigma: 0.5, max: 1000}"]


def test_disaggregation_frees_decodes_from_prefill_stalls():
    colocated = simulate(load(None, DISAGG + ["cluster.replicas=2"])).summary
    split = simulate(load(None, DISAGG + ["cluster.replicas=1", "cluster.prefill_replicas=1"]))
    s = split.summary
    assert s["completed"] == 400 and s["replicas"] == 2
    assert s["p99_itl_ms"] < 0.3 * colocated["p99_itl_ms"]  # no prompt shares a decode step any more
    req = split.requests
    assert (req.prefill_replica == 0).all() and (req.replica == 1).all()
    assert "load_imbalance" not in s  # one decode replica: nothing to balance


def test_a_prefill_replicas_link_carries_one_transfer_at_a_time():
    """Round 83: every hand-off got the whole link, so 100 prompts' KV left a 1 MB/s link at 25 MB/s. Now the
    run lasts at least the prompts' KV bytes over the link, and a fast link is not the bound."""
    sets = ["workload.num_requests=100", "cluster.replicas=2", "cluster.prefill_replicas=1"]
    slow = simulate(load(None, sets + ["cluster.kv_link_gbps=0.001"]))
    kv_bytes = slow.summary["total_input_tokens"] * load(None, sets).arch.kv_bytes_per_token_per_gpu(1)
    assert slow.summary["duration"] >= kv_bytes / 1e6 > 100 * simulate(load(None, sets)).summary["duration"]
    order = slow.requests.sort_values("first_token_time")  # transfers leave in hand-off order
    assert order["finish_time"].is_monotonic_increasing


def test_a_disaggregated_summary_counts_the_decode_replicas_and_the_mean_replica_busy():
    s = simulate(load(None, DISAGG + ["cluster.replicas=2", "cluster.prefill_replicas=1"])).summary
    assert set(s["replica_completed"]) == {"1", "2"} and sum(s["replica_completed"].values()) == 400
    assert s["load_imbalance"] < 1.3  # the least loaded decode replica takes each prompt
    assert 0 < s["busy_fraction"] <= 1  # the mean replica's share of the run, not the sum over replicas


def _prefill_token_time(r) -> pd.Series:
    """When each request's prefill replica sampled its token (the one vLLM's P/D proxy discards)."""
    ends = r.steps.groupby("replica")["end"].apply(lambda e: e.to_numpy())
    return r.requests.apply(lambda x: ends[x.prefill_replica][x.prefill_token_runs[0]], axis=1)


def test_the_kv_transfer_counts_in_the_time_to_first_token():
    """Issue 16 (r107): the client's first token is the decode replica's, as vLLM's P/D proxy streams the decode
    instance's answer; the first token had been the prefill replica's, so TTFT left out the transfer and the
    decode queue, and the transfer showed as an inter-token gap."""
    r = simulate(load(None, DISAGG + ["cluster.replicas=1", "cluster.prefill_replicas=1", "cluster.kv_link_gbps=1"]))
    req = r.requests
    transfer = req.prompt_tokens * 131072 / 1e9  # Llama-3.1-8B bf16: 128 KiB of KV per token over 1 GB/s
    assert (req.first_token_time - _prefill_token_time(r) >= transfer - 1e-9).all()
    fast = simulate(load(None, DISAGG + ["cluster.replicas=1", "cluster.prefill_replicas=1"])).summary
    assert r.summary["mean_ttft_ms"] > fast["mean_ttft_ms"] + 1e3 * transfer.mean() - 1e-6
    # the transfer is not a gap between tokens any more (a request preempted on the decode pool has its own)
    assert req[req.num_preemptions == 0].max_itl.max() < transfer.min()


def test_a_decode_replica_pulls_only_what_its_own_prefix_cache_lacks():
    """Issue 16 (r111): every hand-off pulled the whole prompt, though vLLM's decode instance looks the prompt up
    in its own prefix cache first and its connector pulls only the rest (NIXL: prompt - num_computed_tokens). A
    shared system prompt then crosses the link once per decode replica, not once per request; the decode replica
    holds blocks for the whole prompt while the rest is pulled, counted as waiting, as vLLM's
    WAITING_FOR_REMOTE_KVS requests are."""
    sets = DISAGG[:1] + ["workload.arrival.rate=4", "workload.shared_prefix={tokens: 2048, count: 1}",
                         "cluster.replicas=1", "cluster.prefill_replicas=1", "cluster.kv_link_gbps=1"]
    r = simulate(load(None, sets))
    req = r.requests
    transfer = req.pulled_tokens * 131072 / 1e9
    # nothing cached there before the first request's KV arrived (r159: its blocks are cached then, not when its
    # pull began): a request handed off before that pulls its whole prompt, every later one the rest
    before = _prefill_token_time(r) < _prefill_token_time(r).iloc[0] + transfer.iloc[0]
    assert before.iloc[0] and 1 < before.sum() < 10
    assert (req.pulled_tokens[before] == req.prompt_tokens[before]).all()
    assert (req.pulled_tokens[~before] == req.prompt_tokens[~before] - 2048).all()
    assert (req.first_token_time - _prefill_token_time(r) >= transfer - 1e-9).all()
    off = simulate(load(None, sets + ["engine.enable_prefix_caching=false"]))
    assert (off.requests.pulled_tokens == off.requests.prompt_tokens).all()
    assert r.summary["mean_ttft_ms"] < 0.5 * off.summary["mean_ttft_ms"]
    decode = r.steps[r.steps.replica == 1]
    assert decode.num_waiting.max() >= 1  # a pull in flight counts as waiting


def test_a_request_holding_its_pulled_kv_is_admitted_before_the_queue():
    """r112 called this a deadlock: a decode replica's preempted request, back at the head of its queue, needs
    blocks that pulled prompts waiting behind it hold, nothing runs, "vLLM's decode instance would wait for ever".
    r132 (vLLM): it would not: vLLM admits requests holding KV first (0.19's skipped_waiting, 0.33's
    kv_holding_waiting), so the loaded prompt runs, frees its blocks, and the head goes on. Likewise a short
    prompt handed off first by a second prefill replica no longer waits behind a long one that arrived earlier."""
    sets = ["cluster.prefill_replicas=1", "engine.max_model_len=8192", "engine.num_gpu_blocks_override=513",
            "workload.num_requests=3", "workload.arrival.rate=50", "engine.max_num_seqs=1",
            "workload.prompt_tokens={dist: uniform, low: 2500, high: 3500}",
            "workload.output_tokens={dist: uniform, low: 2000, high: 4000}"]
    for release in ("0.33.0", "0.19.0"):
        assert simulate(load(None, sets + [f"engine.vllm_defaults={release}"])).summary["completed"] == 3
    trace = [RequestSpec(0, 0.0, 14000, 50), RequestSpec(1, 0.001, 3000, 50)]  # 2 prefill replicas, a slow link
    r = simulate(load(None, ["cluster.prefill_replicas=2", "engine.num_gpu_blocks_override=1000",
                             "engine.max_model_len=15000", "cluster.kv_link_gbps=0.5"]), trace)
    req = r.requests.set_index("request_id")
    assert req.loc[1, "finish_time"] < req.loc[0, "first_token_time"]  # the short one went first, and was done


@pytest.mark.parametrize("reserve", ["max_tokens", "quantile"])
def test_a_pulled_prompt_counts_its_own_blocks_towards_its_reservation(reserve):
    """r112: admission's reservation asked for prompt + output among the free blocks, not counting the prompt's
    blocks a decode replica already held for its pull, so a lone request was never admitted (internal error)."""
    r = simulate(load(None, ["cluster.prefill_replicas=1", "engine.max_model_len=8192", "workload.num_requests=3",
                             "engine.num_gpu_blocks_override=513", f"policies.admission.reserve={reserve}",
                             "workload.prompt_tokens={dist: fixed, value: 5000}",
                             "workload.output_tokens={dist: fixed, value: 3000}"]))
    assert r.summary["completed"] == 3


def test_a_pull_moves_only_the_window_of_a_hybrid_models_local_layers():
    """r112: gpt-oss's sliding layers keep only their 128-token window under the hybrid manager (0.33 keeps it on
    beside NIXL), so a pull moves that much of them; it had moved every layer's whole prompt, twice the bytes."""
    sets = ["model=gpt-oss-120b", "cluster.prefill_replicas=1", "cluster.kv_link_gbps=1", "workload.num_requests=4",
            "workload.arrival.rate=0.5", "workload.prompt_tokens={dist: fixed, value: 4000}",
            "workload.output_tokens={dist: fixed, value: 50}"]
    rs = load(None, sets)
    local, layer = rs.kv_layout.local, rs.kv_layout.layer_bytes_per_token
    assert rs.kv_layout.local_groups and local.window == 128
    r = simulate(rs)
    wait = r.requests.first_token_time - _prefill_token_time(r)
    moved = layer * ((local.layers - local.local_layers) * 4000 + local.local_layers * 127) / 1e9
    assert (wait >= moved - 1e-9).all() and wait.min() < moved + 0.02  # (one pull at a time on the link)
    assert moved < 0.6 * 4000 * rs.arch.kv_bytes_per_token_per_gpu(rs.scenario.engine.tensor_parallel_size) / 1e9


def test_routers_read_only_the_replica_load_view():
    """Every router chooses from objects that have ReplicaLoad's members and nothing else; the engine's replicas
    satisfy that view. So a router cannot come to depend on a replica's internals."""
    from dataclasses import dataclass

    from servesim.policies.routing import ROUTERS, ReplicaLoad, make_router
    from servesim.simulator.engine import build
    from servesim.workloads.spec import RequestSpec

    @dataclass
    class Load:
        unfinished: int
        kv_usage: float
        prefill_tokens_per_s: float = 10_000.0
        cached: int = 0
        waiting: int = 0

        def cached_prefix_tokens(self, req) -> int:
            return self.cached

        def predicted_queue_wait(self, req) -> float:
            return self.unfinished * 0.01

        def predicted_tpot(self) -> float:
            return 0.01 + 0.001 * self.unfinished

    class Req:
        prompt_tokens = 1000
        spec = RequestSpec(0, 0.0, 1000, 100)

    loads = [Load(5, 0.5), Load(1, 0.1, cached=900), Load(3, 0.9)]
    assert all(isinstance(x, ReplicaLoad) for x in loads)
    picks = {name: make_router(name, 3, seed=0).choose(Req(), loads) for name in ROUTERS}
    assert picks["least_outstanding"] == picks["least_kv"] == picks["prefix_affinity"] == picks["vllm_dp"] == 1
    assert picks["predicted_completion"] == 1 and picks["round_robin"] == 0 and 0 <= picks["random"] < 3
    sim = build(load(None, ["cluster.replicas=2"]))
    assert all(isinstance(r, ReplicaLoad) for r in sim.replicas)


def test_disaggregated_token_runs_give_every_token_time():
    """Round 23 and issue 16 (r107): token_runs hold every token the client gets, all the decode replica's, the
    first at first_token_time; prefill_token_runs the prefill replica's one step, whose token is discarded (a
    one-token answer goes to the decode replica too, as vLLM's proxy sends every request on)."""
    r = simulate(load(None, ["workload.num_requests=20", "cluster.replicas=1", "cluster.prefill_replicas=1",
                             "workload.output_tokens={dist: uniform, low: 1, high: 3}"]))
    steps = r.steps
    assert (r.requests.output_tokens == 1).any()
    for _, x in r.requests.iterrows():
        runs, first = list(x.token_runs), list(x.prefill_token_runs)
        assert sum(b - a + 1 for a, b in zip(runs[0::2], runs[1::2])) == x.output_tokens and first[0] == first[1]
        ends = steps[steps.replica == x.replica]["end"].to_numpy()
        assert ends[runs[0]] == x.first_token_time and x.replica == 1
    assert (_prefill_token_time(r) < r.requests.first_token_time).all()
    assert "prefill_token_runs" not in simulate(load(None, ["workload.num_requests=5"])).requests


def test_a_decode_replica_takes_pulled_requests_in_arrival_order():
    """r121: a request whose KV arrived went back to the head of the decode replica's queue, so those pulled one
    after another were served newest first (first tokens 12, 34, 33, ..., 13, 11, 10); vLLM leaves a request
    waiting for its KV in its place, so they go on in arrival order."""
    r = simulate(load(None, ["workload.num_requests=40", "workload.arrival.rate=20", "cluster.replicas=1",
                             "cluster.prefill_replicas=1", "engine.max_num_seqs=4"])).requests
    order = r.sort_values(["first_token_time", "request_id"])["request_id"].tolist()
    assert order == sorted(order)


def test_round_132_the_proxy_hands_prompts_to_decode_replicas_in_turn():
    """r132 (vLLM): vLLM's P/D proxies (the NIXL toy proxy, the Mooncake and disagg demos) pick the decode instance
    in turn; servesim always took the least loaded, and said vLLM's proxy does (near the decode replicas' KV limit
    in turn was 7% slower TTFT on average, 22% at p99). cluster.decode_router: round_robin by default,
    least_outstanding the other choice."""
    sets = ["cluster.prefill_replicas=1", "cluster.replicas=3", "engine.max_model_len=8192", "workload.num_requests=60",
            "workload.arrival.rate=20"]
    r = simulate(load(None, sets))
    assert r.requests.replica.value_counts().to_dict() == {1: 20, 2: 20, 3: 20}  # 60 hand-offs, one each in turn
    least = simulate(load(None, sets + ["cluster.decode_router=least_outstanding"]))
    assert least.requests.replica.tolist() != r.requests.replica.tolist()
    with pytest.raises(ConfigError, match="cluster.decode_router"):
        load(None, sets + ["cluster.decode_router=random"])


def test_round_139_a_decode_replicas_reservations_count_its_pulls_and_a_stall_is_one_line(tmp_path, capsys):
    """r139: with output reservation (policies.admission.reserve) a decode replica's pulls counted no reservation,
    so they took the room of the loaded requests' outputs: nothing ran, nothing freed, and the run ended with 16
    requests "unfinished" in an internal error. Under 0.19's priority order a preempted head waiting for blocks
    that loaded requests behind it hold is vLLM's own stall: one line naming the pool."""
    from servesim.simulator.cli import main

    reserve = ["workload.num_requests=60", "engine.max_model_len=4096", "policies.admission.reserve=max_tokens",
               "engine.num_gpu_blocks_override=400", "cluster.replicas=2", "cluster.prefill_replicas=1",
               "workload.shared_prefix={tokens: 500, count: 3}"]
    assert main(["run", "--json", "--out", str(tmp_path / "a"), *[x for s in reserve for x in ("--set", s)]]) == 0
    assert json.loads(capsys.readouterr().out)["completed"] == 60
    (tmp_path / "c2.yaml").write_text("""
engine: {vllm_defaults: 0.19.0, num_gpu_blocks_override: 400, long_prefill_token_threshold: 256}
policies: {queue: priority, batching: static}
cluster: {prefill_replicas: 1, replicas: 1}
workload:
  num_requests: 60
  slo_classes:
    gold: {weight: 1, priority: 0, ttft_ms: 1000}
    bronze: {weight: 2, priority: 3, ttft_ms: 5000}
""")
    assert main(["run", str(tmp_path / "c2.yaml"), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("servesim: error: engine.num_gpu_blocks_override: replica 1 waits "
                                               "for ever: its queue's head"), err


def test_round_140_a_decode_replica_takes_loaded_requests_in_its_queues_order():
    """r140: requests whose pulled KV had arrived waited in pull-completion order whatever the policy; vLLM keeps
    them in a queue of its scheduling policy (0.19's skipped_waiting, 0.33's kv_holding_waiting), so under priority
    a high-priority request waited behind every low one pulled before it: its class's TTFT 4-8x too high."""
    from servesim.simulator.config import load

    rs = load(None, ["seed=1", "model=llama-3-8b", "hardware.gpu=generic-80gb", "profile=teaching",
                     "engine.max_num_seqs=8", "engine.vllm_defaults=0.19.0", "cluster.prefill_replicas=2",
                     "policies.queue=priority", "workload.num_requests=200",
                     "workload.arrival={process: poisson, rate: 10}",
                     "workload.prompt_tokens={dist: uniform, low: 200, high: 2000}",
                     "workload.output_tokens={dist: uniform, low: 50, high: 300}",
                     "workload.slo_classes={hi: {weight: 1, priority: 0}, lo: {weight: 3, priority: 1}}"])
    rows = simulate(rs).requests
    ttft = rows.groupby("priority")["ttft"].mean()
    assert ttft[0] < 0.25 * ttft[1], ttft  # was 0.56 (17.4 s against 31.1 s)
    # the holding queue's order: the policy's key, or under FCFS the order the pulls started (stamped as seq)
    from types import SimpleNamespace

    from servesim.policies.queues import make_queue_policy

    reqs = [SimpleNamespace(priority=p, engine_arrival=t, request_id=i, seq=s, expected_job=0)
            for i, (p, t, s) in enumerate([(1, 0.0, 3), (0, 2.0, 1), (0, 1.0, 2)])]
    for name, order in (("priority", [2, 1, 0]), ("fcfs", [1, 2, 0])):
        q = make_queue_policy(name).make_holding_queue()
        for r in reqs:
            q.add(r)
        assert [q.pop().request_id for _ in reqs] == order


def test_round_140_a_pulled_request_keeps_the_reservation_its_pull_started_with(tmp_path, capsys):
    """r140: under reserve: quantile a request's reservation was sized again when its KV arrived; a long answer
    finished meanwhile had raised the quantile, so it was refused, and with nothing running nothing freed the
    room: an internal error, or (with requests queued) a false "waits for ever" blaming the pool."""
    from servesim.simulator.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in [
        {"request_id": 0, "arrival_time": 0.0, "prompt_tokens": 16, "output_tokens": 400},
        {"request_id": 1, "arrival_time": 2.0, "prompt_tokens": 160, "output_tokens": 50},
        {"request_id": 2, "arrival_time": 2.0, "prompt_tokens": 300, "output_tokens": 2}]))
    common = ["engine.num_gpu_blocks_override=48", "cluster.prefill_replicas=1", "policies.admission.reserve=quantile"]
    runs = [["workload.type=trace", f"workload.path={trace}", "engine.max_model_len=512", "cluster.kv_link_gbps=0.005"],
            ["workload.num_requests=40", "seed=13", "engine.max_model_len=1024", "workload.arrival={process: burst}",
             "workload.prompt_tokens={dist: uniform, low: 1, high: 1024}", "cluster.kv_link_gbps=1",
             "workload.output_tokens={dist: lognormal, median: 50, sigma: 1.5, max: 1024}"]]
    for i, sets in enumerate(runs):
        if i:
            common[0] = "engine.num_gpu_blocks_override=100"
        argv = ["run", "--json", "--out", str(tmp_path / str(i)), *[x for s in [*sets, *common] for x in ("--set", s)]]
        assert main(argv) == 0
        s = json.loads(capsys.readouterr().out)
        assert s["completed"] == s["measured_requests"] == (3, 40)[i] and not s["unfinished"]


@pytest.mark.parametrize("release", ["0.19.0", "0.33.0"])
def test_round_159_a_decode_replica_caches_a_pulled_prompt_once_its_kv_is_there(release):
    """r159 (vLLM): allocate_slots(delay_cache_blocks=load_kv_async) caches a pulled request's blocks only when its
    transfer ends (_update_waiting_for_remote_kv); servesim cached them as the pull began, so a second request
    sharing the prefix hit 96 tokens still on the link, pulled 4 and finished before the KV it used had arrived."""
    specs = [RequestSpec(i, 0.0, 100, 5, prefix_ids=(1, 2, 3, 4, 5, 6, 7 + i), prefix_block_tokens=16)
             for i in range(2)]
    rs = load(None, [f"engine.vllm_defaults={release}", "engine.max_model_len=112", "engine.max_num_batched_tokens=64",
                     "engine.async_scheduling=false", "engine.num_gpu_blocks_override=30", "cluster.replicas=1",
                     "cluster.prefill_replicas=2", "cluster.kv_link_gbps=0.1"])
    req = simulate(rs, specs).requests
    assert req.pulled_tokens.tolist() == [100, 100] and req.first_token_time.nunique() == 1


def test_round_167_one_dp_rank_reached_is_not_said_to_be_spread_over_ranks(capsys):
    """r167: with cluster.dp_ranks_reached 1 the router's "no effect" warning said vLLM's balancer spread the
    requests over the DP ranks, where rank 0 takes them all."""
    sets = ["engine.data_parallel_size=2", "cluster.router=random", "workload.num_requests=10"]
    load(None, sets + ["cluster.dp_ranks_reached=1"])
    err = capsys.readouterr().err
    assert "cluster.router has no effect: one replica takes every request\n" in err, err
    load(None, sets)
    assert "(vLLM's own balancer spreads them over its DP ranks)" in capsys.readouterr().err


def test_round_167_too_many_kv_pools_names_the_count_that_made_them():
    """r167: 1,002 pools of a pool that fits alone were refused as engine.block_size, not the prefill_replicas given."""
    with pytest.raises(ConfigError, match=r"^cluster.prefill_replicas: 1002 KV pool\(s\) of"):
        load(None, ["cluster.replicas=2", "cluster.prefill_replicas=1000"])
