"""vLLM's start-up profile: the memory it takes besides weights and KV cache, which the KV pool is left after."""

import json
from pathlib import Path

import pytest

import servesim
from servesim.simulator.config import load
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import load_model
from servesim.simulator.start_up_memory import (CUDA_GRAPH_BYTES, GIB, forward_peak_bytes, sampler_peak_bytes,
                                                start_up_reserve_bytes)

RTX4090 = Path(__file__).parents[2] / "shared/data/serving/llmservingsim-vllm-0.19/RTX4090/Llama-3.1-8B/vllm/meta.json"


@pytest.mark.skipif(not RTX4090.exists(), reason="../shared/data/serving (the public vLLM 0.19 runs) is absent")
def test_the_pool_a_real_run_recorded_is_estimated_within_two_percent():
    """vLLM 0.19 on an RTX 4090 recorded 2,588 blocks; servesim sized 3,169 (+22%) from weights alone."""
    meta = json.loads(RTX4090.read_text())
    kw, cache = meta["engine_kwargs"], meta["kv_cache"]
    rs = load(None, ["model=llama-3.1-8b", "hardware.gpu=rtx-4090", "engine.vllm_defaults=0.19.0",
                     f"engine.gpu_memory_utilization={cache['gpu_memory_utilization']}",
                     f"engine.max_num_seqs={kw['max_num_seqs']}",
                     f"engine.max_num_batched_tokens={kw['max_num_batched_tokens']}",
                     f"engine.max_model_len={kw['max_model_len']}", f"engine.block_size={cache['block_size']}"])
    assert rs.hardware.memory_bytes == pytest.approx(meta["hardware"]["device_total_memory_bytes"], rel=1e-3)
    assert rs.num_gpu_blocks == pytest.approx(cache["num_gpu_blocks"], rel=0.02)


def test_the_sampler_warm_up_grows_with_sequences_and_vocabulary_up_to_the_budget():
    """max_num_seqs' logits rows, at most one per budgeted token; a draft method's rejection sampler warm-up holds
    more (round 126: 0.33 warms the native path after FlashInfer's, so both releases hold its copies)."""
    one = sampler_peak_bytes(128256, 256, 8192, False)
    assert sampler_peak_bytes(128256, 1024, 8192, False) == 4 * one
    assert sampler_peak_bytes(2 * 128256, 256, 8192, False) == 2 * one
    assert sampler_peak_bytes(128256, 1024, 256, False) == one  # no more requests than tokens
    assert sampler_peak_bytes(128256, 256, 8192, True) > one
    base = ["hardware.gpu=h100-sxm", "engine.max_model_len=8192"]
    assert load(None, base + ["speculative.method=fixed", "speculative.num_speculative_tokens=3"]) \
        .reserved_memory_bytes > load(None, base).reserved_memory_bytes
    assert load(None, base).reserved_memory_bytes - load(None, base + ["engine.vllm_defaults=0.19.0"]) \
        .reserved_memory_bytes == CUDA_GRAPH_BYTES  # 0.33's CUDA graph estimate alone


def test_the_forward_pass_is_split_by_tensor_parallelism_and_counts_a_tokens_experts():
    llama = load_model("llama-3.1-8b")
    assert forward_peak_bytes(llama, 8192, 2, False) < forward_peak_bytes(llama, 8192, 1, False) < \
        forward_peak_bytes(llama, 16384, 1, False)
    mixtral = load_model("mixtral-8x7b")  # 2 experts a token, each a whole MLP
    assert forward_peak_bytes(mixtral, 8192, 1, False) > forward_peak_bytes(load_model("mistral-7b"), 8192, 1, False)
    assert forward_peak_bytes(mixtral, 8192, 8, True) > forward_peak_bytes(mixtral, 8192, 8, False)  # experts whole


def test_only_0_33_takes_its_cuda_graph_estimate_and_only_where_graphs_are_captured():
    arch = load_model("llama-3.1-8b")
    kw = dict(max_num_seqs=256, max_num_batched_tokens=2048, tp=1, expert_parallel=False)
    graphs = start_up_reserve_bytes(arch, release="0.33.0", cuda_graphs=True, **kw)
    assert graphs > start_up_reserve_bytes(arch, release="0.33.0", cuda_graphs=False, **kw)
    assert start_up_reserve_bytes(arch, release="0.19.0", cuda_graphs=True, **kw) == \
        start_up_reserve_bytes(arch, release="0.19.0", cuda_graphs=False, **kw)
    eager = load(None, ["engine.enforce_eager=true", "engine.max_model_len=8192"])
    assert eager.reserved_memory_bytes < load(None, ["engine.max_model_len=8192"]).reserved_memory_bytes


