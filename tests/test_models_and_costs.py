"""Architectures, datasheets, vLLM's device defaults and the built-in cost models."""

import json
import math
import re

import pytest

from servesim.simulator.batch import BatchShape, decode_shape
from servesim.simulator.config import load, usage_context_defaults
from servesim.simulator.cost_model import LinearCoefficients, LinearCostModel, RooflineCoefficients, RooflineCostModel, load_profile
from servesim.simulator.errors import ConfigError
from servesim.simulator.hardware import load_hardware
from servesim.simulator.model_arch import load_model


def test_hf_config_json_loads(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
           "torch_dtype": "bfloat16", "rope_theta": 500000.0, "rms_norm_eps": 1e-5}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    m = load_model(str(f))
    assert m.dtype == "bf16" and m.head_dim == 128 and m.kv_bytes_per_token == 131072
    assert m.weight_bytes == load_model("llama-3-8b").weight_bytes


def test_a_qwen2_config_json_counts_its_qkv_bias_as_vllm_builds_it(tmp_path):
    """Round 94: Qwen2's attention always has a q/k/v bias in vLLM (qwen2.py), a config key nowhere: a Qwen2.5-7B
    config.json read as the built-in (which names the bias) weighs the same."""
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
           "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
           "vocab_size": 152064, "max_position_embeddings": 32768, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m, built_in = load_model(str(tmp_path / "config.json")), load_model("qwen2.5-7b")
    assert m.attention_bias and m.weight_bytes == built_in.weight_bytes
    assert m.attention_params - load_model(str(tmp_path / "config.json")).model_copy(
        update={"attention_bias": False}).attention_params == (28 + 2 * 4) * 128


@pytest.mark.parametrize("extra, length, kv_heads, length_0_19", [
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 16384, 8, None),  # vLLM scales the length by it
    ({"rope_scaling": {"type": "dynamic", "factor": 4}}, 32768, 8, None),  # the older key name
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 8192, 8, None),  # already the scaled length
    # 0.33 takes yarn's length as scaled; 0.19 multiplies its original length (round 67)
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}}, 8192, 8, 32768),
    ({"num_key_value_heads": None}, 8192, 32, None),  # transformers' default: a KV head per attention head
])
def test_hf_config_length_and_kv_heads_as_vllm_reads_them(tmp_path, extra, length, kv_heads, length_0_19):
    """A linear or dynamic RoPE scaling multiplies the model's length in vLLM (its factor refused 16384 on an
    8192 model that vLLM serves at 16384); a config without num_key_value_heads has one per head (round 64)."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192} | extra
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    m = load_model(str(tmp_path / "config.json"))
    assert (m.max_position_embeddings, m.num_key_value_heads) == (length, kv_heads)
    from servesim.simulator.config import load

    path = tmp_path / "config.json"
    assert load(None, [f"model={path}", "engine.vllm_defaults=0.19.0"]).max_model_len == (length_0_19 or length)
    assert load(None, [f"model={path}"]).max_model_len == length


@pytest.mark.parametrize("factor, problem", [(2000, None), (None, None), (0, "positive"), (float("inf"), "positive"),
                                             ("2", "positive"), (1e30, "past the"), (1e-9, "less than one")])
def test_a_rope_factor_scales_the_length_without_bound_or_is_named(tmp_path, factor, problem):
    """Round 106: a linear factor past 1024 was dropped unsaid (an 8,192-token model ran where vLLM derives
    16,384,000 and refuses the KV pool); a factor vLLM cannot multiply by is named, not skipped."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **BARE, "max_position_embeddings": 8192,
           "rope_scaling": {"rope_type": "linear", "factor": factor}}
    path = _config_json(tmp_path, json.loads(json.dumps(cfg).replace("Infinity", "1e999")))
    if problem is None:
        assert load_model(path).max_position_embeddings == 8192 * (factor or 1)
        return
    with pytest.raises(ConfigError) as e:
        load_model(path)
    assert e.value.field == "model.rope_scaling.factor" and problem in str(e.value)


def _config_json(tmp_path, cfg: dict):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path / "config.json")


BARE = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
        "vocab_size": 32000}


@pytest.mark.parametrize("family, extra, expect", [
    ("llama", {}, {"max_position_embeddings": 2048, "num_key_value_heads": 32, "head_dim": 128,
                   "sliding_window": None}),
    ("mistral", {}, {"max_position_embeddings": 131072, "num_key_value_heads": 8, "sliding_window": 4096}),
    ("qwen3", {"hidden_size": 5120, "num_attention_heads": 64},  # 80 a head by the hidden size, 128 by the class
     {"max_position_embeddings": 32768, "num_key_value_heads": 32, "head_dim": 128}),
])
def test_a_config_key_left_out_is_its_transformers_class_default(tmp_path, family, extra, expect):
    """Round 100: vLLM loads a config.json through transformers' config class, whose defaults fill a key the file
    leaves out; servesim took its own (8,192 positions, one KV head per head, head_dim hidden / heads, no window):
    a Mistral without num_key_value_heads has 8 (4x fewer KV bytes than servesim counted), a Qwen3 without
    head_dim 128, a Llama without max_position_embeddings 2,048 (a --max-model-len 4096 vLLM refuses had run)."""
    m = load_model(_config_json(tmp_path, BARE | {"model_type": family} | extra))
    assert {k: getattr(m, k) for k in expect} == expect
    if family == "llama":
        with pytest.raises(ConfigError, match="4096 exceeds the model's max_position_embeddings .2048"):
            load(None, [f"model={tmp_path / 'config.json'}", "engine.max_model_len=4096"])


