"""Round r181's findings: each test failed on the code before its fix (the controls hold on both)."""
import json

import pytest

from servesim.simulator.config import load
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import load_model

CUSTOM = ["hardware.gpu=null", "hardware.memory_gib=80", "profile=roofline"]


@pytest.mark.parametrize("sets, refused", [
    (["hardware.gpu=a100-80gb", "hardware.fp8_tflops=624"], "^hardware.fp8_tflops: 624 beside compute_capability "
                                                            "8.0: fp8 tensor cores start at 8.9"),
    (["hardware.gpu=h100-sxm", "hardware.fp4_tflops=2000"], "^hardware.fp4_tflops: 2000 beside compute_capability "
                                                            "9.0"),
    (CUSTOM + ["hardware.compute_capability=7.5", "model.dtype=fp16", "engine.kv_cache_dtype=fp8"],
     "^engine.kv_cache_dtype: fp8 on compute capability 7.5: of vLLM 0.33's backends only Triton's and FlexAttention"),
    (CUSTOM + ["model=gpt-oss-120b", "model.dtype=fp16", "hardware.memory_gib=141", "hardware.compute_capability=7.0"],
     "^model: gpt-oss-120b's MXFP4 experts on compute capability 7.0"),
    (["model.dtype=fp32", "engine.attention_backend=FLASH_ATTN", "profile=roofline"],
     "^engine.attention_backend: FLASH_ATTN: it takes no float32 model"),
    (["hardware.gpu=l40s", "hardware.fp8_tflops=700", "engine.quantization=fp8"], None),  # Ada has them
    (CUSTOM + ["hardware.compute_capability=7.5", "model.dtype=fp16", "engine.kv_cache_dtype=fp8",
               "engine.vllm_defaults=0.19.0"], None)])  # 0.19's Triton takes it
def test_vllms_floors_hold_for_built_in_gpus_and_every_model(sets, refused):
    if refused:
        with pytest.raises(ConfigError, match=refused):
            load(None, sets)
    else:
        assert load(None, sets)


def test_deepseek_expert_groups_must_be_whole_numbers(tmp_path):
    config = {"model_type": "deepseek_v3", "n_group": 3, "topk_group": 4.0, "n_routed_experts": 255,
              "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="^model.topk_group: must be an integer .* got 4.0"):
        load_model(str(tmp_path / "config.json"))


def test_a_config_files_key_given_twice_that_the_line_overrides_is_not_said(tmp_path, capsys):
    from servesim.simulator.vllm_command import read, split_command

    (tmp_path / "c.yaml").write_text("max_num_seqs: 64\nmax-num-seqs: 32\n")
    base = ["serve", "meta-llama/Llama-3.1-8B-Instruct", "--config", str(tmp_path / "c.yaml")]
    assert read(*split_command(base + ["--max-num-seqs", "16"])[:2]).settings["engine.max_num_seqs"] == 16
    assert "twice" not in capsys.readouterr().err
    assert read(*split_command(base)[:2]).settings["engine.max_num_seqs"] == 32  # the control: the file's own pair
    assert "gives max-num-seqs twice" in capsys.readouterr().err


def test_the_block_limit_names_the_total(tmp_path):
    with pytest.raises(ConfigError, match="4 KV pool\\(s\\) of 8,367,166 blocks \\(33,468,664 in all\\): more than"):
        load(None, ["model=tiny-llama", "cluster.replicas=4"])


def test_expert_parallelism_on_a_dense_model_is_said_to_do_nothing_as_vllm_runs_it(capsys):
    rs = load(None, ["model=llama-3.1-8b", "engine.tensor_parallel_size=2", "engine.enable_expert_parallel=true"])
    assert rs.weight_bytes_per_gpu() == load(None, ["model=llama-3.1-8b", "engine.tensor_parallel_size=2"]) \
        .weight_bytes_per_gpu()
    assert "engine.enable_expert_parallel has no effect: llama-3.1-8b is a dense model" in capsys.readouterr().err


def test_the_memory_floor_warning_reads_bytes_over_bandwidth_alone(capsys):
    load(None, ["hardware.gpu=h200-sxm", "model=qwen3-32b", "engine.tensor_parallel_size=2",
                "hardware.bf16_tflops=50"])
    assert "times a decode step" not in capsys.readouterr().err  # the compute edit reaches no measured profile


def test_norms_are_whole_on_every_gpu():
    arch = load_model("llama-3.1-70b")
    norms = (80 * 2 * 8192 + 8192) * 2
    assert arch.norm_bytes == norms
    assert arch.weight_bytes_per_gpu(8) - arch.weight_bytes / 8 == pytest.approx(norms * (1 - 1 / 8))


def test_a_bench_result_with_a_non_finite_figure_is_refused(tmp_path):
    from servesim.calibration.real_runs import read_run
    from servesim.workloads.traces import read_trace

    path = tmp_path / "res.json"
    path.write_text('{"duration": NaN, "completed": 1, "start_times": [0.0], "input_lens": [10], "output_lens": [5], '
                    '"ttfts": [0.01], "itls": [[0.01, 0.01, 0.01, 0.01]], "generated_texts": [""], "errors": [""]}')
    for reader in (read_run, read_trace):
        with pytest.raises(ConfigError, match="duration:? must be a finite number, got nan"):
            reader(path)
