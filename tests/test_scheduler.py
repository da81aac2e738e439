"""The vLLM V1 schedule() step (../shared/docs/vllm-v1-scheduler.md section 1), case by case."""

import pytest

from servesim.policies import make_batching, make_queue_policy
from servesim.simulator.kv_cache import KVBlockManager
from servesim.simulator.request import PREEMPTED, RUNNING, Request
from servesim.simulator.scheduler import Scheduler, SchedulerSettings
from servesim.workloads.spec import RequestSpec


def sched(blocks=1000, block_size=16, queue="fcfs", batching="continuous", batch_size=8, watermark=0.0, **kw):
    s = SchedulerSettings(**({"max_num_batched_tokens": 2048, "max_num_seqs": 128, "max_model_len": 4096} | kw))
    kv = KVBlockManager(blocks + 1, block_size, s.max_model_len, watermark)
    return Scheduler(s, kv, make_queue_policy(queue), make_batching(batching, batch_size))


def req(i, prompt, output=100, arrival=0.0, priority=0, max_model_len=4096, max_tokens=None):
    return Request(RequestSpec(i, arrival, prompt, output, max_tokens=max_tokens, priority=priority), max_model_len)


def step(s, t=0.0, n=0):
    out = s.schedule(t)
    s.update_from_output(out, n, t + 0.01)
    return out


def scheduled(out):
    return {r.request_id: n for r, n in zip(out.reqs, out.tokens)}


def test_token_budget_chunks_the_prefill_that_does_not_fit():
    s = sched(max_num_batched_tokens=1500)
    for i in range(3):
        s.add_request(req(i, 1000))
    out = step(s)
    assert scheduled(out) == {0: 1000, 1: 500}
    assert out.shape.prefill_tokens == 1500
    out = step(s, n=1)
    # running first (0 decodes, 1 finishes its prompt), then the next waiting request gets what is left
    assert scheduled(out) == {0: 1, 1: 500, 2: 999}


def test_without_chunked_prefill_a_prompt_that_does_not_fit_waits():
    s = sched(max_num_batched_tokens=1500, enable_chunked_prefill=False)
    for i in range(2):
        s.add_request(req(i, 1000))
    assert scheduled(step(s)) == {0: 1000}
    assert len(s.waiting) == 1 and s.admission_blocked == "budget"


def test_max_num_seqs_limits_admission_only():
    s = sched(max_num_seqs=2)
    for i in range(4):
        s.add_request(req(i, 10))
    assert set(scheduled(step(s))) == {0, 1}
    assert s.admission_blocked == "max_num_seqs"


def test_long_prefill_token_threshold_caps_each_chunk():
    s = sched(long_prefill_token_threshold=256)
    s.add_request(req(0, 1000))
    s.add_request(req(1, 100))
    assert scheduled(step(s)) == {0: 256, 1: 100}


def test_threshold_is_off_for_a_lone_request():
    s = sched(long_prefill_token_threshold=256)
    s.add_request(req(0, 1000))
    assert scheduled(step(s)) == {0: 1000}


def test_round_141_a_request_holding_pulled_kv_is_counted_against_a_lone_request():
    """vLLM 0.33 counts waiting and KV-holding requests (get_request_counts) before lifting the threshold."""
    s = sched(long_prefill_token_threshold=256)
    s.add_request(req(0, 1000))
    loaded = req(1, 100)
    s.holding[1] = loaded  # a decode replica's: its KV pulled
    s.pulled(loaded)
    assert scheduled(step(s)) == {0: 256, 1: 1}


def test_head_of_line_blocking_when_the_head_does_not_fit():
    s = sched(blocks=20)  # 320 tokens
    s.add_request(req(0, 200, output=50))
    step(s)
    s.add_request(req(1, 200))  # needs 13 blocks, 7 are free
    s.add_request(req(2, 16))   # would fit, but stands behind 1
    out = step(s, n=1)
    assert scheduled(out) == {0: 1}
    assert s.admission_blocked == "kv" and [r.request_id for r in s.waiting] == [1, 2]


