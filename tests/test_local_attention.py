"""Local-attention layers (gpt-oss's sliding window, Llama 4's chunks): what a query reads, the blocks vLLM's
hybrid KV cache manager keeps, their HF configs read, and the memory and time that follow."""

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.simulator.batch import decode_shape
from servesim.simulator.cli import main
from servesim.simulator.config import load
from servesim.simulator.engine import build, simulate
from servesim.simulator.errors import ConfigError
from servesim.simulator.hybrid_kv import LOCAL, HybridKVBlockManager, HybridPrefixCachingKVManager, kv_layout
from servesim.simulator.local_attention import LocalAttention
from servesim.simulator.model_arch import load_model
from servesim.simulator.request import Request
from servesim.workloads.spec import RequestSpec

GIB = 1 << 30
GPT_OSS_HF = {  # openai/gpt-oss-120b config.json, the fields that matter
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
    "head_dim": 64, "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 36,
    "num_local_experts": 128, "num_experts_per_tok": 4, "experts_per_token": 4, "vocab_size": 201088,
    "max_position_embeddings": 131072, "sliding_window": 128, "attention_bias": True, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "swiglu_limit": 7.0, "rope_scaling": {"rope_type": "yarn", "factor": 32.0},
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
                                                                                "model.layers.*.mlp.router",
                                                                                "model.embed_tokens", "lm_head"]}}
LLAMA4_HF = {  # meta-llama/Llama-4-Scout-17B-16E-Instruct config.json: a multimodal wrapper
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "torch_dtype": "bfloat16",
    "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
                    "intermediate_size_mlp": 16384, "num_attention_heads": 40, "num_key_value_heads": 8,
                    "head_dim": 128, "num_hidden_layers": 48, "num_local_experts": 16, "num_experts_per_tok": 1,
                    "interleave_moe_layer_step": 1, "vocab_size": 202048, "max_position_embeddings": 10485760,
                    "attention_chunk_size": 8192, "use_qk_norm": True, "tie_word_embeddings": False,
                    "no_rope_layers": [1, 1, 1, 0] * 12},
    "vision_config": {"hidden_size": 1408, "intermediate_size": 5632, "num_hidden_layers": 34}}


@pytest.mark.parametrize("chunked", [False, True])
@settings(max_examples=100, deadline=None)
@given(window=st.integers(1, 40), computed=st.integers(0, 200), new=st.integers(1, 120))
def test_spans_and_pairs_match_counting_every_key(chunked, window, computed, new):
    la = LocalAttention(window, chunked, 1, 2)
    keys = [p // window * window if chunked else max(0, p - window + 1) for p in range(computed + new)]
    spans = [p - first + 1 for p, first in enumerate(keys)]
    assert [la.span(p) for p in range(computed + new)] == spans
    assert la.pairs(computed, new) == sum(spans[computed:])
    # nothing before skipped_tokens is read by any later query
    skipped = la.skipped_tokens(computed)
    assert all(first >= skipped for first in keys[computed:]) and (computed == 0 or keys[computed] == skipped
                                                                      or not chunked)


def test_gpt_oss_config_json_reads_its_sliding_layers_and_mxfp4_experts(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT_OSS_HF))
    m = load_model(str(path))
    assert (m.sliding_window, m.num_local_layers, m.expert_dtype, m.dtype) == (128, 18, "mxfp4", "bf16")
    assert m == load_model("gpt-oss-120b").model_copy(update={"name": "config"})
    experts = 36 * 128 * 3 * 2880 * 2880
    assert m.expert_weight_bytes == experts * 17 // 32  # 4.25 bits a weight
    assert 116.7e9 < m.num_params < 116.9e9 and m.weight_bytes / GIB == pytest.approx(60.69, abs=0.01)
    # without layer_types, GptOssConfig alternates them (sliding first): it was read as full attention (round 80)
    path.write_text(json.dumps({k: v for k, v in GPT_OSS_HF.items() if k != "layer_types"}))
    assert load_model(str(path)) == m


