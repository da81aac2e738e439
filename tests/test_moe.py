"""Mixture-of-experts and latent-attention architectures: their memory by hand arithmetic, their HF configs read
(never silently as a dense model), and the roofline reading only the experts a batch routes to."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from servesim.simulator.batch import BatchShape
from servesim.simulator.cli import main
from servesim.simulator.config import load
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import load_model

GIB = 1 << 30
MIXTRAL_HF = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
              "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
              "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
              "rms_norm_eps": 1e-05, "rope_theta": 1e6, "sliding_window": None, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "vocab_size": 32000, "router_aux_loss_coef": 0.02}


def test_mixtral_counts_every_expert_in_memory_and_two_per_token_in_flops():
    m = load_model("mixtral-8x7b")
    attention = 4096 * 4096 * 2 + 2 * 4096 * 1024  # q, o; k, v (8 KV heads of 128)
    experts = 8 * 3 * 4096 * 14336  # gate, up, down of each of the 8
    layer = attention + experts + 4096 * 8  # and the router
    total = 32 * layer + 2 * 32000 * 4096 + 32 * 2 * 4096 + 4096  # embeddings, LM head, norms
    assert m.num_params == total == 46_702_792_704
    assert m.weight_bytes == 2 * total and m.weight_bytes / GIB == pytest.approx(86.99, abs=0.01)
    active = 32 * (attention + 2 * 3 * 4096 * 14336 + 4096 * 8) + 32000 * 4096
    assert m.matmul_params == active  # 12.7 B a token multiplies through


def test_deepseek_v3_caches_the_latent_vector_not_heads():
    m = load_model("deepseek-v3")
    assert m.kv_bytes_per_token == (512 + 64) * 61 * 2 == 70_272  # not 2 x 128 heads x 128 x 61 x 2 = 3.9 MB
    assert m.kv_bytes_per_token_per_gpu(8) == 70_272  # every TP rank holds the whole latent cache
    assert 670e9 < m.num_params < 672e9 and 36e9 < m.matmul_params < 38e9  # 671 B, 37 B active
    assert m.dtype == "fp8" and m.weight_bytes / GIB == pytest.approx(626.7, abs=0.1)


@pytest.mark.parametrize("gpu, kv, size", [("b200-sxm", "auto", 32), ("gb300", "fp8", 32),  # FlashInfer MLA's
                                            ("h200-sxm", "fp8", 64),  # FlashMLA's: FlashAttention MLA is 16-bit only
                                            ("h200-sxm", "auto", 16), ("h200-sxm", "fp8_e4m3", 64)])  # FA MLA: 16
def test_latent_attention_takes_the_block_size_of_vllms_backend(tmp_path, capsys, gpu, kv, size):
    """vLLM's default block size is its attention backend's when --block-size is not given: DeepSeek-V3 on a B200
    runs blocks of 32 tokens, where servesim ran 16 (round 72). A given size stands, and one servesim chose is
    chosen again when the GPU changes. (fp8_e5m2 has no MLA backend on NVIDIA GPUs: refused, round 83.)"""
    sets = ["model=deepseek-v3", f"hardware.gpu={gpu}", "engine.tensor_parallel_size=8", f"engine.kv_cache_dtype={kv}"]
    assert main(["config", *(w for s in sets for w in ("--set", s))]) == 0
    config = capsys.readouterr().out
    assert yaml.safe_load(config)["engine"]["block_size"] == size
    assert load(None, [*sets, "engine.block_size=16"]).scenario.engine.block_size == 16
    (tmp_path / "c.yaml").write_text(config)
    assert main(["config", str(tmp_path / "c.yaml"), "--set", "hardware.gpu=h200-sxm", "--set",
                 "engine.kv_cache_dtype=auto"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["engine"]["block_size"] == 16
    assert main(["capacity", "--model", "deepseek-v3", "--gpu", gpu, "-tp", "8", "--kv-cache-dtype", kv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["block_size"] == size
    assert main(["config", "--set", f"hardware.gpu={gpu}", "--set", f"engine.kv_cache_dtype={kv}"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["engine"]["block_size"] == 16  # a GQA model: vLLM's 16


@pytest.mark.parametrize("name,total,active", [("qwen3-30b-a3b", 30.5e9, 3.0e9), ("qwen3-235b-a22b", 235.1e9, 21.6e9)])
def test_qwen3_moe_sizes(name, total, active):
    m = load_model(name)
    assert m.num_params == pytest.approx(total, rel=0.005) and m.matmul_params == pytest.approx(active, rel=0.02)


def test_an_hf_mixtral_config_is_a_mixture_of_experts_and_does_not_fit_one_h100(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(MIXTRAL_HF))
    m = load_model(str(cfg))
    assert m.is_moe and (m.num_experts, m.experts_per_token) == (8, 2)
    assert m.weight_bytes == load_model("mixtral-8x7b").weight_bytes
    assert main(["capacity", "--model", str(cfg), "--gpu", "h100-sxm"]) == 2  # was: 244 concurrent requests
    assert "no memory left for the KV cache" in capsys.readouterr().err
    assert main(["capacity", "--model", str(cfg), "--gpu", "h100-sxm", "-tp", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["weights_gib"] == pytest.approx(43.5, abs=0.01) and report["kv_bytes_per_token"] == 65_536
    with pytest.raises(ConfigError, match="tensor_parallel_size=2 or enable_expert_parallel with data_parallel_size=2 "
                                          "holds the weights"):
        load(None, [f"model={cfg}", "hardware.gpu=h100-sxm"])


def _hf(tmp_path, **fields):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(MIXTRAL_HF | fields))
    return str(cfg)


@pytest.mark.parametrize("fields,msg", [
    ({"model_type": "gemma3"}, "model.model_type: 'gemma3' is not a family"),
    ({"layer_types": ["sliding_attention", "full_attention"] * 16}, "layer_types has sliding_attention layers but "
                                                                    "no sliding_window"),
    ({"layer_types": ["linear_attention", "full_attention"]}, "layer_types"),
    ({"quantization_config": {"quant_method": "awq"}}, "quantization_config 'awq'"),
    ({"num_experts_per_tok": 9}, "experts_per_token must be in 1..num_experts"),
])
def test_configs_with_what_servesim_does_not_model_are_refused_by_name(tmp_path, fields, msg):
    with pytest.raises(ConfigError, match=msg):
        load_model(_hf(tmp_path, **fields))


def test_a_sliding_window_on_every_layer_keeps_the_whole_context_and_says_so(tmp_path, capsys):
    cfg = _hf(tmp_path, model_type="mistral", sliding_window=4096, num_local_experts=None, num_experts_per_tok=None)
    assert load_model(cfg).num_local_layers == 32  # Mistral-7B-v0.1: vLLM serves it with its window manager
    builtin = load_model("mistralai/Mistral-7B-v0.1")  # the built-in is that release, window included
    assert builtin.name == "mistral-7b" and (builtin.sliding_window, builtin.num_local_layers) == (4096, 32)
    rs = load(None, [f"model={cfg}", "hardware.gpu=h200-sxm", "profile=roofline"])
    assert rs.kv_layout.local_groups == 0 and rs.kv_layout.group_layers == 32
    assert "every layer; its KV is counted for the whole context" in capsys.readouterr().err
    lopsided = _hf(tmp_path, layer_types=["sliding_attention"] + ["full_attention"] * 31, sliding_window=128)
    with pytest.raises(ConfigError, match="engine.disable_hybrid_kv_cache_manager: .* 31 full-attention layers "
                                          "make 31 groups of 1 beside 1 local"):
        load(None, [f"model={lopsided}", "hardware.gpu=h200-sxm", "profile=roofline"])
    # r148: vLLM's group is the commoner kind's count where it is under 1.5 times the rarer's (one group of each,
    # the rarer padded): 13 sliding + 12 full were 3 groups of 12 (a 32k request charged two windows)
    for sliding, full in ((13, 12), (12, 13), (30, 10)):
        near = _hf(tmp_path, layer_types=["sliding_attention"] * sliding + ["full_attention"] * full,
                   num_hidden_layers=sliding + full, sliding_window=128)
        layout = load(None, [f"model={near}", "hardware.gpu=h200-sxm", "profile=roofline"]).kv_layout
        assert (layout.group_layers, layout.local_groups) == ((13, 1) if full != 10 else (10, 3)), (sliding, full)


def test_qwen3_moe_dense_layers_are_counted_and_interleaving_refused(tmp_path):
    base = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
            "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
            "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
            "vocab_size": 151936, "decoder_sparse_step": 1, "mlp_only_layers": [], "torch_dtype": "bfloat16"}
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(base))
    assert load_model(str(cfg)).num_params == pytest.approx(load_model("qwen3-30b-a3b").num_params, rel=1e-4)
    cfg.write_text(json.dumps(base | {"mlp_only_layers": [0, 1]}))
    two = load_model(str(cfg))
    assert two.num_dense_layers == 2 and two.num_moe_layers == 46
    cfg.write_text(json.dumps(base | {"decoder_sparse_step": 2}))
    with pytest.raises(ConfigError, match="interleave dense and MoE layers"):
        load_model(str(cfg))
    # ill-typed or unbounded layer fields: an internal error, or a list of 10^15 layers (round 81)
    for edit, says in (({"num_hidden_layers": 4.0}, "model.num_hidden_layers: must be an integer >= 1 and <= 4,096"),
                       ({"num_hidden_layers": 10**15}, "model.num_hidden_layers: must be an integer"),
                       ({"mlp_only_layers": 3}, "model.mlp_only_layers: must be a list of layer numbers"),
                       ({"decoder_sparse_step": "2"}, "model.decoder_sparse_step: must be an integer >= 1"),
                       ({"decoder_sparse_step": -1}, "model.decoder_sparse_step: must be an integer >= 1"),
                       ({"decoder_sparse_step": 0}, "model.decoder_sparse_step: must be an integer >= 1")):
        cfg.write_text(json.dumps(base | edit))
        with pytest.raises(ConfigError, match=re.escape(says)):
            load_model(str(cfg))


def test_the_roofline_reads_only_the_experts_a_batch_routes_to(capsys):
    rs = load(None, ["model=mixtral-8x7b", "hardware.gpu=generic-80gb", "engine.tensor_parallel_size=2",
                     "moe.routing=balanced"])  # hand arithmetic at uniform routing; the default is skewed
    assert rs.cost_model_source.startswith("roofline fallback (generic-80gb has no measured kernel tables")
    assert "warning" in capsys.readouterr().err
    m = rs.arch
    assert m.experts_touched(1) == pytest.approx(2.0) and m.experts_touched(64) == pytest.approx(8.0, abs=1e-6)
    kernels = rs.cost_model.kernels
    one, many = BatchShape(1, 0, 0, 1, 1024), BatchShape(8, 0, 0, 8, 8 * 1024)
    # one decode reads the attention weights and 2 of 8 experts a layer; eight decodes read almost all 8
    # (the routers whole on each GPU: vLLM replicates them; not the input embedding: a lookup of the step's rows)
    embedding = m.vocab_size * m.hidden_size * 2
    eff = rs.profile.coefficients["memory_efficiency"]  # the fallback's, fitted (r162)
    whole = m.router_bytes + m.norm_bytes  # (and the norms)
    dense_s = ((m.weight_bytes - m.expert_weight_bytes - whole - embedding) / 2 + whole) / (
        rs.hardware.memory_bandwidth_gbps * 1e9 * eff)
    expert_s = m.expert_weight_bytes / 8 / 2 / (rs.hardware.memory_bandwidth_gbps * 1e9 * eff)
    assert kernels._weights_s == pytest.approx(dense_s) and kernels._expert_s == pytest.approx(expert_s)
    assert kernels.step_time(many) - kernels.step_time(one) > 5 * expert_s  # 7.2 more experts, and more KV
    skewed = load(None, ["model=mixtral-8x7b", "hardware.gpu=generic-80gb", "engine.tensor_parallel_size=2"])
    gap = skewed.cost_model.kernels.step_time(many) - skewed.cost_model.kernels.step_time(one)
    assert m.experts_touched(8, "power_law_1.2") == pytest.approx(5.8, abs=0.1)  # the hot experts take most tokens
    assert 3 * expert_s < gap < kernels.step_time(many) - kernels.step_time(one)


def test_tools_that_build_dense_layers_refuse_moe_in_one_line(tmp_path, capsys):
    assert main(["calibrate", "run", "--engine", "torch", "--model", "mixtral-8x7b", "--out", str(tmp_path / "c")]) == 2


def test_expert_parallel_spreads_whole_experts_and_vllm_refusals_hold():
    base = ["model=qwen3-30b-a3b", "hardware.gpu=rtx-pro-6000", "workload.num_requests=20"]
    ep = load(None, base + ["engine.data_parallel_size=2", "engine.enable_expert_parallel=true"])
    m = ep.arch
    per_gpu = (m.weight_bytes - m.expert_weight_bytes) + m.expert_weight_bytes / 2  # attention whole, half the experts
    assert m.weight_bytes_per_gpu(1, 2) == per_gpu
    assert ep.num_gpu_blocks > load(None, base).num_gpu_blocks  # half the experts a GPU: room for KV
    from servesim.simulator.engine import simulate

    assert simulate(ep).summary["replicas"] == 2  # each DP rank its own scheduler and KV cache
    for sets, msg in ((base + ["engine.data_parallel_size=3", "engine.enable_expert_parallel=true"],
                       "128 experts do not divide over .* 3 GPUs: vLLM splits them unevenly \\(43 on the busiest\\), "
                       "which servesim does not model"),
                      (base + ["engine.data_parallel_size=2", "engine.enable_expert_parallel=true",
                               "cluster.prefill_replicas=1"], "disaggregation"),
                      # round 62: vLLM splits every expert over TP x DP then; modelled as whole models per rank
                      (base + ["engine.data_parallel_size=2"], "MoE model without expert parallelism")):
        with pytest.raises(ConfigError, match=msg):
            load(None, sets)


TABLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "gpu" / "aiconfigurator"


@pytest.mark.skipif(not (TABLES / "h100_sxm" / "moe").is_dir(), reason=f"MoE kernel tables not found at {TABLES}")
def test_moe_layers_are_composed_from_the_fused_moe_tables(tmp_path, monkeypatch):
    from servesim.calibration.aiconfigurator import KernelTables, compose_step_ms
    from servesim.calibration.grid import GridPoint

    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    rs = load(None, ["model=mixtral-8x7b", "hardware.gpu=h100-sxm", "engine.tensor_parallel_size=2"])
    assert rs.cost_model_source.startswith("composed from the h100_sxm kernel tables")
    c = rs.profile.coefficients  # the experts-touched term: the fit follows the MoE curve (26% MAPE without it)
    assert c["per_expert_ms"] > 0 and (c["moe_experts"], c["moe_top_k"]) == (8, 2)
    assert rs.profile.held_out_error["mape"] < 0.10
    t = KernelTables(TABLES, "h100_sxm")
    m = rs.arch
    one, many = (compose_step_ms(t, m, GridPoint("decode", b, 0, 1024), "bf16", 2) for b in (1, 64))
    # a 1-token decode runs 2 experts a layer, 64 tokens all 8: the MoE kernel, not attention, makes most of the gap
    moe_gap = m.num_moe_layers * (t.moe_ms(64, m, "bf16", 2) - t.moe_ms(1, m, "bf16", 2))
    assert moe_gap > 0.5 * (many["time_ms"] - one["time_ms"]) > 0
    assert t.moe_ms(1, m, "bf16", 2) > 0
    odd = m.model_copy(update={"moe_intermediate_size": 999})
    with pytest.raises(ConfigError, match="no fused-MoE timings .* expert 999"):
        t.moe_ms(8, odd, "bf16", 2)
    # experts the tables do not hold: refused with or without expert parallelism (it once fell back to the roofline
    # under EP only), pointing at the datasheet estimate
    custom = {"name": "odd-moe", "num_hidden_layers": 8, "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_experts": 16,
              "experts_per_token": 2}
    for layout in ([], ["engine.data_parallel_size=2", "engine.enable_expert_parallel=true"]):
        with pytest.raises(ConfigError, match=r"hardware.kernel_tables: .*no fused-MoE timings .*profile=roofline"):
            load(None, [f"model={json.dumps(custom)}", "hardware.gpu=h100-sxm"] + layout)
    rough = load(None, [f"model={json.dumps(custom)}", "hardware.gpu=h100-sxm", "profile=roofline"])
    assert rough.cost_model_source == "built-in profile roofline"


_NVFP4 = "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_"


@pytest.mark.parametrize("gpu, key, kernel, model, dtype, tp", [
    ("a100-80gb", "a100_sxm", "vllm_fused_moe", "qwen3-30b-a3b", "bf16", 1),
    ("b200-sxm", "b200_sxm", "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts", "qwen3-30b-a3b", "bf16",
     1),
    # r133: ModelOpt NVFP4 experts (TRT-LLM's kernel on B200, FlashInfer's CUTLASS on the RTX PRO 6000) and
    # gpt-oss's MXFP4 experts on Ada (Marlin's) were refused although the tables time them
    ("b200-sxm", "b200_sxm", _NVFP4 + "trtllm_trtllmnvfp4expertsmonolithic", "qwen3-30b-a3b", "nvfp4", 1),
    ("rtx-pro-6000", "rtx_pro_6000_server", _NVFP4 + "cutlass_flashinferexperts", "qwen3-30b-a3b", "nvfp4", 1),
    ("l40s", "l40s", "vllm_gptossmxfp4moe_marlin_marlinexperts", "gpt-oss-120b", "mxfp4", 4)])
def test_moe_experts_compose_from_every_kernel_the_tables_time(gpu, key, kernel, model, dtype, tp, tmp_path,
                                                               monkeypatch, capsys):
    """Round 37: Qwen3-30B-A3B was refused on A100 and B200 as "no fused-MoE timings" though the tables time its
    experts, under the A100 table's name for vLLM's Triton kernel and under FlashInfer's TRT-LLM kernel on B200."""
    import pandas as pd

    from servesim.calibration.aiconfigurator import KernelTables

    if not (TABLES / key / "moe").is_dir():
        pytest.skip(f"{key} MoE kernel tables not found at {TABLES}")
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    quantized = ["engine.quantization=modelopt_fp4"] if dtype == "nvfp4" else []
    rs = load(None, [f"model={model}", f"hardware.gpu={gpu}", f"engine.tensor_parallel_size={tp}"] + quantized)
    assert rs.cost_model_source.startswith(f"composed from the {key} kernel tables")
    m = rs.arch
    t = KernelTables(TABLES, key)
    rows = pd.concat(pd.read_parquet(f) for f in (TABLES / key).glob("moe/vllm/*/moe_perf.parquet"))
    inter = m.moe_intermediate_size or m.intermediate_size
    rows = rows[(rows["hidden_size"] == m.hidden_size) & (rows["inter_size"] == inter)
                & (rows["num_experts"] == m.num_experts) & (rows["moe_tp_size"] == tp) & (rows["moe_ep_size"] == 1)
                & (rows["distribution"] == "power_law_1.2") & (rows["kernel_source"] == kernel)]
    at = rows.groupby("num_tokens")["latency"].median()
    assert len(at) and t.moe_ms(float(at.index[-1]), m, dtype, tp) == pytest.approx(float(at.iloc[-1]))
    # r148: the kernel is the profile's provenance; bf16 experts on FlashInfer's (vLLM's opt-in) are said so, cached
    # or not
    assert kernel in rs.profile.source
    from servesim.simulator import config

    for release in ("0.19.0", "0.19.0", "0.33.0"):  # 0.19 runs Triton's by default, 0.33 FlashInfer's
        config._WARNED.clear()
        capsys.readouterr()
        load(None, [f"model={model}", f"hardware.gpu={gpu}", f"engine.tensor_parallel_size={tp}",
                    f"engine.vllm_defaults={release}"] + quantized)
        said = "bf16 experts are timed with FlashInfer's fused-MoE kernels" in capsys.readouterr().err
        assert said == (dtype == "bf16" and "flashinfer" in kernel and release == "0.19.0")