def test_reserve_full_isl_requires_the_whole_prompt_to_fit():
    s = sched(blocks=20, max_num_batched_tokens=64)
    s.add_request(req(0, 400))  # 25 blocks > 20 free: not admitted even as a 64-token chunk
    assert step(s).reqs == []
    s2 = sched(blocks=20, max_num_batched_tokens=64, scheduler_reserve_full_isl=False)
    s2.add_request(req(0, 400))
    assert scheduled(step(s2)) == {0: 64}


def test_fcfs_preempts_the_last_admitted_and_puts_it_at_the_front():
    s = sched(blocks=4, block_size=4, max_model_len=64)  # 16 token slots
    a, b, c = req(0, 8, max_model_len=64), req(1, 8, max_model_len=64), req(2, 3, max_model_len=64)
    s.add_request(a)
    s.add_request(b)
    step(s)  # a: 8 tokens (2 blocks), b: 8 tokens (2 blocks): pool full
    s.add_request(c)
    assert a.num_tokens == 9 and b.num_tokens == 9
    out = step(s, n=1)  # a needs a 3rd block for its 9th slot -> b (last admitted) is preempted
    assert [r.request_id for r in out.preempted] == [1]
    assert b.status == PREEMPTED and b.num_computed_tokens == 0 and b.blocks == [] and b.num_preemptions == 1
    assert [r.request_id for r in s.waiting] == [1, 2]  # front of the queue, ahead of c
    assert scheduled(out) == {0: 1}  # no admission in a step that preempted
    s.kv.check_invariants(s.running)


def test_a_preempted_request_recomputes_prompt_and_output():
    s = sched(blocks=4, block_size=4, max_model_len=64)
    a, b = req(0, 8, output=6, max_model_len=64), req(1, 8, output=6, max_model_len=64)
    s.add_request(a)
    s.add_request(b)
    step(s)
    step(s, n=1)  # b preempted with 9 tokens (8 prompt + 1 output)
    assert b.status == PREEMPTED and b.num_tokens == 9
    for n in range(2, 40):
        if b.status == RUNNING:
            break
        step(s, n=n)
    # b comes back once a finishes and frees its blocks; its whole sequence is prefilled again
    assert b.status == RUNNING and b.num_output_tokens >= 1


def test_priority_preempts_the_lowest_priority_and_returns_its_budget():
    s = sched(blocks=4, block_size=4, max_model_len=64, queue="priority")
    hi, lo = req(0, 8, priority=0, max_model_len=64), req(1, 8, priority=5, max_model_len=64)
    s.add_request(lo)
    s.add_request(hi)
    step(s)
    assert [r.request_id for r in s.running] == [0, 1]  # heap order: priority 0 first
    out = step(s, n=1)  # hi needs a block -> lo (largest priority value) is the victim
    assert [r.request_id for r in out.preempted] == [1]
    assert scheduled(out) == {0: 1}


@pytest.mark.parametrize("queue", ["priority", "fcfs"])
def test_a_burst_of_equal_priority_preempts_its_last_sent_request(queue):
    """Round 96: a burst (vllm bench's default rate inf) arrives at one time; the priority victim's
    max(priority, arrival) tied and preempted the first request, itself; vLLM's API server stamps the requests
    one after another, so the victim is the last sent, as FCFS's."""
    s = sched(blocks=4, block_size=4, max_model_len=64, queue=queue)
    a, b = req(0, 8, max_model_len=64), req(1, 8, max_model_len=64)
    s.add_request(a)
    s.add_request(b)
    step(s)
    out = step(s, n=1)  # a needs a block: the victim is b, the later sent
    assert [r.request_id for r in out.preempted] == [1] and scheduled(out) == {0: 1}


