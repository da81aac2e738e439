"""vLLM's prefix caching: content-keyed blocks, ref counts, LRU reuse, hits capped at num_tokens - 1."""

import pandas as pd
import pytest

from servesim.simulator.config import load
from servesim.simulator.engine import build, simulate
from servesim.simulator.kv_cache import PrefixCachingKVManager
from servesim.simulator.request import Request
from servesim.workloads.spec import RequestSpec


def essay_run(prefix_caching: bool):
    """The essay: 1,200-token shared system prompt, 600 private tokens, a 28,672-block (56 GiB) pool."""
    return simulate(load(None, [
        "model=llama-3-8b", "profile=teaching", "hardware.gpu=generic-80gb",
        "engine.num_gpu_blocks_override=28673",  # block 0 is vLLM's null block: 28,672 usable
        "engine.reserved_memory_gib=0",  # the essay's arithmetic leaves vLLM's start-up profile out
        "engine.max_num_batched_tokens=1000000", "engine.max_num_seqs=1024",
        f"engine.enable_prefix_caching={str(prefix_caching).lower()}",
        "workload.num_requests=1000", "workload.arrival={process: burst}",
        "workload.shared_prefix={tokens: 1200, count: 1}",
        "workload.prompt_tokens={dist: fixed, value: 600}", "workload.output_tokens={dist: fixed, value: 8}"]))


def test_the_essays_752_concurrent_requests_come_out_of_a_simulation():
    shared = essay_run(True)
    assert shared.steps["num_running"].max() == 752  # (28,672 - 113) // 38 + 1: the essay's 752
    first = shared.requests.sort_values("request_id")
    assert first["cached_tokens"].iloc[0] == 0 and (first["cached_tokens"].iloc[1:] == 1200).all()
    s = shared.summary
    assert s["prefix_cache_hits"] == 1200 * 999 and s["prefix_cache_hit_rate"] == pytest.approx(1200 * 999 / (1800 * 1000))
    private = essay_run(False)
    assert private.steps["num_running"].max() == 253  # 28,672 // 113: the essay's paged figure
    assert private.summary["prefix_cache_hits"] == 0


def test_a_shared_prompt_cuts_ttft():
    sets = ["workload.num_requests=400", "workload.arrival.rate=20", "workload.shared_prefix={tokens: 3000, count: 4}",
            "workload.prompt_tokens={dist: lognormal, median: 200, sigma: 0.5, max: 2000}"]
    on = simulate(load(None, sets)).summary
    off = simulate(load(None, sets + ["engine.enable_prefix_caching=false"])).summary
    assert on["prefix_cache_hit_rate"] > 0.8 and off["prefix_cache_hit_rate"] == 0
    assert on["mean_ttft_ms"] < 0.6 * off["mean_ttft_ms"]


def _req(i, prompt, ids=(), unit=0):
    return Request(RequestSpec(i, 0.0, prompt, 10, prefix_ids=tuple(ids), prefix_block_tokens=unit), 4096)


def test_hits_are_capped_to_leave_one_token_and_maps_trace_blocks():
    kv = PrefixCachingKVManager(100, 16, 4096)
    a = _req(0, 64, ids=[7], unit=512)  # one partial 512-token trace block: four full 16-token blocks
    assert kv.allocate_slots(a, 64)
    a.num_computed_tokens = 64
    b = _req(1, 64, ids=[7], unit=512)  # the same 64 tokens
    hits, tokens = kv.lookup(b)
    assert tokens == 48 and hits == a.blocks[:3]  # capped at num_tokens - 1: the last block is recomputed
    c = _req(2, 80, ids=[8], unit=512)
    assert kv.lookup(c) == ([], 0)  # other content, no hit
    kv.check_invariants([a])


