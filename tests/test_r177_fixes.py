"""Round r177's findings: each test failed on the code before its fix."""
import json
from types import SimpleNamespace

import pytest
from hf_configs import LLAMA_8B, MIXTRAL, QWEN2_MOE, QWEN3_MOE

from servesim.simulator.cli import main
from servesim.simulator.config import load
from servesim.simulator.errors import ConfigError



FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


@pytest.mark.parametrize("config, q, refused", [
    (QWEN3_MOE, FP8 | {"ignored_layers": ["re:("]}, "ignored_layers entry 're:\\(' is no regular expression"),
    (QWEN3_MOE, FP8 | {"ignored_layers": ["model.layers.3.mlp.experts.5.down_proj"]},
     "leaves 'model.layers.3.mlp.experts.5.down_proj'"),
    (MIXTRAL, FP8 | {"ignored_layers": ["model.layers.0.block_sparse_moe.experts.0.w1"]},
     "leaves 'model.layers.0.block_sparse_moe"),
    (QWEN2_MOE, FP8 | {"ignored_layers": ["model.layers.0.mlp.shared_expert.gate_proj",
                                          "model.layers.0.mlp.shared_expert.up_proj"]},
     "leaves 'model.layers.0.mlp.shared_expert.gate_proj' \\(and 1 more\\)"),
    (QWEN3_MOE, FP8 | {"ignored_layers": ["lm_head", "model.layers.0.mlp.gate", "re:.*mlp\\.gate$"]}, None),
    # r178: each family's own layers (a router entry is harmless where no dense gate_proj is)
    (MIXTRAL, AWQ | {"modules_to_not_convert": ["gate"]}, None),  # AutoAWQ's own list: the router
    (QWEN3_MOE, AWQ | {"modules_to_not_convert": ["mlp.gate"]}, None),
    (QWEN3_MOE, FP8 | {"modules_to_not_convert": ["lm_head"] + [f"model.layers.{i}.mlp.gate" for i in range(48)]},
     None),  # fp8's fallback list, matched by name as Fp8Config reads it
    (LLAMA_8B, AWQ | {"modules_to_not_convert": ["gate"]}, "modules_to_not_convert leaves 'gate'"),  # gate_up_proj
    (QWEN3_MOE, FP8 | {"modules_to_not_convert": ["model.layers.0.mlp.experts"]}, "leaves 'model.layers.0.mlp")])
def test_skip_lists_match_the_layers_each_family_has_as_vllm_reads_them(tmp_path, config, q, refused):
    """r177: an entry inside a fused-MoE layer leaves the layer unquantized; r178: a router entry matched a dense
    gate_proj Mixtral has not."""
    (tmp_path / "config.json").write_text(json.dumps(config | {"quantization_config": q}))
    sets = [f"model={tmp_path / 'config.json'}", "hardware.gpu=h100-sxm", "profile=roofline"]
    if refused:
        with pytest.raises(ConfigError, match=refused):
            load(None, sets)
    else:
        assert load(None, sets).arch.dtype in ("w4a16", "fp8")


@pytest.mark.parametrize("given, blocks", [("8", 5176), ("8.0", 5176), ("32.0", 1294), (" 32", 1294)])
def test_compare_keeps_a_recorded_pool_as_tokens_under_a_block_size_given_as_any_number(given, blocks):
    from servesim.calibration.run_comparison import _with_overrides

    run = SimpleNamespace(sets=["engine.num_gpu_blocks_override=2588", "engine.block_size=16"], path="R")
    sets, warnings = _with_overrides(run, [f"engine.block_size={given}"])
    assert f"engine.num_gpu_blocks_override={blocks}" in sets
    assert any(f"is simulated as {blocks:,} blocks of" in w for w in warnings)


def test_a_custom_gpu_takes_its_compute_capability_and_the_warning_names_settings_that_exist(capsys):
    hw = load(None, ["hardware.gpu=null", "hardware.memory_gib=80", "hardware.compute_capability=8.0"]).hardware
    assert hw.compute_capability == 8.0
    err = capsys.readouterr().err
    assert "compute_capability" not in err and "give your GPU's (hardware.memory_bandwidth_gbps, ...)" in err
    with pytest.raises(ConfigError, match="quantization"):  # Marlin's fp8 needs 8.0; an FP4 needs 7.5: 7.0 has none
        load(None, ["hardware.gpu=null", "hardware.memory_gib=80", "hardware.compute_capability=7.0",
                    "engine.quantization=modelopt_fp4"])


def test_a_search_emptied_by_a_window_in_requests_does_not_blame_the_rate(tmp_path, capsys):
    assert main(["search", "max-rate", "--set", "model=tiny-llama", "--set", "workload.num_requests=40",
                 "--set", "simulation.warmup_requests=20", "--set", "simulation.cooldown_requests=20",
                 "--slo", "ttft_p99_ms=500", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "simulation.warmup_requests: the warm-up and cool-down" in err and "at the searched" not in err


def test_a_cut_before_every_request_arrived_measures_its_rates_to_the_cut():
    from servesim.simulator.engine import simulate

    s = simulate(load(None, ["model=tiny-llama", "workload.num_requests=3", "workload.arrival.rate=1e-6",
                             "workload.prompt_tokens={dist: fixed, value: 100}",
                             "workload.output_tokens={dist: fixed, value: 10}", "simulation.max_sim_time_s=1"])).summary
    assert (s["completed"], s["unfinished"]) == (1, 0)
    assert s["duration"] == 1.0 and s["request_throughput"] == 1.0  # not over the one request's own latency


def test_a_trace_whose_clock_starts_late_is_told_where_to_start(tmp_path):
    from servesim.workloads.traces import read_trace

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 1e9 + 0.01 * i, "input_length": 100, "output_length": 10}) + "\n"
                            for i in range(5)))
    with pytest.raises(ConfigError, match="reach 1e\\+09 s of its clock .*first kept arrival is at 1000000000 s of "
                                          "its clock: start_s=1000000000 replays from there"):
        read_trace(path, "vllm_timed_trace")
    assert [round(r.arrival_time, 6) for r in read_trace(path, "vllm_timed_trace", start_s=1e9)][:2] == [0.0, 0.01]


@pytest.mark.parametrize("extra, refused", [({}, True), ({"use_heterogeneous_vocab": True}, False)])
def test_a_draft_model_with_another_vocabulary_is_refused_as_vllm_refuses_it(extra, refused):
    from servesim.simulator.vllm_command import read

    config = {"method": "draft_model", "model": "Qwen/Qwen2.5-7B-Instruct", "num_speculative_tokens": 3} | extra
    line = ["meta-llama/Llama-3.1-8B-Instruct", "--speculative-config", json.dumps(config)]
    if refused:
        with pytest.raises(ConfigError, match="vocabulary \\(152,064 tokens\\) is not llama-3.1-8b's \\(128,256\\)"):
            read(line, [])
    else:
        assert read(line, []).settings["speculative.num_speculative_tokens"] == 3
    same = {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3}
    assert read(["meta-llama/Llama-3.1-8B-Instruct", "--speculative-config", json.dumps(same)], []).settings