def test_moe_timings_in_another_format_only_name_the_format(tmp_path, capsys):
    """r133: `calibrate import --dtype nvfp4` on a GPU whose tables time the experts in other formats blamed
    --data (the tables), not the format asked for."""
    if not (TABLES / "h100_sxm" / "moe").is_dir():
        pytest.skip(f"h100_sxm MoE kernel tables not found at {TABLES}")
    from servesim.calibration.aiconfigurator import KernelTables

    t = KernelTables(TABLES, "h100_sxm")
    arch = load(None, ["model=qwen3-30b-a3b", "hardware.gpu=h100-sxm", "profile=roofline"]).arch
    with pytest.raises(ConfigError, match=r"^dtype: no nvfp4 fused-MoE timings .* \(timed in bfloat16, fp8"):
        t.moe_ms(64.0, arch, "nvfp4", 1)


@pytest.mark.skipif(not (TABLES / "rtx_pro_6000_server" / "comm" / "nccl").is_dir(),
                    reason=f"NCCL tables not found at {TABLES}")
def test_expert_parallel_layers_are_composed_with_their_dispatch_and_combine(tmp_path, monkeypatch):
    from servesim.calibration.aiconfigurator import KernelTables, compose_step_ms
    from servesim.calibration.grid import GridPoint

    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    sets = ["model=qwen3-30b-a3b", "hardware.gpu=rtx-pro-6000", "engine.data_parallel_size=2",
            "engine.enable_expert_parallel=true"]
    rs = load(None, sets)  # the public MoE run's deployment
    assert rs.cost_model_source.startswith("composed from the rtx_pro_6000_server kernel tables")
    assert rs.profile.name.endswith("-tp1-dp2-ep2") and rs.profile.coefficients["moe_token_ranks"] == 2
    assert rs.profile.held_out_error["mape"] < 0.10
    t, m = KernelTables(TABLES, "rtx_pro_6000_server"), rs.arch
    point = GridPoint("decode", 32, 0, 1024)
    ep, alone = compose_step_ms(t, m, point, "bf16", 1, ep=2, dp=2), compose_step_ms(t, m, point, "bf16", 1)
    # per MoE layer: half the experts over both ranks' 64 tokens, plus an all-gather and a reduce-scatter of them
    wire = t.nccl_ms("all_gather", 64 * 2048, 2) + t.nccl_ms("reduce_scatter", 64 * 2048, 2)
    moe = t.moe_ms(64, m, "bf16", 1, ep=2) - t.moe_ms(32, m, "bf16", 1)
    assert ep["time_ms"] - alone["time_ms"] == pytest.approx(m.num_moe_layers * (wire + moe), rel=1e-9)
    assert wire > 0 and t.nccl_ms("all_gather", 1 << 26, 2) > 10 * t.nccl_ms("all_gather", 1 << 16, 2)
    with pytest.raises(ConfigError, match="no NCCL all_gather timings for 3 GPUs"):
        t.nccl_ms("all_gather", 1024, 3)
    # an expert-parallel profile is refused for a deployment whose MoE layers see other ranks' tokens
    inline = json.dumps(rs.profile.model_dump(mode="json"))
    with pytest.raises(ConfigError, match="composed for data_parallel_size=2 with expert parallelism"):
        load(None, ["model=qwen3-30b-a3b", "hardware.gpu=rtx-pro-6000", f"profile={inline}"])
    assert load(None, sets + [f"profile={inline}"]).profile.name == rs.profile.name