@pytest.mark.parametrize("release_0_19, after", [(False, {1: 1, 2: 1}), (True, {})])
def test_a_request_that_is_its_own_victim_ends_the_running_loop_in_0_19(release_0_19, after):
    """Round 96: under PRIORITY, 0.33 goes on to the running requests after one that preempted itself; 0.19's
    loop breaks there (`if new_blocks is None: break`), so nobody after it runs that step."""
    s = sched(blocks=4, block_size=4, max_model_len=64, queue="priority", self_preemption_ends_loop=release_0_19)
    b = req(0, 7, priority=5, max_model_len=64)
    s.add_request(b)
    step(s, n=0)  # b alone: 7 tokens in 2 blocks, then its first token (8)
    a, c = req(1, 4, priority=0, max_model_len=64), req(2, 4, priority=1, max_model_len=64)
    s.add_request(a)
    s.add_request(c)
    step(s, n=1)  # b decodes into its 2nd block's last slot; a and c take the 2 blocks left: running [b, a, c]
    out = step(s, n=2)  # b needs a 3rd block, none free: the lowest priority, it preempts itself
    assert [r.request_id for r in out.preempted] == [0] and scheduled(out) == after


def test_priority_victim_already_scheduled_gives_back_its_tokens():
    s = sched(blocks=4, block_size=4, max_model_len=64, queue="priority")
    lo, hi = req(0, 5, priority=5, max_model_len=64), req(1, 8, priority=0, arrival=1.0, max_model_len=64)
    s.add_request(lo)
    step(s)  # lo alone: running = [lo]
    s.add_request(hi)
    step(s, n=1)  # hi admitted after lo: running = [lo, hi]
    out = step(s, n=2)  # lo scheduled first; hi needs a block -> victim lo, already scheduled: budget returned
    assert scheduled(out) == {1: 1} and [r.request_id for r in out.preempted] == [0]
    assert sum(out.tokens) == sum(scheduled(out).values()) == out.shape.num_tokens


def test_sjf_admits_the_shortest_expected_job_first():
    s = sched(queue="sjf", max_num_seqs=1)
    s.add_request(req(0, 1000, output=500))
    s.add_request(req(1, 10, output=10))
    assert scheduled(step(s)) == {1: 10}


def test_stop_at_max_tokens_and_at_max_model_len():
    s = sched(max_model_len=64)
    a = req(0, 10, output=100, max_tokens=5, max_model_len=64)
    b = req(1, 60, output=100, max_model_len=64)
    s.add_request(a)
    s.add_request(b)
    for n in range(10):
        step(s, n=n)
    assert a.num_output_tokens == 5 and a.finish_reason == "length"
    assert b.num_tokens == 64 and b.finish_reason == "length"
    # round 90: an output of its own drawn length, without max_tokens, ends at the model's stop (EOS), not "length"
    assert req(2, 10, output=5, max_model_len=64).finish_reason == "stop"
    assert req(3, 10, output=5, max_tokens=5, max_model_len=64).finish_reason == "length"  # max_tokens reached
    assert req(4, 10, output=5, max_tokens=8, max_model_len=64).finish_reason == "stop"
    assert not s.running and s.kv.num_free_blocks == s.kv.num_usable_blocks


def test_watermark_holds_back_admission_while_others_run():
    s = sched(blocks=100, watermark=0.2)  # 20 blocks held back from admissions
    s.add_request(req(0, 16 * 60))
    step(s)
    s.add_request(req(1, 16 * 25))  # 25 blocks needed, 39 free, 39 - 25 < 20
    step(s, n=1)
    assert s.admission_blocked == "kv"


def test_static_batching_admits_only_into_an_empty_engine():
    s = sched(batching="static", batch_size=2)
    for i, out_len in enumerate((3, 13, 5)):
        s.add_request(req(i, 10, output=out_len))
    assert set(scheduled(step(s))) == {0, 1}
    n = 1
    while s.running:
        out = step(s, n=n)
        n += 1
        assert 2 not in scheduled(out)  # waits for the whole batch, though request 0 left long ago
    assert n > 10
    assert set(scheduled(step(s, n=n))) == {2}