def test_llama4_config_json_reads_the_text_model_its_chunks_and_the_vision_encoder(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA4_HF))
    m = load_model(str(path))
    assert (m.attention_chunk_size, m.num_local_layers, m.num_experts, m.experts_per_token) == (8192, 36, 16, 1)
    assert (m.moe_intermediate_size, m.num_shared_experts, m.num_dense_layers) == (8192, 1, 0)
    assert m.encoder_params == 34 * (4 * 1408**2 + 2 * 1408 * 5632)
    assert m == load_model("llama-4-scout").model_copy(update={"name": "config"})
    assert 108.5e9 < m.num_params < 108.7e9  # 107.8 B decoder + 0.8 B vision encoder


def test_a_bad_vision_field_is_named_inside_vision_config(tmp_path):
    """It was named as the text model's model.hidden_size (round 81)."""
    cfg = json.loads(json.dumps(LLAMA4_HF))
    cfg["vision_config"]["hidden_size"] = "x"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="model.vision_config.hidden_size: must be an integer"):
        load_model(str(path))


def test_a_llama4_config_with_no_chunked_layer_attends_fully_everywhere(tmp_path):
    cfg = json.loads(json.dumps(LLAMA4_HF))
    cfg["text_config"]["no_rope_layers"] = [0] * 48  # every layer NoPE: none of them chunked
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    assert m.attention_chunk_size is None and m.num_local_layers == 0


@pytest.mark.parametrize("change, field", [
    ({"interleave_moe_layer_step": 2}, "interleave_moe_layer_step"),  # Llama 4 Maverick
    ({"layer_types": ["linear_attention", "full_attention"] * 24}, "layer_types"),
    ({"no_rope_layers": 5}, "model.no_rope_layers: must be a list"),  # malformed: one line, never a traceback
    ({"no_rope_layers": [1, 1, 0]}, "model.no_rope_layers: has 3 entries for 48 layers"),
    ({"no_rope_layers": [1, 1, 1, 0] * 13}, "model.no_rope_layers: has 52 entries for 48 layers"),
    ({"no_rope_layers": None, "no_rope_layer_interval": 0}, "model.no_rope_layer_interval: must be an integer >= 1"),
    ({"num_hidden_layers": "48"}, "model.num_hidden_layers: must be an integer"),
    ({"attention_chunk_size": 0}, "model.attention_chunk_size: must be an integer >= 1"),
])
def test_configs_with_unmodelled_layouts_are_refused_by_name(tmp_path, change, field):
    cfg = json.loads(json.dumps(LLAMA4_HF))
    cfg["text_config"].update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=field):
        load_model(str(path))


@pytest.mark.parametrize("change, field", [
    ({"layer_types": 5}, "model.layer_types: must be a list"),
    ({"layer_types": [["sliding_attention"]] * 36}, "model.layer_types: must be a list"),
    ({"layer_types": ["sliding_attention", "full_attention"] * 5}, "model.layer_types: has 10 entries for 36 layers"),
    ({"sliding_window": -4}, "model.sliding_window: must be an integer >= 1"),
    ({"sliding_window": True}, "model.sliding_window: must be an integer >= 1, got True"),
])
def test_malformed_gpt_oss_configs_get_one_line(tmp_path, change, field):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT_OSS_HF | change))
    with pytest.raises(ConfigError, match=field):
        load_model(str(path))


@pytest.mark.parametrize("vision, field", [("big", "model.vision_config: must be a mapping"),
                                           ({"hidden_size": "big", "intermediate_size": 1, "num_hidden_layers": 1},
                                            "model.vision_config.hidden_size: must be an integer")])
def test_malformed_llama4_wrappers_get_one_line(tmp_path, vision, field):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA4_HF | {"vision_config": vision}))
    with pytest.raises(ConfigError, match=field):
        load_model(str(path))
    path.write_text(json.dumps(LLAMA4_HF | {"text_config": "hello"}))
    with pytest.raises(ConfigError, match="model.text_config: must be a mapping"):
        load_model(str(path))


def test_qwen_sliding_layers_are_refused_not_dropped():
    cfg = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
           "num_key_value_heads": 2, "num_hidden_layers": 24, "vocab_size": 151936, "sliding_window": 4096,
           "use_sliding_window": True, "max_window_layers": 21}
    with pytest.raises(ConfigError, match="use_sliding_window"):
        load_model(cfg)
    cfg["use_sliding_window"] = False  # the usual release: sliding_window is there but unused
    assert load_model(cfg).local_window is None


