"""Round r180's findings: each test failed on the code before its fix (the controls hold on both)."""
import json

import pytest
from hf_configs import LLAMA_8B

from servesim.simulator.cli import main
from servesim.simulator.config import load
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import load_model

WIDE = {"name": "wide", "num_hidden_layers": 4, "hidden_size": 4096, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 512, "intermediate_size": 8192, "vocab_size": 32000,
        "max_position_embeddings": 4096}


def test_prefix_affinity_says_nothing_of_requests_it_never_routed(tmp_path, capsys):
    sets = ["model=tiny-llama", "cluster.replicas=3", "cluster.router=prefix_affinity", "workload.num_requests=12",
            "engine.num_gpu_blocks_override=4096", "engine.max_num_queued_reqs=0"]  # every request refused
    assert main(["run", *[a for s in sets for a in ("--set", s)], "--out", str(tmp_path / "r")]) == 0
    assert "outranks load" not in capsys.readouterr().err


def test_a_flag_the_line_overrides_in_its_config_file_is_not_twice_and_two_json_values_are(tmp_path, capsys):
    from servesim.simulator.vllm_command import read, split_command

    (tmp_path / "c.yaml").write_text("max-num-seqs: 64\n")
    line = ["serve", "meta-llama/Llama-3.1-8B-Instruct", "--config", str(tmp_path / "c.yaml"), "--max-num-seqs", "128"]
    assert read(*split_command(line)[:2]).settings["engine.max_num_seqs"] == 128
    assert "given twice" not in capsys.readouterr().err
    line = ["serve", "meta-llama/Llama-3.1-8B-Instruct", "--compilation-config", '{"cudagraph_capture_sizes": [1, 2]}',
            "--compilation-config", '{"mode": 3}']
    read(*split_command(line)[:2])
    assert "vllm serve --compilation-config given twice: the last stands" in capsys.readouterr().err


@pytest.mark.parametrize("sets, refused", [
    (["hardware.compute_capability=8.0", "engine.quantization=fp8"], None),  # no fp8 cores: Marlin, said
    (["hardware.compute_capability=8.0", "hardware.fp8_tflops=500"], "^hardware.fp8_tflops: 500 beside "
                                                                     "compute_capability 8.0"),
    (["hardware.compute_capability=7.0"], "^model.dtype: bf16 on compute capability 7.0"),
    (["hardware.compute_capability=7.0", "model.dtype=fp16", "engine.quantization=awq_marlin"],
     "^engine.quantization: awq_marlin on compute capability 7.0: below the method's minimum \\(7.5\\)"),
    (["hardware.compute_capability=7.0", "model.dtype=fp16", "engine.quantization=gptq"], None)])
def test_a_custom_gpus_capability_decides_its_tensor_cores_and_vllms_floors(sets, refused):
    sets = ["hardware.gpu=null", "hardware.memory_gib=80", "profile=roofline"] + sets
    if refused:
        with pytest.raises(ConfigError, match=refused):
            load(None, sets)
    else:
        assert load(None, sets).hardware.fp8_tflops is None


def test_a_named_backend_must_take_the_models_head_size(tmp_path):
    (tmp_path / "wide.yaml").write_text(json.dumps(WIDE))
    sets = [f"model={tmp_path / 'wide.yaml'}", "profile=roofline"]
    for backend in ("FLASH_ATTN", "FLASHINFER"):
        with pytest.raises(ConfigError, match=f"^engine.attention_backend: {backend}: it takes no head size 512"):
            load(None, sets + [f"engine.attention_backend={backend}"])
    assert load(None, sets + ["engine.attention_backend=TRITON_ATTN"])


def test_each_gpu_holds_a_whole_kv_head_when_tp_outnumbers_them(tmp_path):
    (tmp_path / "wide.yaml").write_text(json.dumps(WIDE))
    arch = load_model(str(tmp_path / "wide.yaml"))
    kv = 4 * 2 * 4096 * 512 * 2  # K and V of one head, four layers, bf16
    norms = arch.norm_bytes * (1 - 1 / 4)  # whole on each GPU (r181)
    assert arch.weight_bytes_per_gpu(4) - arch.weight_bytes / 4 - norms == pytest.approx(kv * (1 - 2 / 4))
    assert arch.weight_bytes_per_gpu(2) == pytest.approx(arch.weight_bytes / 2 + arch.norm_bytes / 2)  # two heads
    # over two: shared


@pytest.mark.parametrize("extra, refused", [
    ({"rope_scaling": {"rope_type": "bogus", "factor": 2.0}}, "^model.rope_scaling.rope_type: 'bogus' is no RoPE"),
    ({"hidden_size": 4100}, None)])  # no head_dim: the config class's floor, 128 (4,100 / 32)
def test_a_config_json_is_read_as_vllm_reads_it(tmp_path, extra, refused):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B | extra))
    if refused:
        with pytest.raises(ConfigError, match=refused):
            load_model(str(tmp_path / "config.json"))
    else:
        assert load_model(str(tmp_path / "config.json")).head_dim == 128


@pytest.mark.parametrize("experts, groups, kept, refused", [(63, 8, 4, "^model.n_group: 8 groups do not split the 63"),
                                                             (64, 8, 9, "^model.topk_group: 9 groups kept of 8"),
                                                             (64, 8, 4, None)])
def test_deepseek_grouped_routing_is_checked(tmp_path, experts, groups, kept, refused):
    config = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 2048,
              "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 10944,
              "moe_intermediate_size": 1408, "num_hidden_layers": 4, "first_k_dense_replace": 1,
              "n_routed_experts": experts, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": groups,
              "topk_group": kept, "kv_lora_rank": 512, "q_lora_rank": None, "qk_rope_head_dim": 64,
              "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 102400, "max_position_embeddings": 4096,
              "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    if refused:
        with pytest.raises(ConfigError, match=refused):
            load_model(str(tmp_path / "config.json"))
    else:
        assert load_model(str(tmp_path / "config.json")).num_experts == experts
