"""The background essays' capacity arithmetic, figure by figure (design brief)."""

import json

import pytest

from servesim.simulator.capacity import GIB, capacity, kv_pool_bytes
from servesim.simulator.cli import main
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import load_model


def essay(util=0.90, **kw):
    m = load_model("llama-3-8b")
    pool = kv_pool_bytes(80 * GIB, util, 16 * GIB)
    return capacity(model_name=m.name, kv_bytes_per_token=m.kv_bytes_per_token, pool_bytes=pool, block_size=16,
                    max_model_len=32768, tokens_per_request=1800, **kw)


def test_kv_bytes_per_token():
    assert load_model("llama-3-8b").kv_bytes_per_token == 131_072
    assert load_model("qwen2.5-7b").kv_bytes_per_token == 57_344


def test_pool_and_blocks():
    r = essay()
    assert r.pool_bytes == 56 * GIB
    assert r.num_blocks == 28_672


def test_contiguous_paged_shared():
    r = essay(shared_prefix_tokens=1200, private_tokens=600)
    assert r.contiguous_requests == 14
    assert r.blocks_per_request == 113
    assert r.paged_requests == 253
    assert r.shared_prefix_blocks == 75 and r.private_blocks_per_request == 38
    assert r.shared_prefix_requests == 752
    assert r.paged_gain_vs_contiguous == pytest.approx(18.1, abs=0.05)


def test_utilisation_070():
    r = essay(util=0.70)
    assert r.pool_bytes == 40 * GIB
    assert r.paged_requests == 181


def test_weights_from_architecture():
    m = load_model("llama-3-8b")
    assert 8.0e9 < m.num_params < 8.1e9  # Llama-3-8B has 8.03 B parameters
    assert 7.5e9 < load_model("qwen2.5-7b").num_params < 7.7e9  # 7.62 B


def test_cli_json(capsys):
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu-memory-gib", "80", "--gpu-memory-utilization", "0.9", "--weights-gib", "16",
                 "--reserved-memory-gib", "0", "--max-model-len", "32768", "--tokens-per-request", "1800",
                 "--shared-prefix-tokens", "1200", "--private-tokens", "600", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["kv_bytes_per_token"], d["contiguous_requests"], d["paged_requests"], d["shared_prefix_requests"]) == \
        (131072, 14, 253, 752)
    assert main(["capacity", "--gpu-memory-gib", "80", "--gpu-memory-utilization", "0.7", "--weights-gib", "16",
                 "--reserved-memory-gib", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["paged_requests"] == 181
    assert main(["capacity", "--model", "qwen2.5-7b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_token"] == 57344


def test_cli_text(capsys):
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu-memory-gib", "80", "--gpu-memory-utilization", "0.9", "--weights-gib", "16",
                 "--reserved-memory-gib", "0", "--max-model-len", "32768", "--shared-prefix-tokens", "1200",
                 "--private-tokens", "600"]) == 0
    out = capsys.readouterr().out
    assert "131,072 B" in out and "14 concurrent" in out and "253 concurrent" in out and "752 concurrent" in out


@pytest.mark.parametrize("args,field", [
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization: must be <= 1"),
    (["--weights-gib", "100"], "--weights-gib: no memory left for the KV cache"),
    # r124: the memory given was said as the default GPU's name, --gpu generic-80gb
    (["--weights-gib", "100"], "(--gpu-memory-gib 80, --tensor-parallel-size 1)"),
    (["--block-size", "0"], "--block-size: must be >= 1"),
    (["--weights-gib", "0"], "--weights-gib: must be > 0"),  # r157: an 8B model of no weights was taken
    (["--gpu-memory-gib", "inf"], "--gpu-memory-gib: must be a finite number"),
    (["-tp", "3", "--model", "llama-3.1-8b"], "--tensor-parallel-size: 32 attention heads do not split over 3"),
    # round 92: Qwen2.5-7B's 4 KV heads over 7 or 14 GPUs (its 28 query heads split): vLLM's QKVParallelLinear refuses
    (["-tp", "7", "--model", "qwen2.5-7b"], "--tensor-parallel-size: 4 KV heads neither split over 7 GPUs"),
    (["-tp", "14", "--model", "qwen2.5-7b", "--gpu", "b200-sxm"], "4 KV heads neither split over 14 GPUs"),
    (["--max-model-len", "0"], "--max-model-len: must be >= 2"),
    (["--max-model-len", "2.5K"], "--max-model-len: Decimals are not allowed with binary suffixes like K"),
    (["--max-model-len", "0x10"], "--max-model-len: must be a length such as 32768, 32k or 32K, or -1/auto"),
    (["--max-model-len", "9000"], "--max-model-len: 9000 exceeds the model's max_position_embeddings (8192)"),
    (["--model", "no-such-model"], "model"),
    # round 41: the API's argument names were said to a command-line user
    (["--shared-prefix-tokens", "100"], "--shared-prefix-tokens: give both --shared-prefix-tokens and --private-tokens"),
])
def test_cli_bad_input(capsys, args, field):
    assert main(["capacity", "--gpu-memory-gib", "80"] + args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err and "Traceback" not in err


def test_pool_too_small_is_an_error():
    with pytest.raises(ConfigError):
        kv_pool_bytes(16 * GIB, 0.9, 16 * GIB)


def test_capacity_takes_vllms_quantization_and_kv_cache_dtype(capsys):
    from servesim.simulator.cli import main

    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192"]) == 0
    plain = capsys.readouterr().out
    assert "131,072 B" in plain and "14.96 GiB weights" in plain
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
                 "--quantization", "fp8", "--kv-cache-dtype", "fp8"]) == 0
    both = capsys.readouterr().out
    # one byte per linear weight (6,979,321,856 of them), embeddings and LM head still bf16; one byte per KV value
    assert "65,536 B" in both and "8.46 GiB weights" in both