def test_gpt_oss_hybrid_layout_by_hand():
    lay = kv_layout(load_model("gpt-oss-120b"))
    assert (lay.group_layers, lay.local_groups) == (18, 1)  # 18 full + 18 sliding: two groups of 18
    assert lay.page_bytes_per_token == 18 * 2 * 8 * 64 * 2 == 36_864
    # 1,000 tokens: 63 full blocks; the window keeps tokens 872..999, blocks 54..62
    assert lay.blocks_for(1000, 999, 16) == 63 + 9
    off = kv_layout(load_model("gpt-oss-120b"), disable_hybrid=True)
    assert (off.group_layers, off.local_groups, off.page_bytes_per_token) == (36, 0, 73_728)


def test_llama4_defaults_to_vllms_choice_hybrid_on_for_chunks():
    """VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 1 (0.19 and 0.33): the manager stays on for
    chunked attention; servesim turned it off, a pool some 4x too small for long contexts (round 73)."""
    m = load_model("llama-4-scout")
    assert kv_layout(m).local_groups == 3 and kv_layout(m, disable_hybrid=True).local_groups == 0
    lay = kv_layout(m, disable_hybrid=False)
    assert (lay.group_layers, lay.local_groups) == (12, 3)  # 12 NoPE full layers, 36 chunked in three groups
    # vLLM's start-up bound: a chunk starts at a block's edge, so no extra block (a sliding window adds one);
    # 20,000 tokens at a budget of 8,192: 1,250 full + 3 x cdiv(8,192 + 8,192, 16) = 4,322 (round 74: 4,325)
    assert lay.max_blocks(20000, 8192, 16) == 1250 + 3 * 1024
    # 20,000 tokens: 1,250 full blocks; the chunk from 16,384 keeps blocks 1,024..1,249 in each local group
    assert lay.blocks_for(20000, 19999, 16) == 1250 + 3 * 226



@pytest.mark.parametrize("drafts", [["speculative.eagle_block_drop=true"], ["speculative.lookahead_block_hashes=true"]])
def test_chunked_attention_beside_eagle_drafts_turns_the_hybrid_manager_off(drafts, capsys):
    """VllmConfig turns the manager off for chunked local attention beside an EAGLE-type drafter and refuses it on
    (its chunked manager has no EAGLE hit rule); servesim kept it on, and a hit ran past the blocks it held."""
    sets = ["model=llama-4-scout", "engine.tensor_parallel_size=4", "engine.max_model_len=32768", "profile=roofline",
            "speculative.method=fixed", *drafts]
    assert load(None, sets).kv_layout.local_groups == 0
    assert load(None, sets[:-1]).kv_layout.local_groups == 3  # the drafter without EAGLE's rules keeps it on
    assert main(["config", *[a for s in sets + ["engine.disable_hybrid_kv_cache_manager=false"]
                             for a in ("--set", s)]]) == 2
    err = capsys.readouterr().err
    assert err.count("servesim: error:") == 1 and "engine.disable_hybrid_kv_cache_manager" in err

