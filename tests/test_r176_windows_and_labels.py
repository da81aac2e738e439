"""r176: engine labels of several vLLM instances, window flags read as numbers, and a rate search's window said
with its rate (each case failed on the code before its fix)."""

import pandas as pd
import pytest
from hf_configs import LLAMA_8B
from prometheus_client import parser

from servesim.simulator.cli import main


def _labels(path) -> set:
    families = {f.name: f for f in parser.text_string_to_metric_families(path.read_text())}
    return {(s.labels["engine"], s.labels.get("replica")) for s in families["vllm:num_requests_running"].samples}


def test_each_instance_labels_its_engines_by_dp_rank_and_a_replica_label_tells_instances_apart(tmp_path):
    """vLLM labels an engine by its DP rank within its instance: two instances of DP 2 were labelled 0-3, and under
    hybrid balancing -dp 4 from rank 2 with two instances 2, 3, 6, 7 (no rank 6 exists)."""
    assert main(["run", "--set", "cluster.replicas=2", "--set", "engine.data_parallel_size=2", "--set",
                 "workload.num_requests=40", "--prometheus", "--quiet", "--out", str(tmp_path / "r")]) == 0
    assert _labels(tmp_path / "r" / "metrics.prom") == {("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")}
    line = pd.read_parquet(tmp_path / "r" / "prometheus.parquet")
    assert set(zip(line.engine, line.replica)) == {(0, 0), (1, 0), (0, 1), (1, 1)}
    assert main(["vllm", "--gpu", "h100-sxm", "--quiet", "--out", str(tmp_path / "v"), "--set", "cluster.replicas=2",
                 "serve", "meta-llama/Llama-3.1-8B-Instruct", "-dp", "4", "--data-parallel-size-local", "2",
                 "--data-parallel-start-rank", "2", "--data-parallel-hybrid-lb", "--", "bench", "serve",
                 "--num-prompts", "20"]) == 0
    assert {e for e, _ in _labels(tmp_path / "v" / "metrics.prom")} == {"2", "3"}
    assert main(["run", "--set", "workload.num_requests=10", "--prometheus", "--quiet",
                 "--out", str(tmp_path / "one")]) == 0
    assert _labels(tmp_path / "one" / "metrics.prom") == {("0", None)}  # one instance: vLLM's own labels only


@pytest.mark.parametrize("flag, value, said", [("--warmup-requests", "0x10", "must be an integer, got '0x10'"),
                                               ("--warmup-s", "1_0", "must be a number, got '1_0'"),
                                               ("--cooldown-s", "nan", "must be a finite number")])
def test_window_flags_are_numbers_not_yaml(tmp_path, capsys, flag, value, said):
    assert main(["run", "--set", "workload.num_requests=20", flag, value, "--out", str(tmp_path / "r")]) == 2
    assert said in capsys.readouterr().err