def test_a_partial_shared_block_is_not_shared(capsys):
    """Prefix caching shares full blocks only: 10 shared tokens on 16-token blocks share nothing (once a ZeroDivisionError)."""
    assert main(["capacity", "--model", "llama-3.1-8b", "--shared-prefix-tokens", "10", "--private-tokens", "6",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["shared_prefix_blocks"], d["private_blocks_per_request"]) == (0, 1)
    assert d["shared_prefix_requests"] == d["usable_blocks"] == d["num_blocks"] - 1  # block 0: the null block


def test_the_readme_capacity_example_prints_what_the_readme_shows(capsys):
    """README's worked example, command and output, run as written (it once named a max_model_len the default
    model could not take)."""
    import shlex
    from pathlib import Path

    text = Path(__file__).parents[1].joinpath("README.md").read_text()
    block = text.split("$ .venv/bin/servesim capacity", 1)[1].split("```", 1)[0]
    command, _, shown = block.partition("\n      ")
    rest, _, shown = shown.partition("\n")
    argv = shlex.split((command + " " + rest).replace("\\", " "))
    assert main(["capacity"] + argv) == 0
    assert capsys.readouterr().out.strip() == shown.strip()


@pytest.mark.parametrize("args, flag", [
    (["--gpu", "h200-sxm", "--gpu-memory-gib", "80", "--weights-gib", "16", "--reserved-memory-gib", "1"], "--gpu"),
    (["--weights-gib", "10", "--quantization", "fp8", "--gpu", "h200-sxm"], "--quantization"),
    (["--model", "llama-3.1-8b", "--disable-hybrid-kv-cache-manager"], "--disable-hybrid-kv-cache-manager"),
])
def test_a_capacity_flag_that_others_override_is_named(capsys, args, flag):
    assert main(["capacity"] + args) == 0
    assert f"servesim: warning: {flag} has no effect" in capsys.readouterr().err


def test_the_calculator_counts_the_blocks_a_run_can_use(capsys):
    """Block 0 is vLLM's null block: the calculator's one-block requests are the simulator's usable blocks (it
    counted one more)."""
    from servesim.simulator.config import load

    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--tokens-per-request", "16",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    rs = load(None, [])
    assert d["num_blocks"] == rs.num_gpu_blocks and d["paged_requests"] == rs.num_gpu_blocks - 1


def test_a_pool_too_small_for_one_max_length_request_is_said_and_the_json_is_json(capsys):
    """llama-4-scout's 10M-token context: contiguous holds none (the gain printed inf, and --json wrote Infinity,
    which no strict JSON reader takes), and vLLM would not start, which `run` refuses and capacity did not say."""
    assert main(["capacity", "--model", "llama-4-scout", "--gpu", "h200-sxm", "-tp", "2", "--json"]) == 0
    out = capsys.readouterr()

    def strict(constant):
        raise ValueError(constant)

    d = json.loads(out.out, parse_constant=strict)
    assert d["contiguous_requests"] == 0 and "paged_gain_vs_contiguous" not in d  # no gain over nothing
    assert d["max_model_len_blocks"] > d["usable_blocks"] and "vLLM would not start" in out.err
    assert main(["capacity", "--model", "llama-4-scout", "--gpu", "h200-sxm", "-tp", "2", "--max-model-len",
                 "65536"]) == 0
    assert "vLLM would not start" not in capsys.readouterr().err


@pytest.mark.parametrize("model, gpus, extra, inert", [
    ("llama-3.1-8b", ("h100-sxm", "a100-80gb"), ["--reserved-memory-gib", "2", "--max-num-seqs", "256"], True),
    # (the numbers give all it would)
    # the GPU's default max_num_seqs (1,024 on an H100, 256 on an A100) sizes vLLM's start-up profile
    ("llama-3.1-8b", ("h100-sxm", "a100-80gb"), [], False),
    ("deepseek-v3", ("h200-sxm", "b200-sxm"), ["--kv-cache-dtype", "fp8", "--reserved-memory-gib", "2"], False),
    ("gpt-oss-120b", ("h100-sxm", "a100-80gb"), ["--reserved-memory-gib", "2"], False),  # the local groups' budget
])
def test_gpu_beside_memory_and_weights_is_said_unread_only_where_it_is(capsys, model, gpus, extra, inert):
    """Round 89: '--gpu has no effect' was said where the GPU still set the block size (DeepSeek-V3: 846 requests on
    H200, 860 on B200) or the start-up verdict (gpt-oss on H100 vs A100)."""
    outs = []
    for gpu in gpus:
        assert main(["capacity", "--model", model, "--gpu", gpu, "--gpu-memory-gib", "71.45", "--weights-gib", "40",
                     *extra, "--json"]) == 0
        out, err = capsys.readouterr()
        outs.append(json.loads(out))
        assert ("--gpu has no effect" in err) == inert, err
    if inert:  # then the answer is the same on either GPU
        assert outs[0]["paged_requests"] == outs[1]["paged_requests"]
    elif not extra:  # the H100's 1,024-sequence sampler warm-up leaves fewer blocks than the A100's 256
        assert outs[0]["reserved_memory_gib"] > outs[1]["reserved_memory_gib"]
        assert outs[0]["paged_requests"] < outs[1]["paged_requests"]


def test_round_165_the_gpus_default_max_num_seqs_is_an_effect_of_gpu(capsys):
    """r165: an A100's default max_num_seqs (256; 1,024 on an H100) bounds the requests run at once, said in a
    warning, beside the warning that --gpu had no effect."""
    flags = ["capacity", "--model", "llama-3.1-8b", "--gpu-memory-gib", "80", "--weights-gib", "16",
             "--reserved-memory-gib", "0"]
    for gpu, inert in (("a100-80gb", False), ("h100-sxm", True)):
        assert main([*flags, "--gpu", gpu]) == 0
        err = capsys.readouterr().err
        assert ("--gpu has no effect" in err) == inert and ("vLLM runs at most max_num_seqs=256" in err) != inert, err
    # r166: at 40 GiB (a generic GPU of 40 GiB has the H100's 1,024 default too) it was unsaid
    small = ["capacity", "--model", "llama-3.1-8b", "--gpu-memory-gib", "40", "--weights-gib", "15",
             "--reserved-memory-gib", "2", "--json"]
    assert main([*small, "--gpu", "h100-sxm"]) == 0
    h100 = capsys.readouterr()
    assert main([*small, "--gpu", "generic-80gb"]) == 0
    assert h100.out == capsys.readouterr().out and "--gpu has no effect" in h100.err
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "a100-sxm"]) == 2  # r166: named hardware.gpu
    assert capsys.readouterr().err.startswith("servesim: error: --gpu: unknown GPU 'a100-sxm'")


