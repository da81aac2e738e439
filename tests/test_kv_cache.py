"""Block manager invariants, as properties: no leaked block, free + used = total."""

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.simulator.config import load
from servesim.simulator.engine import build
from servesim.simulator.kv_cache import KVBlockManager
from servesim.simulator.request import Request
from servesim.workloads.spec import RequestSpec


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 90), st.booleans()), max_size=60),
       st.integers(2, 40), st.sampled_from([1, 4, 16]))
def test_allocate_and_free_never_lose_a_block(ops, blocks, block_size):
    kv = KVBlockManager(blocks, block_size, max_model_len=512)
    reqs = [Request(RequestSpec(i, 0.0, 100, 100), 512) for i in range(6)]
    for who, n, free in ops:
        r = reqs[who]
        if free:
            kv.free(r)
            r.num_computed_tokens = 0
            continue
        before = list(r.blocks)
        ok = kv.allocate_slots(r, n)
        if ok:
            r.num_computed_tokens = min(r.num_computed_tokens + n, 512)
            assert len(r.blocks) * block_size >= min(r.num_computed_tokens, 512)
        else:
            assert r.blocks == before  # a failed allocation changes nothing
        kv.check_invariants(reqs)
        assert kv.num_free_blocks + kv.num_used_blocks == kv.num_usable_blocks
    for r in reqs:
        kv.free(r)
    assert kv.num_free_blocks == kv.num_usable_blocks


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 2), st.integers(1, 300), st.integers(1, 120), st.integers(0, 2)),
                min_size=1, max_size=25),
       st.integers(30, 80), st.sampled_from(["fcfs", "priority", "sjf"]), st.booleans())
def test_a_whole_run_keeps_the_invariants_and_returns_every_block(rows, blocks, queue, chunked):
    rs = load(None, ["profile=teaching", f"engine.num_gpu_blocks_override={blocks}", "engine.max_model_len=400",
                     "engine.max_num_batched_tokens=400", f"engine.enable_chunked_prefill={chunked}",
                     f"policies.queue={queue}"])
    specs = [RequestSpec(i, t, p, o, priority=pr) for i, (t, p, o, pr) in enumerate(rows)]
    sim = build(rs, specs, keep_requests=True)
    kv = sim.replicas[0].kv
    sched = sim.replicas[0].scheduler
    while sim.env.peek() != float("inf"):
        sim.env.step()
        kv.check_invariants(list(sched.running) + list(sched.waiting))
        assert all(r.blocks == [] for r in sched.waiting if r.status == "preempted")
    assert kv.num_free_blocks == kv.num_usable_blocks
    done = [r for r in sim.front_end.requests if r.status == "finished"]
    assert len(done) == sum(1 for r in sim.front_end.requests if r.status != "rejected")
    assert all(r.num_tokens == r.stop_len for r in done)


def test_the_lazy_free_queue_keeps_the_ordered_dicts_order():
    """FreeQueue (untouched blocks as a range) against the OrderedDict of every block it replaces, under random
    pops from either end, deletions anywhere, inserts at the end and moves to the front."""
    import random
    from collections import OrderedDict

    from servesim.simulator.kv_cache import FreeQueue

    rng = random.Random(7)
    for _ in range(40):
        n = rng.randint(2, 60)
        lazy, ref = FreeQueue(n), OrderedDict((b, None) for b in range(1, n))
        for _ in range(200):
            op = rng.random()
            if op < 0.35 and ref:
                last = rng.random() < 0.2
                assert lazy.popitem(last=last) == ref.popitem(last=last)
            elif op < 0.5 and ref:
                b = rng.choice(list(ref))
                del lazy[b], ref[b]
            elif op < 0.8:
                free = [b for b in range(1, n) if b not in ref]
                if free:
                    b = rng.choice(free)
                    lazy[b] = ref[b] = None
                    if rng.random() < 0.5:
                        lazy.move_to_end(b, last=False)
                        ref.move_to_end(b, last=False)
            elif ref:
                b = rng.choice(list(ref))
                last = rng.random() < 0.5
                lazy.move_to_end(b, last=last)
                ref.move_to_end(b, last=last)
            assert list(lazy) == list(ref) and len(lazy) == len(ref)
            assert all((b in lazy) == (b in ref) for b in range(n + 1))