def test_a_rate_search_names_the_rate_its_window_in_seconds_emptied(tmp_path, capsys):
    assert main(["search", "max-rate", "--set", "model=tiny-llama", "--set", "workload.num_requests=100",
                 "--set", "simulation.warmup_s=2", "--slo", "ttft_p99_ms=50", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "leave none of the run's 100 requests measured" in err and "at the searched workload.arrival.rate=" in err
    assert "a window given in requests (warmup_requests, cooldown_requests) keeps its share" in err




@pytest.mark.parametrize("q, refused", [
    ({"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": ["lm_head", "*mlp.gate*"]},
     "exclude_modules leaves '\\*mlp.gate\\*'"),  # a glob matching every gate_proj, not the router
    ({"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": ["lm_head", "*router*", "vision_model*"]},
     None),  # what servesim counts 16-bit anyway: a vision tower too
    ({"quant_method": "fp8", "ignored_layers": ["re:.*mlp\\.down_proj"]}, "ignored_layers leaves 're:"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": 0},
     "modules_to_not_convert 0 \\(vLLM reads a list of module names\\)"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "modules_in_block_to_quantize":
      [["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], ["self_attn.o_proj"]]},
     "modules_in_block_to_quantize .* leaves a decoder layer's other linear layers unquantized"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "modules_in_block_to_quantize":
      [["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], ["self_attn.o_proj"],
       ["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]]}, None)])
def test_skip_lists_are_matched_as_vllm_matches_them(tmp_path, q, refused):
    import json

    from servesim.simulator.config import load
    from servesim.simulator.errors import ConfigError

    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B | {"quantization_config": q}))
    sets = [f"model={tmp_path / 'config.json'}", "hardware.gpu=h100-sxm"]
    if refused:
        with pytest.raises(ConfigError, match=refused):
            load(None, sets)
    else:
        assert load(None, sets).arch.dtype in ("fp8", "w4a16")


def test_round_176_leftovers_of_r175s_fixes(tmp_path, monkeypatch, capsys):
    """A custom GPU took no compute capability (so no Marlin) while saying none was checked; one point's held-out
    errors disagreeing were taken; a file where the cache folder goes was said as the profile."""
    from servesim.simulator import config
    from servesim.simulator.config import load
    from servesim.simulator.cost_model import load_profile
    from servesim.simulator.errors import ConfigError

    rs = load(None, ["hardware.gpu=null", "hardware.memory_gib=80", "engine.quantization=modelopt_fp4"])
    assert rs.hardware.compute_capability == 9.0
    assert "compute_capability 9.0 assumed (an H100 SXM's datasheet)" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="held_out_error over 1 point: its mape, p90_ape and max_ape are that"):
        load_profile({"name": "p", "cost_model": "linear", "coefficients": {"step_overhead_ms": 1},
                      "held_out_error": {"mape": 0.01, "p90_ape": 0.02, "max_ape": 0.9, "points": 1}})
    (tmp_path / "profiles").write_text("")
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    config._WARNED.clear()
    load(None, ["model=qwen3-8b", "hardware.gpu=h100-sxm"])
    assert f"cannot cache the composed profile at {tmp_path / 'profiles'} (a file is there, not a folder)" in \
        capsys.readouterr().err


@pytest.mark.parametrize("sets, said", [
    (["workload.num_requests=null", "workload.duration_s=20",
      "workload.arrival={process: closed_loop, concurrency: 10, ramp_up_s: 100}"],
     "ramp_up_s=100: only 2 of the 10 clients started (the others start at or after duration_s (20 s))"),
    (["workload.num_requests=10", "workload.arrival={process: closed_loop, concurrency: 100, ramp_up_s: 10}"],
     "ramp_up_s=10: only 10 of the 100 clients started (the requests ran out), over 0.9 s"),
    (["workload.num_requests=5", "workload.arrival={process: closed_loop, concurrency: 1, ramp_up_s: 5}"],
     "workload.arrival.ramp_up_s has no effect: one client starts at t = 0")])
def test_a_closed_loops_ramp_that_starts_fewer_clients_is_said(tmp_path, capsys, sets, said):
    assert main(["run", *[x for s in sets for x in ("--set", s)], "--set", "workload.output_tokens={dist: fixed, "
                 "value: 20}", "--out", str(tmp_path / "r")]) == 0
    assert said in capsys.readouterr().err


def test_a_turn_held_back_by_the_client_cap_names_the_cap(tmp_path):
    import json

    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    rows = [(0.0, 300, 1500, None, None), (0.001, 300, 1500, None, None), (0.002, 500, 100, 7, 0),
            (5.0, 700, 100, 7, 1), (5.1, 300, 50, None, None)]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"request_id": i, "arrival_time": t, "prompt_tokens": p, "output_tokens": o}
                                        | ({"session_id": s, "turn": k} if s is not None else {})) + "\n"
                             for i, (t, p, o, s, k) in enumerate(rows)))
    said = [w for w in simulate(load(None, [f"workload={{type: trace, path: {trace}, max_concurrency: 2}}",
                                            "model=llama-3.1-70b", "engine.tensor_parallel_size=4"])).warnings
            if "later session turns" in w]
    assert said and said[0].endswith("or workload.max_concurrency=2 held the earlier turn back)"), said