def _driver_shape_row():
    """calibration/vllm_driver.py's shape_row, read from its source: the file imports vLLM, which is not here."""
    import ast
    from pathlib import Path

    src = Path(__file__).parents[1] / "calibration" / "vllm_driver.py"
    fn = next(n for n in ast.parse(src.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == "shape_row")
    scope: dict = {}
    exec(compile(ast.Module([fn], type_ignores=[]), str(src), "exec"), scope)
    return scope["shape_row"]


def test_the_three_copies_of_the_shape_aggregation_agree():
    """The scheduler's fused pass, batch.shape_of (real runs) and the vLLM driver's import-free copy give
    the same BatchShape for the same scheduled chunks, decodes and prefill chunks mixed."""
    import random

    from servesim.simulator.batch import SHAPE_FIELDS, shape_of
    from servesim.simulator.scheduler import SchedulerOutput

    driver_row, rng = _driver_shape_row(), random.Random(0)
    for trial in range(200):
        s, out, chunks = sched(), SchedulerOutput(), []
        for i in range(rng.randint(1, 12)):
            r = req(i, rng.randint(1, 3000))
            decode = rng.random() < 0.5
            c = r.num_tokens - 1 if decode else rng.randint(0, r.num_tokens - 1)
            n = 1 if decode else rng.randint(1, r.num_tokens - c)
            r.num_computed_tokens = c
            out.reqs.append(r)
            out.tokens.append(n)
            chunks.append((n, c, n == 1 and c == r.num_tokens - 1))
        s._update_after_schedule(out)
        assert out.shape == shape_of(chunks) and list(driver_row(chunks).values()) == list(out.shape)
        assert list(driver_row(chunks)) == SHAPE_FIELDS


def test_policy_registries_are_the_scenario_choices_and_give_their_seams():
    """A policy registered by name is selectable from a scenario with no second list to edit; what each makes
    is the seam the scheduler calls (RequestQueue, BatchingGate)."""
    from typing import get_args

    from servesim.policies.batching import BATCHING_POLICIES, BatchingGate
    from servesim.policies.queues import QUEUE_POLICIES, VICTIMS, RequestQueue
    from servesim.policies.routing import ROUTERS
    from servesim.simulator.config import ClusterSettings, PolicySettings

    fields = PolicySettings.model_fields
    assert get_args(fields["queue"].annotation) == tuple(QUEUE_POLICIES)
    assert get_args(fields["batching"].annotation) == tuple(BATCHING_POLICIES)
    assert get_args(get_args(fields["preemption_victim"].annotation)[0]) == tuple(VICTIMS)
    assert get_args(ClusterSettings.model_fields["router"].annotation) == tuple(ROUTERS)
    from servesim.simulator.request import Request
    from servesim.workloads.spec import RequestSpec

    for name in QUEUE_POLICIES:
        q = make_queue_policy(name).make_queue()
        assert isinstance(q, RequestQueue)
        a, b = (Request(RequestSpec(i, 0.0, 10, 5), 1000) for i in range(2))
        q.add(a)
        q.prepend(b)
        assert len(q) == 2 and {r.request_id for r in q} == {0, 1} and q.peek() in (a, b)
    assert all(isinstance(make_batching(name, 4), BatchingGate) for name in BATCHING_POLICIES)


@pytest.mark.parametrize("sets", [
    ["engine.max_num_active_seqs=2"],  # a seat cap below the batch
    ["workload.arrival.rate=50", "engine.max_model_len=4096", "engine.num_gpu_blocks_override=300",
     "policies.static_batch_size=16"]])  # a KV pool holding part of it
def test_no_member_of_a_static_batch_takes_a_slot_another_member_freed(sets):
    """r117: a member the seat cap or the KV pool kept out joined when another member finished, so static batching
    ran as continuous (batches of 6 with 2 running at once; useful work 43% said of a batch of 6). The batch is
    what joined before its first member left; the rest wait for the next."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    r = simulate(load(None, ["workload.num_requests=40", "policies.batching=static"] + sets)).requests
    for _, batch in r.groupby("batch_id"):
        assert (batch["first_scheduled_time"] <= batch["finish_time"].min()).all()


def test_a_static_batch_is_its_size_even_when_one_step_cannot_admit_it_all():
    """Round 93: a static batch formed only in the step the engine emptied, so it held what that step's token
    budget admitted (batches of 9 where 16 were asked for and 64 waited); its members now join over the steps
    their prefills take, and nothing arriving later joins it."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    r = simulate(load(None, ["workload.num_requests=64", "policies.batching=static", "policies.static_batch_size=16",
                             "workload.arrival.process=burst", "workload.prompt_tokens={dist: fixed, value: 1000}",
                             "workload.output_tokens={dist: fixed, value: 100}", "profile=teaching"]))
    sizes = r.requests.groupby("batch_id").size()
    assert sizes.tolist() == [16, 16, 16, 16] and r.summary["max_running_requests"] == 16
    late = simulate(load(None, ["workload.num_requests=40", "policies.batching=static", "policies.static_batch_size=16",
                                "workload.arrival.rate=2", "profile=teaching"]))
    first = late.requests[late.requests.batch_id == 0]  # the batch opened on the first arrival alone
    assert len(first) == 1