@pytest.mark.parametrize("extra, longest, default", [
    ({"max_sequence_length": 4096}, 4096, 4096),  # vLLM takes the smallest length key
    ({"seq_length": 2048, "max_seq_len": 3000}, 2048, 2048),
    ({"model_max_length": 65536, "max_seq_len": 4096}, 65536, 65536),  # model_max_length is the length, as given
    ({"model_max_length": 2048}, 2048, 2048),
    ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [4.0]},
      "original_max_position_embeddings": 4096}, 32768, 4096),  # LongRoPE defaults to its original length
    ({"sliding_window": 0, "model_type": "mistral"}, 32768, 32768),  # 0: no window, as vLLM reads it
])
def test_a_config_jsons_length_is_derived_as_vllm_derives_it(tmp_path, extra, longest, default):
    """Round 100: only max_position_embeddings was read; vLLM derives the length from every length key, lets a
    model_max_length raise the limit, defaults a LongRoPE model to its original length, and reads a sliding_window
    of 0 as none (it had been refused)."""
    path = _config_json(tmp_path, BARE | {"model_type": "llama", "num_key_value_heads": 8,
                                          "max_position_embeddings": 32768} | extra)
    m = load_model(path)
    assert m.sliding_window is None
    for release in ("0.33.0", "0.19.0"):
        assert load(None, [f"model={path}", f"engine.vllm_defaults={release}"]).max_model_len == default
        assert load(None, [f"model={path}", f"engine.max_model_len={longest}"]).max_model_len == longest
        with pytest.raises(ConfigError, match=f"{longest + 1} exceeds"):
            load(None, [f"model={path}", f"engine.max_model_len={longest + 1}"])


def test_a_checkpoints_own_formats_are_vllms_auto_ones(tmp_path):
    """Round 100: a float32 checkpoint ran in fp32 (4-byte weights and KV), where vLLM's --dtype auto runs it in
    bfloat16; a ModelOpt checkpoint's kv_cache_quant_algo FP8 was left out, where vLLM resolves
    --kv-cache-dtype auto to fp8_e4m3 (half the KV bytes); its 4-bit KV cache is refused, not modelled."""
    llama = BARE | {"model_type": "llama", "num_key_value_heads": 8, "max_position_embeddings": 8192}
    fp32 = load_model(_config_json(tmp_path, llama | {"torch_dtype": "float32"}))
    assert (fp32.dtype, fp32.kv_bytes_per_token) == ("bf16", 131072)
    for q in ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
              {"quant_method": "modelopt", "quant_algo": "FP8",
               "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}):
        m = load_model(_config_json(tmp_path, llama | {"quantization_config": q}))
        assert (m.kv_cache_dtype, m.kv_bytes_per_token) == ("fp8", 65536)
        assert load(None, [f"model={tmp_path / 'config.json'}", "engine.kv_cache_dtype=bfloat16"]).arch \
            .kv_bytes_per_token == 131072  # given, it stands
    plain = load_model(_config_json(tmp_path, llama | {"quantization_config": {"quant_method": "modelopt",
                                                                                "quant_algo": "FP8"}}))
    assert plain.kv_bytes_per_token == 131072
    with pytest.raises(ConfigError, match="kv_cache_quant_algo NVFP4: a 4-bit KV cache"):
        load_model(_config_json(tmp_path, llama | {"quantization_config": {
            "quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"}}))


def test_modelopt_sidecar_and_vllms_family_aliases_are_read(tmp_path):
    """Round 101: a ModelOpt checkpoint of 0.29 or before keeps its quantization in hf_quant_config.json beside
    config.json (nvidia/Llama-3.3-70B-Instruct-FP4), which vLLM reads: it had been read as 16-bit (131 GiB of
    weights, a 16-bit KV cache) and --quantization modelopt refused. Kimi-K2's model_type kimi_k2 is DeepSeek-V3's
    config class in vLLM; it had been refused."""
    from servesim.simulator.config import with_formats

    llama = BARE | {"model_type": "llama", "num_key_value_heads": 8, "max_position_embeddings": 8192}
    path = _config_json(tmp_path, llama)
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"producer": {"name": "modelopt", "version": "0.27"},
                                                               "quantization": {"quant_algo": "NVFP4",
                                                                                "kv_cache_quant_algo": "FP8",
                                                                                "group_size": 16}}))
    m = load_model(path)
    assert (m.dtype, m.quant_method, m.kv_cache_dtype) == ("nvfp4", "modelopt", "fp8")
    assert load_model(str(tmp_path)).weight_bytes == m.weight_bytes < load_model(llama).weight_bytes / 3
    assert with_formats(m, "modelopt").dtype == "nvfp4"  # the checkpoint's own method
    (tmp_path / "hf_quant_config.json").write_text("{oops")
    with pytest.raises(ConfigError, match="cannot parse .*hf_quant_config.json"):
        load_model(path)
    (tmp_path / "hf_quant_config.json").write_text('{"quantization": {"quant_algo": "NVFP4", "quant_algo": "FP8"}}')
    with pytest.raises(ConfigError, match="cannot parse .*hf_quant_config.json: key 'quant_algo' is given twice"):
        load_model(path)
    (tmp_path / "hf_quant_config.json").unlink()
    # r143: a key given twice kept the last silently (2 layers of 32), where every other reader refuses it
    (tmp_path / "config.json").write_text(json.dumps(llama)[:-1] + ', "num_hidden_layers": 2}')
    with pytest.raises(ConfigError, match="^model: cannot parse .*config.json: key 'num_hidden_layers' is given twice"):
        load_model(path)
    v3 = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "n_routed_experts": 384}
    kimi, deepseek = (load_model(_config_json(tmp_path, v3 | {"model_type": t})) for t in ("kimi_k2", "deepseek_v3"))
    assert kimi.model_dump(exclude={"name"}) == deepseek.model_dump(exclude={"name"})
    assert (kimi.num_experts, kimi.kv_bytes_per_token) == (384, (512 + 64) * 2 * 61)


def test_config_json_corners_read_as_transformers_builds_them(tmp_path, capsys):
    """Round 103: a model_type that is a list was an internal error; no length key at all ran at servesim's 8,192
    where vLLM assumes 2,048 (and says so); a Llama 4 wrapper without torch_dtype, or whose text_config names no
    model_type, was refused where transformers builds it; Qwen's use_sliding_window with max_window_layers at the
    layer count (no layer slides) was refused as sliding layers."""
    with pytest.raises(ConfigError, match=r"model.model_type: \['llama'\] is not a family"):
        load_model(_config_json(tmp_path, BARE | {"model_type": ["llama"]}))
    m = load_model(_config_json(tmp_path, BARE | {"model_type": "llama", "max_position_embeddings": None}))
    assert m.max_position_embeddings == 2048 and "2048 assumed, as vLLM assumes it" in capsys.readouterr().err
    text = BARE | {"num_key_value_heads": 8, "head_dim": 128, "num_local_experts": 16, "num_experts_per_tok": 1,
                   "intermediate_size_mlp": 16384, "attention_chunk_size": 8192}
    wrapper = load_model(_config_json(tmp_path, {"model_type": "llama4", "text_config": text}))
    assert (wrapper.hf_model_type, wrapper.dtype, wrapper.num_experts) == ("llama4_text", "bf16", 16)
    with pytest.raises(ConfigError, match="model.model_max_length: a 31-digit integer"):  # round 105: named so
        load_model(_config_json(tmp_path, BARE | {"model_type": "llama", "model_max_length": 10**30}))
    qwen = BARE | {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096}
    assert load_model(_config_json(tmp_path, qwen | {"max_window_layers": 32})).sliding_window is None
    with pytest.raises(ConfigError, match="use_sliding_window with max_window_layers 28"):
        load_model(_config_json(tmp_path, qwen | {"max_window_layers": 28}))