def test_capacity_doubles_for_gpt_oss_with_the_hybrid_manager(capsys):
    args = ["capacity", "--model", "gpt-oss-120b", "--gpu", "h100-sxm", "--json"]
    assert main(args) == 0
    on = json.loads(capsys.readouterr().out)
    assert main(args + ["--disable-hybrid-kv-cache-manager"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert on["num_blocks"] == 2 * off["num_blocks"] + (on["num_blocks"] % 2)
    assert (on["blocks_per_request"], off["blocks_per_request"]) == (113 + 9, 113)  # 1,800 tokens
    assert on["paged_requests"] > 1.8 * off["paged_requests"]


def test_capacity_warns_where_run_refuses_a_hybrid_pool(capsys):
    """capacity counted one max-length request at its steady window, run at vLLM's start-up bound (window plus a
    step's tokens): on a pool between the two, capacity was silent where run refuses (round 74)."""
    args = ["capacity", "--model", "gpt-oss-120b", "--gpu", "h200-sxm", "--weights-gib", "123.955",
            "--reserved-memory-gib", "0", "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    # 131,072 / 16, and the window's 127 tokens plus two 8,192-token steps in flight (async scheduling) + 1
    assert report["max_model_len_blocks"] == 8192 + 1033 > report["usable_blocks"] == 8500
    assert "vLLM would not start: the pool's 8,500 usable blocks" in captured.err
    assert main(["config", "--set", "model=gpt-oss-120b", "--set", "hardware.gpu=h200-sxm", "--set",
                 "engine.num_gpu_blocks_override=8501"]) == 2  # the same pool, as run sees it
    assert "cannot hold one request of max_model_len=131,072 (9,225 blocks)" in capsys.readouterr().err


@pytest.mark.parametrize("sets, need", [([], 8192 + 1033),  # 0.33, async: max_in_flight_tokens two budgets
                                        (["engine.async_scheduling=false"], 8192 + 521),  # one step in flight
                                        (["engine.vllm_defaults=0.19.0"], 8192 + 521)])  # 0.19: one budget
def test_a_local_layer_holds_the_steps_in_flight_beyond_its_window(sets, need):
    """vLLM 0.33 bounds a local layer's blocks by its window plus max_in_flight_tokens (a budget per step in
    flight, two with async scheduling), at start-up and at admission; servesim counted one budget (round 74)."""
    base = ["model=gpt-oss-120b", "hardware.gpu=h200-sxm", "profile=roofline"]
    rs = load(None, base + sets)
    assert rs.in_flight_tokens == (16384 if need > 8713 else 8192)
    assert rs.kv_layout.max_blocks(rs.max_model_len, rs.in_flight_tokens, 16) == need  # start-up (refusal above)
    kv = build(rs, []).replicas[0].kv  # admission takes the same bound (0.33's apply_admission_cap)
    assert kv.in_flight_tokens == rs.in_flight_tokens


@pytest.mark.parametrize("manager", [HybridKVBlockManager, HybridPrefixCachingKVManager])
@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 4), st.integers(1, 70), st.booleans()), max_size=50),
       blocks=st.integers(4, 60), block_size=st.sampled_from([1, 4, 16]), window=st.integers(2, 40),
       chunked=st.booleans())
def test_local_blocks_are_never_lost_and_a_failed_allocation_changes_nothing(manager, ops, blocks, block_size,
                                                                            window, chunked):
    lay = kv_layout(load_model({"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                                "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100,
                                ("attention_chunk_size" if chunked else "sliding_window"): window,
                                "num_local_attention_layers": 2}), disable_hybrid=False)
    kv = manager(lay, 1 << 40, blocks, block_size, 512)  # no step budget: the window alone bounds a group
    reqs = [Request(RequestSpec(i, 0.0, 200, 100), 512) for i in range(5)]
    for who, n, free in ops:
        r = reqs[who]
        if free:
            kv.free(r)
            r.num_computed_tokens = 0
            continue
        before = (list(r.blocks), len(r.local_blocks))
        if kv.allocate_slots(r, n):
            r.num_computed_tokens = min(r.num_computed_tokens + n, 512)
            assert len(r.blocks) * block_size >= r.num_computed_tokens
            assert len(r.blocks) + len(r.local_blocks) == lay.blocks_for(r.num_computed_tokens, r.num_computed_tokens
                                                                         - n, block_size)
        else:
            assert r.blocks == before[0] and len(r.local_blocks) <= before[1]  # only out-of-window blocks went
        kv.check_invariants(reqs)
    for r in reqs:
        kv.free(r)
    assert kv.num_free_blocks == kv.num_usable_blocks


def _sliding(prefix_caching: bool, disable: bool) -> list[str]:
    """A 4-layer model, 2 layers on a 64-token window, in the same KV memory: 200 blocks of 4 layers or 400
    of 2."""
    model = {"name": "tiny-swa", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000,
             "max_position_embeddings": 4096, "sliding_window": 64, "num_local_attention_layers": 2}
    sets = [f"model={json.dumps(model)}", "profile=roofline", f"engine.num_gpu_blocks_override={200 if disable else 400}",
            f"engine.enable_prefix_caching={str(prefix_caching).lower()}", "engine.max_model_len=2048", "engine.max_num_batched_tokens=512",
            "workload.num_requests=40", "workload.arrival.rate=50",
            "workload.shared_prefix={\"tokens\": 300, \"count\": 2}"]
    return sets + [f"engine.disable_hybrid_kv_cache_manager={str(disable).lower()}"]


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_a_sliding_window_run_returns_every_block_and_runs_more_at_once_with_the_hybrid_manager(prefix_caching):
    runs = {}
    for disable in (False, True):
        rs = load(None, _sliding(prefix_caching, disable))
        sim = build(rs, None, keep_requests=True)
        kv, sched = sim.replicas[0].kv, sim.replicas[0].scheduler
        while sim.env.peek() != float("inf"):
            sim.env.step()
            kv.check_invariants(list(sched.running) + list(sched.waiting))
        assert kv.num_free_blocks == kv.num_usable_blocks
        reqs = sim.front_end.requests
        assert all(r.status == "finished" for r in reqs)
        runs[disable] = max(r.finish_time for r in reqs)  # the makespan
    assert runs[False] < 0.8 * runs[True]  # windowed layers give back what they no longer read: more run at once