def test_a_format_the_gpu_cannot_run_names_capacitys_own_flag(capsys):
    """Round 89: capacity's refusal advised hardware.fp4_tflops, a setting capacity has no flag for."""
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "b60", "--quantization", "modelopt_fp4"]) == 2
    err = capsys.readouterr().err
    assert "(give a --gpu that has them)" in err and "hardware." not in err
    assert main(["run", "--set", "engine.quantization=modelopt_fp4", "--set", "hardware.gpu=b60"]) == 2
    assert "set hardware.fp4_tflops if yours does" in capsys.readouterr().err  # a scenario can
    # a CUDA GPU without fp4 tensor cores holds NVFP4 weights (vLLM's Marlin runs them weight-only): round 90
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--quantization", "modelopt_fp4",
                 "--json"]) == 0
    nvfp4 = json.loads(capsys.readouterr().out)
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--quantization", "fp8", "--json"]) == 0
    assert nvfp4["weights_gib"] < json.loads(capsys.readouterr().out)["weights_gib"]  # 4.5 bits a weight, not 8


@pytest.mark.parametrize("given, length", [("32k", 32000), ("32K", 32768), ("2.5k", 2500)])
def test_capacity_reads_max_model_len_as_vllm_serve_does(capsys, given, length):
    """Round 94: `vllm serve --max-model-len 32k` is a user's own line; capacity refused it as not an integer."""
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", given, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_model_len"] == length