def test_an_expert_parallel_profile_counts_the_experts_every_dp_rank_touches():
    from servesim.simulator.cost_model import LinearCoefficients, LinearCostModel

    one = LinearCostModel(LinearCoefficients(per_expert_ms=1.0, moe_experts=128, moe_top_k=8))
    two = LinearCostModel(LinearCoefficients(per_expert_ms=1.0, moe_experts=128, moe_top_k=8, moe_token_ranks=2))
    step = BatchShape(4, 0, 0, 4, 4000)
    # 4 tokens on this rank, 4 on the other, both at each GPU's experts: as 8 tokens touch them
    assert two.step_time(step) == pytest.approx(one.step_time(BatchShape(8, 0, 0, 8, 8000)))
    assert two.step_time(step) == pytest.approx(128 * (1 - (1 - 8 / 128) ** 8) * 1e-3)


def test_expert_routing_skew_touches_fewer_experts_by_hand():
    two = load_model({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
                      "intermediate_size": 64, "vocab_size": 10, "num_experts": 2, "experts_per_token": 1})
    assert two.experts_touched(2) == pytest.approx(1.5)  # balanced: 2 (1 - 1/4)
    q = load_model("qwen3-30b-a3b")
    one, few, many = (q.experts_touched(n, "power_law_1.2") for n in (1, 8, 4096))
    assert one == pytest.approx(8.0)  # one token still runs its top 8
    assert few < q.experts_touched(8, "power_law_1.01") < q.experts_touched(8) and many == pytest.approx(128, abs=0.5)