def test_freed_cached_blocks_are_reused_least_recent_first_and_keep_their_content():
    kv = PrefixCachingKVManager(9, 16, 4096)  # 8 usable blocks
    a = _req(0, 32, ids=[1, 1], unit=16)
    kv.allocate_slots(a, 32)
    a_blocks = list(a.blocks)
    kv.free(a)  # cached blocks go to the tail of the free queue, tail block first
    assert list(kv.queue)[-2:] == a_blocks[::-1]
    b = _req(1, 32, ids=[1, 1], unit=16)  # the same content: a hit, revived from the free queue
    hits, tokens = kv.lookup(b)
    assert tokens == 16 and hits == a_blocks[:1]
    assert kv.allocate_slots(b, 16, hit_blocks=hits)
    assert b.blocks[0] == a_blocks[0] and kv.ref[a_blocks[0]] == 1
    kv.check_invariants([b])
    # filling the pool evicts the least recently freed cached block before touching ones in use
    c = _req(2, 16 * 7, ids=list(range(10, 17)), unit=16)
    assert not kv.allocate_slots(c, 16 * 7)  # 6 free blocks, 7 needed
    d = _req(3, 16 * 6, ids=list(range(20, 26)), unit=16)
    assert kv.allocate_slots(d, 16 * 6)
    assert kv.lookup(_req(4, 32, ids=[1, 1], unit=16))[1] == 16  # b still holds the first block
    kv.check_invariants([b, d])


def test_a_preempted_request_finds_its_own_blocks_again():
    r = simulate(load(None, ["workload.num_requests=300", "workload.arrival.rate=30",
                             "engine.num_gpu_blocks_override=700", "engine.max_model_len=4096"]))
    pre = r.requests[r.requests.num_preemptions > 0]
    assert len(pre) > 0
    # re-admission hits what the request had computed before: it recomputes less than its prompt each time
    assert (pre["recomputed_tokens"] < pre["prompt_tokens"] * pre["num_preemptions"]).any()
    # ... which vLLM counts apart (PrefixCacheStats.preempted_*), out of prefix_cache_queries/hits (round 93: a
    # run whose requests share nothing showed a 16% hit rate of victims finding their own blocks)
    assert (pre["prefix_hits"] == pre["cached_tokens"]).all()
    assert r.summary["prefix_cache_hits"] == int(r.requests["cached_tokens"].sum())


def test_0_19_counts_a_blocked_requests_lookups_and_0_33_the_admitting_one():
    """Round 94: vLLM 0.19 records every prefix-cache lookup in get_computed_blocks, a request the pool or budget
    then blocks included (looked up again each step it waits); 0.33 records the lookup that admits it."""
    sets = ["workload.num_requests=300", "workload.arrival.rate=30", "engine.num_gpu_blocks_override=700",
            "engine.max_model_len=4096", "workload.shared_prefix={tokens: 512, count: 2}"]
    new, old = (simulate(load(None, sets + [f"engine.vllm_defaults={v}"])) for v in ("0.33.0", "0.19.0"))
    first = new.requests[new.requests.num_preemptions == 0]
    assert (first["prefix_queries"] == first["prompt_tokens"]).all()  # one lookup each, at admission
    assert (old.requests["prefix_queries"] > old.requests["prompt_tokens"]).sum() > 10  # waited and looked again
    assert (old.requests["prefix_queries"] % old.requests["prompt_tokens"] == 0).all()
    assert old.summary["prefix_cache_queries"] == int(old.requests["prefix_queries"].sum())


SESSIONS = "workload={type: sessions, num_sessions: 20, turns: {dist: fixed, value: 4}, think_time_s: {dist: fixed, value: 1.0}}"


@pytest.mark.parametrize("block_size", [16, 7, 24])
def test_a_chat_turn_reuses_the_previous_turn_and_its_answer(block_size):
    """Round 85: the history's partial last block took a new id each turn, so an engine block ending inside it
    (block sizes not a multiple of 16: 7 hit 154 of 168 tokens) missed."""
    r = simulate(load(None, [SESSIONS, f"engine.block_size={block_size}"]))
    req = r.requests.sort_values(["session_id", "turn"]).reset_index(drop=True)
    for _, g in req.groupby("session_id"):
        g = g.reset_index(drop=True)
        for k in range(1, 4):
            history = g.prompt_tokens[k - 1] + g.output_tokens[k - 1]
            # every full block of the last turn and its answer whose KV was computed: the final sampled
            # token is never fed back, so its block is not complete (as in vLLM)
            assert g.cached_tokens[k] == (history - 1) // block_size * block_size


