"""Round r178's findings: each test failed on the code before its fix (the controls hold on both)."""
import json
from pathlib import Path

import pandas as pd
import pytest

from servesim.simulator.cli import main
from servesim.simulator.config import load
from servesim.simulator.errors import ConfigError


@pytest.mark.parametrize("gpu, cc, refused", [("h100-sxm", 8.0, "8.0 beside the built-in h100-sxm, whose is 9.0"),
                                              ("b60", 10.0, "10.0 beside the built-in b60, whose is none \\(not CUDA\\)"),
                                              ("h100-sxm", 9.0, None)])
def test_a_built_in_gpu_keeps_its_own_compute_capability(gpu, cc, refused):
    sets = [f"hardware.gpu={gpu}", f"hardware.compute_capability={cc}"]
    if refused:
        with pytest.raises(ConfigError, match=f"^hardware.compute_capability: {refused}"):
            load(None, sets)
    else:
        assert load(None, sets).hardware.compute_capability == cc


def test_a_threshold_below_one_plus_k_is_refused_under_0_33_speculation():
    spec = ["speculative.method=fixed", "speculative.num_speculative_tokens=4"]
    with pytest.raises(ConfigError, match="^engine.long_prefill_token_threshold: 3: below 1 \\+ num_speculative_tokens"
                                          " \\(5\\): vLLM 0.33 pads"):
        load(None, spec + ["engine.long_prefill_token_threshold=3"])
    assert load(None, spec + ["engine.long_prefill_token_threshold=5"])  # the padded admission fits it
    assert load(None, spec + ["engine.long_prefill_token_threshold=3", "engine.vllm_defaults=0.19.0"])  # no padding


def _shared_run(run: str):
    root = Path(__file__).resolve().parents[2] / "shared" / "data" / "serving" / "llmservingsim-vllm-0.19" / run
    if not (root / "vllm" / "requests.jsonl").is_file():
        pytest.skip(f"{root} not found (../shared is absent)")
    return root / "vllm"


def test_compare_keeps_a_recorded_pool_as_memory_under_another_kv_dtype_and_says_a_replaced_auto(capsys):
    from servesim.calibration.real_runs import read_run
    from servesim.calibration.run_comparison import resolve_run
    run = read_run(_shared_run("RTX4090/Llama-3.1-8B"))
    rs = resolve_run(run, None, ["engine.kv_cache_dtype=fp8"])
    err = capsys.readouterr().err
    assert rs.num_gpu_blocks == 5176  # 2,588 blocks of bf16 KV: the same memory in fp8
    assert "replaces the engine.kv_cache_dtype=auto that" in err
    assert "is simulated as 5,176 blocks of 65,536 bytes a token, the same memory" in err
    assert resolve_run(run, None, []).num_gpu_blocks == 2588


def test_a_serving_fit_labels_its_kv_cache_dtype(tmp_path):
    from servesim.simulator.cost_model import load_profile

    out = tmp_path / "p.yaml"
    assert main(["calibrate", "fit", str(_shared_run("RTX4090/Llama-3.1-8B").parent), "--max-evals", "7",
                 "--out", str(out)]) == 0
    assert load_profile(str(out)).kv_cache_dtype == "bf16"
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        load(None, [f"profile={out}", "hardware.gpu=rtx-4090", "engine.kv_cache_dtype=fp8",
                    "engine.max_model_len=16384"])