def test_moe_routing_picks_the_tables_distribution_and_the_rooflines_experts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    shape = BatchShape(16, 0, 0, 16, 16 * 1000)
    roof = {r: load(None, ["model=qwen3-30b-a3b", "hardware.gpu=h100-sxm", "profile=roofline", f"moe.routing={r}"])
            for r in ("balanced", "power_law_1.2")}
    assert roof["power_law_1.2"].cost_model.step_time(shape) < roof["balanced"].cost_model.step_time(shape)
    # on a dense model: said, not refused, so a sweep over dense and MoE models runs every point (round 70); a
    # profile composed for it (none built in, none cached) as well, the same run as without (round 71)
    load(None, ["moe.routing=balanced"])
    assert "moe.routing has no effect: llama-3.1-8b is a dense model: it has no router" in capsys.readouterr().err
    from servesim.simulator.engine import simulate

    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path / "fresh-cache"))
    dense = ["model=qwen3-8b", "engine.tensor_parallel_size=4", "workload.num_requests=5"]
    said = simulate(load(None, dense + ["moe.routing=balanced"])).summary
    assert "moe.routing has no effect: qwen3-8b is a dense model" in capsys.readouterr().err
    assert said == simulate(load(None, dense)).summary
    if not (TABLES / "h100_sxm" / "moe").is_dir():
        pytest.skip(f"MoE kernel tables not found at {TABLES}")
    composed = {r: load(None, ["model=qwen3-30b-a3b", "hardware.gpu=h100-sxm", f"moe.routing={r}"])
                for r in ("balanced", "power_law_1.2")}
    assert composed["balanced"].profile.name.endswith("-tp1-balanced")
    assert composed["power_law_1.2"].profile.name.endswith("-tp1")  # the default keeps its name and cache
    # balanced routing spreads a batch over more experts: the fused kernel takes longer
    assert composed["balanced"].cost_model.step_time(shape) > composed["power_law_1.2"].cost_model.step_time(shape)
    # a composed profile records its routing and expert layout: another one is refused, as a frozen `config` may
    # carry it into (it ran silently, the balanced profile's TPOT at skewed routing)
    balanced = composed["balanced"].profile
    assert (balanced.moe_routing, balanced.expert_parallel_size) == ("balanced", 1)
    inline = f"profile={json.dumps(balanced.model_dump(mode='json'))}"
    with pytest.raises(ConfigError, match="composed at balanced routing, but moe.routing is power_law_1.2"):
        load(None, ["model=qwen3-30b-a3b", "hardware.gpu=h100-sxm", inline])
    tp2 = ["model=qwen3-30b-a3b", "hardware.gpu=h100-sxm", "engine.tensor_parallel_size=2"]
    inline = f"profile={json.dumps(load(None, tp2).profile.model_dump(mode='json'))}"
    with pytest.raises(ConfigError, match="composed for no expert parallelism, but the scenario has expert "
                                          "parallelism over 2 GPUs"):
        load(None, tp2 + [inline, "engine.enable_expert_parallel=true"])
    # round 46: a generic profile (teaching: three constants, model `any`) was never composed for any layout, and was
    # refused for DP ranks sharing experts as if it had been ("teaching was composed for no expert parallelism")
    dp_ep = ["model=qwen3-30b-a3b", "engine.data_parallel_size=2", "engine.enable_expert_parallel=true"]
    assert load(None, dp_ep + ["profile=teaching"]).profile.name == "teaching"
    dp1 = load(None, ["model=qwen3-30b-a3b", "hardware.gpu=h100-sxm"]).profile  # composed for one rank's tokens
    with pytest.raises(ConfigError, match="composed for no expert parallelism, but the scenario's MoE layers see 2"):
        load(None, dp_ep + ["hardware.gpu=h100-sxm", f"profile={json.dumps(dp1.model_dump(mode='json'))}"])


