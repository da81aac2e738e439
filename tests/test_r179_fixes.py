"""Round r179's findings: each test failed on the code before its fix (the controls hold on both)."""
import json
from pathlib import Path

import pytest
from hf_configs import QWEN3_MOE

from servesim.simulator.cli import main
from servesim.simulator.config import load
from servesim.simulator.errors import ConfigError

SESSIONS = ["workload={type: sessions, num_sessions: 12, arrival: {process: poisson, rate: 4}, turns: {dist: fixed, "
            "value: 2}, system_prompt_tokens: 512, first_message_tokens: {dist: fixed, value: 64}, message_tokens: "
            "{dist: fixed, value: 32}, output_tokens: {dist: fixed, value: 16}, think_time_s: {dist: fixed, value: 1}}",
            "model=tiny-llama", "engine.num_gpu_blocks_override=4096"]


def test_prefix_affinity_that_leaves_replicas_idle_is_said(tmp_path, capsys):
    sets = SESSIONS + ["cluster.replicas=3", "cluster.router=prefix_affinity"]
    assert main(["run", *[a for s in sets for a in ("--set", s)], "--out", str(tmp_path / "r")]) == 0
    assert "cluster.router=prefix_affinity sent all 24 requests it routed to 1 of the 3 replicas (replicas 1, 2 took " \
           "none): a prefix cached on one (a shared system prompt) outranks load" in capsys.readouterr().err
    sets[-1] = "cluster.router=round_robin"  # the control: every replica takes some
    assert main(["run", *[a for s in sets for a in ("--set", s)], "--out", str(tmp_path / "rr")]) == 0
    assert "outranks load" not in capsys.readouterr().err


def test_a_trace_turn_after_a_refused_turn_is_said(tmp_path, capsys):
    rows = [(0.0, 3000, 1, 0), (0.1, 100, 2, 0), (5.0, 3100, 1, 1), (5.1, 200, 2, 1)]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_time": t, "prompt_tokens": p, "output_tokens": 20, "session_id": s,
                                         "turn": n}) + "\n" for t, p, s, n in rows))
    assert main(["run", "--set", "model=tiny-llama", "--set", "engine.max_model_len=2048", "--set",
                 f"workload={{type: trace, path: {trace}}}", "--out", str(tmp_path / "r")]) == 0
    assert "1 of 2 later session turns followed a turn the server refused (session 1's turn 1)" in \
        capsys.readouterr().err


@pytest.mark.parametrize("gpu, cc, refused", [("generic-80gb", 8.9, None),  # a datasheet without one takes it
                                              ("h100-sxm", 9.00000001, "9.00000001 beside the built-in h100-sxm, "
                                                                       "whose is 9.0")])
def test_a_capability_beside_a_datasheet_without_one_is_taken_and_a_refusal_shows_the_value(gpu, cc, refused):
    sets = [f"hardware.gpu={gpu}", f"hardware.compute_capability={cc}"]
    if refused:
        with pytest.raises(ConfigError, match=refused):
            load(None, sets)
    else:
        assert load(None, sets).hardware.compute_capability == cc


@pytest.mark.parametrize("q", [
    {"quant_method": "awq", "bits": 4, "group_size": 128, "ignored_layers": ["model.layers.0.self_attn.q_proj"]},
    {"quant_method": "fp8", "activation_scheme": "dynamic", "ignore": ["model.layers.0.self_attn.q_proj"]}])
def test_a_skip_list_its_method_never_reads_is_not_judged(tmp_path, q):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_MOE | {"quantization_config": q}))
    assert load(None, [f"model={tmp_path / 'config.json'}", "hardware.gpu=h100-sxm", "profile=roofline"]).arch.dtype \
        in ("w4a16", "fp8")


def test_a_goodput_plot_of_a_sweep_without_classes_names_its_table(tmp_path, capsys):
    assert main(["sweep", "--set", "model=tiny-llama", "--set", "workload.num_requests=10", "--grid",
                 "workload.arrival.rate=1,2", "--out", str(tmp_path / "sw"), "--quiet"]) == 0
    assert main(["plot", str(tmp_path / "sw"), "--kind", "goodput", "--out", str(tmp_path / "p")]) == 2
    assert f"results: {Path(tmp_path / 'sw' / 'sweep.parquet')} has no request_goodput column" in \
        capsys.readouterr().err


def test_a_vllm_flag_given_twice_is_said(capsys):
    from servesim.simulator.vllm_command import parse

    assert parse(["m", "--block-size", "16", "--block_size", "32"], "serve")["block_size"] == 32
    assert "vllm serve --block-size given twice: the last stands" in capsys.readouterr().err
    assert parse(["m", "--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens", "3"],
                 "serve")["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3}
    assert "given twice" not in capsys.readouterr().err  # a JSON config's dotted keys are gathered into one