@pytest.mark.parametrize("model, gpu, tp, given", [
    ("llama-3.1-70b", "h100-sxm", 2, "auto"),
    ("llama-3.1-70b", "h100-sxm", 2, "-1"),
    ("llama-4-scout", "h200-sxm", 2, "auto"),  # local-attention groups hold their window beside the full group
])
def test_capacity_auto_fits_max_model_len_as_run_does(capsys, model, gpu, tp, given):
    """--max-model-len auto (or -1): the longest one request's KV fits the pool, the length `run` fits
    engine.max_model_len=auto to (vLLM's auto-fit), said in a note."""
    from servesim.simulator.config import load_scenario, resolve

    assert main(["capacity", "--model", model, "--gpu", gpu, "-tp", str(tp), f"--max-model-len={given}", "--json"]) == 0
    out = capsys.readouterr()
    fitted = json.loads(out.out)["max_model_len"]
    rs = resolve(load_scenario(None, [f"model={model}", f"hardware.gpu={gpu}", f"engine.tensor_parallel_size={tp}",
                                      "engine.max_model_len=auto"]))
    assert fitted == rs.max_model_len < load_model(model).max_position_embeddings
    assert f"--max-model-len auto: {fitted:,} tokens" in out.err and "vLLM would not start" not in out.err


def test_the_api_takes_max_model_len_as_the_cli_does():
    """Round 95: servesim.capacity(max_model_len="auto") and "32k" were refused as not numbers (the CLI took them)."""
    import servesim

    def length(value):
        return servesim.capacity(model="llama-3.1-70b", gpu="h100-sxm", tensor_parallel_size=2,
                                 max_model_len=value).report.max_model_len

    assert length("auto") == length(-1) < 131072 and length("32k") == 32000 and length(8192) == 8192
    with pytest.raises(ConfigError, match="max_model_len: must be a length"):
        length(1.5)


def test_round_158_the_api_says_and_keeps_every_warning_the_cli_says(capsys):
    """r158: servesim.capacity said no warning (the CLI's max_num_seqs line only kept in .warnings), lost the
    sliding-window note entirely, and said a block size's warning without keeping it."""
    import servesim

    window = servesim.capacity("mistral-7b", "h100-sxm")
    assert "slides a 4096-token window on every layer" in window.warnings[0]
    assert f"servesim: warning: {window.warnings[0]}" in capsys.readouterr().err
    odd = servesim.capacity("llama-3.1-8b", "h100-sxm", tokens_per_request=1, block_size=24)
    err = capsys.readouterr().err
    assert len(odd.warnings) == 2 and all(f"servesim: warning: {w}" in err for w in odd.warnings)
    assert "multiples of 16" in odd.warnings[0] and "max_num_seqs=1,024" in odd.warnings[1]
    assert odd.warnings[0].startswith("block_size 24: ") and "(max_num_seqs; vLLM's default" in odd.warnings[1]


def test_round_168_weights_past_a_given_memory_name_the_memory():
    """r168: hardware.memory_gib 1e-6 was refused as engine.tensor_parallel_size, "on an H100 SXM 80GB"."""
    from servesim.simulator.config import load
    from servesim.simulator.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^hardware.memory_gib: 1e-06 GiB given: llama-3.1-8b \(bf16\) needs"):
        load(None, ["hardware.gpu=h100-sxm", "hardware.memory_gib=1e-6"])