def test_pipeline_parallelism_is_refused_not_ignored():
    with pytest.raises(ConfigError, match="engine.pipeline_parallel_size: 2: pipeline parallelism .* not modelled"):
        load(None, ["engine.pipeline_parallel_size=2"])
    assert load(None, ["engine.pipeline_parallel_size=1"]).scenario.engine.pipeline_parallel_size == 1


@pytest.mark.skipif(not (TABLES / "h200_sxm" / "mla").is_dir(), reason=f"MLA kernel tables not found at {TABLES}")
def test_latent_attention_is_composed_from_the_mla_module_tables(tmp_path, monkeypatch, capsys):
    from servesim.calibration.aiconfigurator import KernelTables

    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    rs = load(None, ["model=deepseek-v3", "hardware.gpu=h200-sxm", "engine.tensor_parallel_size=8"])
    assert rs.cost_model_source.startswith("composed from the h200_sxm kernel tables")
    assert rs.profile.name == "h200-sxm-deepseek-v3-fp8-tp8" and rs.profile.held_out_error["mape"] < 0.10
    t = KernelTables(TABLES, "h200_sxm")
    # one layer's module, 16 heads a GPU, fp8 block-scaled projections: the table's own cells, long prefills on
    # FlashAttention and short ones on the MLA decode kernel (vLLM's split), both read
    assert t.mla_ms("context", 1, 2048, 16, "bf16", "fp8") == pytest.approx(0.3960, abs=1e-4)
    assert t.mla_ms("context", 1, 128, 16, "bf16", "fp8") == pytest.approx(0.1230, abs=1e-4)
    assert t.mla_ms("generation", 64, 2048, 16, "bf16", "fp8") == pytest.approx(0.1505, abs=1e-4)
    with pytest.raises(ConfigError, match="no MLA generation timings for 12 heads"):
        t.mla_ms("generation", 1, 2048, 12, "bf16", "fp8")
    # r148: Blackwell's tables time TRT-LLM's ragged prefill (vLLM's opt-in) beside FlashAttention at the same
    # points; an fp8-KV prefill was their median, 0.174 ms at 2,048 tokens where FlashAttention's row is 0.165
    b200 = KernelTables(TABLES, "b200_sxm")
    assert b200.mla_ms("context", 1, 2048, 16, "fp8", "fp8") == pytest.approx(0.1651, abs=1e-4)
    assert b200.mla_ms("context", 1, 8192, 16, "fp8", "fp8") == pytest.approx(0.5858, abs=1e-4)
    step = rs.cost_model.kernels.step_time
    assert step(BatchShape(64, 0, 0, 64, 64 * 8192)) > step(BatchShape(64, 0, 0, 64, 64 * 1024))
    # r151: a chunk after cached context was the whole prefill scaled to its pairs, projections included: 16 tokens
    # after 4,080 cost a 21st of 16 fresh ones; now the fresh module plus the pairs it adds
    from servesim.calibration.aiconfigurator import _mla_attention_ms
    from servesim.calibration.grid import GridPoint

    fresh = _mla_attention_ms(t, GridPoint("prefill", 1, 16), 16, "bf16", "fp8")
    late = [_mla_attention_ms(t, GridPoint("mixed", 0, 16, c), 16, "bf16", "fp8") for c in (16, 1024, 4080)]
    assert fresh <= late[0] <= late[1] <= late[2] < 2 * fresh
    # and an MLA shape the tables' rows are not (they time DeepSeek-V3's module alone) is said (r151: unsaid)
    capsys.readouterr()
    load(None, ["model=deepseek-v3", "hardware.gpu=h200-sxm", "engine.tensor_parallel_size=8",
                "model.kv_lora_rank=1024"])
    assert "latent attention with DeepSeek-V3's module alone" in capsys.readouterr().err
    assert main(["calibrate", "import", "aiconfigurator", "--gpu", "h100-sxm", "--model", "deepseek-v3", "--tp", "8",
                 "--out", str(tmp_path / "p.yaml")]) == 0  # in the model's own fp8
    assert "dtype: fp8" in (tmp_path / "p.yaml").read_text()
    # a GPU whose tables hold no MLA module at all: the roofline, said so (a dense MLA model: A100's MoE table lacks
    # DeepSeek's experts, which is refused)
    small = load_model("deepseek-v3").model_dump() | {"name": "small-mla", "num_hidden_layers": 4, "dtype": "bf16",
                                                     "max_position_embeddings": 8192, "num_experts": 0,
                                                     "experts_per_token": 0, "num_shared_experts": 0,
                                                     "num_dense_layers": 0, "moe_intermediate_size": None}
    capsys.readouterr()
    a100 = load(None, [f"model={json.dumps(small)}", "hardware.gpu=a100-80gb", "engine.tensor_parallel_size=8"])
    assert a100.cost_model_source.startswith("roofline fallback (cannot compose small-mla's latent-attention layers")
    assert "warning" in capsys.readouterr().err


def test_models_by_hf_id_from_the_builtins_or_the_local_hf_cache_and_by_folder(tmp_path, monkeypatch):
    assert load_model("openai/gpt-oss-120b") == load_model("gpt-oss-120b")  # its profiles match by this name
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ConfigError, match="model: acme/mixtral-clone is neither a built-in nor in the local HF cache"):
        load_model("acme/mixtral-clone")
    snap = tmp_path / "hub" / "models--acme--mixtral-clone" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(MIXTRAL_HF))
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("abc123")
    m = load_model("acme/mixtral-clone")  # offline, as vLLM with HF_HUB_OFFLINE=1 would read it
    assert m.name == "mixtral-clone" and m.num_params == load_model("mixtral-8x7b").num_params
    assert load_model(str(snap)).name == "abc123"  # a folder holding config.json
    with pytest.raises(ConfigError, match="is a folder without a config.json"):
        load_model(str(tmp_path))