def test_describe_leaves_out_what_the_api_server_refuses_and_counts_prompt_blocks(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload:\n  num_requests: 100\n  arrival: {process: poisson, rate: 5}\n"
                        "  prompt_tokens: {dist: uniform, low: 100, high: 2000}\n"
                        "  output_tokens: {dist: uniform, low: 1, high: 400}\n  request_max_tokens: true\n"
                        "engine: {max_model_len: 2048, vllm_defaults: 0.19.0}\n")
    assert main(["workload", "describe", str(scenario), "--json"]) == 0
    out = capsys.readouterr()
    d = json.loads(out.out)
    assert "refuses 10 of the 100 requests (400: 10 max_tokens_too_large): described without them" in out.err
    assert main(["run", str(scenario), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    req = pd.read_parquet(tmp_path / "r" / "requests.parquet")
    done = req[req["status"] == "finished"]
    assert d["rows"] == len(done) == 90 and d["output"]["mean"] == pytest.approx(done["output_tokens"].mean())
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"request_id": 0, "arrival_time": 0.0, "prompt_tokens": 32, "output_tokens": 32, "prefix_ids": [0, 1, 2, 3],'
        ' "prefix_block_tokens": 16}\n{"request_id": 1, "arrival_time": 1.0, "prompt_tokens": 64, "output_tokens": 16,'
        ' "prefix_ids": [0, 1, 2, 3, 4], "prefix_block_tokens": 16}\n')
    assert main(["workload", "describe", str(trace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prefix_reuse"] == pytest.approx(4 / 6)  # of the 6 prompt blocks


def test_a_nixl_example_is_the_releases_own_and_a_sweep_folder_plots_from_its_csv(tmp_path, capsys):
    line = ["vllm", "--gpu", "h100-sxm", "--set", "cluster.prefill_replicas=1", "--out", str(tmp_path / "v"), "serve",
            "meta-llama/Llama-3.1-8B-Instruct", "--", "bench", "serve", "--dataset-name", "random",
            "--num-prompts", "5"]
    assert main(line) == 2
    assert '"kv_role":"kv_consumer"}\': one line serves both instances here' in capsys.readouterr().err
    assert main(["sweep", "--set", "model=tiny-llama", "--set", "workload.num_requests=20", "--grid",
                 "workload.arrival.rate=1,2", "--out", str(tmp_path / "sw"), "--quiet"]) == 0
    (tmp_path / "sw" / "sweep.parquet").unlink()
    assert main(["plot", str(tmp_path / "sw"), "--kind", "latency-vs-rate", "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p.png").is_file()


def test_compare_says_a_given_simulation_whose_settings_it_cannot_check(tmp_path, capsys):
    import shutil

    real = _shared_run("RTX4090/Llama-3.1-8B")
    assert main(["compare", str(real), "--out", str(tmp_path / "c"), "--quiet"]) in (0, 1)
    sim = tmp_path / "sim"
    shutil.copytree(tmp_path / "c" / "sim", sim)
    (sim / "config.yaml").unlink()
    capsys.readouterr()
    assert main(["compare", str(real), str(sim), "--out", str(tmp_path / "c2")]) in (0, 1)
    assert f"{sim} has no config.yaml: its settings (model, GPU, engine) were not checked" in capsys.readouterr().err


def test_a_step_log_fit_says_a_kv_cost_held_at_its_floor(tmp_path, capsys):
    shapes = [(0, b, b * c) for b in (1, 4, 16, 64) for c in (512, 2048, 8192)] + \
        [(p, 0, 0) for p in (128, 512, 2048, 4096)]
    rows, t = [], 0.0
    for p, b, ctx in shapes:  # a decode KV token at 2e-6 ms: faster than an H100 reads its 128 KiB
        ms = 5.0 + 0.01 * b + 2e-6 * ctx + 0.02 * p
        rows.append({"t": t, "t_end": t + ms / 1e3, "num_seqs": b + (p > 0), "prefill_tokens": p,
                     "prefill_attention_pairs": p * (p + 1) // 2, "decode_seqs": b, "decode_context_tokens": ctx})
        t += ms / 1e3 + 1e-4
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["calibrate", "fit", str(path), "--model", "llama-3.1-8b", "--dtype", "bf16", "--gpu", "h100-sxm",
                 "--out", str(tmp_path / "f.yaml")]) == 0
    assert "read each decode KV token no slower than h100-sxm's datasheet bandwidth allows" in capsys.readouterr().err