def test_bad_architecture_names_the_field(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("num_hidden_layers: 0\nhidden_size: 64\nnum_attention_heads: 4\nnum_key_value_heads: 4\n"
                 "intermediate_size: 128\nvocab_size: 100\n")
    with pytest.raises(ConfigError) as e:
        load_model(str(f))
    assert e.value.field == "model.num_hidden_layers"
    with pytest.raises(ConfigError, match="multiple of num_key_value_heads"):
        load_model({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3,
                    "intermediate_size": 128, "vocab_size": 100})


@pytest.mark.parametrize("gpu,ctx,expected", [
    ("h100-sxm", "openai_server", (8192, 1024)),
    ("h200-sxm", "openai_server", (8192, 1024)),
    ("h100-sxm", "llm_class", (16384, 1024)),
    ("a100-80gb", "openai_server", (2048, 256)),
    ("l40s", "openai_server", (2048, 256)),
])
def test_vllm_usage_context_defaults(gpu, ctx, expected):
    assert usage_context_defaults(load_hardware(gpu), ctx) == expected


def test_defaults_resolve_as_vllm():
    rs = load(None, [])  # Llama-3.1-8B on an H200 (141 GiB: under vLLM's 160 GiB line)
    assert (rs.max_num_batched_tokens, rs.max_num_seqs, rs.max_model_len) == (8192, 1024, 131072)
    off = load(None, ["engine.enable_chunked_prefill=false", "model=qwen2.5-7b", "profile=roofline"])
    assert off.max_num_batched_tokens == 32768  # max(max_model_len, default) with chunked prefill off
    big = load(None, ["hardware.memory_gib=192"])
    assert big.max_num_batched_tokens == 16384
    a100 = load(None, ["hardware.gpu=a100-80gb", "profile=roofline"])
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)