def test_expert_parallel_dp_ranks_step_in_lockstep(tmp_path):
    """Every MoE layer's dispatch waits for all DP ranks: two busy ranks' steps start and end together."""
    out = tmp_path / "run"
    assert main(["run", "--set", "model=qwen3-30b-a3b", "--set", "hardware.gpu=rtx-pro-6000", "--set",
                 "profile=roofline", "--set", "engine.data_parallel_size=2", "--set",
                 "engine.enable_expert_parallel=true", "--set", "cluster.router=round_robin", "--set",
                 "workload.num_requests=60", "--set", "workload.arrival.rate=30", "--out", str(out)]) == 0
    steps = pd.read_parquet(out / "steps.parquet")
    a, b = (steps[steps.replica == i][["start", "end"]].to_numpy() for i in (0, 1))
    assert len(a) > 20 and len(b) > 20
    shared = 0
    for s0, e0 in a:  # a step of rank 0 and one of rank 1 are either the same step or do not overlap
        for s1, e1 in b:
            if s1 < e0 and s0 < e1:
                assert (s0, e0) == (s1, e1)
                shared += 1
    assert shared > 10


@pytest.mark.parametrize("config, fmt", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "w4a16"),
    ({"quant_method": "awq", "w_bit": 4}, "w4a16"),
    ({"quant_method": "gptq", "bits": 4}, "w4a16"),
    ({"quant_method": "gptq", "bits": 8}, None),  # 8-bit GPTQ: not a format servesim times
    ({"quant_method": "gptq", "bits": 4, "group_size": 32}, None),  # groups of 32: another weight size
    ({"quant_method": "awq", "w_bit": 4, "q_group_size": -1}, None),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
    ({"quant_method": "AWQ", "bits": 4, "group_size": 128}, "w4a16"),  # round 98: vLLM lower-cases the method
    ({"quant_method": "FP8"}, "fp8"),
    ({"quant_method": "fp8"}, "fp8"),
    ({"quant_method": "compressed-tensors"}, None),
])
def test_a_checkpoints_own_format_is_read_from_its_config(config, fmt):
    """4-bit AWQ/GPTQ and ModelOpt checkpoints were refused, so `vllm serve AWQ-CKPT -q awq` could not be
    simulated at all (round 71)."""
    from servesim.simulator.model_arch import checkpoint_format

    assert checkpoint_format(config) == fmt


def test_a_4bit_checkpoint_in_groups_other_than_128_is_refused_naming_its_group_size(tmp_path):
    """Round 89: groups of 32 hold four times the scales and zero points of 128 (4.6 bits a weight, not 4.16)."""
    from servesim.simulator.model_arch import load_model

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                                "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                                "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
                                "torch_dtype": "float16",
                                "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32}}))
    with pytest.raises(ConfigError, match="group_size 32 .*groups of 128"):
        load_model(str(path))


@pytest.mark.parametrize("model, experts, says", [
    ("llama-3.1-8b", 8, "prices expert reads (moe_experts 8), but llama-3.1-8b is a dense model"),
    ("qwen3-30b-a3b", 8, "prices top-2 of 8 experts, but qwen3-30b-a3b routes each token to 8 of 128"),
])
def test_a_profiles_expert_term_must_be_the_models_routing(tmp_path, model, experts, says):
    """Round 96: a profile's MoE term (per_expert_ms over moe_experts, top moe_top_k) priced a dense model's steps
    51% dearer, and a 128-expert model at 8 experts, unsaid."""
    import yaml

    from servesim.simulator.config import load
    from servesim.simulator.cost_model import load_profile

    p = load_profile("h200-llama-3.1-8b-bf16-tp1").model_dump(mode="json", exclude_none=True)
    p |= {"name": "edited", "model": "any", "dtype": "any", "kv_cache_dtype": None,
          "source": "a hand-made profile"}  # a built-in's own source with model any is refused as relabelled (r162)
    p["coefficients"] |= {"per_expert_ms": 1.0, "moe_experts": experts, "moe_top_k": 2}
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in p.items() if v is not None}))
    with pytest.raises(ConfigError, match=re.escape(says)):
        load(None, [f"model={model}", f"profile={path}"])


def test_0_19_holds_each_gpus_expert_slice_to_the_fp8_weight_block(tmp_path):
    """Round 100: vLLM 0.19's Fp8MoEMethod refuses a block-scaled fp8 checkpoint whose expert slice per GPU
    (moe_intermediate_size / TP) is no multiple of the block: Qwen3-30B-A3B-FP8 (768, blocks of 128) at TP 4 (192)
    ran. 0.33 shrinks the block and starts; expert parallelism keeps each expert whole."""
    import json

    if not TABLES.is_dir():  # its MoE profile is composed from them
        pytest.skip(f"kernel tables not found at {TABLES} (../shared is absent)")

    from servesim.simulator.capacity_plan import plan
    from servesim.simulator.config import load
    from servesim.simulator.errors import ConfigError

    cfg = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4,
           "head_dim": 128, "num_hidden_layers": 48, "intermediate_size": 6144, "vocab_size": 151936,
           "max_position_embeddings": 40960, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
           "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                   "weight_block_size": [128, 128]}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    model = [f"model={tmp_path / 'config.json'}", "hardware.gpu=h100-sxm"]
    for tp in (4, 8):
        with pytest.raises(ConfigError, match=f"tensor_parallel_size: {tp}: each GPU's {768 // tp}-wide slice .* "
                                              f"no multiple of its fp8 weight block .128.: vLLM 0.19 does not start"):
            load(None, model + [f"engine.tensor_parallel_size={tp}", "engine.vllm_defaults=0.19.0"])
        # 0.33 starts; the tables time the block-scaled kernel on whole blocks only (r143: refused, not priced
        # with another kernel)
        assert load(None, model + [f"engine.tensor_parallel_size={tp}", "profile=roofline"]).arch.weight_block_size \
            == (128, 128)
        with pytest.raises(ConfigError, match=f"in fp8 block-scaled .* at MoE TP {tp}, .*tritonexperts is timed at "
                                              f"MoE TP 1, 2 only"):
            load(None, model + [f"engine.tensor_parallel_size={tp}"])
        load(None, model + [f"engine.tensor_parallel_size={tp}", "engine.vllm_defaults=0.19.0",
                            "engine.enable_expert_parallel=true"])
        # r154: capacity (experts split by TP) took it under 0.19, where run, config and vllm refuse it
        with pytest.raises(ConfigError, match=f"{tp}: each GPU's {768 // tp}-wide slice") as e:
            plan(str(tmp_path / "config.json"), "h100-sxm", tensor_parallel_size=tp, vllm_version="0.19.0")
        assert e.value.field == "--tensor-parallel-size"
        plan(str(tmp_path / "config.json"), "h100-sxm", tensor_parallel_size=tp)
    load(None, model + ["engine.tensor_parallel_size=2", "engine.vllm_defaults=0.19.0"])  # 384: three blocks
    cfg["quantization_config"]["weight_block_size"] = [128]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="weight_block_size: two positive integers"):
        load(None, model)