def test_a_chat_turn_names_its_history_with_the_last_turns_ids():
    """Each turn's ids begin with all of the last turn's, its partial last block's too: that block's first tokens
    are resent, so 0.33's lookahead hashes, which ask for the token after a block, find it shared (round 85: a new
    id there dropped the history's last block of hits)."""
    rs = load(None, [SESSIONS])
    source = rs.scenario.workload.source(rs.scenario.seed, rs.max_model_len)
    turns = {(s.session_id, s.turn): s for s in source.initial()}
    for spec, _ in source.next_turn.values():
        turns[spec.session_id, spec.turn] = spec
    partial = 0
    for (session, turn), spec in turns.items():
        if turn:
            last = turns[session, turn - 1]
            assert spec.prefix_ids[:len(last.prefix_ids)] == last.prefix_ids
            partial += (last.prompt_tokens + last.output_tokens) % 16 != 0
    assert partial > 30  # most histories end inside a block


@pytest.mark.parametrize("block_size", [32, 128])
def test_content_ids_finer_than_the_engine_blocks_still_share_whole_blocks(block_size):
    """Generated workloads name 16-token blocks; vLLM's CPU engine uses 128-token blocks. A 1,280-token shared
    prompt is 10 full blocks of 128 (40 of 32): every request after the first hits all of them."""
    r = simulate(load(None, [
        "model=llama-3-8b", "profile=teaching", "hardware.gpu=generic-80gb", f"engine.block_size={block_size}",
        "workload.num_requests=50", "workload.arrival={process: poisson, rate: 2}",
        "workload.shared_prefix={tokens: 1280, count: 1}",
        "workload.prompt_tokens={dist: fixed, value: 300}", "workload.output_tokens={dist: fixed, value: 8}"]))
    cached = r.requests.sort_values("request_id")["cached_tokens"]
    assert cached.iloc[0] == 0 and (cached.iloc[1:] == 1280).all()


@pytest.mark.parametrize("block_size, unit", [(48, 512), (16, 24), (7, 16), (64, 48), (16, 512)])
def test_any_block_size_shares_what_the_content_ids_share(block_size, unit):
    """Engine blocks that do not divide the workload's content blocks (48-token blocks on Mooncake's 512-token
    hash blocks) hit exactly the whole engine blocks inside the shared prefix, as vLLM's own-size hashes do."""
    kv = PrefixCachingKVManager(400, block_size, max_model_len=4096)
    shared = [11, 12]  # two content blocks in common, then each its own
    a = Request(RequestSpec(0, 0.0, 3 * unit + 5, 10, prefix_ids=shared + [13, 14], prefix_block_tokens=unit), 4096)
    b = Request(RequestSpec(1, 0.0, 3 * unit + 5, 10, prefix_ids=shared + [23, 24], prefix_block_tokens=unit), 4096)
    assert kv.allocate_slots(a, a.num_tokens)
    a.num_computed_tokens = a.num_tokens
    hits, tokens = kv.lookup(b)
    assert tokens == (2 * unit) // block_size * block_size  # every engine block wholly inside the shared tokens
    assert kv.allocate_slots(b, b.num_tokens - tokens, hit_blocks=hits)
    kv.check_invariants([a, b])
    assert hits == a.blocks[:len(hits)]


@pytest.mark.parametrize("unit", [7, 16, 32])
def test_fewer_content_ids_than_prompt_blocks_share_what_they_name(unit):
    """A trace may name only a prompt's leading blocks (the reader allows it): the rest is this request's own."""
    rs = load(None, ["profile=teaching", "engine.enable_prefix_caching=true"])
    specs = [RequestSpec(i, 0.01 * i, 100, 5, prefix_ids=(7,), prefix_block_tokens=unit) for i in range(3)]
    sim = build(rs, specs, keep_requests=True)
    sim.env.run()
    assert all(r.status == "finished" for r in sim.front_end.requests)