def test_the_steps_report_layer_averaged_reads_and_the_blocks_vllm_holds(tmp_path):
    """One gpt-oss request of 340 tokens: its prefill and first decode, by hand."""
    trace = tmp_path / "one.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,340,3\n")  # Azure's format
    out = tmp_path / "run"
    assert main(["run", "--set", "model=gpt-oss-120b", "--set", "profile=roofline", "--set",
                 f"workload={json.dumps({'type': 'trace', 'path': str(trace)})}", "--out", str(out)]) == 0
    steps = pd.read_parquet(out / "steps.parquet")
    full_pairs, window_pairs = 340 * 341 // 2, 128 * 129 // 2 + (340 - 128) * 128
    assert steps.prefill_attention_pairs[0] == (full_pairs + window_pairs) // 2  # 18 full, 18 sliding layers
    assert steps.decode_context_tokens[1] == (341 + 128) // 2
    assert steps.kv_blocks_used[0] == 22 + 22  # the prefill writes all 340 tokens in both groups
    # then the sliding group keeps blocks 13..21 (tokens 213..340), once the prefill is processed: 0.33 plans the
    # first decode with it in flight (async scheduling), and frees its window's blocks a step later (r155)
    assert steps.kv_blocks_used[1] == 22 + 22 and steps.kv_blocks_used[2] == 22 + 9
    rs = load(None, ["model=gpt-oss-120b", "profile=roofline"])
    step = rs.cost_model.step_time  # and the roofline reads the layer-averaged context
    assert step(decode_shape(64, 64 * 564)) < step(decode_shape(64, 64 * 1001))


def test_long_prompts_are_admitted_only_when_every_group_can_hold_them():
    """The whole-prompt check (scheduler_reserve_full_isl) counts the local groups' blocks too: long prompts in a
    tight pool wait instead of being admitted, preempted and recomputed over and over."""
    model = {"name": "tiny-chunks", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 8192,
             "attention_chunk_size": 512, "num_local_attention_layers": 3}
    base = [f"model={json.dumps(model)}", "profile=roofline", "engine.max_model_len=4096",
            "engine.max_num_batched_tokens=512", "engine.enable_prefix_caching=false", "workload.num_requests=30",
            "workload.arrival.rate=100", "workload.prompt_tokens={dist: uniform, low: 1500, high: 4000}",
            "workload.output_tokens={dist: fixed, value: 50}"]
    preempted = {}
    for disable, blocks in ((False, 1400), (True, 700)):  # the same memory: blocks of 1 layer, or of all 4
        rs = load(None, base + [f"engine.disable_hybrid_kv_cache_manager={str(disable).lower()}",
                                f"engine.num_gpu_blocks_override={blocks}"])
        sim = build(rs, None, keep_requests=True)
        sim.env.run()
        reqs = sim.front_end.requests
        assert all(r.status == "finished" for r in reqs)
        preempted[disable] = sum(r.num_preemptions for r in reqs)
    assert preempted[False] <= preempted[True]