def test_round_133_what_vllm_replicates_over_the_tp_group_is_whole_on_each_gpu():
    """vLLM keeps MLA's down-projections (fused_qkv_a_proj, disable_tp) and every MoE router (a ReplicatedLinear,
    unquantized) whole on each GPU of the TP group; servesim split them, and priced DeepSeek-V3's fp8 routers in
    fp8: 0.94 GiB a GPU too few at TP 8, about 2% of its KV pool."""
    from servesim.simulator.model_arch import load_model

    ds = load_model("deepseek-v3")
    down = 61 * 7168 * (1536 + 512 + 64) * 1  # fp8
    routers = 58 * 7168 * 256 * 2  # bf16
    assert (ds.latent_down_projection_bytes, ds.router_bytes) == (down, routers)
    norms = ds.norm_bytes  # r181: whole on each GPU too
    dense = ds.weight_bytes - ds.expert_weight_bytes - down - routers - norms
    assert ds.weight_bytes_per_gpu(8) == pytest.approx(dense / 8 + down + routers + norms + ds.expert_weight_bytes / 8)
    assert ds.weight_bytes_per_gpu(8) - ds.weight_bytes / 8 == pytest.approx((down + routers + norms) * 7 / 8)
    counted_before = (ds.weight_bytes - routers // 2) / 8  # all split, the routers in fp8
    assert (ds.weight_bytes_per_gpu(8) - counted_before) / 2**30 == pytest.approx(0.94, abs=0.01)
    dense_model = load_model("llama-3.1-8b")
    assert dense_model.weight_bytes_per_gpu(4) == (dense_model.weight_bytes - dense_model.norm_bytes) / 4 + \
        dense_model.norm_bytes  # nothing replicated but the norms


def test_round_135_sequence_parallel_moe_keeps_the_shared_experts_whole():
    """vLLM builds DeepSeek's and Llama 4's shared experts with disable_tp under sequence-parallel MoE (expert
    parallelism, TP > 1 and DP > 1, its default all2all backend): servesim split them over TP, so Llama-4-Scout at
    -tp 2 -dp 2 -ep counted 56.1 GiB a GPU where vLLM holds 61.8 (its KV pool some 40% smaller on an H100)."""
    from servesim.simulator.model_arch import load_model

    scout = load_model("llama-4-scout")
    shared = 48 * 3 * 5120 * 8192 * 2  # one shared expert of 8,192 per MoE layer, bf16
    assert scout.shared_expert_bytes(True) == shared and scout.shared_expert_bytes(False) == 0
    split = scout.dense_weight_bytes_per_gpu(2) + scout.expert_weight_bytes / 4
    assert scout.weight_bytes_per_gpu(2, 4) == pytest.approx(split + shared / 2)  # TP 2 x DP 2, EP over 4
    assert scout.weight_bytes_per_gpu(2, 4) / 2**30 == pytest.approx(61.75, abs=0.01)
    assert scout.weight_bytes_per_gpu(2, 2) == pytest.approx(split + scout.expert_weight_bytes / 4)  # DP 1: split
    assert scout.weight_bytes_per_gpu(1, 2) == pytest.approx(scout.dense_weight_bytes_per_gpu(1)
                                                              + scout.expert_weight_bytes / 2)  # TP 1: whole anyway


@pytest.mark.skipif(not (TABLES / "h100_sxm" / "moe").is_dir(),
                    reason=f"h100_sxm MoE kernel tables not found at {TABLES}")
def test_round_143_expert_parallelism_without_dp_ranks_dispatches_nothing():
    """vLLM dispatches and combines a MoE layer's tokens only across DP ranks (do_naive_dispatch_combine needs
    dp_size > 1): with -tp 2 --enable-expert-parallel each GPU runs its half of the experts over the TP group's
    shared tokens and the layer's all-reduce sums them. servesim added an all-gather and a reduce-scatter (5-12%
    of every step)."""
    from servesim.calibration.aiconfigurator import KernelTables, compose_step_ms
    from servesim.calibration.grid import GridPoint

    t, m = KernelTables(TABLES, "h100_sxm"), load_model("qwen3-30b-a3b")
    for point in (GridPoint("decode", 64, 0, 2048), GridPoint("prefill", 1, 2048, 0)):
        tokens = point.shape.prefill_tokens + point.shape.decode_seqs
        ep, tp = compose_step_ms(t, m, point, "bf16", 2, ep=2), compose_step_ms(t, m, point, "bf16", 2)
        experts = t.moe_ms(tokens, m, "bf16", 1, ep=2) - t.moe_ms(tokens, m, "bf16", 2)
        assert ep["time_ms"] - tp["time_ms"] == pytest.approx(m.num_moe_layers * experts, rel=1e-9)
        assert ep["allreduce_ms"] == tp["allreduce_ms"] > 0  # the combine is the TP group's all-reduce


@pytest.mark.parametrize("gpu", ["h100-pcie", "generic-80gb"])
def test_round_165_the_roofline_pays_expert_parallelisms_dispatch_and_combine(gpu):
    """Across DP ranks every MoE layer all-gathers the ranks' tokens and reduce-scatters them back (README's
    enable_expert_parallel row; the kernel-table path times them in NCCL's tables). The roofline priced neither:
    -dp 4 --enable-expert-parallel on a fallback GPU ran a 4 x 8,192-token prefill as fast as one GPU's."""
    ep = ["model=qwen3-30b-a3b", f"hardware.gpu={gpu}", "engine.data_parallel_size=4",
          "engine.enable_expert_parallel=true"]
    shape = BatchShape(16, 8192, 8192 * 512, 0, 0)
    slow, fast = (load(None, ep + sets) for sets in ([], ["hardware.gpu_link_gbps=1e9"]))
    m, link = slow.arch, slow.hardware.gpu_link_gbps * 1e9
    assert slow.cost_model.kernels.name == "roofline"
    # two rings over 4 GPUs a MoE layer, each moving 3/4 of the 4 ranks' 8,192 tokens' 16-bit activations
    moved = 2 * m.num_moe_layers * 4 * 8192 * m.hidden_size * 2 * 3 / 4
    gap = slow.cost_model.kernels.step_time(shape) - fast.cost_model.kernels.step_time(shape)
    assert gap == pytest.approx(moved / link - moved / 1e18, rel=1e-6)
    one_rank = load(None, ep[:2] + ["engine.tensor_parallel_size=4", "engine.enable_expert_parallel=true"])
    assert one_rank.cost_model.kernels._dispatch == (0.0, 0.0)  # one DP rank dispatches nothing (r143)
    # r174: the rings are the DP group's (a rank's TP GPUs hold its tokens): TP 2 x DP 2 moves 1/2, not 3/4
    tp2 = load(None, ep[:2] + ["engine.tensor_parallel_size=2", "engine.data_parallel_size=2",
                               "engine.enable_expert_parallel=true"])
    assert tp2.cost_model.kernels._dispatch[1] == pytest.approx(2 * m.num_moe_layers * 2 * m.hidden_size * 2 / 2 / link)


@pytest.mark.skipif(not (TABLES / "h100_sxm" / "comm" / "nccl").is_dir(),
                    reason=f"H100 NCCL tables not found at {TABLES}")
def test_round_174_expert_dispatch_runs_over_the_dp_group_and_moe_curves_rise():
    """vLLM's AgRsAll2AllManager gathers and reduce-scatters a MoE layer's tokens over the DP group: a DP rank's TP
    GPUs hold its tokens already. servesim timed them over all TP x DP GPUs (+19% at TP 2 x DP 2), inside gemm_ms.
    And a skewed routing's fused-MoE rows dip (Mixtral's 256-token prefill composed 8% cheaper than a 64-token)."""
    from servesim.calibration.aiconfigurator import KernelTables, compose_step_ms
    from servesim.calibration.grid import GridPoint

    t, m = KernelTables(TABLES, "h100_sxm"), load_model("qwen3-30b-a3b")
    point = GridPoint("prefill", 4, 2048, 0)
    tokens = point.shape.prefill_tokens + point.shape.decode_seqs
    both = compose_step_ms(t, m, point, "bf16", 2, ep=4, dp=2)
    moved = tokens * 2 * m.hidden_size  # both ranks' tokens' hidden states
    wire = t.nccl_ms("all_gather", moved, 2) + t.nccl_ms("reduce_scatter", moved, 2)
    assert both["dispatch_ms"] == pytest.approx(m.num_moe_layers * wire, rel=1e-12) and wire > 0
    assert both["time_ms"] == pytest.approx(both["gemm_ms"] + both["attention_ms"] + both["allreduce_ms"]
                                            + both["dispatch_ms"], rel=1e-12)
    assert compose_step_ms(t, m, point, "bf16", 2, ep=2)["dispatch_ms"] == 0  # one DP rank: none (r143)
    mixtral = load_model("mixtral-8x7b")
    sizes = (16, 32, 64, 80, 96, 128, 256, 512, 1024, 4096)
    for arch, tp in ((mixtral, 2), (mixtral, 1), (m, 1), (m, 2)):
        curve = [t.moe_ms(n, arch, "bf16", tp) for n in sizes]
        assert curve == sorted(curve), (arch.name, tp, curve)
    steps = [compose_step_ms(t, mixtral, GridPoint("prefill", 1, n, 0), "bf16", 2)["time_ms"] for n in sizes]
    assert steps == sorted(steps)


@pytest.mark.skipif(not (TABLES / "h100_sxm" / "comm").is_dir(), reason=f"H100 kernel tables not found at {TABLES}")
def test_round_165_a_refusal_offers_the_layouts_that_hold_the_weights_and_what_the_tables_lack():
    """DeepSeek-V3 over 8 H100s: the refusal offered TP 16 alone, which the tables then refused (no all-reduce for 16
    GPUs) without the roofline the other table gaps offer. A MoE model may keep its TP and add DP ranks with
    expert parallelism instead."""
    v3 = ["model=deepseek-v3", "hardware.gpu=h100-sxm"]
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=16 or enable_expert_parallel with "
                                          r"data_parallel_size=2 holds the weights") as refused:
        load(None, v3 + ["engine.tensor_parallel_size=8"])
    assert refused.value.field == "engine.tensor_parallel_size"
    layout = ["engine.tensor_parallel_size=16"]
    with pytest.raises(ConfigError, match=r"timings for 16 GPUs .*; profile=roofline gives a datasheet estimate"):
        load(None, v3 + layout)
    assert load(None, v3 + layout + ["profile=roofline"]).cost_model_source == "built-in profile roofline"
    # r174: TP 8 x DP 2 dispatches over its DP group of 2 (timed), not over all 16 GPUs (untimed: it was refused)
    both = load(None, v3 + ["engine.tensor_parallel_size=8", "engine.data_parallel_size=2",
                            "engine.enable_expert_parallel=true"])
    assert both.cost_model_source.startswith("composed from the h100_sxm kernel tables")
    with pytest.raises(ConfigError, match=r"; tensor_parallel_size=4 holds"):  # a dense model: TP only
        load(None, ["model=llama-3.1-70b", "hardware.gpu=l40s"])
    # r166: only ranks its 256 experts divide over (12 GPUs were offered at TP 4, then refused), and more ranks with
    # expert parallelism on too (TP 16 alone was offered)
    for given, offered in ((["engine.tensor_parallel_size=4"], "enable_expert_parallel with data_parallel_size=4"),
                           (["engine.tensor_parallel_size=8", "engine.enable_expert_parallel=true"],
                            "data_parallel_size=2")):
        with pytest.raises(ConfigError, match=f"tensor_parallel_size=16 or {offered} holds") as refused:
            load(None, v3 + given)
        ranks = refused.value.message.split("data_parallel_size=")[1].split()[0]
        load(None, v3 + given + ["engine.enable_expert_parallel=true", f"engine.data_parallel_size={ranks}",
                                 "profile=roofline"])  # the layout offered starts