def test_no_prefix_cache_is_queried_when_caching_is_off():
    """vLLM looks up (and counts) prefix-cache queries only with enable_prefix_caching: off, the summary counts none
    (it counted every prompt token as a query with 0 hits)."""
    sets = ["workload.num_requests=40", "workload.shared_prefix={tokens: 2000, count: 2}"]
    off = simulate(load(None, sets + ["engine.enable_prefix_caching=false"])).summary
    on = simulate(load(None, sets)).summary
    assert (off["prefix_cache_queries"], off["prefix_cache_hits"], off["prefix_cache_hit_rate"]) == (0, 0, 0.0)
    assert on["prefix_cache_queries"] > on["prefix_cache_hits"] > 0


@pytest.mark.parametrize("version, hits", [
    ("0.19.0", [0, 0, 0, 0, 32, 0, 0, 32, 0, 16, 32, 0]),  # every freed block to the queue's tail (append_n)
    ("0.33.0", [0, 0, 0, 0, 32, 32, 32, 32, 32, 32, 32, 32]),  # a block without content at its head (prepend_n)
])
def test_freed_blocks_go_back_to_the_queue_as_the_release_puts_them(tmp_path, version, hits):
    """Round 96: vLLM 0.19's BlockPool.free_blocks appends every freed block to the free queue's tail, where 0.33
    puts those without content at its head: on a 10-block pool, four 32-token prefixes in turn, 0.19 evicts
    prefixes that 0.33 keeps (hits replayed by hand from each release's block_pool.py)."""
    from servesim.simulator.cli import main

    out = tmp_path / "run"
    assert main(["vllm", "--vllm-version", version, "--out", str(out), "--quiet", "serve",
                 "meta-llama/Llama-3.1-8B-Instruct", "--num-gpu-blocks-override", "11", "--max-model-len", "160", "--",
                 "bench", "serve",
                 "--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "32",
                 "--prefix-repetition-suffix-len", "8", "--prefix-repetition-output-len", "2",
                 "--prefix-repetition-num-prefixes", "4", "--num-prompts", "12", "--max-concurrency", "1",
                 "--ignore-eos"]) == 0
    req = pd.read_parquet(out / "requests.parquet").sort_values("arrival_time")
    assert list(req.cached_tokens) == hits


@pytest.mark.parametrize("release", ["0.33.0", "0.19.0"])
def test_a_second_copy_of_a_cached_block_is_found_once_the_first_is_evicted(release):
    """r130: r0 and r1 compute one 64-token prefix at once (r1 hits r0's first two blocks and computes the rest
    itself): two copies of blocks 3 and 4. A long request then evicts r1's copies (freed first); vLLM's
    BlockHashToBlockMap still finds r0's, so r3 hits 48 tokens. servesim kept a key's first block only: 32."""
    import servesim
    from servesim import RequestSpec

    ids = (1, 2, 3, 4)
    requests = [RequestSpec(0, 0.0, 64, 1, prefix_ids=ids, prefix_block_tokens=16),
                RequestSpec(1, 0.0, 64, 1, prefix_ids=ids, prefix_block_tokens=16),
                RequestSpec(2, 1.0, 240, 1),
                RequestSpec(3, 2.0, 64, 1, prefix_ids=ids, prefix_block_tokens=16)]
    run = servesim.simulate(None, ["model=llama-3.1-8b", "hardware.gpu=h100-sxm", "engine.block_size=16",
                                   "engine.max_model_len=256", "engine.num_gpu_blocks_override=20",
                                   "engine.max_num_batched_tokens=64", "engine.long_prefill_token_threshold=32",
                                   f"engine.vllm_defaults={release}"], requests=requests)
    assert run.requests.set_index("request_id").cached_tokens.tolist() == [0, 32, 0, 48]


def test_round_151_an_answer_ending_inside_its_prompts_last_id_is_shared():
    """r151: a turn's answer ending inside the prompt's last 16-token id was left unnamed, so at block size 8 the
    next turn (resending it) hit 16 tokens where vLLM 0.19 and 0.33 hit 24."""
    import servesim

    specs = [servesim.RequestSpec(0, 0.0, 20, 5, prefix_ids=(1, 2), prefix_block_tokens=16),
             servesim.RequestSpec(1, 5.0, 45, 1, prefix_ids=(1, 2, 3), prefix_block_tokens=16)]
    r = servesim.simulate(None, {"engine.block_size": 8, "profile": "teaching"}, requests=specs).requests
    assert r.set_index("request_id").loc[1, "cached_tokens"] == 24