@pytest.mark.parametrize("max_len, blocks", [(4096, 256 + 257), (131072, 8192 + 1033)])
def test_a_sliding_window_bound_keeps_its_extra_block_where_the_length_bounds_it(max_len, blocks):
    """vLLM's SlidingWindowSpec adds its block for a window not starting at a block's edge even where max_model_len,
    not the window, bounds it: gpt-oss at 4,096 tokens needs 256 + 257 blocks; servesim counted 512, so it
    started (and fitted auto to 4,800 tokens) on pools vLLM refuses (round 76)."""
    rs = load(None, ["model=gpt-oss-120b", "hardware.gpu=h200-sxm", "profile=roofline",
                     f"engine.max_model_len={max_len}"])
    assert rs.kv_layout.max_blocks(max_len, rs.in_flight_tokens, 16) == blocks
    page = rs.kv_layout.page_bytes_per_token * 16
    fitted = load(None, ["model=gpt-oss-120b", "hardware.gpu=h200-sxm", "profile=roofline",
                         "engine.max_model_len=auto", f"engine.kv_cache_memory_bytes={601 * page}"])
    assert fitted.max_model_len == 4784  # 299 + 300 blocks of the 600 usable (4,800 needs 300 + 301), as vLLM fits it


@pytest.mark.parametrize("argv, shared, private, requests", [
    (["--model", "gpt-oss-120b", "--gpu", "h200-sxm", "--shared-prefix-tokens", "1000", "--private-tokens", "50"],
     62 + 5, 4 + 4, 14539),  # the window (blocks 57..65) holds prefix blocks 57..61
    (["--model", "llama-4-scout", "--gpu", "h200-sxm", "-tp", "4", "--max-model-len", "32768",
      "--shared-prefix-tokens", "10000", "--private-tokens", "500"],
     625 + 3 * 113, 32 + 3 * 32, 3115),  # 3,116 before the routers were whole on each GPU (r133)
])
def test_capacity_shares_the_prefix_blocks_a_local_group_holds(capsys, argv, shared, private, requests):
    """vLLM's window and chunk managers take cached prefix blocks inside the window as hits, shared by every
    request; capacity counted them private to each (gpt-oss: 9,661 requests for 15,698, round 77)."""
    assert main(["capacity", *argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["shared_prefix_blocks"], r["private_blocks_per_request"], r["shared_prefix_requests"]) == \
        (shared, private, requests)


def _shared(n: int, shared_ids: int, private: int, gap: float, unit: int = 16) -> list[RequestSpec]:
    """n requests on one shared prefix of shared_ids content ids, each with its own ids after it."""
    return [RequestSpec(i, i * gap, (shared_ids + private) * unit, 8,
                        prefix_ids=tuple(range(shared_ids)) + tuple(10**6 * (i + 1) + k for k in range(private)),
                        prefix_block_tokens=unit) for i in range(n)]


@pytest.mark.parametrize("sets, cached", [
    ([], [0, 0, 640, 640]),  # 0.33: the second request finds the prefix in the full group only; it computes it again
    # and keeps its window cached for the third (shared_prefix_boundary)
    (["engine.prefix_cache_retention_interval=null"], [0, 640, 640, 640]),  # every window block kept
    # and the window before every 256 tokens: the second request resumes at token 512
    (["engine.prefix_cache_retention_interval=256"], [0, 512, 640, 640]),
    (["engine.vllm_defaults=0.19.0"], [0, 640, 640, 640])])  # 0.19 keeps every block
def test_a_sliding_window_hit_needs_the_window_before_it_cached(sets, cached):
    rs = load(None, ["model=gpt-oss-120b", "profile=roofline", *sets])
    sim = build(rs, _shared(4, 40, 3, gap=1.0), keep_requests=True)  # each alone: the one before has finished
    sim.env.run()
    reqs = sim.front_end.requests
    assert [r.cached_tokens for r in reqs] == cached
    kv = sim.replicas[0].kv
    assert kv.num_free_blocks == kv.num_usable_blocks


@pytest.mark.parametrize("retention, cached", [("null", [0, 640, 640, 640]), (0, [0, 0, 0, 0])])
def test_a_one_token_window_hits_as_vllm_finds_it(retention, cached):
    """A 1-token window needs no block before the hit (cdiv(0, 16) = 0), but vLLM's search still ends on a cached
    block, whose run it keeps: the hit lost that block (round 79); 0.33's sparse retention keeps no window block
    (its tails are need = 0 blocks long), so nothing hits there, as in vLLM."""
    rs = load(None, ["model=gpt-oss-120b", "model.sliding_window=1", "profile=roofline",
                     f"engine.prefix_cache_retention_interval={retention}"])
    sim = build(rs, _shared(4, 40, 3, gap=1.0), keep_requests=True)
    sim.env.run()
    assert [r.cached_tokens for r in sim.front_end.requests] == cached


def test_requests_on_one_prefix_share_its_chunk_blocks():
    """Llama 4's chunks: a request reads the blocks of its chunk, and those of a shared prefix are cached once
    (vLLM's ChunkedLocalAttentionManager), not held by each request."""
    model = {"name": "tiny-chunks", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 4096,
             "attention_chunk_size": 256, "num_local_attention_layers": 3}
    rs = load(None, [f"model={json.dumps(model)}", "profile=roofline", "engine.max_model_len=2048",
                     "engine.num_gpu_blocks_override=2000"])
    sim = build(rs, _shared(30, 12, 2, gap=0.0), keep_requests=True)  # 192 shared tokens, all in the first chunk
    kv = sim.replicas[0].kv
    shared_most = peak = 0
    while sim.env.peek() != float("inf"):
        sim.env.step()
        running = sim.replicas[0].scheduler.running
        kv.check_invariants(list(running) + list(sim.replicas[0].scheduler.waiting))
        shared_most = max([shared_most] + [kv.ref[b] for r in running for b in r.local_blocks])
        peak = max(peak, kv.num_used_blocks)
    reqs = sim.front_end.requests
    assert all(r.cached_tokens == 192 for r in reqs[1:])
    assert shared_most == 30  # every request holds the prefix's chunk blocks of each local group, once in the pool
    # 12 shared token blocks in 4 groups, and each request's own 2 prompt blocks and 1 for its output, in 4 groups
    assert peak == 4 * 12 + 30 * 4 * 3


@pytest.mark.parametrize("margin, hit", [(True, 39), (False, 38)])
def test_an_eagle_hit_on_a_window_drops_one_block_once_in_0_33_twice_in_0_19(margin, hit):
    """An EAGLE-type drafter recomputes a hit's last block. 0.33 looks one block past the full group's hit for
    the window and drops it there (eagle margin); 0.19 drops one block in each group."""
    lay = kv_layout(load_model("gpt-oss-120b"))
    kv = HybridPrefixCachingKVManager(lay, 8192, 4000, 16, 4096)
    kv.drop_last_hit, kv.eagle_margin = True, margin
    first, second = (Request(s, 4096) for s in _shared(2, 40, 4, gap=0.0))
    assert kv.allocate_slots(first, first.num_tokens)  # computed whole, every block keyed (0.19's, or None)
    first.num_computed_tokens = first.num_tokens
    kv.free(first)
    blocks, tokens = kv.lookup(second)
    assert tokens == hit * 16 and len(blocks) == hit
    assert kv.allocate_slots(second, second.num_tokens - tokens, hit_blocks=blocks)
    assert second.local_first == hit - 8 and second.local_blocks[:8] == [
        kv.cached[(LOCAL, 0, kv.block_key(second, i))] for i in range(hit - 8, hit)]  # the window's 127 tokens
    kv.check_invariants([second])


def test_a_wrapped_configs_quantization_is_read_where_vllm_reads_it(tmp_path):
    """Round 98: a Llama 4 config.json's top-level quantization_config was dropped with the wrapper (an fp8 checkpoint
    ran as bf16), and a compressed-tensors checkpoint naming it compression_config ran as 16-bit, unsaid; vLLM reads
    the top level's (either name), then text_config's."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA4_HF | {"quantization_config": {"quant_method": "fp8"}}))
    assert load_model(str(path)).dtype == "fp8"
    path.write_text(json.dumps(GPT_OSS_HF | {"quantization_config": None,
                                              "compression_config": {"quant_method": "compressed-tensors"}}))
    with pytest.raises(ConfigError, match="quantization_config 'compressed-tensors'"):
        load_model(str(path))


@pytest.mark.parametrize("release, blocks", [("0.19.0", 400), ("0.33.0", 600)])
def test_round_131_0_19_admits_a_prompt_only_where_every_local_group_holds_it_whole(release, blocks):
    """r130 (vLLM): 0.19's whole-prompt admission check asks every sliding-window group for the whole prompt, as
    the full group; 0.33 caps it at the window (apply_admission_cap, its fix of vLLM issue 39734). servesim capped
    both: a 4,000-token gpt-oss prompt ran in a 400-block 0.19 pool where vLLM waits for it for ever (250 + 250
    blocks asked of 399). Now 0.19's run stops with the line naming it; 0.33's (its start-up bound: 600) runs."""
    from servesim.simulator.engine import simulate

    sets = ["model=gpt-oss-120b", "hardware.gpu=h200-sxm", f"engine.vllm_defaults={release}",
            "engine.max_model_len=4096", f"engine.num_gpu_blocks_override={blocks}", "engine.max_num_batched_tokens=2048",
            "workload.num_requests=1", "workload.prompt_tokens={dist: fixed, value: 4000}",
            "workload.output_tokens={dist: fixed, value: 10}"]
    if release == "0.19.0":
        with pytest.raises(ConfigError, match="needs 500 blocks, more than the KV pool's 399 usable blocks of 16 "
                                              r"\(vLLM 0.19 admits a prompt only where each local-attention group "
                                              "holds it whole"):
            simulate(load(None, sets))
    else:
        assert simulate(load(None, sets)).summary["completed"] == 1


def _pd_run(model: str, prompts: list[int], extra: list[str]):
    from servesim.workloads.spec import RequestSpec

    specs = [RequestSpec(i, 2.0 * i, p, 2 if model == "llama-4-scout" else 3) for i, p in enumerate(prompts)]
    return simulate(load(None, [f"model={model}", "engine.enable_prefix_caching=false", "cluster.prefill_replicas=1",
                                "cluster.replicas=1", *extra]), specs)


def test_round_153_a_pull_carries_and_holds_the_local_kv_the_decode_replica_reads():
    """r153: at a chunk's edge the pull sent none of the chunk the decode replica recomputes its last token in (a
    16,384-token prompt pulled 2.5x faster than one of 16,383), and while pulling, the decode replica held a
    sliding window's blocks for the whole prompt (vLLM skips by the connector's external tokens)."""
    steps = _pd_run("llama-4-scout", [16383, 16384, 16385],
                    ["engine.max_model_len=32768", "engine.tensor_parallel_size=2"]).steps
    pulls = []
    for t in (0.0, 2.0, 4.0):
        window = steps[(steps.start >= t) & (steps.start < t + 2)]
        pulls.append(window[window.replica == 1].start.min() - window[window.replica == 0].end.max())
    assert pulls[0] == pytest.approx(pulls[1], rel=1e-3) and pulls[2] < 0.5 * pulls[1], pulls  # one token apart
    run = _pd_run("gpt-oss-120b", [4000], ["engine.max_model_len=8192", "cluster.kv_link_gbps=1"])
    decode = run.steps[run.steps.replica == 1]
    assert decode.kv_blocks_used.max() < 300  # 250 full blocks and the window's few, not 250 more


@pytest.mark.parametrize("release, blocks", [("0.33.0", [256, 512, 630, 504, 385]),
                                             ("0.19.0", [256, 392, 502, 385, 385])])
def test_round_155_0_33_under_async_scheduling_frees_a_window_on_the_tokens_processed(release, blocks):
    """r155: vLLM 0.33 frees a local group's blocks by the tokens processed (total computed less those in flight:
    kv_cache_manager.allocate_slots), and under async scheduling the step before is still in flight as the next is
    planned; servesim freed them on the tokens scheduled, as 0.19 does: a 6,000-token gpt-oss prompt in 2,048-token
    chunks peaked at 502 blocks where 0.33 holds 630 (one full and one 128-token sliding group)."""
    import servesim

    base = {"model": "gpt-oss-120b", "engine.max_num_batched_tokens": 2048, "engine.max_model_len": 6100,
            "engine.enable_prefix_caching": False, "engine.vllm_defaults": release,
            "engine.num_gpu_blocks_override": 800}
    run = servesim.simulate(None, base, requests=[servesim.RequestSpec(0, 0.0, 6000, 3)])
    assert run.steps.kv_blocks_used.tolist()[:5] == blocks
    sync = servesim.simulate(None, base | {"engine.async_scheduling": False},
                             requests=[servesim.RequestSpec(0, 0.0, 6000, 3)])
    assert sync.steps.kv_blocks_used.tolist()[:5] == [256, 392, 502, 385, 385]  # nothing in flight when planned