@pytest.mark.skipif(not all((TABLES / g / "moe").is_dir() for g in ("h100_sxm", "l40s")),
                    reason=f"h100_sxm and l40s MoE kernel tables not found at {TABLES}")
def test_round_143_fp8_experts_keep_vllms_kernel_at_every_tp():
    """Where the Triton fp8 kernel was not timed at a TP (Qwen3-30B-A3B at TP 4 on H100: 192-wide slices),
    FlashInfer's per-tensor CUTLASS kernel stood in, 3x slower: the step doubled from TP 2 to TP 4. The kernel is
    now the format's at every TP and a TP it lacks is refused; per-tensor `-q fp8` reads the per-tensor Triton
    rows where they were timed (L40S), a block-scaled checkpoint the block-scaled ones."""
    from servesim.calibration.aiconfigurator import KernelTables

    moe = pd.read_parquet(next((TABLES / "l40s").glob("moe/vllm/*/moe_perf.parquet")))
    q = load_model("qwen3-30b-a3b")
    shape = moe[(moe["hidden_size"] == 2048) & (moe["inter_size"] == 768) & (moe["num_experts"] == 128)
                & (moe["moe_ep_size"] == 1) & (moe["moe_tp_size"] == 2) & (moe["distribution"] == "power_law_1.2")
                & (moe["num_tokens"] == 64)]
    row = {k: shape.loc[shape["kernel_source"] == f"vllm_{k}_triton_tritonexperts", "latency"].median()
           for k in ("modeloptfp8moe", "fp8moe")}
    assert row["modeloptfp8moe"] != row["fp8moe"]
    t = KernelTables(TABLES, "l40s")
    assert t.moe_ms(64, q, "fp8", 2) == pytest.approx(row["modeloptfp8moe"])  # per-tensor
    block = q.model_copy(update={"weight_block_size": (128, 128)})
    assert t.moe_ms(64, block, "fp8", 2) == pytest.approx(row["fp8moe"])  # block-scaled
    assert t.moe_ms(64, q, "fp8", 4) > 0  # per-tensor Triton is timed at TP 4 there
    h100 = KernelTables(TABLES, "h100_sxm")
    assert h100.moe_ms(64, q, "fp8", 1, ep=4) > 0  # under EP FlashInfer's block-scaled kernel, vLLM's choice
    with pytest.raises(ConfigError, match=r"in fp8 at MoE TP 4, .*\(vllm_fp8moe_triton_tritonexperts is timed at "
                                          r"MoE TP 1, 2 only\)"):
        h100.moe_ms(64, q, "fp8", 4)
    assert main(["vllm", "--gpu", "h100-sxm", "--config", "serve", "Qwen/Qwen3-30B-A3B", "-tp", "4", "-q", "fp8"]) == 2