def test_a_given_reserve_replaces_the_estimate_and_the_pool_is_left_after_it():
    base = ["hardware.gpu=h100-sxm", "engine.max_model_len=8192"]
    est = load(None, base)
    given = load(None, base + ["engine.reserved_memory_gib=1"])
    none = load(None, base + ["engine.reserved_memory_gib=0"])
    assert given.reserved_memory_bytes == GIB and none.reserved_memory_bytes == 0
    assert 1.5 * GIB < est.reserved_memory_bytes < 3 * GIB  # 1,024 sequences of Llama 3's 128,256 logits
    page = est.kv_layout.page_bytes_per_token * 16
    assert none.kv_pool_bytes - given.kv_pool_bytes == GIB
    assert none.num_gpu_blocks - est.num_gpu_blocks == pytest.approx(est.reserved_memory_bytes / page, abs=1)
    assert est.as_dict()["resolved"]["reserved_memory_bytes"] == est.reserved_memory_bytes
    # more sequences, a larger warm-up, fewer blocks
    assert load(None, base + ["engine.max_num_seqs=2048"]).num_gpu_blocks < est.num_gpu_blocks


@pytest.mark.parametrize("sets, kwargs", [
    ([], {}),
    (["engine.max_num_seqs=64", "engine.max_num_batched_tokens=4096"], {"max_num_seqs": 64, "max_num_batched_tokens": 4096}),
    (["engine.reserved_memory_gib=3.5"], {"reserved_memory_gib": 3.5}),
])
def test_capacity_and_a_run_size_the_same_pool(sets, kwargs):
    """The calculator's pool is the simulator's, the start-up profile's estimate included."""
    plan = servesim.capacity("qwen3-8b", "h200-sxm", max_model_len=32768, gpu_memory_utilization=0.9, **kwargs)
    rs = load(None, ["model=qwen3-8b", "hardware.gpu=h200-sxm", "engine.max_model_len=32768",
                     "engine.gpu_memory_utilization=0.9", *sets])
    assert plan.reserved_bytes == rs.reserved_memory_bytes
    assert plan.report.num_blocks == rs.num_gpu_blocks


def test_a_budget_whose_profile_leaves_no_memory_is_refused_naming_what_sizes_it():
    with pytest.raises(ConfigError, match=r"engine.gpu_memory_utilization: no memory left for the KV cache.*vLLM's "
                                          r"start-up profile .* GiB \(servesim's estimate"):
        load(None, ["engine.max_num_batched_tokens=2000000", "engine.max_num_seqs=1024", "engine.max_model_len=8192"])
    with pytest.raises(ConfigError, match="engine.reserved_memory_gib: no memory left"):
        load(None, ["engine.reserved_memory_gib=120", "engine.max_model_len=8192"])
    # a pool left too small for one request by a reserve given says so (r126's low one: said as the share's alone)
    with pytest.raises(ConfigError, match=r"\(8,192 blocks\) \(engine.reserved_memory_gib=110 took its share"):
        load(None, ["engine.reserved_memory_gib=110"])


def test_round_126_a_share_above_what_is_free_at_start_is_refused():
    """vLLM's request_memory: 0.999 of an H100 asks for more than is free once the CUDA context is made."""
    with pytest.raises(ConfigError, match=r"^engine.gpu_memory_utilization: 0.999 of 79.19 GiB is more than is free"):
        load(None, ["hardware.gpu=h100-sxm", "engine.gpu_memory_utilization=0.999", "engine.max_model_len=8192"])
    load(None, ["hardware.gpu=h100-sxm", "engine.gpu_memory_utilization=0.99", "engine.max_model_len=8192"])
    with pytest.raises(ConfigError, match="^gpu_memory_utilization: 0.999 of"):  # the API names its argument
        servesim.capacity("llama-3.1-8b", "h100-sxm", gpu_memory_utilization=0.999)