def test_pool_from_memory_weights_and_utilisation():
    rs = load(None, ["hardware.gpu=generic-80gb", "engine.gpu_memory_utilization=0.9"])
    pool = 80 * 2**30 * 0.9 - rs.arch.weight_bytes - rs.reserved_memory_bytes
    assert rs.num_gpu_blocks == int(pool // (131072 * 16))
    assert 1.5 * 2**30 < rs.reserved_memory_bytes < 4 * 2**30  # vLLM's start-up profile (start_up_memory.py)
    assert load(None, ["engine.num_gpu_blocks_override=5000", "engine.max_model_len=8192"]).num_gpu_blocks == 5000
    assert load(None, ["engine.reserved_memory_gib=4"]).num_gpu_blocks < load(None, []).num_gpu_blocks


def test_kv_cache_memory_bytes_sizes_the_pool_as_vllm_takes_it(capsys):
    """vLLM's --kv-cache-memory-bytes: the pool is that many bytes a GPU, whatever gpu_memory_utilization says
    (it was recorded and warned, not modelled: a 4 GiB cache simulated as ~58 GiB); past the GPU, refused."""
    from servesim.simulator.errors import ConfigError

    base = ["hardware.gpu=generic-80gb", "engine.max_model_len=8192"]
    for util in (0.5, 0.9):
        rs = load(None, base + ["engine.kv_cache_memory_bytes=4294967296", f"engine.gpu_memory_utilization={util}"])
        assert rs.num_gpu_blocks == 4 * 2**30 // (131072 * 16) == 2048
    assert "engine.gpu_memory_utilization has no effect: engine.kv_cache_memory_bytes" in capsys.readouterr().err
    over = load(None, base + ["engine.num_gpu_blocks_override=600", "engine.kv_cache_memory_bytes=4294967296"])
    assert over.num_gpu_blocks == 600
    with pytest.raises(ConfigError, match=r"engine.kv_cache_memory_bytes: 70.00 GiB of KV cache beside 14.96 GiB of "
                                          r"weights and [\d.]+ GiB reserved per GPU is more than the 80.0 GiB"):
        load(None, base + [f"engine.kv_cache_memory_bytes={70 * 2**30}"])
    with pytest.raises(ConfigError, match=r"engine.kv_cache_memory_bytes: the KV pool \(0 usable blocks"):
        load(None, base + ["engine.kv_cache_memory_bytes=1000"])


def test_teaching_profile_is_the_essays_three_constants():
    p = load_profile("teaching")
    m = LinearCostModel(LinearCoefficients(**p.coefficients))
    assert m.step_time(decode_shape(16, 16 * 500)) * 1000 == pytest.approx(18.0 + 0.12 * 16)
    assert m.step_time(decode_shape(253, 0)) * 1000 == pytest.approx(48.36)  # the essay's worked example
    assert m.step_time(BatchShape(1, 1000, 0, 0, 0)) * 1000 == pytest.approx(18.0 + 0.12 + 30.0)


def test_a_profile_path_that_is_no_yaml_is_said_so(tmp_path):
    """A records file given as a profile was an "unknown profile" with the list of built-in names (round 63)."""
    from servesim.simulator.errors import ConfigError

    (tmp_path / "run.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"run.jsonl' is not a profile: a profile file is YAML \(.yaml or .yml\)$"):
        load_profile(str(tmp_path / "run.jsonl"))
    with pytest.raises(ConfigError, match="this path does not exist"):
        load_profile(str(tmp_path / "gone.txt"))
    with pytest.raises(ConfigError, match="unknown profile 'h100-llama'; built-in: .*teaching"):
        load_profile("h100-llama")


def test_roofline_is_memory_bound_for_decode_and_compute_bound_for_long_prefill():
    arch, hw = load_model("llama-3-8b"), load_hardware("h100-sxm")
    m = RooflineCostModel(arch, hw, RooflineCoefficients())
    # ~5 ms: reading 15 GB of weights (not the 1 GB input embedding: a step looks up its tokens' rows, r144)
    weights_s = (arch.weight_bytes - arch.vocab_size * arch.hidden_size * 2) / (3350e9 * 0.8)
    one = m.step_time(decode_shape(1, 1000))
    assert one == pytest.approx(1e-3 + weights_s, rel=0.01)
    # decoding 64 sequences costs little more than one: the weights are read once
    assert m.step_time(decode_shape(64, 64 * 1000)) < 1.5 * one
    # a long prefill is compute-bound: time grows with tokens
    t4k = m.step_time(BatchShape(1, 4096, 4096 * 4097 // 2, 0, 0))
    t8k = m.step_time(BatchShape(1, 8192, 8192 * 8193 // 2, 0, 0))
    assert t8k > 1.9 * t4k and t4k > 5 * one
    # the LM head runs once a sequence, on its last token (round 89: it was charged on each of the 8,192 prompt
    # tokens, 7% of an 8B prefill's FLOPs): three more sequences over the same tokens add three of them
    head_s = 2 * arch.vocab_size * arch.hidden_size / (hw.peak_flops(arch.dtype) * 0.6)
    t8k_4 = m.step_time(BatchShape(4, 8192, 8192 * 8193 // 2, 0, 0))
    assert t8k_4 - t8k == pytest.approx(3 * head_s, rel=1e-9)
    assert t8k - 1e-3 == pytest.approx(2 * 8192 * arch.active_linear_params / (hw.peak_flops(arch.dtype) * 0.6) + head_s
                                       + max(8192 * arch.kv_bytes_per_token / (3350e9 * 0.8),
                                             8192 * 8193 // 2 * arch.attention_flops_per_token_pair
                                             / (hw.peak_flops(arch.dtype) * 0.6)), rel=1e-9)


def test_roofline_attention_runs_in_its_kv_caches_dtype():
    """Round 92: fp8 weights timed attention at the fp8 peak even beside a bf16 KV cache, where vLLM's attention
    runs in bf16: a 32k prompt's TTFT came out the same with either cache."""
    hw = load_hardware("h100-sxm")
    long_prefill = BatchShape(1, 8192, 8192 * 32768 + 8192 * 8193 // 2, 0, 0)
    times = {}
    for kv in ("bf16", "fp8"):
        arch = load_model("llama-3.1-8b").model_copy(update={"dtype": "fp8", "kv_cache_dtype": kv})
        times[kv] = RooflineCostModel(arch, hw, RooflineCoefficients()).step_time(long_prefill)
        pairs_s = arch.attention_flops_per_token_pair * long_prefill.prefill_attention_pairs / (
            hw.peak_flops(kv) * 0.6)
        assert times[kv] > pairs_s  # attention at its cache's rate is part of the step
    assert times["bf16"] > 1.3 * times["fp8"]


def test_profile_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError) as e:
        load(None, ["profile={name: x, cost_model: linear, coefficients: {per_seq_ms: -1}}"])
    assert e.value.field == "profile.coefficients.per_seq_ms"
    with pytest.raises(ConfigError) as e:
        load(None, ["profile={name: x, cost_model: quantum}"])
    assert e.value.field == "profile.cost_model"
    f = tmp_path / "p.yaml"
    f.write_text("name: mine\ncost_model: linear\ncoefficients: {step_overhead_ms: 5}\n")
    rs = load(None, [f"profile={f}"])
    assert rs.cost_model.step_time(decode_shape(3, 30)) == pytest.approx(0.005)


def test_max_sim_time_leaves_requests_unfinished_and_says_so():
    rs = load(None, ["workload.num_requests=200", "simulation.max_sim_time_s=5"])
    from servesim.simulator.engine import simulate

    s = simulate(rs).summary
    assert s["unfinished"] > 0 and s["completed"] + s["unfinished"] + s["failed"] <= 200


def test_tensor_parallel_splits_weights_and_kv():
    one = load(None, ["model=llama-3.1-70b", "profile=roofline", "engine.tensor_parallel_size=4",
                      "engine.max_model_len=8192"])
    # 70B in bf16 is 131 GiB: per H200 of a TP-4 group, a quarter of the weights and of each token's KV
    a = one.arch  # (the norms whole on each GPU, as vLLM's RMSNorm holds them)
    pool = math.ceil(139.81 * 2**30 * 0.92) - math.ceil((a.weight_bytes - a.norm_bytes) / 4 + a.norm_bytes) - \
        one.reserved_memory_bytes
    assert one.num_gpu_blocks == pool // (16 * 327_680 // 4)
    with pytest.raises(ConfigError, match="GiB of weights.*tensor_parallel_size=2"):
        load(None, ["model=llama-3.1-70b", "profile=roofline", "engine.max_model_len=8192"])
    tp8 = load(None, ["model=llama-3.1-70b", "profile=h200-llama-3.1-70b-bf16-tp8", "engine.tensor_parallel_size=8",
                      "engine.max_model_len=8192"])
    assert tp8.arch.kv_bytes_per_token_per_gpu(8) == 327_680 // 8  # 8 KV heads, one per GPU


def test_quantization_shrinks_the_linear_layers_only_and_needs_a_matching_profile():
    bf16 = load(None, [])
    fp8 = load(None, ["engine.quantization=fp8", "profile=h200-llama-3.1-8b-fp8-tp1"])
    # Llama-3.1-8B by hand: per layer q 4096^2 + k, v 2 x 4096 x 1024 + o 4096^2 + MLP 3 x 4096 x 14336
    linear = 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert linear == 6_979_321_856
    assert bf16.arch.weight_bytes - fp8.arch.weight_bytes == linear  # one byte a weight; embeddings, LM head stay bf16
    # AWQ/GPTQ by hand: 4 bits, an fp16 scale and a 4-bit packed zero point per group of 128 (round 89: the
    # zero point counted 16 bits, 0.75 GiB too much on a 70B model)
    for q, bits in (("modelopt_fp4", 4.5), ("awq", 4 + 20 / 128), ("gptq_marlin", 4 + 20 / 128)):
        w4 = load(None, [f"engine.quantization={q}", "profile=roofline", "hardware.gpu=b200-sxm"]).arch
        assert bf16.arch.weight_bytes - w4.weight_bytes == pytest.approx(linear * (16 - bits) / 8, abs=1)
        assert w4.kv_bytes_per_token == bf16.arch.kv_bytes_per_token
    assert fp8.arch.kv_bytes_per_token == bf16.arch.kv_bytes_per_token
    assert fp8.num_gpu_blocks > bf16.num_gpu_blocks
    with pytest.raises(ConfigError, match="quantization"):
        load(None, ["profile=h200-llama-3.1-8b-fp8-tp1"])


def test_roofline_tensor_parallel_adds_the_all_reduce():
    arch, hw = load_model("llama-3.1-70b"), load_hardware("h200-sxm")
    tp1 = RooflineCostModel(arch, hw, RooflineCoefficients(), 1)
    tp2 = RooflineCostModel(arch, hw, RooflineCoefficients(), 2)
    tp2_free = RooflineCostModel(arch, hw, RooflineCoefficients(allreduce_latency_us=0.0), 2)
    big = BatchShape(1, 8192, 8192 * 8193 // 2, 0, 0)
    assert tp2.step_time(big) < 0.75 * tp1.step_time(big)  # half the work each, plus communication
    assert tp2.step_time(big) > tp1.step_time(big) / 2
    assert tp2.step_time(big) - tp2_free.step_time(big) == pytest.approx(2 * 80 * 8e-6)  # 160 all-reduce latencies
    assert tp1.step_time(big) == RooflineCostModel(arch, hw, RooflineCoefficients(allreduce_latency_us=0.0), 1).step_time(big)


@pytest.mark.parametrize("sets, says", [
    (["model=llama-3.1-70b", "hardware.gpu=l4", "engine.num_gpu_blocks_override=500", "engine.max_model_len=4096"],
     "engine.num_gpu_blocks_override: 2.44 GiB of KV cache beside 131.42 GiB of weights and "),
    (["engine.num_gpu_blocks_override=90000", "engine.max_model_len=8192"],
     "engine.num_gpu_blocks_override: 175.78 GiB of KV cache beside 14.96 GiB of weights"),
])
def test_a_block_override_the_gpu_cannot_hold_is_refused(sets, says):
    """A block count is allocated as given, as kv_cache_memory_bytes is: 70B on an L4, or 176 GiB of KV on an
    H200, ran (round 71)."""
    from servesim.simulator.config import load

    with pytest.raises(ConfigError, match=re.escape(says)):
        load(None, sets)


def test_a_one_position_model_is_refused():
    """max_position_embeddings 1 cut every prompt to 0 tokens, 'finished' (round 71)."""
    from servesim.simulator.config import load

    tiny = {"name": "x", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
            "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 1}
    with pytest.raises(ConfigError, match="model.max_position_embeddings: 1: a request needs at least 2 positions"):
        load(None, [f"model={json.dumps(tiny)}", "engine.num_gpu_blocks_override=2000"])


def test_a_profile_named_for_an_edited_model_is_refused_or_said(tmp_path, capsys):
    """Round 89: the built-in 32-layer profile timed a 16-layer llama-3.1-8b (TPOT 6.2 ms where its own composed
    profile gives 3.2), unsaid; a harness profile recording 2 layers timed a 4-layer tiny-llama. Refused where the
    profile is built in or records its shape, said where a user's file records none; auto composes the edited one."""
    import yaml

    from servesim.simulator.config import _WARNED, load
    from servesim.simulator.errors import ConfigError

    builtin = "h200-llama-3.1-8b-bf16-tp1"
    for edit in ("model.num_hidden_layers=16", "model.hidden_size=8192"):
        with pytest.raises(ConfigError, match=r"profile: profile h200-llama-3.1-8b-bf16-tp1 timed llama-3.1-8b at the "
                                              r"built-in model's shape: (num_hidden_layers 32|hidden_size 4096)"):
            load(None, [edit, f"profile={builtin}"])
        assert load(None, [edit]).profile.name != builtin  # composed for the edited model
    assert load(None, [f"profile={builtin}"]).profile.name == builtin
    data = load(None, [f"profile={builtin}"]).profile.model_dump(mode="json", exclude_none=True)
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(data | {"name": "mine"}))
    _WARNED.clear()
    load(None, ["model.num_hidden_layers=16", f"profile={tmp_path / 'mine.yaml'}"])
    assert "warning: profile mine timed llama-3.1-8b at the built-in model's shape: num_hidden_layers 32" in \
        capsys.readouterr().err
    recorded = data | {"name": "rec", "architecture": {"num_hidden_layers": 16}}
    (tmp_path / "rec.yaml").write_text(yaml.safe_dump(recorded))
    assert load(None, ["model.num_hidden_layers=16", f"profile={tmp_path / 'rec.yaml'}"]).profile.name == "rec"
    with pytest.raises(ConfigError, match="timed llama-3.1-8b at the shape it records: num_hidden_layers 16 "
                                          r"\(the scenario's 32\)"):
        load(None, [f"profile={tmp_path / 'rec.yaml'}"])


def test_a_profile_is_matched_by_its_device_and_its_models_hugging_face_id():
    """r129: a profile without `gpu` whose device is a built-in GPU (H100 tables imported from a renamed folder)
    timed a B200 run without a word; one naming its model by the Hugging Face id was refused as another model."""
    from servesim.simulator.config import load
    from servesim.simulator.cost_model import load_profile
    from servesim.simulator.errors import ConfigError

    h100 = load_profile("h100-llama-3.1-8b-bf16-tp1").model_dump(mode="json")
    bare = h100 | {"name": "bare", "gpu": None, "device": "NVIDIA H100 80GB HBM3"}
    with pytest.raises(ConfigError, match=r"^profile: bare was measured on h100-sxm \(its device: NVIDIA H100 80GB "
                                          r"HBM3\), but hardware.gpu is b200-sxm"):
        load(None, ["hardware.gpu=b200-sxm", "engine.max_model_len=8192", f"profile={json.dumps(bare)}"])
    load(None, ["hardware.gpu=h100-sxm", "engine.max_model_len=8192", f"profile={json.dumps(bare)}"])
    # r147: its `gpu` relabelled to the scenario's (a file, or --set profile.gpu) timed a B200 run with H100 times
    for edit in ([f"profile={json.dumps(h100 | {'name': 'relabelled', 'gpu': 'b200-sxm'})}"],
                 ["profile=h100-llama-3.1-8b-bf16-tp1", "profile.gpu=b200-sxm"]):
        with pytest.raises(ConfigError, match=r"^profile.gpu: b200-sxm, but profile .* was measured on h100-sxm"):
            load(None, ["hardware.gpu=b200-sxm", "engine.max_model_len=8192", *edit])
    # r174: `calibrate fit --gpu h100-sxm` of a bare table records the GPU's key as its device: relabelled, or its
    # gpu line deleted, it timed H200 runs with H100 times
    keyed = h100 | {"name": "keyed", "device": "h100-sxm", "source": "servesim calibrate fit: my table"}
    for edit in ({"gpu": "b200-sxm"}, {"gpu": None}):
        with pytest.raises(ConfigError, match="was measured on h100-sxm"):
            load(None, ["hardware.gpu=b200-sxm", "engine.max_model_len=8192", f"profile={json.dumps(keyed | edit)}"])
    load(None, ["hardware.gpu=h100-sxm", "engine.max_model_len=8192", f"profile={json.dumps(keyed)}"])
    named = h100 | {"name": "named", "model": "meta-llama/Llama-3.1-8B-Instruct"}
    load(None, ["hardware.gpu=h100-sxm", "engine.max_model_len=8192", f"profile={json.dumps(named)}"])
    with pytest.raises(ConfigError, match="named was measured for model meta-llama/Llama-3.1-8B-Instruct, but the "
                                          "scenario's model is qwen3-8b"):
        load(None, ["model=qwen3-8b", "hardware.gpu=h100-sxm", "engine.max_model_len=8192",
                    f"profile={json.dumps(named)}"])


@pytest.mark.parametrize("rope, problem", [({"factor": 4.0}, "has no rope_type"), ("yarn", "must be a mapping"),
                                           ([1, 2], "must be a mapping"),
                                           ({"rope_type": "linear", "type": "yarn", "factor": 2}, "contradicts"),
                                           ({"type": "linear", "factor": 2.0}, None)])
def test_round_154_a_rope_scaling_vllm_cannot_read_is_refused(tmp_path, rope, problem):
    """r154: a rope_scaling without a rope_type multiplied the length by its factor (131,072 x 4), and a text or a
    list was ignored; vLLM's patch_rope_parameters refuses each (a legacy `type` alone is read as the rope_type)."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **BARE, "max_position_embeddings": 8192,
           "rope_scaling": rope}
    path = _config_json(tmp_path, cfg)
    if problem is None:
        assert load_model(path).max_position_embeddings == 16384
        return
    with pytest.raises(ConfigError) as e:
        load_model(path)
    assert e.value.field == "model.rope_scaling" and problem in str(e.value)


def test_round_154_a_qwen3_config_json_norms_q_and_k_as_the_built_in():
    """r154: a Qwen3 config.json loaded without qk_norm, which vLLM's Qwen3 attention always has."""
    import os
    import tempfile

    built_in = load_model("qwen3-8b")
    with tempfile.TemporaryDirectory() as d:
        cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
               "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
               "num_hidden_layers": 36, "vocab_size": 151936, "max_position_embeddings": 40960}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        read = load_model(os.path.join(d, "config.json"))
    assert read.qk_norm and read.attention_params == built_in.attention_params


@pytest.mark.parametrize("sets, problem", [
    (["engine.tensor_parallel_size=8"], "intermediate_size (14,340) does not split over 8"),
    (["engine.tensor_parallel_size=4"], None),
])
def test_round_154_an_mlp_width_the_tp_group_cannot_split_is_refused(tmp_path, sets, problem):
    """vLLM's MergedColumnParallelLinear and RowParallelLinear divide the MLP's width over the TP group (an
    assertion): an intermediate_size of 14,340 at TP 8 ran (1,792.5 columns a GPU)."""
    from servesim.simulator.capacity_plan import plan

    path = _config_json(tmp_path, {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **BARE,
                                   "intermediate_size": 14340, "num_key_value_heads": 8})
    tp = int(sets[0].split("=")[1])
    if problem is None:
        load(None, [f"model={path}", "profile=roofline", *sets])
        plan(path, "h100-sxm", tensor_parallel_size=tp)
        return
    with pytest.raises(ConfigError, match=re.escape(problem)) as e:
        load(None, [f"model={path}", "profile=roofline", *sets])
    assert e.value.field == "engine.tensor_parallel_size"
    with pytest.raises(ConfigError, match=re.escape(problem)) as e:
        plan(path, "h100-sxm", tensor_parallel_size=tp)
    assert e.value.field == "--tensor-parallel-size"


def test_round_154_an_experts_width_splits_by_tp_only_without_expert_parallelism():
    """Qwen3-30B-A3B's experts are 768 wide: TP 16 would split them 48 a GPU, TP 32 24 a GPU and TP 64 (its
    heads do not split) never; with expert parallelism each expert stays whole, so only heads and shared widths
    count."""
    from servesim.simulator.config import check_mlp_split

    arch = load_model("qwen3-30b-a3b")
    check_mlp_split(arch, 16, None, "f")
    with pytest.raises(ConfigError, match="experts' intermediate size"):
        check_mlp_split(arch, 512, None, "f")
    check_mlp_split(arch, 512, 512, "f")  # experts whole on each of the EP ranks


def test_round_154_a_too_small_gpu_is_told_a_tp_size_vllm_starts(tmp_path):
    """r154: llama-4-scout on an L4 was told tensor_parallel_size=16, which its 40 heads refuse (and its
    8,192-wide experts split over no size that holds it); the TP size suggested is one its heads and MLP widths
    split over: 40 for a 250 GB model of 40 heads, 8 KV heads and a 16,000-wide MLP. r169: "quantize it" was said
    whether or not a quantization held it: the one that does is named, with the TP it needs, and it starts."""
    scout = ["model=llama-4-scout", "hardware.gpu=l4", "profile=roofline"]
    with pytest.raises(ConfigError, match="engine.quantization=fp8 with tensor_parallel_size=8 holds the weights"):
        load(None, scout)
    load(None, scout + ["engine.quantization=fp8", "engine.tensor_parallel_size=8", "engine.max_model_len=8192"])
    # nothing holds a 16-bit 8B model on 1 GiB: said, rather than a share of memory to set (0.599, which held none)
    with pytest.raises(ConfigError, match="no TP size or quantization holds them and vLLM's start-up profile on a "
                                          "GPU of 1 GiB: a GPU with more memory") as e:
        load(None, ["model=llama-3.1-8b", "hardware.memory_gib=1"])
    assert e.value.field == "hardware.memory_gib"
    with pytest.raises(ConfigError, match="hardware.memory_gib: 1e-121 GiB given"):  # 0 bytes (a division by it)
        load(None, ["model=llama-3.1-8b", "hardware.memory_gib=1e-121"])
    # r170: "raise it" where the most vLLM starts with held the weights but not their start-up profile beside them
    with pytest.raises(ConfigError, match="tensor_parallel_size=2 holds the weights") as e:
        load(None, ["model=llama-3.1-8b", "hardware.memory_gib=16", "engine.gpu_memory_utilization=0.9"])
    assert "usable on a GPU of 16 GiB" in str(e.value)
    with pytest.raises(ConfigError, match=r"raise gpu_memory_utilization above (0\.9\d+)") as e:
        load(None, ["model=llama-3.1-8b", "hardware.memory_gib=18", "engine.gpu_memory_utilization=0.8",
                    "engine.max_model_len=2048"])
    above = float(re.search(r"above (0\.9\d+)", str(e.value)).group(1))
    load(None, ["model=llama-3.1-8b", "hardware.memory_gib=18", f"engine.gpu_memory_utilization={above + 0.01}",
                "engine.max_model_len=1024"])  # followed, it starts
    with pytest.raises(ConfigError, match="at most 0.866") as e:  # a share of 3 GiB vLLM cannot start with, first
        load(None, ["model=llama-3.1-8b", "hardware.memory_gib=3", "engine.quantization=awq",
                    "engine.tensor_parallel_size=2"])
    path = _config_json(tmp_path, {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **BARE,
                                   "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 8,
                                   "intermediate_size": 16000, "num_hidden_layers": 400})
    with pytest.raises(ConfigError) as e:
        load(None, [f"model={path}", "hardware.gpu=l4", "profile=roofline"])
    assert re.search(r"tensor_parallel_size=(\d+) holds", str(e.value)).group(1) == "40"
    load(None, [f"model={path}", "hardware.gpu=l4", "profile=roofline", "engine.tensor_parallel_size=40",
                "engine.max_model_len=2048"])


def test_round_154_capacity_refuses_a_pool_without_one_block_beside_the_null_block():
    """r154: a pool under one block printed "-1 usable blocks" and "-1 concurrent requests" with exit 0; run
    refuses fewer than 2 blocks, and so does capacity, naming the flag that left too little."""
    from servesim.simulator.capacity_plan import plan

    with pytest.raises(ConfigError, match="holds 0 block") as e:
        plan("llama-3.1-8b", gpu_memory_gib=20, weights_gib=18.399, reserved_memory_gib=0, max_model_len=16,
             tokens_per_request=16)
    assert e.value.field == "--weights-gib"
    assert plan("llama-3.1-8b", gpu_memory_gib=20, weights_gib=18.3, reserved_memory_gib=0, max_model_len=16,
                tokens_per_request=16).report.usable_blocks >= 1


def test_round_154_the_resolved_section_is_per_gpu_as_its_pool_is():
    """r154: config.yaml's `resolved` put the model's whole weights and KV bytes per token beside a pool sized per
    GPU of the TP group: at TP 4 the pool divided by them gave a quarter of num_gpu_blocks, and memory less the
    weights and the reserve came out negative."""
    rs = load(None, ["model=llama-3.1-70b", "hardware.gpu=h100-sxm", "engine.tensor_parallel_size=4",
                     "engine.max_model_len=8192", "profile=roofline"])
    r = rs.as_dict()["resolved"]
    assert r["kv_bytes_per_token_per_gpu"] == 327_680 // 4
    assert r["kv_pool_bytes"] // (r["kv_bytes_per_token_per_gpu"] * rs.scenario.engine.block_size) == \
        r["num_gpu_blocks"]
    assert r["kv_pool_bytes"] == math.ceil(rs.hardware.memory_bytes * 0.92) - r["weight_bytes_per_gpu"] - \
        r["reserved_memory_bytes"]


@pytest.mark.parametrize("edit", ["profile.model=qwen3-32b", "profile.dtype=fp8", "profile.kv_cache_dtype=fp8",
                                  "profile.tensor_parallel_size=2", "profile.device=any"])
@pytest.mark.parametrize("renamed", [[], ["profile.name=mine"]])
def test_round_160_a_built_in_profile_relabelled_for_another_deployment_is_refused(edit, renamed):
    """r160: --set profile.model=qwen3-32b on the H200 Llama-3.1-8B profile timed Qwen3-32B with Llama's kernels
    (3.4x fast), unsaid; only a relabelled gpu was refused (r147). Its coefficients may still be edited. r162: renamed
    in the same command, it was taken (the built-in was found by its name, not its source)."""
    from servesim.simulator.config import load

    with pytest.raises(ConfigError, match=rf"^{edit.split('=')[0]}: .* but built-in profile "
                                          r"h200-llama-3.1-8b-bf16-tp1 was measured with"):
        load(None, ["profile=h200-llama-3.1-8b-bf16-tp1", *renamed, edit])
    assert load(None, ["profile=h200-llama-3.1-8b-bf16-tp1", "profile.coefficients.per_seq_ms=0.5"])


def test_round_160_a_roofline_faster_than_the_datasheet_is_said(capsys):
    """r160: memory and compute efficiencies of 100 ran Llama-3.1-8B's decode in 1 ms on an H200, unsaid."""
    from servesim.simulator.config import load

    load(None, ["profile={name: r, cost_model: roofline, coefficients: {memory_efficiency: 1.5}}"])
    assert "profile r's memory_efficiency 1.5 above 1: its steps run faster than the GPU's datasheet peak" in \
        capsys.readouterr().err


def test_round_160_a_profiles_point_counts_are_counts():
    """r160: held_out_error.points -4 and train_points "many" were taken and printed as the profile's record."""
    from servesim.simulator.cost_model import load_profile

    base = {"name": "r", "cost_model": "linear", "coefficients": {"step_overhead_ms": 1}}
    for key, value in (("points", -4), ("train_points", "many"), ("points", 2.5)):
        with pytest.raises(ConfigError, match=rf"held_out_error.{key} must be a count of points"):
            load_profile(base | {"held_out_error": {"mape": 0.1, key: value}})
    assert load_profile(base | {"held_out_error": {"mape": 0.1, "points": 40, "train_points": 160}})
    # r174: "held-out MAPE 0.0% over 0 points" was taken as the profile's measured accuracy
    for error in ({"mape": 0.0, "points": 0}, {"max_ape": 0.2, "points": 0}, {"train_mape": 0.1, "train_points": 0}):
        with pytest.raises(ConfigError, match=r"measured over 0 points \((train_)?points: 0\) it is no error"):
            load_profile(base | {"held_out_error": error})
    assert load_profile(base | {"held_out_error": {"mape": None, "points": 0, "train_mape": 0.1, "train_points": 9}})


def test_round_161_only_a_built_in_measured_for_a_deployment_is_held_to_its_labels(tmp_path):
    """r161: the r160 refusal took a user's own file of a built-in's name (another source) for the built-in, refused
    labelling the generic roofline with the scenario's own GPU or TP as "measured with gpu None", and refused the HF
    id of the profile's own model."""
    from servesim.simulator.config import load

    mine = tmp_path / "roofline.yaml"
    mine.write_text("name: roofline\ncost_model: roofline\nsource: my own tuned roofline\ndevice: NVIDIA H100 80GB HBM3\n"
                    "gpu: h100-sxm\nmodel: llama-3.1-8b\ndtype: bf16\ncoefficients: {memory_efficiency: 0.85}\n")
    assert load(None, [f"profile={mine}", "hardware.gpu=h100-sxm"]).profile.source == "my own tuned roofline"
    assert load(None, ["profile=roofline", "hardware.gpu=h100-sxm", "engine.tensor_parallel_size=2",
                       "profile.tensor_parallel_size=2", "profile.gpu=h100-sxm"])
    assert load(None, ["profile=h100-llama-3.1-8b-bf16-tp1", "hardware.gpu=h100-sxm", "profile.gpu=h100-sxm",
                       "profile.model=meta-llama/Llama-3.1-8B-Instruct"])


def test_round_161_a_4bit_checkpoint_split_into_partial_groups_is_refused(tmp_path):
    """r161 (vLLM): AWQLinearMethod.create_weights refuses an input split over TP into a part that is not whole
    quantization groups; Qwen2.5-72B's intermediate_size 29,568 (231 groups of 128) was taken at TP 2, 4 and 8."""
    from servesim.simulator.config import load

    config = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 8192, "intermediate_size": 29568,
              "max_position_embeddings": 32768, "model_type": "qwen2", "num_attention_heads": 64,
              "num_hidden_layers": 80, "num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 152064,
              "quantization_config": {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    sets = [f"model={tmp_path / 'config.json'}", "engine.max_model_len=4096", "hardware.memory_gib=3000"]
    with pytest.raises(ConfigError, match="splits into 14,784 per GPU, not whole 128-weight quantization groups"):
        load(None, sets + ["engine.tensor_parallel_size=2"])
    assert load(None, sets).arch.dtype == "w4a16"


def test_round_162_a_4bit_attention_output_split_into_partial_groups_is_refused(tmp_path):
    """r162 (vLLM): o_proj is row-parallel, its input (heads x head_dim) split over TP; AWQ/GPTQ refuse a part
    that is not whole groups. 24 heads of 64 at TP 8 is 192 per GPU, which ran (only the MLP was checked)."""
    from servesim.simulator.config import load

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1536,
              "intermediate_size": 4096, "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 64,
              "num_hidden_layers": 16, "max_position_embeddings": 8192, "vocab_size": 32000, "torch_dtype": "float16",
              "quantization_config": {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    sets = [f"model={tmp_path / 'config.json'}", "engine.max_model_len=4096"]
    with pytest.raises(ConfigError, match=r"attention output width \(heads x head_dim\) \(1,536\) splits into 192"):
        load(None, sets + ["engine.tensor_parallel_size=8"])
    assert load(None, sets + ["engine.tensor_parallel_size=4"]).arch.dtype == "w4a16"  # 384: three whole groups
    del config["quantization_config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert load(None, sets + ["engine.tensor_parallel_size=8"])  # unquantized, any whole-head split


def test_round_163_a_built_in_profiles_label_removed_is_an_edit_too():
    """r163: --set profile.kv_cache_dtype=null on the fp8-KV built-in timed a bf16 KV cache with its kernels."""
    from servesim.simulator.config import load

    sets = ["hardware.gpu=h100-sxm", "model=llama-3.1-8b", "engine.quantization=fp8",
            "profile=h100-llama-3.1-8b-fp8-kvfp8-tp1"]
    with pytest.raises(ConfigError, match="^profile.kv_cache_dtype: None, but built-in profile "
                                          "h100-llama-3.1-8b-fp8-kvfp8-tp1 was measured with kv_cache_dtype fp8"):
        load(None, sets + ["profile.kv_cache_dtype=null"])


def test_round_171_a_qwen_window_is_off_unless_use_sliding_window(tmp_path):
    """r171: a Qwen3 config.json listing sliding_attention layers beside use_sliding_window false windowed half its
    layers (21 concurrent 32k requests where vLLM holds 12): transformers' Qwen configs drop sliding_window unless
    use_sliding_window is true, and vLLM reads the model through them."""
    from servesim.simulator.model_arch import load_model

    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **BARE, "num_hidden_layers": 36,
           "sliding_window": 4096, "max_window_layers": 36,
           "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(36)]}
    off = load_model(str(_config_json(tmp_path, cfg | {"use_sliding_window": False})))
    assert off.sliding_window is None and not off.num_local_attention_layers
    moe = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 128,
           "num_experts_per_tok": 8, "moe_intermediate_size": 768}  # r172: and Qwen's MoE configs alike
    assert load_model(str(_config_json(tmp_path, cfg | moe | {"use_sliding_window": False}))).sliding_window is None
    other = load_model(str(_config_json(tmp_path, cfg | {"architectures": ["LlamaForCausalLM"], "model_type": "llama"})))
    assert other.sliding_window == 4096 and other.num_local_attention_layers == 18  # layer_types as given
