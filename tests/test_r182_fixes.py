"""Round r182's findings: each test failed on the code before its fix."""
import json

import pytest

from servesim.simulator.config import load
from servesim.simulator.errors import ConfigError


@pytest.mark.parametrize("sets, refused", [
    (["hardware.gpu=a100-80gb", "model.dtype=fp32", "engine.kv_cache_dtype=fp8"],
     "^engine.kv_cache_dtype: fp8 on compute capability 8.0: of vLLM 0.33's backends only Triton's take "
     "llama-3.1-8b's float32 attention"),
    (["engine.enable_expert_parallel=true", "engine.data_parallel_size=2", "engine.num_redundant_experts=4"],
     "^engine.num_redundant_experts: llama-3.1-8b is a dense model: it has no experts to copy")])
def test_what_vllm_refuses_is_refused_for_the_reason_it_refuses_it(sets, refused):
    with pytest.raises(ConfigError, match=refused):
        load(None, ["model=llama-3.1-8b", "profile=roofline"] + sets)


def test_a_bench_results_queue_times_are_read_as_its_other_arrays(tmp_path):
    from servesim.calibration.real_runs import read_run

    base = {"completed": 2, "start_times": [0.0, 0.1], "input_lens": [10, 10], "output_lens": [3, 3],
            "ttfts": [0.01, 0.01], "itls": [[0.01, 0.01], [0.01, 0.01]], "latencies": [0.03, 0.03],
            "queue_times": [0.0, 0.0], "generated_texts": ["", ""], "errors": ["", ""]}
    for value, said in ((-5.0, "queue_times\\[1\\] must be >= 0"), ("x", "queue_times\\[1\\] must be a finite")):
        (tmp_path / "r.json").write_text(json.dumps(base | {"queue_times": [0.0, value]}))
        with pytest.raises(ConfigError, match=said):
            read_run(tmp_path / "r.json")
    (tmp_path / "r.json").write_text(json.dumps(base))
    assert len(read_run(tmp_path / "r.json").specs) == 2


def test_a_trace_given_as_the_scenario_is_told_how_to_replay(tmp_path):
    from servesim.simulator.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"request_id": 0, "arrival_time": 0.0, "prompt_tokens": 10, "output_tokens": 5}\n')
    with pytest.raises(ConfigError, match=f"t.jsonl is a trace, not a scenario \\(YAML\\): replay it with --set "
                                          f"workload.type=trace --set workload.path={trace}"):
        load(str(trace), [])
    assert main(["run", str(trace), "--out", str(tmp_path / "r")]) == 2