@pytest.mark.parametrize("release", ["0.33.0", "0.19.0"])
def test_round_126_capacity_takes_the_release_and_eager_mode_a_run_takes(release):
    """capacity assumed 0.33 (its CUDA graph estimate) for a 0.19 deployment; a run's pool is its release's."""
    for eager in (False, True):
        plan = servesim.capacity("llama-3.1-8b", "h100-sxm", max_model_len=32768, vllm_version=release,
                                 enforce_eager=eager)
        rs = load(None, ["hardware.gpu=h100-sxm", "engine.max_model_len=32768", f"engine.vllm_defaults={release}",
                         f"engine.enforce_eager={str(eager).lower()}"])
        assert (plan.reserved_bytes, plan.report.num_blocks) == (rs.reserved_memory_bytes, rs.num_gpu_blocks)


def test_round_126_capacity_says_what_bounds_it_besides_the_pool(capsys):
    from servesim.simulator.cli import main

    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--max-num-seqs", "16"]) == 0
    assert "vLLM runs at most max_num_seqs=16 requests at once" in capsys.readouterr().err
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--reserved-memory-gib", "1",
                 "--max-num-batched-tokens", "4096"]) == 0
    assert "--max-num-batched-tokens has no effect: --reserved-memory-gib gives" in capsys.readouterr().err
    assert main(["capacity", "--model", "llama-3.1-8b", "--reserved-memory-gib", "1", "--enforce-eager"]) == 0
    assert "--enforce-eager has no effect: --reserved-memory-gib gives" in capsys.readouterr().err
    assert main(["capacity", "--model", "mixtral-8x7b", "--gpu", "h100-sxm"]) == 2  # the weights alone
    err = capsys.readouterr().err
    assert "weights 86.99 GiB (--gpu h100-sxm" in err and "start-up profile" not in err


@pytest.mark.parametrize("model, gpu, extra, sets", [
    # 0.19 counts every block (no null block) in its start-up check and auto-fit
    ("qwen3-32b", "h100-sxm", {"max_model_len": "auto", "vllm_version": "0.19.0"},
     ["engine.max_model_len=auto", "engine.vllm_defaults=0.19.0"]),
    # 0.19's backends for gpt-oss's sinks on an A100 take an fp8 KV cache (0.33's do not)
    ("gpt-oss-120b", "a100-80gb", {"kv_cache_dtype": "fp8", "vllm_version": "0.19.0", "tensor_parallel_size": 2},
     ["engine.kv_cache_dtype=fp8", "engine.vllm_defaults=0.19.0", "engine.tensor_parallel_size=2"]),
])
def test_round_127_capacity_answers_as_a_run_of_the_release_named(model, gpu, extra, sets):
    plan = servesim.capacity(model, gpu, **extra)
    rs = load(None, [f"model={model}", f"hardware.gpu={gpu}", "profile=roofline", *sets])
    assert (plan.report.num_blocks, plan.report.max_model_len) == (rs.num_gpu_blocks, rs.max_model_len)
    assert not any("would not start" in w for w in plan.warnings)


def test_round_127_capacity_takes_a_checkpoints_own_fp8_kv_cache_as_a_run_does(tmp_path):
    """Latent attention's block size follows the KV dtype: auto is the checkpoint's fp8 (64-token blocks on
    Hopper), which capacity read as 16-bit."""
    text = (Path(__file__).parents[1] / "simulator/data/models/deepseek-v3.yaml").read_text()
    arch = tmp_path / "ds-fp8kv.yaml"
    arch.write_text(text.replace("name: deepseek-v3", "name: ds-fp8kv") + "\nkv_cache_dtype: fp8\n")
    plan = servesim.capacity(arch, "h200-sxm", tensor_parallel_size=8, max_model_len=8192)
    rs = load(None, [f"model={arch}", "hardware.gpu=h200-sxm", "engine.tensor_parallel_size=8",
                     "engine.max_model_len=8192", "profile=roofline"])
    assert (plan.report.block_size, plan.report.num_blocks) == (rs.scenario.engine.block_size, rs.num_gpu_blocks) == \
        (64, rs.num_gpu_blocks)


def test_round_127_capacity_refuses_a_block_size_a_run_refuses_on_intels_xpu():
    with pytest.raises(ConfigError, match=r"^block_size: 16: vLLM 0.33's FlashAttention on Intel's XPU"):
        servesim.capacity("llama-3.1-8b", "b60", block_size=16)
    with pytest.raises(ConfigError, match=r"^engine.block_size: 16: vLLM 0.33's FlashAttention on Intel's XPU"):
        load(None, ["hardware.gpu=b60", "engine.block_size=16", "engine.max_model_len=8192"])
    assert servesim.capacity("llama-3.1-8b", "b60", block_size=16, vllm_version="0.19.0").report.block_size == 16