@pytest.mark.parametrize("async_scheduling, joins", [(True, 2), (False, 1)])
def test_round_141_under_async_scheduling_an_arrival_mid_step_joins_the_step_after_next(async_scheduling, joins):
    """r141: vLLM plans step N+1 as step N starts (async scheduling), so a request arriving while N runs is
    first scheduled in N+2; servesim admitted it in N+1 (TTFT a step short, some 20% at light load). Where nothing
    is left to run, nothing was planned behind N, and it joins at once."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    sets = [f"engine.async_scheduling={str(async_scheduling).lower()}"]
    steps = simulate(load(None, sets), [RequestSpec(0, 0.0, 5000, 3), RequestSpec(1, 0.01, 100, 3)]).steps
    assert list(steps.prefill_tokens[:3]) == [5000, 100 * (joins == 1), 100 * (joins == 2)]
    alone = simulate(load(None, sets), [RequestSpec(0, 0.0, 5000, 1), RequestSpec(1, 0.01, 100, 3)]).steps
    assert list(alone.prefill_tokens[:2]) == [5000, 100]  # request 0 ended in step 0: request 1 next, either way


def test_round_142_a_request_the_planned_step_has_not_seen_counts_for_neither_threshold_nor_batch():
    """r142: a request set aside by async scheduling's lag still counted in 0.33's lone-request rule (the step
    vLLM planned before it came was capped at the threshold) and in a static batch opening (it joined its batch a
    step after the batch started; a batch opened with none seen skipped an id)."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    specs = [RequestSpec(0, 0.0, 20000, 3), RequestSpec(1, 0.01, 100, 3)]
    steps = simulate(load(None, ["engine.max_num_batched_tokens=4096", "engine.long_prefill_token_threshold=2048"]),
                     specs).steps
    assert list(steps.scheduled_tokens[:3]) == [4096, 4096, 2048 + 100]
    specs = [RequestSpec(0, 0.0, 5000, 3), RequestSpec(1, 0.01, 100, 5), RequestSpec(2, 0.124, 100, 5),
             RequestSpec(3, 0.125, 100, 5)]
    rows = simulate(load(None, ["policies.batching=static", "policies.static_batch_size=4"]), specs).requests
    batches = rows.sort_values("request_id").groupby("batch_id").first_scheduled_time.nunique()
    assert list(rows.sort_values("request_id").batch_id) == [0, 1, 2, 2] and (batches == 1).all()
