"""`servesim vllm serve ... -- bench serve ...`: vLLM's flags (0.33.0 by default, 0.19.0 on request), its result
file, its semantics."""

import json
import shlex
import math
import pathlib
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from servesim.simulator.cli import main
from servesim.simulator.config import load
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import HF_IDS, load_model
from servesim.simulator.vllm_command import ONLINE_FP8, parse, read, serve_command

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
MOE = "Qwen/Qwen3-30B-A3B"
BENCH = ["--", "bench", "serve", "--dataset-name", "random", "--random-input-len", "512", "--random-output-len", "64",
         "--num-prompts", "60", "--request-rate", "8"]

# vllm/benchmarks/serve.py (0.19.0 and 0.33.0 alike): the keys its --save-result file holds, in order, for the
# default metrics and percentiles; --save-detailed adds the per-request arrays after total_token_throughput
VLLM_KEYS = ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
             "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
             "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
             "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
             "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
             "std_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms"]
DETAILED = {"0.19.0": ["input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors"],
            "0.33.0": ["input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
                       "generated_texts", "errors"]}


def test_vllm_argument_rewriting_is_followed():
    """Underscores, --flag=value, short aliases, prefixes, --no- forms and dotted JSON keys, as vLLM reads them."""
    got = parse(["m", "--max_num_seqs=64", "-tp", "2", "--max-num-batched", "4096", "--no-enable-prefix-caching",
                 "--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens", "3",
                 "--max-model-len", "32k"], "serve")
    assert got["max_num_seqs"] == 64 and got["tensor_parallel_size"] == 2 and got["max_num_batched_tokens"] == 4096
    assert got["enable_prefix_caching"] is False and got["max_model_len"] == 32000
    assert got["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3}
    cmd = read(["m", "--speculative-config", '{"method": "eagle3", "model": "d", "num_speculative_tokens": 2}', "-q",
                "fp8"], [])
    assert cmd.settings["speculative.num_speculative_tokens"] == 2 and cmd.settings["engine.quantization"] == "fp8"
    # 0.33's switch pairs (--disable-x sets --enable-x false), its spec shorthands and its queue limits
    got = parse(["m", "--disable-prefix-caching", "--disable-expert-parallel", "--no-enforce-eager"], "serve")
    assert got == {"model_tag": "m", "enable_prefix_caching": False, "enable_expert_parallel": False,
                   "enforce_eager": False}
    cmd = read(["m", "--spec-method", "ngram", "--spec-tokens", "4", "--max-num-queued-reqs", "64"], [])
    assert cmd.settings["speculative.num_speculative_tokens"] == 4 and cmd.settings["speculative.draft_cost_ratio"] == 0
    assert cmd.settings["engine.max_num_queued_reqs"] == 64 and cmd.settings["engine.gpu_memory_utilization"] == 0.92
    assert read(["m"], [], "0.19.0").settings["engine.gpu_memory_utilization"] == 0.9  # each release's default


@pytest.mark.parametrize("version, flags, says", [
    ("0.19.0", ["--max-num-queued-reqs", "4"], "--max-num-queued-reqs 4 (not a flag of vLLM 0.19.0's `vllm "
                                               "serve`; vLLM 0.33.0's takes it: --vllm-version 0.33.0)"),
    ("0.33.0", ["--max-num-partial-prefills", "2"], "vLLM 0.19.0's takes it"),  # gone in 0.33
    ("0.33.0", ["--swap-space", "4"], "--swap-space 4 (not a flag of vLLM 0.33.0's `vllm serve`)"),  # removed from vLLM
    ("0.33.0", ["--no-disable-prefix-caching"], "unrecognized arguments"),  # 0.33's pairs have no such form
    ("0.33.0", ["--max-num-seqs", "many"], "argument --max-num-seqs: invalid int value: 'many'"),
    ("0.19.0", ["--kv-cache-dtype", "int8"], "argument --kv-cache-dtype: invalid choice: 'int8'"),
    ("0.33.0", ["--enable-chunked-prefill", "false"], "unrecognized arguments: false"),  # a switch takes no value
    ("0.33.0", ["--speculative-config", "{bad"], "argument --speculative-config/-sc: not valid JSON"),  # round 82
    ("0.19.0", ["-cc", '{"max_cudagraph_capture_size": 1k}'], "argument --compilation-config/-cc: not valid JSON"),
])
def test_what_vllm_refuses_is_refused_in_one_line(version, flags, says, tmp_path, capsys):
    assert main(["vllm", "--vllm-version", version, "--out", str(tmp_path), "serve", MODEL] + flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("servesim: error: vllm serve: ") and says in err[0], err


@pytest.mark.parametrize("bench, says", [
    (["--dataset-name", "sharegpt"], "--dataset-name: 'sharegpt' needs its prompts' text"),
    # round 67: vLLM's client checks the URL's ending per backend and every request fails (no result file)
    (["--backend", "openai-chat"], "--endpoint: '/v1/completions': --backend openai-chat's client refuses"),
    (["--backend", "openai-responses", "--endpoint", "/v1/completions"], "not ending in 'responses'"),
    (["--backend", "openai-audio"], "--backend: 'openai-audio' benchmarks speech transcription"),
    (["--dataset-name", "timed_trace"], "format: vllm_timed_trace}'`"),  # lengths, not text: said so (round 67)
    # round 68: what vllm bench serve's main refuses before sending, and LoRA adapters servesim does not serve
    (["--self-timed"], "--self-timed: only with --dataset-name timed_trace"),
    (["--header", "foo"], "--header: KEY=VALUE items"),
    (["--plot-timeline", "--timeline-itl-thresholds", "5"], "--timeline-itl-thresholds: two numbers"),
    (["--lora-modules", "a", "b"], "--lora-modules: each request would name a LoRA adapter"),
    (["--goodput", "ttft=500"], "--goodput: KEY:MILLISECONDS"),
    (["--request-rate", "-3"], "--request-rate: must be > 0"),
    (["--random-range-ratio", "1.5"], "--random-range-ratio: a ratio in [0, 1)"),
    (["--random-range-ratio", '{"input": 0.2}'], "--random-range-ratio: a ratio in [0, 1)"),
    (["--random-range-ratio", "abc"], "--random-range-ratio: a ratio in [0, 1), or {\"input\": r, \"output\": r}, "
                                      "got 'abc'"),  # the text given, not None
    (["--percentile-metrics", "ttft,latency"], "--percentile-metrics"),
    # round 94: RandomDataset.sample calls tokenizer.num_special_tokens_to_add() on the None this leaves
    (["--skip-tokenizer-init"], "--skip-tokenizer-init: vLLM's client then has no tokenizer"),
    # r128: 0.33's request classes take stream_interval from 1 (every request 400); burstgpt's true reason
    (["--extra-body", '{"stream_interval": 0}'], "--extra-body.stream_interval: 0: vLLM 0.33.0's server takes "
                                                 "stream_interval an integer from 1"),
    (["--dataset-name", "burstgpt", "--dataset-path", "x.csv"], "'burstgpt' sends each prompt as the decoded text "
                                                                "of token ids"),
    (["--random-output-len", "100000000000"], "vllm bench serve --random-output-len (--output-len, "
                                              "--prefix-repetition-output-len): Input should be less than"),
    (["--skip-tokenizer-init", "--dataset-name", "prefix_repetition"], "'prefix_repetition' dataset needs one"),
    # round 94: vLLM splits on commas alone, so " e2el" is no metric (servesim had reported it)
    (["--percentile-metrics", "ttft, e2el"], "--percentile-metrics: ' e2el' matches no metric: vLLM splits on commas "
                                             "alone and would leave e2el out; write ttft,e2el"),
    (["--random-range-ratio", '{"input": "x", "output": 0.5}'], "--random-range-ratio: a ratio in [0, 1)"),
    (["--random-range-ratio", '{"input": true, "output": 0.5}'], "--random-range-ratio: a ratio in [0, 1)"),
    (["--random-range-ratio", '[0.1]'], "--random-range-ratio: a ratio in [0, 1)"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "20", "--ramp-up-end-rps", "10"], "at most --ramp-up-end"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "0", "--ramp-up-end-rps", "10"], "must be above 0"),
    (["--num-prompts", "20000000"], "--num-prompts: Input should be less than or equal to 10000000 (got 20000000) "
                                    "(as servesim's workload.num_requests)"),
    (["--request-rate", "5", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "9"],
     "--request-rate: not with --ramp-up-strategy"),
    (["--random-input-len=-10"], "--random-input-len: too small: 0 at range ratio"),  # below 0 is 0, as in vLLM
    (["--metadata", "foo", "bar=1"], "--metadata: KEY=VALUE items"),
    (["--extra-body", "[1]"], "--extra-body: a JSON object, got [1]"),  # round 103: {**params, **extra_body}
    (["--extra-body", "[]", "--extra-body", "[1]"], "--extra-body: a JSON object"),  # the last given
    (["--request-rate", "5", "--burstiness", "1e-13"], "--burstiness: 1e-13: below 1e-12 servesim does not draw"),
    (["--burstiness", "0"], "--burstiness: must be > 0, as vLLM asserts, got 0.0"),
    (["--burstiness", "nan"], "--burstiness: must be > 0, as vLLM asserts, got nan"),
    # vLLM's RandomDataset refuses a line whose prompt could be empty: prefix + floor(len (1 - ratio)) < 1
    (["--random-input-len", "1", "--random-range-ratio", "0.5"], "--random-input-len: too small: 1 at range ratio"),
    (["--input-len", "1", "--random-range-ratio", "0.999"], "--input-len: too small"),
    (["--random-input-len", "10", "--random-prefix-len", "-10"], "--random-input-len: too small"),
])
def test_bad_client_flags_are_refused_in_one_line(bench, says, tmp_path, capsys):
    assert main(["vllm", "--out", str(tmp_path), "serve", MODEL, "--", "bench", "serve"] + bench) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and err[0].startswith("servesim: error: vllm bench serve"), err


@pytest.mark.parametrize("bench, prompt, output", [
    (["--random-output-len", "0"], 512, 1),  # vLLM's output bounds are at least 1
    (["--random-output-len", "-5"], 512, 1),
    (["--random-input-len", "0", "--random-prefix-len", "100"], 1, 10),  # a prefix alone is a prompt vLLM takes
    (["--random-prefix-len", "-5"], 507, 10),  # vLLM asks for prefix + input tokens: 5 fewer (round 106 refused it)
])
def test_random_lengths_vllm_takes_are_taken(bench, prompt, output):
    """vLLM's random dataset clamps an output length to at least 1 and takes an input of 0 beside a prefix:
    servesim refused both lines (round 73). (The random part of a prompt is at least 1 token here.)"""
    settings = read([MODEL], ["--dataset-name", "random", "--random-input-len", "512", "--random-output-len", "10",
                              *bench]).settings
    assert settings["workload.prompt_tokens"] == {"dist": "fixed", "value": prompt}
    assert settings["workload.output_tokens"] == {"dist": "fixed", "value": output}
    assert ("workload.shared_prefix" in settings) == (int(bench[-1]) > 0 and "prefix" in bench[-2])


def test_a_relative_result_dir_is_said_where_it_is(tmp_path, capsys, monkeypatch):
    """vLLM writes --result-dir relative to where it runs: the file is there, and said so (the listing after
    'results in OUT/' named relres/r.json, which is not in OUT, round 68)."""
    monkeypatch.chdir(tmp_path)
    assert main(["vllm", "--out", str(tmp_path / "o"), "serve", MODEL, "--", "bench", "serve", "--num-prompts", "3",
                 "--save-result", "--result-dir", "relres", "--result-filename", "r.json"]) == 0
    assert (tmp_path / "relres" / "r.json").is_file()
    assert str(tmp_path / "relres" / "r.json") in capsys.readouterr().out


def test_a_chat_backend_runs_at_its_own_endpoint(tmp_path):
    assert main(["vllm", "--quiet", "--out", str(tmp_path), "serve", MODEL, "--", "bench", "serve", "--backend",
                 "openai-chat", "--endpoint", "/v1/chat/completions", "--num-prompts", "3", "--save-result"]) == 0
    result = json.loads(next(tmp_path.glob("openai-chat-*.json")).read_text())
    assert result["backend"] == "openai-chat" and result["completed"] == 3


def test_an_unknown_hf_id_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert main(["vllm", "--out", str(tmp_path / "o"), "serve", "acme/NoSuchModel-7B"] + BENCH) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "acme/NoSuchModel-7B" in err[0] and "config.json" in err[0], err


def test_the_command_equals_the_scenario_it_reads_as(tmp_path, capsys):
    """The vLLM line and `servesim run` with the settings it stands for give the same run; unmodelled flags
    are named once and recorded."""
    assert main(["vllm", "--out", str(tmp_path / "v"), "--json", "serve", MODEL, "--max-num-seqs", "32",
                 "--no-enable-prefix-caching", "--host", "0.0.0.0", "--port", "8000"] + BENCH) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)  # --json: stdout holds the JSON alone
    assert [line for line in err.splitlines() if "warning" in line] == \
        ["servesim: warning: not modelled, recorded in vllm_command.json: --host, --port"]
    assert (tmp_path / "v" / "metrics.prom").is_file() and (tmp_path / "v" / "prometheus.parquet").is_file()
    record = json.loads((tmp_path / "v" / "vllm_command.json").read_text())
    assert record["not_modelled"] == {"vllm serve --host": "0.0.0.0", "vllm serve --port": 8000}
    assert main(["run", "--out", str(tmp_path / "r"), "--json", "--set", f"model={MODEL}",
                 "--set", "engine.max_num_seqs=32", "--set", "engine.enable_prefix_caching=false",
                 "--set", "workload.num_requests=60",
                 "--set", "workload.arrival={process: poisson, rate: 8, fit_span: true, vllm_client_draws: true}",
                 "--set", "workload.prompt_tokens={dist: fixed, value: 512}",
                 "--set", "workload.output_tokens={dist: fixed, value: 64}",
                 "--set", "workload.request_max_tokens=true", "--set", "workload.clip_to_max_model_len=false"]) == 0
    assert json.loads(capsys.readouterr().out) == summary


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_vllm_result_file_has_vllms_keys_and_meanings(version, tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["vllm", "--vllm-version", version, "--out", str(out), "--quiet", "serve", MODEL] + BENCH +
                ["--save-result", "--result-filename", "plain.json"]) == 0
    i = VLLM_KEYS.index("total_token_throughput") + 1  # 0.33 keeps these two arrays without --save-detailed
    kept = ["latencies", "queue_times"] if version == "0.33.0" else []
    assert list(json.loads((out / "plain.json").read_text())) == VLLM_KEYS[:i] + kept + VLLM_KEYS[i:]
    assert main(["vllm", "--vllm-version", version, "--out", str(out), "--quiet", "serve", MODEL] + BENCH +
                ["--save-result", "--save-detailed", "--goodput", "ttft:16", "tpot:8", "--max-concurrency", "4",
                 "--percentile-metrics", "e2el,ttft", "--metric-percentiles", "50,99.9", "--label", "L",
                 "--metadata", "tp=1", "--result-dir", str(tmp_path / "res")]) == 0
    [path] = (tmp_path / "res").iterdir()
    assert path.name.startswith("L-8.0qps-concurrency4-Llama-3.1-8B-Instruct-") and path.suffix == ".json"
    r = json.loads(path.read_text())
    keys = VLLM_KEYS[:7] + ["tp"] + VLLM_KEYS[7:i] + DETAILED[version] + VLLM_KEYS[i:22]
    keys += [f"{s}_{m}_ms" for m in ("ttft", "e2el") for s in ("mean", "median", "std", "p50", "p99.9")]
    assert list(r) == keys and r["tp"] == "1" and r["max_concurrency"] == 4
    # the per-request arrays are the run's requests, in seconds, in request order
    req = pd.read_parquet(out / "requests.parquet").sort_values("request_id")
    assert r["input_lens"] == req.prompt_tokens.tolist() and r["output_lens"] == req.output_tokens.tolist()
    np.testing.assert_allclose(r["ttfts"], req.ttft)
    np.testing.assert_allclose(r["start_times"], req.arrival_time)
    ends = [s + t + sum(g) for s, t, g in zip(r["start_times"], r["ttfts"], r["itls"])]
    np.testing.assert_allclose(ends, req.arrival_time + req.e2el)  # the gaps add up to each request's end
    # vLLM's statistics of those arrays, and its goodput: ttft <= 16 ms and tpot <= 8 ms per request
    ttfts = np.array(r["ttfts"])
    assert math.isclose(r["p99.9_ttft_ms"], np.percentile(ttfts, 99.9) * 1000)
    assert math.isclose(r["std_e2el_ms"], np.std(req.e2el) * 1000)
    tpot = (req.e2el - req.ttft) / (req.output_tokens - 1)
    good = ((req.ttft <= 0.016) & (tpot <= 0.008)).sum()
    assert 0 < good < len(req) and math.isclose(r["request_goodput"], good / r["duration"])
    # the client's limit: never more than 4 in flight
    ev = sorted([(t, 1) for t in req.arrival_time] + [(t, -1) for t in req.arrival_time + req.e2el])
    assert max(np.cumsum([d for _, d in ev])) == 4


def test_a_script_for_real_results_reads_the_simulated_one(tmp_path, capsys):
    """servesim's own reader of real `vllm bench serve` files takes it as a real run, with the same latencies."""
    from servesim.calibration.real_runs import read_run

    out = tmp_path / "v"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL] + BENCH +
                ["--save-result", "--save-detailed", "--result-filename", "r.json"]) == 0
    real = read_run(out / "r.json")
    sim = json.loads((out / "summary.json").read_text())
    got = real.summary()
    for key in ("completed", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms"):
        assert math.isclose(got[key], sim[key], rel_tol=1e-9), key


def test_config_shows_the_scenario_and_prints_it_back_as_a_vllm_line(tmp_path, capsys):
    assert main(["vllm", "--config", "serve", MODEL, "--max-num-seqs", "48", "-tp", "2"] + BENCH) == 0
    scenario = capsys.readouterr().out
    assert "max_num_seqs: 48" in scenario and "tensor_parallel_size: 2" in scenario
    (tmp_path / "s.yaml").write_text(scenario)
    assert main(["config", str(tmp_path / "s.yaml"), "--vllm"]) == 0
    captured = capsys.readouterr()
    line = captured.out.strip().split()
    assert line[:2] == ["vllm", "serve"] and HF_IDS[line[2]] == "llama-3.1-8b" and "h200-sxm" in captured.err
    back = read(line[2:], [])  # the printed line reads back as the same deployment
    assert back.settings["engine.max_num_seqs"] == 48 and back.settings["engine.tensor_parallel_size"] == 2
    assert not back.not_modelled
    # what one line cannot say is said (round 58: replicas, router and disaggregation went unsaid)
    assert main(["config", "--vllm", "--set", "cluster.replicas=3", "--set", "cluster.router=least_kv"]) == 0
    assert "3 instances of this line behind a load balancer (servesim's router: least_kv)" in capsys.readouterr().err
    assert main(["config", "--vllm", "--set", "cluster.replicas=2", "--set", "cluster.prefill_replicas=1"]) == 0
    err = capsys.readouterr().err
    assert "run 1 prefill and 2 decode instance(s)" in err
    # r111: 0.33's NixlConnector deprecates kv_both, and asks for a role per instance
    assert '"kv_role":"kv_producer"}\', the decode ones with' in err and '"kv_role":"kv_consumer"' in err
    assert main(["config", "--vllm", "--vllm-version", "0.19.0", "--set", "cluster.replicas=2", "--set",
                 "cluster.prefill_replicas=1"]) == 0
    assert '"kv_role":"kv_both"' in capsys.readouterr().err


@pytest.mark.parametrize("version", ["0.19.0", "0.33.0"])
def test_a_request_past_max_model_len_is_refused_or_lowered_as_each_vllm_does(version, tmp_path, capsys):
    """vllm bench serve sends each output length as max_tokens. vLLM 0.19 answers 400 when prompt + max_tokens
    exceeds max_model_len; 0.33 lowers max_tokens to what fits (get_max_tokens) and refuses only a max_tokens
    above max_model_len alone. --append-result alone saves, as vLLM."""
    client = ["bench", "serve", "--random-input-len", "1500", "--random-output-len", "300", "--random-range-ratio",
              "0.5", "--num-prompts", "100", "--request-rate", "20", "--save-detailed", "--append-result",
              "--result-filename", "r.json"]
    runs = {}
    for name, length in (("tight", "2048"), ("roomy", "8192")):
        assert main(["vllm", "--vllm-version", version, "--out", str(tmp_path / name), "--quiet", "serve", MODEL,
                     "--max-model-len", length, "--"] + client) == 0
        runs[name] = json.loads((tmp_path / name / "r.json").read_text())
    tight, asked = runs["tight"], runs["roomy"]  # the same requests; with room, each gets its whole output
    assert asked["failed"] == 0
    over = [i + o > 2048 for i, o in zip(asked["input_lens"], asked["output_lens"])]
    assert 0 < sum(over) < 100
    fits = [o for o, bad in zip(asked["output_lens"], over) if not bad]
    if version == "0.19.0":
        assert tight["failed"] == sum(over) and [e == "Bad Request" for e in tight["errors"]] == over
        assert [o for o, bad in zip(tight["output_lens"], over) if not bad] == fits  # nothing cut short
    else:  # only a prompt leaving no room for one token is refused; the others past it stop at max_model_len
        long = [i >= 2048 for i in asked["input_lens"]]
        assert 0 < sum(long) < sum(over) and [e == "Bad Request" for e in tight["errors"]] == long
        assert tight["output_lens"] == [0 if no else min(o, 2048 - i) for i, o, no in
                                        zip(asked["input_lens"], asked["output_lens"], long)]
        # a max_tokens above max_model_len alone is still refused
        assert main(["vllm", "--out", str(tmp_path / "long"), "--quiet", "serve", MODEL, "--max-model-len", "256",
                     "--", *client[:2], "--random-input-len", "100", "--random-output-len", "300",
                     "--num-prompts", "5", "--save-result", "--result-filename", "r.json"]) == 0
        assert json.loads((tmp_path / "long" / "r.json").read_text())["failed"] == 5


def test_speculative_decoding_reports_vllms_figures_in_the_file_and_the_metrics(tmp_path, capsys):
    """vLLM's spec-decode keys (serve.py: from the server's counters before and after the run) and the counters
    themselves: drafts, draft and accepted tokens, acceptance length and each position's acceptance rate."""
    from prometheus_client.parser import text_string_to_metric_families

    out = tmp_path / "v"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, "--speculative-config",
                 '{"method": "ngram", "num_speculative_tokens": 3}'] + BENCH +
                ["--save-result", "--result-filename", "spec.json"]) == 0
    r = json.loads((out / "spec.json").read_text())
    i = VLLM_KEYS.index("rtfx") + 1
    spec = ["spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts",
            "spec_decode_draft_tokens", "spec_decode_accepted_tokens", "spec_decode_per_position_acceptance_rates"]
    j = VLLM_KEYS.index("total_token_throughput") + 1  # 0.33 (the default) keeps these two without --save-detailed
    keys = VLLM_KEYS[:j] + ["latencies", "queue_times"] + VLLM_KEYS[j:i] + spec + VLLM_KEYS[i:]
    assert list(r) == keys
    drafts, rates = r["spec_decode_num_drafts"], r["spec_decode_per_position_acceptance_rates"]
    assert r["spec_decode_draft_tokens"] == 3 * drafts and len(rates) == 3
    assert rates == sorted(rates, reverse=True)  # a draft counts only when every one before it was accepted
    assert round(sum(rates) * drafts) == r["spec_decode_accepted_tokens"]
    assert math.isclose(r["spec_decode_acceptance_length"], 1 + r["spec_decode_accepted_tokens"] / drafts)
    assert math.isclose(r["spec_decode_acceptance_rate"], 100 * r["spec_decode_accepted_tokens"] / (3 * drafts))
    prom = {s.name + str(sorted(s.labels.items())): s.value for f in
            text_string_to_metric_families((out / "metrics.prom").read_text()) for s in f.samples}
    labels = [("engine", "0"), ("model_name", MODEL)]
    assert prom[f"vllm:spec_decode_num_drafts_total{labels}"] == drafts
    assert prom[f"vllm:spec_decode_num_accepted_tokens_total{labels}"] == r["spec_decode_accepted_tokens"]
    assert [prom[f"vllm:spec_decode_num_accepted_tokens_per_pos_total{sorted(labels + [('position', str(p))])}"]
            for p in range(3)] == [round(x * drafts) for x in rates]


def test_vllm_033_reports_the_clients_queue_and_the_servers_refusals(tmp_path, capsys):
    """0.33's result file: each request's latency and its wait for a --max-concurrency slot (sent less due: the
    workload's own send times), their statistics when asked for; its /metrics counts the 503s of the queue
    limits by reason."""
    from prometheus_client.parser import text_string_to_metric_families

    def run(name: str, serve: list[str], bench: list[str]):
        out = tmp_path / name
        assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, *serve, "--", "bench", "serve",
                     "--random-input-len", "512", "--random-output-len", "64", "--num-prompts", "80",
                     "--request-rate", "40", "--save-result", "--save-detailed", "--result-filename", "r.json",
                     *bench]) == 0
        req = pd.read_parquet(out / "requests.parquet").sort_values("request_id")
        return out, json.loads((out / "r.json").read_text()), req, (req.status == "finished").to_numpy()

    _, r, req, ok = run("queue", [], ["--max-concurrency", "6", "--percentile-metrics",
                                      "e2el,client_queue_time,e2el_including_client_queue"])
    np.testing.assert_allclose(r["latencies"], req.e2el)
    queued = np.array(r["queue_times"])
    assert (queued >= 0).all() and (queued > 0).any()  # six in flight hold some back
    due = np.array(r["start_times"]) - queued  # the planned send times: Poisson gaps over 80 / 40 s
    assert due[-1] == pytest.approx(80 / 40) and (np.diff(due) >= 0).all()
    assert math.isclose(r["mean_client_queue_time_ms"], queued.mean() * 1000)
    assert math.isclose(r["p99_e2el_including_client_queue_ms"], np.percentile(req.e2el + queued, 99) * 1000)
    assert "mean_ttft_ms" not in r  # only what --percentile-metrics names
    out, r, req, ok = run("refused", ["--max-num-queued-reqs", "3"], [])
    assert r["failed"] == (~ok).sum() > 0 and set(np.array(r["errors"])[~ok]) == {"Service Unavailable"}
    assert (np.array(r["latencies"])[~ok] == 0).all() and not np.array(r["queue_times"]).any()
    assert "mean_client_queue_time_ms" not in r  # no limit, no client queue
    prom = {(s.name, s.labels.get("reason")): s.value for f in
            text_string_to_metric_families((out / "metrics.prom").read_text()) for s in f.samples
            if s.name.startswith("vllm:admission_rejections")}
    assert prom == {("vllm:admission_rejections_total", "max_num_queued_reqs"): r["failed"],
                    ("vllm:admission_rejections_total", "max_num_queued_tokens"): 0}


@pytest.mark.parametrize("serve, completed", [
    (["--max-num-queued-reqs", "10"], 10),
    (["-dp", "2", "--max-num-queued-reqs", "10"], 10),  # was 10 per rank: 20
    (["-dp", "2", "--max-num-queued-tokens", "2k"], 4),  # 0.33 reads it as a human-readable int, as vLLM does
    (["-dp", "2", "--max-num-queued-reqs", "0"], 0),  # vLLM 0.33 takes 0: every request 503
])
def test_queue_limits_are_the_api_servers_over_every_dp_rank(tmp_path, serve, completed):
    """vLLM 0.33 checks --max-num-queued-reqs/-tokens in its API server, counting the requests of every DP rank it
    routes to (config/scheduler.py). 100 prompts of 512 tokens at once: 10 requests, or 4 prompts below 2,048
    queued tokens (each counted until its first token), whatever the ranks."""
    out = tmp_path / "out"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, *serve, "--", "bench", "serve",
                 "--random-input-len", "512", "--random-output-len", "16", "--random-range-ratio", "0",
                 "--num-prompts", "100", "--save-result", "--result-filename", "r.json"]) == 0
    assert json.loads((out / "r.json").read_text())["completed"] == completed


@pytest.mark.parametrize("item, flag", [
    ("engine.max_num_seqs=3", "(vllm serve --max-num-seqs)"),
    ("engine.gpu_memory_utilization=0.5", "(vllm serve --gpu-memory-utilization, left at vLLM's default)"),
    ("workload.arrival.rate=3", "(vllm bench serve --request-rate, --burstiness and --ramp-up-*)"),
    ("workload.num_requests=9", "(vllm bench serve --num-prompts)"),
    ("engine=null", "(vllm serve "),
    ("hardware.gpu=a100-sxm", "(servesim vllm --gpu)"),
    ("seed=4", "(vllm bench serve --seed)"),
])
def test_a_set_of_what_a_vllm_flag_decides_is_refused(tmp_path, capsys, item, flag):
    """--set engine.max_num_seqs=3 beside --max-num-seqs 8 ran 3 while the result file and vllm_command.json
    said 8: the flag is named instead, before anything runs."""
    out = tmp_path / "v"
    assert main(["vllm", "--gpu", "h200-sxm", "--out", str(out), "--set", item, "serve", MODEL, "--max-num-seqs", "8"]
                + BENCH) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"servesim: error: --set {item.split('=')[0]}: ") and flag in err[0]
    assert not out.exists()


def test_a_set_no_flag_decides_runs_and_is_recorded(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["vllm", "--out", str(out), "--quiet", "--set", "policies.preemption_mode=swap", "--set",
                 "engine.swap_space=1", "serve", MODEL] + BENCH) == 0
    record = json.loads((out / "vllm_command.json").read_text())
    assert record["set"] == ["policies.preemption_mode=swap", "engine.swap_space=1"]
    assert yaml.safe_load((out / "config.yaml").read_text())["policies"]["preemption_mode"] == "swap"


@pytest.mark.parametrize("flags, needle", [
    (["--result-filename", "../x.json"], "--result-filename: '../x.json' is not a file name"),
    (["--result-filename", "/tmp/abs.json"], "--result-filename: '/tmp/abs.json' is not a file name"),
    (["--label", "a/b"], "--label: 'a/b' is not a file name"),
    (["--result-filename", "summary.json"], "--result-filename: summary.json is one of a servesim run's own files"),
    (["--result-filename", "metrics.prom", "--append-result"], "--result-filename: metrics.prom is one of a servesim"),
    # r152: the folder's manifest was written over (its runs then deleted junk names), and another run's folder's
    (["--result-filename", ".servesim-files"], "--result-filename: .servesim-files is one of a servesim run's own"),
    (["--result-dir", "RUN", "--result-filename", "summary.json"], "summary.json is one of a servesim run's own files"),
    (["--result-dir", "FILE", "--result-filename", "r.json"], "--result-dir: FILE is not a directory"),
])
def test_a_result_path_that_would_land_outside_or_over_the_run_is_refused_before_it(tmp_path, capsys, flags, needle):
    """--result-filename ../x.json wrote beside --out, summary.json replaced the run's summary, and a bad
    --result-dir failed after the whole run without naming the flag."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    run = tmp_path / "run"
    if "RUN" in flags:  # another servesim run's folder
        run.mkdir()
        (run / ".servesim-files").write_text("summary.json\n")
    flags = [str(blocker) if f == "FILE" else str(run) if f == "RUN" else f for f in flags]
    out = tmp_path / "v"
    assert main(["vllm", "--out", str(out), "serve", MODEL] + BENCH + ["--save-result", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle.replace("FILE", str(blocker)) in err[0], err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"] + ["run"] * run.exists()


@pytest.mark.parametrize("version, model, method", [
    ("0.33.0", "my_mod.MyProposer", "custom_class"),  # a dotted import path: a proposer class (V1 runner, no async)
    ("0.33.0", "org/draft-1b", "draft_model"),  # an HF id: a draft model
    ("0.19.0", "my_mod.MyProposer", "draft_model"),  # 0.19 has no custom proposer classes
])
def test_a_speculative_model_without_a_method_is_read_as_vllms_post_init_infers_it(version, model, method):
    """Round 94: 0.33 infers custom_class from a dotted path (SpeculativeConfig._is_custom_proposer_path); servesim
    read it as a draft model and ran async scheduling, which vLLM turns off (and refuses given)."""
    def line(**extra):
        return read([MODEL, "--speculative-config", json.dumps({"model": model, "num_speculative_tokens": 3, **extra})],
                    [], version).settings

    assert line() == line(method=method)
    if method == "custom_class":
        assert line()["engine.async_scheduling"] is False


@pytest.mark.parametrize("ratio, low", [
    ('{"input": "0.5", "output": 0.5}', 512),  # vLLM reads each ratio with float()
    ('{"input": false, "output": 0}', 1024),  # float(False) is 0.0
    ('"0.25"', 768),  # a JSON text is float()ed too
])
def test_range_ratios_are_read_with_pythons_float_as_vllm_reads_them(ratio, low):
    """Round 94: 0.33's --random-range-ratio '{"input": "0.3", ...}' was refused; vLLM runs it."""
    settings = read([MODEL], ["--random-range-ratio", ratio]).settings
    prompt = settings["workload.prompt_tokens"]
    assert prompt.get("low", prompt.get("value")) == low


def test_an_empty_percentile_metrics_takes_vllms_default():
    """vLLM: `args.percentile_metrics or` the default (ttft,tpot,itl); servesim had refused ''."""
    assert read([MODEL], ["--percentile-metrics", ""]).bench.percentile_metrics == ["ttft", "tpot", "itl"]


@pytest.mark.parametrize("flags, name", [
    (["--result-filename", ""], "openai-infqps-Llama-3.1-8B-Instruct-"),  # vLLM: `if args.result_filename`
    (["--label", ""], "openai-infqps-Llama-3.1-8B-Instruct-"),  # `label or args.backend`
    (["--label", ".."], "..-infqps-Llama-3.1-8B-Instruct-"),  # a label heads the name: still a file name
])
def test_an_empty_result_name_or_label_takes_vllms_default_name(tmp_path, flags, name):
    """Round 94: --result-filename "" and --label "" were refused as not file names; vLLM takes them as unset."""
    out = tmp_path / "v"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, "--", "bench", "serve", "--num-prompts", "3",
                 "--save-result", *flags]) == 0
    [result] = [p.name for p in out.iterdir() if p.name.startswith(name)]
    assert json.loads((out / result).read_text())["label"] == (flags[1] if flags[0] == "--label" else None)


@pytest.mark.parametrize("version, config, needle", [
    ("0.33.0", {"method": "bogus", "num_speculative_tokens": 3}, "--speculative-config.method: 'bogus' is not a "
                                                                 "method of vLLM 0.33.0: ngram, "),
    ("0.33.0", {"method": "medusa", "num_speculative_tokens": 3}, "vLLM 0.19.0's takes it: --vllm-version 0.19.0"),
    ("0.19.0", {"method": "dflash", "num_speculative_tokens": 3}, "vLLM 0.33.0's takes it: --vllm-version 0.33.0"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 3, "lookahead": 2},
     "--speculative-config.lookahead: not a key of vLLM 0.33.0's SpeculativeConfig"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 3, "synthetic_acceptance_length": 2},
     "only valid with rejection_sample_method 'synthetic'"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",
                "synthetic_acceptance_rates": [0.5]}, "synthetic_acceptance_rates: must be 2 numbers in [0, 1]"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",
                "synthetic_acceptance_length": 3.5}, "synthetic_acceptance_length: must be in [1, 3]"),
    # round 102: the fields' types and bounds, and __post_init__'s checks of what servesim does not model
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 3, "rejection_sample_method": "bogus"},
     "rejection_sample_method: one of standard, synthetic, block, fly, got 'bogus'"),
    ("0.19.0", {"method": "ngram", "num_speculative_tokens": 3, "rejection_sample_method": "standard"},
     "rejection_sample_method: one of strict, probabilistic, synthetic"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 0},
     "draft_tensor_parallel_size: must be >= 1 (vLLM 0.33.0's SpeculativeConfig), got 0"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 3, "disable_padded_drafter_batch": "maybe"},
     "disable_padded_drafter_batch: bool, as vLLM's SpeculativeConfig types it"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 1, "rejection_sample_method": "fly"},
     "rejection_sample_method: fly needs a drafting method, num_speculative_tokens of at least 2"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 3, "rejection_sample_method": "fly",
                "fly_window_size": 3}, "fly_window_size below it"),
    ("0.19.0", {"method": "suffix", "suffix_decoding_min_token_prob": 2}, "suffix_decoding_min_token_prob: 2.0 must "
                                                                          "be in [0, 1]"),
    ("0.33.0", {"method": "suffix", "suffix_decoding_max_cached_requests": -1}, "must be >= 0"),
    ("0.33.0", {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3,
                "draft_tensor_parallel_size": 2}, "draft_tensor_parallel_size: 2 cannot be other than 1 or the "
                                                  "target's tensor_parallel_size (1)"),
    ("0.19.0", {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3,
                "max_model_len": 200000}, "max_model_len: 200000 cannot be larger than the target's max_model_len "
                                          "(131072)"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 3, "draft_lm_head_quantization": "fp8"},
     "draft_lm_head_quantization: not supported for method 'ngram'"),
    ("0.33.0", {"method": "eagle3", "model": "x/y", "num_speculative_tokens": 3, "use_heterogeneous_vocab": True},
     "use_heterogeneous_vocab: only with method draft_model and greedy draft sampling"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 3, "index_share_for_mtp_iteration": True},
     "index_share_for_mtp_iteration: only with method mtp"),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 3, "enable_adaptive_verification": True,
                "use_local_argmax_reduction": True}, "enable_adaptive_verification: not with use_local_argmax"),
    ("0.19.0", {"method": "ngram", "num_speculative_tokens": 3, "moe_backend": "foo"}, "moe_backend: one of auto, "),
    ("0.33.0", {"method": "ngram", "num_speculative_tokens": 3, "attention_backend": "nonsense"},
     "attention_backend: 'nonsense' is not an attention backend"),
    ("0.33.0", {"method": "draft_model", "model": "x/y", "num_speculative_tokens": 3, "use_heterogeneous_vocab": True,
                "use_local_argmax_reduction": True}, "use_heterogeneous_vocab: not with use_local_argmax_reduction"),
])
def test_a_speculative_config_vllm_refuses_is_refused(version, config, needle):
    """A bogus method ran as speculative decoding and every key but method and k was dropped unsaid: vLLM's
    SpeculativeConfig takes the methods its release lists and forbids keys it lacks."""
    with pytest.raises(ConfigError, match=re.escape(needle)):
        read([MODEL, "--speculative-config", json.dumps(config)], [], version)


def test_0_19s_eagle3_reads_the_hidden_states_of_the_families_it_lists():
    """Round 102: 0.19's SpeculativeConfig takes EAGLE-3 on the model types it lists only (Mixtral is none)."""
    spec = json.dumps({"method": "eagle3", "model": "someone/eagle3-head", "num_speculative_tokens": 3})
    with pytest.raises(ConfigError, match="eagle3 reads hidden states vLLM 0.19 takes from llama, .* not mixtral"):
        read(["mistralai/Mixtral-8x7B-Instruct-v0.1", "-tp", "2", "--speculative-config", spec], [], "0.19.0")
    # r115: 0.33 drops the list but loads the drafter only on a class with SupportsEagle3, which Mixtral's lacks
    with pytest.raises(ConfigError, match="mixtral model has no EAGLE-3 interface"):
        read(["mistralai/Mixtral-8x7B-Instruct-v0.1", "-tp", "2", "--speculative-config", spec], [])
    assert read([MODEL, "--speculative-config", spec], [], "0.19.0").settings


def test_speculative_numbers_are_read_as_vllms_lax_fields_read_them():
    """Round 102: "1.5" as synthetic_acceptance_length and "2" as prompt_lookup_min were refused; SpeculativeConfig's
    pydantic fields read them as numbers."""
    cmd = read([MODEL, "--speculative-config", json.dumps({
        "method": "ngram", "num_speculative_tokens": "2", "prompt_lookup_min": "2", "prompt_lookup_max": 4.0,
        "rejection_sample_method": "synthetic", "synthetic_acceptance_length": "1.5"})], [])
    assert cmd.settings["speculative.num_speculative_tokens"] == 2
    assert cmd.settings["speculative.acceptance_distribution"] == \
        read([MODEL, "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 2,
                                                           "rejection_sample_method": "synthetic",
                                                           "synthetic_acceptance_length": 1.5})], []) \
        .settings["speculative.acceptance_distribution"]


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_extract_hidden_states_is_checked_as_vllm_does_and_simulated_without_speculation(version):
    """Round 90: it ran as 3-token speculation accepted at 70%; vLLM asserts one token, needs the layers to
    extract, and its proposer "drafts" the token it sampled: no speed-up (v1/spec_decode/extract_hidden_states.py)."""
    def line(**config):
        return read([MODEL, "--speculative-config", json.dumps({"method": "extract_hidden_states", **config})], [],
                    version)

    layers = {"draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}}}
    with pytest.raises(ConfigError, match="num_speculative_tokens: 3: extract_hidden_states takes 1"):
        line(num_speculative_tokens=3, **layers)
    with pytest.raises(ConfigError, match="draft_model_config: extract_hidden_states needs"):
        line(num_speculative_tokens=1)
    with pytest.raises(ConfigError, match="disable_padded_drafter_batch: not supported"):
        line(num_speculative_tokens=1, disable_padded_drafter_batch=True, **layers)
    cmd = line(num_speculative_tokens=1, **layers)
    assert not any(k.startswith("speculative.") for k in cmd.settings)
    assert "drafts nothing" in cmd.not_modelled["vllm serve --speculative-config.method"]


def test_speculative_config_keys_not_modelled_are_recorded_and_synthetic_acceptance_is_drawn():
    cmd = read([MODEL, "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 3,
                                                           "prompt_lookup_max": 5})], [])
    assert cmd.not_modelled == {"vllm serve --speculative-config.prompt_lookup_max": 5}
    # 0.33's unconditional rates per position: a run of exactly j accepted has rate[j-1] - rate[j]
    cmd = read([MODEL, "--speculative-config", json.dumps({
        "method": "ngram", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": [0.8, 0.5, 0.2]})], [])
    assert cmd.settings["speculative.acceptance_distribution"] == pytest.approx([0.2, 0.3, 0.3, 0.2])
    assert not cmd.not_modelled
    # a mean length of 2.5 with 3 drafts: vLLM's least-variance schedule [1, 0.5, 0]
    cmd = read([MODEL, "--speculative-config", json.dumps({
        "method": "ngram", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.5})], [])
    dist = cmd.settings["speculative.acceptance_distribution"]
    assert dist == pytest.approx([0, 0.5, 0.5, 0]) and 1 + sum(j * p for j, p in enumerate(dist)) == 2.5


@pytest.mark.parametrize("serve, bench, needle", [
    ([], ["--model", "Qwen/Qwen2.5-7B"], "--model: 'Qwen/Qwen2.5-7B' is not a model the server serves"),
    ([], ["--model", MODEL, "--served-model-name", "chat"], "--served-model-name: 'chat' is not a model the server "
                                                             "serves"),
    (["--served-model-name", "chat"], ["--model", MODEL], f"--model: '{MODEL}' is not a model the server serves "
                                                           f"('chat')"),
])
def test_a_client_asking_for_a_model_the_server_does_not_serve_is_refused(serve, bench, needle):
    """vLLM answers 404 to a request naming a model it does not serve; it was simulated as served."""
    with pytest.raises(ConfigError, match=re.escape(needle)):
        read([MODEL, *serve], bench)
    read([MODEL, "--served-model-name", "chat", "llama"], ["--model", MODEL, "--served-model-name", "llama"])
    # round 94: without --model the client asks the server for its first model and leaves --served-model-name unread
    assert read([MODEL], ["--served-model-name", "chat"]).bench.model_id == MODEL


def test_what_vllms_client_takes_is_taken():
    """vLLM allows a ramp whose start equals its end, an explicit --request-rate inf beside a ramp, and any
    burstiness > 0 (1e10: gaps nearly constant); these were refused or failed on servesim's own bounds."""
    for bench in (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "2", "--ramp-up-end-rps", "2"],
                  ["--request-rate", "inf", "--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "1",
                   "--ramp-up-end-rps", "4"],
                  ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "4",
                   "--burstiness", "1e10"]):
        arrival = read([MODEL], bench).settings["workload.arrival"]
        assert arrival["ramp_up_start_rps"] <= arrival["ramp_up_end_rps"]
    assert read([MODEL], ["--request-rate", "4", "--burstiness", "1e10"]).settings["workload.arrival"] == \
        {"process": "constant", "rate": 4.0, "fit_span": True, "vllm_client_draws": False}  # constant: no draws
    # round 104: an empty --extra-body is none (vLLM's `extra_body or {}`)
    assert read([MODEL], ["--extra-body", "[]"]).settings
    # round 99: at rate inf vLLM draws no gaps, so any burstiness > 0 is a burst
    assert read([MODEL], ["--burstiness", "1e-5"]).settings["workload.arrival"] == {"process": "burst"}


def test_per_request_metrics_put_the_servers_timings_in_the_detailed_file(tmp_path, capsys):
    """0.33's `vllm serve --enable-per-request-metrics`: each streamed response ends with the server's queue time
    and TTFT, which vllm bench serve --save-detailed keeps as server_queue_times and server_ttfts (None for a
    refused request), right after rtfx; without the flag, or without --save-detailed, vLLM writes neither."""
    def run(name, serve, detailed=("--save-detailed",)):
        out = tmp_path / name
        assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, "--max-num-queued-reqs", "15", *serve,
                     "--", "bench", "serve", "--num-prompts", "20", "--random-input-len", "256",
                     "--random-output-len", "8", "--save-result", "--result-filename", "r.json", *detailed]) == 0
        return json.loads((out / "r.json").read_text()), pd.read_parquet(out / "requests.parquet")

    r, req = run("on", ["--enable-per-request-metrics"])
    keys = list(r)
    assert keys[keys.index("rtfx") + 1:keys.index("rtfx") + 3] == ["server_queue_times", "server_ttfts"]
    req = req.sort_values("request_id")
    ok = (req.status == "finished").to_numpy()
    assert ok.sum() == 15 and [q is None for q in r["server_queue_times"]] == list(~ok)
    np.testing.assert_allclose(np.array(r["server_queue_times"])[ok].astype(float), req.queue_time[ok])
    np.testing.assert_allclose(np.array(r["server_ttfts"])[ok].astype(float),
                               (req.first_token_time - req.first_scheduled_time)[ok])
    assert "server_ttfts" not in run("off", [])[0]
    assert "server_ttfts" not in run("brief", ["--enable-per-request-metrics"], detailed=())[0]
    assert main(["vllm", "--out", str(tmp_path / "x"), "serve", MODEL, "--enable-per-request-metrics",
                 "--disable-log-stats"]) == 2
    assert "--enable-per-request-metrics: requires engine statistics logging" in capsys.readouterr().err


@pytest.mark.parametrize("version", ["0.19.0", "0.33.0"])
def test_kv_cache_memory_bytes_is_modelled_and_human_readable(version):
    """Both releases take --kv-cache-memory-bytes as a human-readable int (4G = 4 GiB, 4g = 4e9) and size the KV
    cache with it; it was typed a plain int (4G refused) and recorded as not modelled (round 63)."""
    for given, got in (("4G", 4 * 2**30), ("4g", 4 * 10**9), ("1000", 1000)):
        cmd = read([MODEL, "--kv-cache-memory-bytes", given], [], version=version)
        assert cmd.settings["engine.kv_cache_memory_bytes"] == got and not cmd.not_modelled


def test_prefix_repetition_without_ignore_eos_is_said(tmp_path, capsys):
    """vLLM's client sets ignore_eos for the random datasets only: prefix_repetition's outputs may end early at
    the model's EOS, where servesim generates every token (round 67)."""
    bench = ["--dataset-name", "prefix_repetition", "--num-prompts", "10"]
    assert main(["vllm", "--out", str(tmp_path / "a"), "serve", MODEL, "--", "bench", "serve", *bench]) == 0
    assert "prefix_repetition without --ignore-eos" in capsys.readouterr().err
    assert main(["vllm", "--out", str(tmp_path / "b"), "serve", MODEL, "--", "bench", "serve", *bench,
                 "--ignore-eos"]) == 0
    assert "--ignore-eos" not in capsys.readouterr().err


def test_prefix_repetition_makes_vllms_requests(tmp_path, capsys):
    """vLLM's prefix_repetition dataset makes num_prompts // num_prefixes requests of each prefix (25 prompts, 10
    prefixes: 20 requests, two each, shuffled) and refuses fewer prompts than prefixes; servesim sent all 25, each
    prefix drawn at random (round 64)."""
    from collections import Counter

    from servesim.workloads.synthetic import SyntheticWorkload

    cmd = read([MODEL], ["--dataset-name", "prefix_repetition", "--num-prompts", "25",
                         "--prefix-repetition-num-prefixes", "10", "--prefix-repetition-prefix-len", "64"])
    w = cmd.settings
    assert w["workload.num_requests"] == 20 and cmd.bench.num_prompts == 25
    workload = SyntheticWorkload(type="synthetic", num_requests=20, arrival=w["workload.arrival"],
                                 prompt_tokens=w["workload.prompt_tokens"], output_tokens=w["workload.output_tokens"],
                                 shared_prefix=w["workload.shared_prefix"])
    specs = workload.generate(0)
    assert sorted(Counter(s.prefix_ids[:4] for s in specs).values()) == [2] * 10  # 64 tokens: 4 content blocks
    with pytest.raises(ConfigError, match="--num-prompts: 5 is below --prefix-repetition-num-prefixes"):
        read([MODEL], ["--dataset-name", "prefix_repetition", "--num-prompts", "5"])
    from servesim.simulator.config import load

    with pytest.raises(ConfigError, match="shared_prefix.balanced: deals num_requests out evenly"):
        load(None, ["workload.num_requests=21", "workload.shared_prefix={tokens: 64, count: 10, balanced: true}"])


def test_disable_shuffle_sends_prefix_repetitions_requests_prefix_by_prefix():
    """Round 99: --disable-shuffle was recorded as not modelled; vLLM's prefix_repetition dataset then keeps its
    requests as it made them, each prefix's in a row (datasets.py PrefixRepetitionRandomDataset, both releases),
    so every request but each prefix's first finds its prefix cached."""
    from servesim.workloads.synthetic import SyntheticWorkload

    def prefixes(*flags):
        cmd = read([MODEL], ["--dataset-name", "prefix_repetition", "--num-prompts", "20", *flags,
                             "--prefix-repetition-num-prefixes", "4", "--prefix-repetition-prefix-len", "64"])
        w = cmd.settings
        assert "disable_shuffle" not in cmd.not_modelled
        workload = SyntheticWorkload(type="synthetic", num_requests=20, arrival=w["workload.arrival"],
                                     prompt_tokens=w["workload.prompt_tokens"],
                                     output_tokens=w["workload.output_tokens"], shared_prefix=w["workload.shared_prefix"])
        return [s.prefix_ids[:4] for s in workload.generate(0)]

    def runs(order):  # where the next request's prefix is the same
        return [order[i] == order[i + 1] for i in range(len(order) - 1)]

    grouped, shuffled = prefixes("--disable-shuffle"), prefixes()
    assert runs(grouped) == [i % 5 != 4 for i in range(19)]
    assert len(set(grouped)) == len(set(shuffled)) == 4 and runs(shuffled) != runs(grouped)
    with pytest.raises(ConfigError, match="workload.shared_prefix.shuffle: false orders the requests of a balanced"):
        load(None, ["workload.shared_prefix={tokens: 64, count: 10, shuffle: false}"])


@pytest.mark.parametrize("burstiness", ["1e7", "inf"])
def test_constant_gaps_send_the_first_after_one_gap(burstiness):
    """vLLM's client makes constant gaps (burstiness inf, or so large the gamma is one) as it makes any: the first
    request after a gap of 1/rate, the last at N/rate. Sent at t=0, the run was a gap short (round 63)."""
    from servesim.workloads.arrivals import Arrival

    arrival = read([MODEL], ["--request-rate", "4", "--burstiness", burstiness]).settings["workload.arrival"]
    times = Arrival(**arrival).times(8, None, np.random.default_rng(0))
    np.testing.assert_allclose(times, np.arange(1, 9) / 4)


def test_ramp_events_are_vllms_every_whole_rate_stamped_when_due(tmp_path, capsys):
    """vLLM logs the start rate, then each whole rate the ramp passes as a request is due (every one between,
    at that request's time), not only those some request's rate lands on."""
    out = tmp_path / "v"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, "--", "bench", "serve", "--random-input-len",
                 "100", "--random-output-len", "100", "--num-prompts", "5", "--ramp-up-strategy", "linear",
                 "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "9", "--max-concurrency", "1", "--save-result",
                 "--save-detailed",
                 "--result-filename", "r.json"]) == 0
    r = json.loads((out / "r.json").read_text())
    events = r["rps_change_events"]
    assert [e["rps"] for e in events] == list(range(1, 10))
    stamps = [e["timestamp"] for e in events]
    assert stamps[1] == stamps[2] and stamps[3] == stamps[4]  # 1 -> 3 at request 1: 2 and 3 together
    from datetime import datetime
    due = np.array(r["start_times"]) - np.array(r["queue_times"])  # before the one slot held them
    last = (datetime.fromisoformat(stamps[-1]) - datetime.fromisoformat(stamps[0])).total_seconds()
    # the start rate at vLLM's clock start, before the first request's gap (stamped from the first send before)
    assert due[0] > 0 and last == pytest.approx(due[-1], abs=1e-5) and max(r["queue_times"]) > 0
    # r129: vLLM stamps them while sending and dates the file when the run ends: every event before the date, the
    # first `duration` before it
    end = datetime.strptime(r["date"], "%Y%m%d-%H%M%S")
    assert datetime.fromisoformat(stamps[-1]) <= end
    assert (end - datetime.fromisoformat(stamps[0])).total_seconds() == pytest.approx(r["duration"], abs=1e-5)


@pytest.mark.parametrize("value, got", [("32k", 32000), ("1.5k", 1500), ("2K", 2048), ("007", 7), ("4096", 4096)])
def test_max_model_len_reads_as_vllms_human_readable_int(value, got):
    assert read([MODEL, "--max-model-len", value], []).settings["engine.max_model_len"] == got


@pytest.mark.parametrize("value, says", [
    ("1.5K", "Decimals are not allowed with binary suffixes like K. Did you mean to use 1.5k instead?"),
    ("abc", "invalid human_readable_int_or_auto value: 'abc'"),
])
def test_a_length_vllm_refuses_is_refused_as_vllm_says(value, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, "--max-model-len", value], [])


@pytest.mark.parametrize("value", ["auto", "-1", "AUTO"])
def test_max_model_len_auto_fits_the_kv_pool_as_vllm_does(value, tmp_path, capsys):
    """vLLM's -1/auto: the longest length whose one request's KV fits the pool (an L4 holds 43,248 tokens of
    Llama-3.1-8B, not its 131,072); it ran the model's full length and refused to start."""
    from servesim.simulator.config import load

    assert read([MODEL, "--max-model-len", value], []).settings["engine.max_model_len"] == "auto"
    assert main(["vllm", "--gpu", "l4", "--out", str(tmp_path / "v"), "--quiet", "serve", MODEL, "--max-model-len",
                 value] + BENCH) == 0
    config = yaml.safe_load((tmp_path / "v" / "config.yaml").read_text())
    fitted, blocks = config["engine"]["max_model_len"], config["resolved"]["num_gpu_blocks"]
    assert fitted == (blocks - 1) * 16 < 131072  # every usable 16-token block, one request
    with pytest.raises(ConfigError, match="cannot hold one request of max_model_len=131,072"):
        load(None, ["hardware.gpu=l4", "model=llama-3.1-8b"])  # the model's length, not auto: refused
    assert main(["vllm", "--gpu", "l4", "--out", str(tmp_path / "w"), "serve", MODEL] + BENCH) == 2
    assert "; lower --max-model-len or give the cache more memory" in capsys.readouterr().err  # the flag to change
    # the written config keeps `auto`, derived again: on an H100 the whole context fits
    again = load(str(tmp_path / "v" / "config.yaml"), ["hardware.gpu=h100-sxm"])
    assert again.max_model_len == 131072


def test_every_setting_a_vllm_flag_decides_is_refused_as_a_set_even_when_the_flag_is_left_out(tmp_path, capsys):
    """--set workload.max_concurrency=1 ran capped while the result file said max_concurrency null; the same held
    for every flag left out whose parser has no default (round 57). servesim's own (sjf) stays settable."""
    for item, flag in (("workload.max_concurrency=1", "(vllm bench serve --max-concurrency)"),
                       ("engine.max_num_seqs=3", "(vllm serve --max-num-seqs, left at vLLM's default)"),
                       ("engine.max_model_len=4096", "(vllm serve --max-model-len, left at vLLM's default)")):
        assert main(["vllm", "--out", str(tmp_path / "v"), "--set", item, "serve", MODEL] + BENCH) == 2
        assert flag in capsys.readouterr().err
    assert main(["vllm", "--vllm-version", "0.19.0", "--out", str(tmp_path / "v"), "--set",
                 "engine.max_num_queued_reqs=3", "serve", MODEL] + BENCH) == 2
    assert "vLLM 0.19.0, which has no --max-num-queued-reqs" in capsys.readouterr().err
    assert main(["vllm", "--out", str(tmp_path / "q"), "--quiet", "--set", "policies.queue=sjf", "serve", MODEL]
                + BENCH) == 0
    # a measuring window: the result file's totals fell short of its arrays (completed 9 of 20 listed, round 67)
    # r141: a clock cut wrote 9 of 20 requests, the last with a made-up error
    for item in ("simulation.warmup_requests=5", "simulation={cooldown_s: 1}", "simulation.max_sim_time_s=1"):
        assert main(["vllm", "--out", str(tmp_path / "w"), "--set", item, "serve", MODEL] + BENCH) == 2
        assert "vLLM's client measures every request it sends" in capsys.readouterr().err


def test_the_served_name_labels_the_metrics_as_vllms_server_does(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["vllm", "--out", str(out), "serve", MODEL, "--served-model-name", "chat", "--", "bench", "serve",
                 "--num-prompts", "10", "--random-input-len", "100", "--random-output-len", "10",
                 "--ramp-up-start-rps", "1", "--save-result", "--result-filename", "r.json"]) == 0
    err = capsys.readouterr().err
    assert 'model_name="chat"' in (out / "metrics.prom").read_text() and MODEL not in (out / "metrics.prom").read_text()
    assert json.loads((out / "r.json").read_text())["model_id"] == MODEL  # vLLM's client: the model's root
    # taken, not "not modelled"; a ramp rate without a ramp, which vLLM ignores, is said
    assert "--served-model-name" not in err and "--ramp-up-start-rps" in err


@pytest.mark.parametrize("argv, says", [
    (["--set", "policies.queue=priority", "serve", MODEL], "--set policies.queue: the pasted command decides it "
                                                           "(vllm serve --scheduling-policy, left at vLLM's default"),
    (["--set", "policies={queue: priority}", "serve", MODEL], "--set policies: the pasted command decides it"),
    # round 86: taken as the user's what-if, where the internal balancer reaches every rank
    (["--set", "cluster.dp_ranks_reached=3", "serve", "Qwen/Qwen3-30B-A3B", "-dp", "4", "--enable-expert-parallel"],
     "--set cluster.dp_ranks_reached: the pasted command decides it (vllm serve --data-parallel-size under vLLM's "
     "internal balancer, which reaches every rank)"),
    (["--set", "engine.usage_context=llm_class", "serve", MODEL], "--set engine.usage_context: decided by vllm serve, "
                                                                  "which runs vLLM's OpenAI server"),
    (["serve", MODEL, "--long-prefill-token-threshold", "9000", "--max-model-len", "8192"],
     "vllm serve --long-prefill-token-threshold: 9000 is above max_model_len (8192)"),
    (["serve", MODEL, "--max-num-active-seqs", "20", "--max-num-seqs", "10"],
     "vllm serve --max-num-active-seqs: 20 is above --max-num-seqs (10)"),
    (["serve", MODEL, "--max-num-active-seqs", "2000"],  # round 61: against the default max_num_seqs too
     "vllm serve --max-num-active-seqs: 2000 is above max_num_seqs, vLLM's default here (1024)"),
    (["serve", MODEL, "--max-num-active-seqs", "0"], "vllm serve --max-num-active-seqs: must be >= 1 (vLLM "
                                                     "0.33.0's SchedulerConfig)"),  # vLLM's Field(ge=1), round 67
    (["serve", MODEL, "--config", "/nonexistent/v.yaml"], "vllm serve --config: file not found"),
    (["serve", MODEL, "--config", "v.json"], "vllm serve --config: v.json: must be a .yaml or .yml file"),
    (["serve", MODEL, "--config"], "vllm serve --config: expects a file"),
])
def test_round_60_what_vllm_refuses_or_its_flags_decide_is_refused(argv, says, tmp_path, capsys):
    """Each was run silently: a --set beside the flag default that decides it (the queue, the OpenAI server's
    usage context), values vLLM's SchedulerConfig refuses, a --config file never read."""
    assert main(["vllm", "--out", str(tmp_path), *argv, *BENCH]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_max_num_active_seqs_caps_the_running_batch_as_0_33s_scheduler_does(tmp_path):
    """vLLM 0.33 admits at most --max-num-active-seqs into RUNNING (max_num_seqs still sizes its CUDA graphs): it
    was recorded as not modelled, and 20 ran at once where vLLM runs 2 (round 67)."""
    out = tmp_path / "o"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, "--max-num-active-seqs", "2", "--",
                 "bench", "serve", "--num-prompts", "20", "--random-input-len", "128", "--random-output-len", "16"]) == 0
    assert pd.read_parquet(out / "steps.parquet").num_running.max() == 2
    assert json.loads((out / "summary.json").read_text())["completed"] == 20
    record = json.loads((out / "vllm_command.json").read_text())
    assert record["settings"]["engine.max_num_active_seqs"] == 2 and "--max-num-active-seqs" not in str(
        record.get("not_modelled"))


def test_round_60_sjf_beside_vllms_queue_and_a_seed_past_32_bits(tmp_path, capsys):
    """servesim's own sjf is not a --scheduling-policy value: a --set of it is taken; vLLM's client seeds numpy
    with --seed, which refuses 2**32."""
    assert main(["vllm", "--out", str(tmp_path / "s"), "--quiet", "--set", "policies.queue=sjf", "serve", MODEL,
                 *BENCH[:-2], "--num-prompts", "5"]) == 0
    assert yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())["policies"]["queue"] == "sjf"
    with pytest.raises(ConfigError, match=r"--seed: must be from 0 to 2\*\*32 - 1"):
        read([MODEL], ["--seed", str(2**32)])


def test_a_vllm_config_file_gives_flags_the_command_line_overrides(tmp_path):
    """vllm serve --config FILE: its keys become flags after the model and before the line's own (which win), as
    vLLM's FlexibleArgumentParser places them; it was recorded as unmodelled and the file never read."""
    cfg = tmp_path / "v.yaml"
    cfg.write_text("max-num-seqs: 4\nmax_num_batched_tokens: 512\nenable-prefix-caching: false\n"
                   "speculative-config: {method: ngram, num_speculative_tokens: 2, prompt_lookup_max: 3}\n")
    cmd = read([MODEL, "--config", str(cfg), "--max-num-seqs", "8"], [])
    s = cmd.settings
    assert s["engine.max_num_seqs"] == 8 and s["engine.max_num_batched_tokens"] == 512
    # r174: a false is --no-KEY under 0.33 where that very spelling is a flag (vLLM PR 51573); 0.19 leaves every
    # false out (round 104), so caching stays on there, said
    assert s["engine.enable_prefix_caching"] is False and s["speculative.num_speculative_tokens"] == 2
    assert read([MODEL, "--config", str(cfg)], [], "0.19.0").settings.get("engine.enable_prefix_caching") is not False
    assert "vllm serve --config" not in cmd.not_modelled
    cfg.write_text("max-num-seqz: 4\n")
    with pytest.raises(ConfigError, match="unrecognized arguments: --max-num-seqz 4"):
        read([MODEL, "--config", str(cfg)], [])
    # round 61: read as vLLM's yaml.safe_load reads it (YAML 1.1: yes/off are booleans, 0777 is octal)
    cfg.write_text("enforce-eager: yes\nasync-scheduling: off\nmax-num-seqs: 0777\n")
    s = read([MODEL, "--config", str(cfg)], []).settings
    assert s["engine.enforce_eager"] is True and s["engine.async_scheduling"] is False and \
        s["engine.max_num_seqs"] == 511
    assert read([MODEL, "--config", str(cfg)], [], "0.19.0").settings.get("engine.async_scheduling") is not False
    with pytest.raises(ConfigError, match="vllm serve --config: no model: vLLM needs it right after `serve`"):
        read(["--config", str(cfg), MODEL], [])  # vLLM: "No model specified!"
    cfg.write_text(f"model: {MODEL}\n")
    assert read(["--config", str(cfg), "-tp", "2"], []).settings["engine.tensor_parallel_size"] == 2
    # round 102: the positional model wins over the file's (it had been refused as two models)
    cfg.write_text("model: Qwen/Qwen3-8B\nmax-num-seqs: 64\n")
    both = read([MODEL, "--config", str(cfg)], [])
    assert both.settings["engine.max_num_seqs"] == 64 and both.settings["model"] == MODEL
    cfg.write_text("max-num-seqs: 0x_\n")  # PyYAML's int('', 16): a ValueError, exit 3 (round 67)
    with pytest.raises(ConfigError, match="is not valid YAML: '0x_' \\(line 1\\) is no integer Python reads"):
        read([MODEL, "--config", str(cfg)], [])


def test_throughput_performance_mode_doubles_the_default_budgets(capsys):
    """vLLM's --performance-mode throughput doubles max_num_batched_tokens and max_num_seqs where not given; it
    was recorded as unmodelled and the run kept the single budgets."""
    assert read([MODEL, "--performance-mode", "throughput"], []).settings["engine.performance_mode"] == "throughput"
    from servesim.simulator.config import load

    plain = load(None, [])
    fast = load(None, ["engine.performance_mode=throughput"])
    assert (fast.max_num_batched_tokens, fast.max_num_seqs) == (2 * plain.max_num_batched_tokens,
                                                                2 * plain.max_num_seqs)
    given = load(None, ["engine.performance_mode=throughput", "engine.max_num_seqs=64"])
    assert (given.max_num_batched_tokens, given.max_num_seqs) == (2 * plain.max_num_batched_tokens, 64)


@pytest.mark.parametrize("version, gpu, tokens, graph", [
    ("0.33.0", "b200-sxm", 16384, 1024),  # >= 160 GiB: 0.33's tier; compute capability 10.x: 1024-token graphs
    ("0.19.0", "b200-sxm", 8192, 512),  # 0.19 has neither
    ("0.33.0", "gb300", 16384, 1024),
    ("0.33.0", "h200-sxm", 8192, 512),
    ("0.33.0", "rtx-pro-6000", 8192, 512),  # Blackwell, but compute capability 12.0
])
def test_each_release_fills_its_own_defaults_by_device(version, gpu, tokens, graph, capsys):
    """The budget and the CUDA-graph ceiling left out are the release's own for the GPU: 0.19 gave B200 0.33's
    16384 tokens, and 0.33 B200 512-token graphs where it captures 1024 (round 64)."""
    assert main(["vllm", "--vllm-version", version, "--gpu", gpu, "--config", "serve", MODEL]) == 0
    engine = yaml.safe_load(capsys.readouterr().out)["engine"]
    assert engine["vllm_defaults"] == version
    from servesim.simulator.config import load

    rs = load(None, [f"hardware.gpu={gpu}", f"engine.vllm_defaults={version}", f"model={MODEL}"])
    assert rs.max_num_batched_tokens == tokens
    assert rs.cost_model._graph_tokens == graph


@pytest.mark.parametrize("serve, bench, says", [
    ([], ["--backend", "vllm-pooling"], "vllm bench serve --backend: 'vllm-pooling' benchmarks a pooling model"),
    ([], ["--dataset-name", "random", "--dataset-path", "d.json"], "vllm bench serve --dataset-path: vLLM cannot "
                                                                   "use the 'random' dataset with a path"),
])
def test_round_64_client_lines_vllm_refuses_are_refused(serve, bench, says, tmp_path, capsys):
    """A pooling backend ran as a generation benchmark, a made-up dataset took a path vLLM refuses: both ran."""
    assert main(["vllm", "--out", str(tmp_path), "serve", MODEL, *serve, "--", "bench", "serve", *bench]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_max_num_scheduled_tokens_caps_each_step_as_0_33s_scheduler_does(tmp_path):
    """vLLM 0.33's scheduler issues at most --max-num-scheduled-tokens a step (its token_budget), under the
    batched-token budget; it was recorded and not modelled (steps of 8,192 tokens where vLLM issues 1,000)."""
    out = tmp_path / "o"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, "--max-num-scheduled-tokens", "1k", "--",
                 "bench", "serve", "--num-prompts", "20", "--random-input-len", "2000"]) == 0
    assert json.loads((out / "vllm_command.json").read_text())["settings"]["engine.max_num_scheduled_tokens"] == 1000
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps.scheduled_tokens.max() == 1000


def test_a_scheduled_token_cap_above_the_budget_is_said(tmp_path, capsys):
    """Above max_num_batched_tokens the cap changes nothing (a step holds at most the budget; vLLM's scheduler
    would issue steps its model runner cannot take): said, not silently capped (round 66)."""
    assert main(["vllm", "--out", str(tmp_path), "serve", MODEL, "--max-num-batched-tokens", "2048",
                 "--max-num-scheduled-tokens", "4096", "--", "bench", "serve", "--num-prompts", "5"]) == 0
    assert ("engine.max_num_scheduled_tokens has no effect: above max_num_batched_tokens (2048)"
            in capsys.readouterr().err)
    assert pd.read_parquet(tmp_path / "steps.parquet").scheduled_tokens.max() <= 2048


def test_a_step_that_cannot_hold_a_prompt_is_refused_without_chunked_prefill():
    """max_num_scheduled_tokens below max_model_len with chunked prefill off: a longer prompt could never be
    scheduled (an internal error, exit 3, round 66); refused by name, as the budget itself is."""
    from servesim.simulator.config import load

    with pytest.raises(ConfigError, match="engine.max_num_scheduled_tokens: 100 is smaller than max_model_len"):
        load(None, ["engine.max_num_scheduled_tokens=100", "engine.enable_chunked_prefill=false",
                    "engine.max_model_len=4096"])


@pytest.mark.parametrize("version, serve, says", [
    ("0.33.0", ["--enable-auto-tool-choice"], "--enable-auto-tool-choice: requires --tool-call-parser"),
    ("0.19.0", ["--enable-log-outputs"], "--enable-log-outputs: requires --enable-log-requests"),
    ("0.33.0", ["--sse-keep-alive-interval", "-1"], "--sse-keep-alive-interval: must be a non-negative integer"),
    ("0.33.0", ["--speculative-config.method", "suffix", "--speculative-config.num_speculative_tokens", "3",
                "--async-scheduling"], "--async-scheduling: vLLM 0.33.0 does not run async scheduling with suffix"),
    ("0.19.0", ["--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens", "3",
                "--async-scheduling"], "--async-scheduling: vLLM 0.19.0 does not run async scheduling with ngram"),
])
def test_round_66_serve_lines_vllm_refuses_at_start_are_refused(version, serve, says):
    """vLLM's checks before it loads (its serve-argument validation, async scheduling beside a draft method its
    runner cannot overlap): each was simulated as if vLLM had started (round 66)."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, *serve], [], version=version)


def test_a_draft_method_without_its_model_is_refused():
    """vLLM finds the drafter itself only for n-gram, suffix, MTP (and 0.33's dspark): eagle without a model was
    simulated where vLLM refuses to start (round 69)."""
    for method in ("eagle", "draft_model"):
        with pytest.raises(ConfigError, match=f"--speculative-config.model: method '{method}' needs its draft model"):
            read([MODEL, "--speculative-config", json.dumps({"method": method, "num_speculative_tokens": 3})], [])
    for version in ("0.19.0", "0.33.0"):  # and MTP's deprecated names, which vLLM reads as mtp (round 70)
        for method in ("mtp", "deepseek_mtp", "qwen3_next_mtp"):
            spec = json.dumps({"method": method, "num_speculative_tokens": 1})
            assert read(["deepseek-ai/DeepSeek-V3", "-tp", "8", "--speculative-config", spec], [],
                        version=version).settings


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_a_deepseek_v3_checkpoint_as_the_drafter_is_mtp(version):
    """Round 102: DeepSeek-V3 named as the draft model (no method, or draft_model) ran as a separate draft model;
    vLLM rewrites its model_type to deepseek_mtp, an MTP type, so the method is mtp."""
    def spec(**config):
        return read(["deepseek-ai/DeepSeek-V3", "-tp", "8", "--speculative-config", json.dumps(config)], [],
                    version=version).settings

    mtp = spec(method="mtp", num_speculative_tokens=1)
    # round 104: an MTP drafter without MTP layers refused
    with pytest.raises(ConfigError, match="has no MTP layers: vLLM refuses method 'mtp'"):
        read([MODEL, "--speculative-config", json.dumps({"method": "mtp", "model": MODEL})], [], version=version)
    for config in ({"model": "deepseek-ai/DeepSeek-V3", "num_speculative_tokens": 1},
                   {"method": "draft_model", "model": "deepseek-ai/DeepSeek-R1", "num_speculative_tokens": 1}):
        got = spec(**config)
        assert {k: v for k, v in got.items() if k.startswith("speculative.")} == \
            {k: v for k, v in mtp.items() if k.startswith("speculative.")}


@pytest.mark.parametrize("window, says", [
    ({"prompt_lookup_min": 5, "prompt_lookup_max": 2}, "prompt_lookup_min: 5 must be <= prompt_lookup_max 2"),
    ({"prompt_lookup_min": 0}, "prompt_lookup_min: must be >= 1 (vLLM 0.33.0's SpeculativeConfig), got 0"),
    ({"prompt_lookup_max": 2.5}, "prompt_lookup_max: int | None, as vLLM's SpeculativeConfig types it, got 2.5"),
    ({"prompt_lookup_min": "4", "prompt_lookup_max": 3.0}, "prompt_lookup_min: 4 must be <= prompt_lookup_max 3"),
])
def test_an_ngram_window_vllm_refuses_is_refused(window, says):
    """SpeculativeConfig's Field(ge=1) and its n-gram check: min above max was simulated (round 70)."""
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3} | window)
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, "--speculative-config", spec], [])
    assert read([MODEL, "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 3,
                                                            "prompt_lookup_max": 2})], []).settings  # min: its max


@pytest.mark.parametrize("version, method, on", [("0.19.0", "ngram", False), ("0.19.0", "draft_model", False),
                                                 ("0.19.0", "eagle3", None), ("0.33.0", "suffix", False),
                                                 ("0.33.0", "ngram", None)])
def test_async_scheduling_left_unset_follows_the_draft_method(version, method, on):
    """Left unset, vLLM turns async scheduling off beside a draft method its model runner cannot overlap (0.19:
    all but EAGLE/MTP and ngram_gpu; 0.33: suffix, which runs on the V1 runner); servesim kept it on."""
    spec = json.dumps({"method": method, "num_speculative_tokens": 3} | ({"model": "m"} if method != "ngram" and
                                                                        method != "suffix" else {}))
    assert read([MODEL, "--speculative-config", spec], [], version=version).settings.get(
        "engine.async_scheduling") is on


EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


@pytest.mark.parametrize("version, serve, on", [
    # a drafter named EAGLE-/EAGLE3 is vLLM's eagle method, not a draft model: 0.19 kept async on (round 72)
    ("0.19.0", ["--speculative-config", json.dumps({"model": EAGLE3, "num_speculative_tokens": 3})], None),
    ("0.19.0", ["--speculative-config", json.dumps({"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 3})],
     False),  # a plain draft model still turns it off
    # 0.19's Ray executor has no async scheduling; 0.33's (RayExecutorV2, a MultiprocExecutor's) does
    ("0.19.0", ["--distributed-executor-backend", "ray"], False),
    ("0.33.0", ["--distributed-executor-backend", "ray"], None),
    # padded drafter batches off: 0.19 turns async off; 0.33 only on its V1 model runner (parallel drafting)
    ("0.19.0", ["--speculative-config", json.dumps({"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3,
                                                    "disable_padded_drafter_batch": True})], False),
    ("0.33.0", ["--speculative-config", json.dumps({"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3,
                                                    "disable_padded_drafter_batch": True})], None),
    ("0.33.0", ["--speculative-config", json.dumps({"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 1,
                                                    "disable_padded_drafter_batch": True,
                                                    "parallel_drafting": True})], False),  # (one draft: no slot
    # of its own, so unpadded batches are taken: r118)
])
def test_async_scheduling_follows_vllms_other_rules(version, serve, on):
    """VllmConfig turns async scheduling off, left unset, for more than the draft method: the executor, padded
    drafter batches, the drafter's name (round 72). Asked for, each is refused as vLLM refuses it."""
    assert read([MODEL, *serve], [], version=version).settings.get("engine.async_scheduling") is on
    if on is False and "meta-llama/Llama-3.2-1B" not in serve[-1]:  # 0.19 runs a draft model asked for
        with pytest.raises(ConfigError, match="--async-scheduling: vLLM .* does not run async scheduling with"):
            read([MODEL, *serve, "--async-scheduling"], [], version=version)


SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
EAGLE_SPEC = json.dumps({"method": "eagle", "model": "some/eagle-llama4", "num_speculative_tokens": 3})


@pytest.mark.parametrize("version, model, serve, disabled", [
    ("0.33.0", SCOUT, [], None),  # vLLM's default: on, chunked attention too
    ("0.33.0", SCOUT, ["--speculative-config", EAGLE_SPEC], True),  # chunked + an EAGLE drafter: off
    ("0.19.0", SCOUT, ["--speculative-config", EAGLE_SPEC], True),
    ("0.33.0", MODEL, ["--speculative-config", EAGLE_SPEC], None),  # no chunked layers: nothing to turn off
    ("0.19.0", "openai/gpt-oss-120b", ["--kv-transfer-config", '{"kv_connector": "NixlConnector", '
                                                               '"kv_role": "kv_both"}'], True),  # 0.19's connector
    ("0.33.0", "openai/gpt-oss-120b", ["--kv-transfer-config", '{"kv_connector": "NixlConnector", '
                                                               '"kv_role": "kv_both"}'], None),  # supports HMA
    *[("0.33.0", "openai/gpt-oss-120b", ["--kv-transfer-config", json.dumps(c)], off) for c, off in (
        ({"kv_connector": "ExampleConnector", "kv_role": "kv_both"}, True),  # no SupportsHMA: off (round 78)
        ({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}, True),
        ({"kv_connector": "NixlConnector", "kv_connector_module_path": "my.nixl", "kv_role": "kv_both"}, True),
        ({"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": [
            {"kv_connector": "NixlConnector", "kv_role": "kv_both"}, {"kv_connector": "OffloadingConnector",
                                                                       "kv_role": "kv_both"}]}}, None),
        ({"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": [
            {"kv_connector": "NixlConnector", "kv_role": "kv_both"}, {"kv_connector": "LMCacheConnectorV1",
                                                                       "kv_role": "kv_both"}]}}, True))],
    ("0.19.0", "openai/gpt-oss-120b", ["--kv-events-config", '{"enable_kv_cache_events": true}'], True),
    ("0.19.0", MODEL, ["--kv-transfer-config", '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'], True),
    ("0.19.0", MODEL, ["--kv-transfer-config", json.dumps({  # 0.19's MultiConnector has no SupportsHMA
        "kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": [
            {"kv_connector": "NixlConnector", "kv_role": "kv_both"}]}})], True),
])
def test_the_hybrid_kv_cache_manager_is_off_where_vllm_turns_it_off(version, model, serve, disabled):
    """VllmConfig turns the manager off, left unset, beside an EAGLE-type drafter on chunked attention, in 0.19
    beside KV events or a KV connector (round 73), and in 0.33 beside a connector without HMA support. Enabled by
    the line there, vLLM refuses to start (VllmConfig, or KVConnectorFactory for a connector without SupportsHMA,
    whatever the model: round 82), except beside a connector that supports it (0.19's Nixl) or a class servesim
    cannot see (a module path)."""
    cmd = read([model, "-tp", "8", *serve], [], version=version)
    # r112: a model without local layers has no manager to turn off: nothing is set (it had been, and then
    # warned about as a setting without effect that the user never gave)
    assert cmd.settings.get("engine.disable_hybrid_kv_cache_manager") is (None if model == MODEL else disabled)
    line = [model, "-tp", "8", *serve, "--no-disable-hybrid-kv-cache-manager"]
    if disabled and "kv_connector_module_path" not in serve[1] and \
            not (version == "0.19.0" and serve[1].endswith('"NixlConnector", "kv_role": "kv_both"}')):
        with pytest.raises(ConfigError, match="hybrid KV cache manager enabled, with"):
            read(line, [], version=version)
    else:
        assert read(line, [], version=version).settings["engine.disable_hybrid_kv_cache_manager"] is False


MULTI = {"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": [
    {"kv_connector": "NixlConnector", "kv_role": "kv_both"}, {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}]}}


@pytest.mark.parametrize("kv, says", [
    (None, "the line has no KV connector"),
    ({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"cpu_bytes_to_use": 2**30}}, "OffloadingConnector moves no prompt's KV"),
    ({"kv_connector": "NixlConnector", "kv_role": "kv_producer"}, None),
    (MULTI, None)])
def test_disaggregation_needs_a_connector_that_moves_kv_between_instances(kv, says, tmp_path, capsys):
    """r111: --set cluster.prefill_replicas ran P/D for a line with no KV connector, or with an offloading one,
    which vLLM's instances cannot hand a prompt over; and a P/D connector was called not modelled."""
    line = ["vllm", "--out", str(tmp_path / "o"), "--config", "--set", "cluster.prefill_replicas=1", "serve", MODEL,
            *(["--kv-transfer-config", json.dumps(kv)] if kv else []), "--", "bench", "serve", "--num-prompts", "5"]
    rc = main(line)
    err = capsys.readouterr().err
    if says:
        assert rc == 2 and f"cluster.prefill_replicas: prefill/decode disaggregation needs" in err and says in err
    elif kv is MULTI:  # the P/D child taken; its offloading child's CPU tier is not simulated (r141)
        assert rc == 0 and err.count("not modelled") == 1 and "connectors.1.kv_connector" in err
    else:
        assert rc == 0 and "not modelled" not in err


def test_019_disaggregation_runs_without_the_hybrid_manager(capsys):
    """0.19 turns the hybrid manager off beside the KV connector disaggregation needs: gpt-oss's P/D instances
    hold every layer whole, a smaller pool than the one simulated with it on (round 73)."""
    sets = ["model=gpt-oss-120b", "engine.vllm_defaults=0.19.0", "cluster.prefill_replicas=1"]
    from servesim.simulator.config import load

    assert load(None, sets).kv_layout.local_groups == 0
    assert load(None, sets[:2]).kv_layout.local_groups > 0
    assert load(None, sets[::2]).kv_layout.local_groups > 0  # 0.33's NixlConnector supports it


@pytest.mark.parametrize("version", ["0.19.0", "0.33.0"])
def test_a_speculative_tensor_parallel_size_is_refused_as_vllm_refuses_it(version):
    """SpeculativeConfig._verify_args refuses tensor_parallel_size (draft_tensor_parallel_size is the key): it
    was recorded as not modelled, a line vLLM does not start (round 73)."""
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "tensor_parallel_size": 1})
    with pytest.raises(ConfigError, match="--speculative-config.tensor_parallel_size: not a valid argument"):
        read([MODEL, "--speculative-config", spec], [], version=version)
    # round 105: null is the field's default, which vLLM takes
    assert read([MODEL, "--speculative-config", spec.replace('"tensor_parallel_size": 1', '"tensor_parallel_size": '
                                                                                          'null')], [], version=version)


def test_eagle_drafts_compute_a_prefix_hits_last_block_again(tmp_path):
    """EAGLE-type drafters need the hidden state after each position: vLLM drops the last block of a prefix-cache
    hit (needs_eagle_block_drop); servesim counted it cached, as for n-gram drafts (round 73)."""
    bench = ["--", "bench", "serve", "--dataset-name", "random", "--num-prompts", "30", "--random-input-len", "64",
             "--random-prefix-len", "512", "--random-output-len", "8", "--request-rate", "5", "--seed", "1"]
    cached = {}
    for name, spec in (("ngram", {"method": "ngram", "num_speculative_tokens": 3}),
                       ("eagle3", {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3}),
                       ("kept", {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3,
                                 "disable_eagle_block_drop": True})):
        assert main(["vllm", "--quiet", "--out", str(tmp_path / name), "serve", MODEL, "--speculative-config",
                     json.dumps(spec), *bench]) == 0
        cached[name] = pd.read_parquet(tmp_path / name / "requests.parquet")["cached_tokens"]
    hit = cached["ngram"] > 0
    assert hit.sum() > 20 and (cached["eagle3"][hit] == cached["ngram"][hit] - 16).all()
    assert (cached["kept"] == cached["ngram"]).all()


def test_a_budget_within_the_drafts_lookahead_is_refused_as_vllm_033_refuses_it():
    """0.33's VllmConfig needs a slot beside a drafter's lookahead tokens (k for EAGLE-type and draft models):
    a budget of 4 with 4 EAGLE3 drafts was simulated (round 74); n-gram drafts hold no lookahead slot."""
    spec = {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 4}
    with pytest.raises(ConfigError, match="--max-num-batched-tokens: 4 leaves no slot"):
        read([MODEL, "--max-num-batched-tokens", "4", "--speculative-config", json.dumps(spec)], [])
    assert read([MODEL, "--max-num-batched-tokens", "5", "--speculative-config", json.dumps(spec)], []).settings
    assert read([MODEL, "--max-num-batched-tokens", "4", "--speculative-config", json.dumps(spec)], [],
                version="0.19.0").settings  # 0.19 has no such check
    ngram = {"method": "ngram", "num_speculative_tokens": 4}
    assert read([MODEL, "--max-num-batched-tokens", "4", "--speculative-config", json.dumps(ngram)], []).settings


def test_eagle_block_drop_without_prefix_caching_is_said_to_have_no_effect(capsys):
    from servesim.simulator.config import load

    load(None, ["speculative.method=fixed", "speculative.eagle_block_drop=true", "engine.enable_prefix_caching=false"])
    assert "speculative.eagle_block_drop has no effect: engine.enable_prefix_caching is off" in capsys.readouterr().err


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_an_mtp_drafter_needs_its_count(version):
    """Round 105: an MTP drafter named without num_speculative_tokens had been given 1 (round 72 read vLLM's
    n_predict default); vLLM compares the missing count (`num_speculative_tokens > 1`) as it detects MTP, before it
    reads n_predict, and fails at start in both releases. Without a model and a count it refuses the line too."""
    for spec in ({"method": "mtp", "model": "deepseek-ai/DeepSeek-V3"}, {"model": "deepseek-ai/DeepSeek-V3"},
                 {"method": "mtp"}):
        with pytest.raises(ConfigError, match="an MTP drafter without a count fails its start"):
            read(["deepseek-ai/DeepSeek-V3", "-tp", "8", "--speculative-config", json.dumps(spec)], [], version)


def test_max_concurrency_0_is_no_limit_in_019_and_refused_in_033():
    """0.19's client makes its semaphore only for a truthy --max-concurrency (0: no limit); 0.33 refuses <= 0."""
    old = read([MODEL], ["--max-concurrency", "0"], version="0.19.0")
    assert "workload.max_concurrency" not in old.settings and old.bench.max_concurrency == 0
    with pytest.raises(ConfigError, match="--max-concurrency: must be > 0, as vLLM 0.33.0 requires, got 0"):
        read([MODEL], ["--max-concurrency", "0"])
    with pytest.raises(ConfigError, match="--max-concurrency: must be 0 \\(no limit\\) or more: vLLM 0.19's client "
                                          "makes a semaphore of it, which refuses -1"):  # r129: said as 0.33's bound
        read([MODEL], ["--max-concurrency=-1"], version="0.19.0")


def test_round_64_ngram_model_and_spaced_optimization_level_read_as_vllm_reads_them():
    """--speculative-config {"model": "ngram"} is vLLM's n-gram method (it was costed as a draft model); -O 3 with a
    space is --optimization-level 3 (it was refused)."""
    for spec in ('{"model": "ngram", "num_speculative_tokens": 3}', '{"model": "[ngram]", "num_speculative_tokens": 3}'):
        settings = read([MODEL, "--speculative-config", spec], []).settings
        assert settings["speculative.draft_cost_ratio"] == 0.0, spec
    assert "speculative.draft_cost_ratio" not in read(  # a draft model: servesim's default draft cost
        [MODEL, "--speculative-config", '{"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 3}'],
        []).settings
    # whose own weights and KV are not modelled: its name recorded, so a 70B drafter is not silently a 1B one
    assert read([MODEL, "--speculative-config", '{"model": "meta-llama/Llama-3.1-70B", "num_speculative_tokens": 3}'],
                []).not_modelled == {"vllm serve --speculative-config.model": "meta-llama/Llama-3.1-70B"}
    spaced = read([MODEL, "-O", "3"], [])  # level 3 is level 2, CUDA graphs and all (round 70: modelled)
    assert not spaced.not_modelled and spaced.settings["engine.enforce_eager"] is False
    assert read([MODEL, "-O", "1"], []).not_modelled == {"vllm serve --optimization-level": "1"}  # piecewise


@pytest.mark.parametrize("setting, says", [
    ("engine.reserved_memory_gib=20", "engine.reserved_memory_gib=20.0 has no vllm serve flag: it stands for the "
                                      "memory vLLM profiles"),
    ("policies.batching=static", "policies.batching=static has no vllm serve flag: vLLM runs with continuous"),
    ("policies.preemption_mode=swap", "policies.preemption_mode=swap has no vllm serve flag: vLLM V1 preempts by "
                                      "recompute"),
    ("policies.admission.reserve=max_tokens", "policies.admission={reserve: max_tokens} has no vllm serve flag"),
])
def test_config_vllm_says_each_setting_its_line_cannot_carry(setting, says, capsys):
    """The printed vllm serve line deploys vLLM without servesim's own settings: each is said (they were dropped
    silently, so the line deployed another KV pool or scheduler than the one simulated)."""
    assert main(["config", "--vllm", "--set", setting]) == 0
    captured = capsys.readouterr()
    assert f"note: {says}" in captured.err and captured.out.startswith("vllm serve ")
    assert main(["config", "--vllm"]) == 0
    assert "has no vllm serve flag" not in capsys.readouterr().err


def test_config_vllm_prints_capture_sizes_a_vllm_line_reads_back(capsys):
    """The capture sizes are a list (nargs +): printed as words, and the line read back captures the same largest
    graph, the largest size within the budget, as the scenario simulated."""
    assert main(["config", "--vllm", "--set", "engine.cudagraph_capture_sizes=[1,2,4,10000]"]) == 0
    line = capsys.readouterr().out.split()
    assert line[line.index("--cudagraph-capture-sizes"):][:5] == ["--cudagraph-capture-sizes", "1", "2", "4", "10000"]
    assert resolved_engine(capsys, line[3:])["max_cudagraph_capture_size"] == 4


def test_config_vllm_leaves_async_scheduling_to_vllm_unless_the_scenario_sets_it(capsys):
    """The printed line said --async-scheduling whenever servesim resolved it on: a user adding a draft method
    0.19 cannot overlap, as its note invites, got a line vLLM refuses (round 72). Unset, vLLM decides."""
    assert main(["config", "--vllm", "--vllm-version", "0.19.0"]) == 0
    assert "async-scheduling" not in capsys.readouterr().out
    assert main(["config", "--vllm", "--set", "engine.async_scheduling=false"]) == 0
    assert " --no-async-scheduling" in capsys.readouterr().out


def test_config_vllm_speaks_the_scenarios_release(tmp_path, capsys):
    """A scenario made for 0.19 (engine.vllm_defaults) prints a 0.19 line by default: its no- forms and defaults
    (0.33's --disable-prefix-caching was printed, which 0.19 refuses, and a false note that vLLM runs 0.33); a
    queue limit of 0, which refuses every request, is said on a release without the flag (round 65)."""
    assert main(["config", "--vllm", "--set", "engine.vllm_defaults=0.19.0", "--set",
                 "engine.enable_prefix_caching=false"]) == 0
    out, err = capsys.readouterr()
    assert " --no-enable-prefix-caching " in out and "--disable-prefix-caching" not in out
    assert "vllm_defaults" not in err
    assert main(["config", "--vllm", "--vllm-version", "0.33.0", "--set", "engine.vllm_defaults=0.19.0", "--set",
                 "engine.enable_prefix_caching=false"]) == 0
    assert " --disable-prefix-caching " in capsys.readouterr().out  # the release asked for
    for limit in ("max_num_queued_reqs", "max_num_queued_tokens"):
        assert main(["config", "--vllm", "--vllm-version", "0.19.0", "--set", f"engine.{limit}=0"]) == 0
        assert f"note: engine.{limit}=0 has no flag in vLLM 0.19.0" in capsys.readouterr().err


@pytest.mark.parametrize("spec", [["--speculative-config", '{"method": "ngram", "num-speculative-tokens": 3}'],
                                  ["--speculative-config.method", "ngram",
                                   "--speculative-config.num-speculative-tokens", "3"]])
def test_dashed_speculative_keys_are_0_33s_underscored_ones(spec):
    """vLLM 0.33's create_speculative_config turns dashes in its keys into underscores; 0.19 forbids them."""
    assert read([MODEL, *spec], []).settings["speculative.num_speculative_tokens"] == 3
    with pytest.raises(ConfigError, match="num-speculative-tokens: not a key of vLLM 0.19.0's SpeculativeConfig"):
        read([MODEL, *spec], [], version="0.19.0")
    # 0.33 checks a shorthand against the keys as given, then reads the dashes: the shorthand, added last, wins
    assert read([MODEL, *spec, "--spec-tokens", "5"], []).settings["speculative.num_speculative_tokens"] == 5
    with pytest.raises(ConfigError, match="--spec-tokens: and --speculative-config's 'num_speculative_tokens' are"):
        read([MODEL, "--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens", "3",
              "--spec-tokens", "5"], [])


def test_round_61_long_prefill_threshold_is_checked_before_the_auto_fit(tmp_path, capsys):
    """vLLM checks long_prefill_token_threshold against max_model_len before fitting `auto` to the pool: a line
    vLLM starts was refused against the fitted length."""
    assert main(["vllm", "--config", "serve", MODEL, "--long-prefill-token-threshold", "5000", "--max-model-len",
                 "auto", "--gpu-memory-utilization", "0.132", "--", "bench", "serve", "--num-prompts", "5"]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["engine"]["max_model_len"] < 5000 == config["engine"]["long_prefill_token_threshold"]


def test_round_62_what_vllm_could_not_start_is_refused_or_said(tmp_path, capsys):
    """vLLM's CUDA attention backends take block sizes in multiples of 16, and read AWQ/GPTQ/NVFP4 weights from a
    checkpoint made so: `servesim vllm --block-size 8` ran, recommend ranked --block-size 7 first, and a 16-bit
    model with --quantization awq was printed as a line to deploy, all without a word."""
    assert main(["vllm", "--out", str(tmp_path / "v"), "serve", MODEL, "--block-size", "8", *BENCH]) == 2
    assert "vllm serve --block-size: block_size 8: vLLM's CUDA attention backends" in capsys.readouterr().err
    assert main(["recommend", "--rate", "4", "--slo", "ttft_p99_ms=500", "--gpu", "h100-sxm", "--grid",
                 "engine.block_size=16,7", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--grid: block_size 7" in err[0] and "recommend searches deployments vLLM can start" in err[0]
    assert main(["config", "--vllm", "--set", "engine.block_size=8", "--set", "engine.quantization=awq"]) == 0
    err = capsys.readouterr().err
    assert "note: block_size 8: vLLM's CUDA attention backends" in err
    assert "note: --quantization awq reads weights quantized so" in err
    # a line vLLM would not start: refused, as a block size it cannot take is (a warning before, round 68)
    with pytest.raises(ConfigError, match=f"--quantization: {MODEL} is a bf16 checkpoint; --quantization gptq"):
        read([MODEL, "--quantization", "gptq"], [])


def test_quantization_is_checked_against_the_checkpoint(tmp_path):
    """Round 70: a local config.json was not checked (-q awq on a 16-bit or an fp8 checkpoint ran as AWQ); the
    checkpoint's own method (mxfp4 on gpt-oss) was refused; 0.33's online fp8 shorthands were refused."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
              "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 16,
              "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
    for name, extra in (("plain", {}), ("fp8", {"quantization_config": {"quant_method": "fp8"}})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config | extra))
    with pytest.raises(ConfigError, match="plain is a bf16 checkpoint; --quantization awq reads weights quantized"):
        read([str(tmp_path / "plain"), "-q", "awq"], [])
    with pytest.raises(ConfigError, match="fp8's checkpoint is quantized to fp8: vLLM refuses --quantization awq"):
        read([str(tmp_path / "fp8"), "-q", "awq"], [])
    with pytest.raises(ConfigError, match="quantized to mxfp4: vLLM refuses --quantization awq"):
        read(["openai/gpt-oss-120b", "-q", "awq"], [])
    for model, q in ((str(tmp_path / "fp8"), "fp8"), ("openai/gpt-oss-120b", "mxfp4")):  # its own: as without -q
        assert "engine.quantization" not in read([model, "-q", q], []).settings
    # round 71: a 4-bit AWQ checkpoint takes -q awq (refused before: its config.json was not read); an online fp8
    # shorthand beside an fp8 checkpoint is refused, as vLLM's method check refuses it
    (tmp_path / "awq").mkdir()
    (tmp_path / "awq" / "config.json").write_text(json.dumps(config | {"quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128}}))
    for q in ("awq", "awq_marlin"):
        assert "engine.quantization" not in read([str(tmp_path / "awq"), "-q", q], []).settings
    assert load_model(str(tmp_path / "awq")).dtype == "w4a16"
    with pytest.raises(ConfigError, match="quantized to fp8: vLLM refuses --quantization fp8_per_block"):
        read([str(tmp_path / "fp8"), "-q", "fp8_per_block"], [])
    for q in ONLINE_FP8:
        cmd = read([MODEL, "-q", q], [])
        assert cmd.settings["engine.quantization"] == "fp8"
        assert bool(cmd.not_modelled) == (q != "fp8_per_tensor")  # the scales' granularity: recorded


def test_a_prefix_lets_the_random_part_be_short(tmp_path):
    """vLLM refuses a line only where the whole prompt could be empty: a prefix makes a 1-token random part fine."""
    assert main(["vllm", "--quiet", "--out", str(tmp_path), "serve", MODEL, "--", "bench", "serve", "--num-prompts",
                 "4", "--random-input-len", "1", "--random-range-ratio", "0.999", "--random-prefix-len", "4"]) == 0
    prompts = pd.read_parquet(tmp_path / "requests.parquet")["prompt_tokens"]
    assert prompts.between(5, 6).all()


def test_no_engine_counters_no_spec_decode_keys(tmp_path):
    """--disable-log-stats: vLLM's server keeps no stat loggers, its /metrics has no vllm:spec_decode_* series and
    the client's result file has no spec_decode_* keys (round 68 found them written)."""
    spec = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']
    keys = {}
    for extra in ([], ["--disable-log-stats"]):
        out = tmp_path / str(len(extra))
        assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL] + spec + extra + BENCH +
                    ["--save-result", "--result-filename", "r.json"]) == 0
        keys[len(extra)] = {k for k in json.loads((out / "r.json").read_text()) if k.startswith("spec_decode_")}
        assert "--disable-log-stats" not in json.loads((out / "vllm_command.json").read_text())["not_modelled"]
    assert len(keys[0]) == 6 and keys[1] == set()


def resolved_engine(capsys, flags: list[str], version: str = "0.33.0", model: str = MODEL) -> dict:
    """The engine section of the scenario `servesim vllm --config` resolves from a serve line."""
    assert main(["vllm", "--vllm-version", version, "--config", "serve", model, *flags, "--", "bench", "serve",
                 "--num-prompts", "10"]) == 0
    return yaml.safe_load(capsys.readouterr().out)["engine"]


@pytest.mark.parametrize("flags, eager, largest", [
    ([], False, 512),
    (["-O0"], True, None),  # vLLM's level 0: cudagraph_mode NONE
    (["-O", "0", "-cc.cudagraph_mode=FULL"], False, 512),  # -cc's mode wins over the level's default
    (["-cc.cudagraph_mode=none"], True, None),  # vLLM reads the name in any case
    (["-cc.max_cudagraph_capture_size=8"], False, 8),
    (["-cc.max_cudagraph_capture_size=1k"], False, 992),  # 0.33 reads human-readable counts; 1000 on the grid
    (["-cc", '{"max_cudagraph_capture_size": 1k}'], False, 992),  # inside a config dataclass's JSON too
    (["--cudagraph-capture-sizes", "1", "2", "4", "8"], False, 8),
    (["--compilation-config", '{"cudagraph_capture_sizes": [16, 4]}'], False, 16),
    (["--compilation-config.cudagraph_capture_sizes+", "1,2,4"], False, 4),  # vLLM's list form of a dotted key
    # sizes above the budget are dropped, as vLLM drops them: the largest graph is 4, not 10,000 (round 72)
    (["--cudagraph-capture-sizes", "1", "2", "4", "10000"], False, 4),
    (["--cudagraph-capture-sizes", "1", "2", "4", "10000", "--max-cudagraph-capture-size", "4"], False, 4),
    (["--cudagraph-capture-sizes", "10000"], False, None),  # none within the budget: every step eager
])
def test_cuda_graphs_however_the_line_gives_them(capsys, flags, eager, largest):
    """-O0, cudagraph_mode NONE, -cc's largest size and the capture sizes were recorded as not modelled, so a line
    without graphs was timed with them (round 70)."""
    cmd = read([MODEL, *flags], [])
    assert not any("cudagraph" in k or "optimization" in k for k in cmd.not_modelled)
    engine = resolved_engine(capsys, flags)
    assert engine["enforce_eager"] == eager and engine["max_cudagraph_capture_size"] == largest


NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
@pytest.mark.parametrize("flag, config, field", [
    ("--kv-transfer-config", {**NIXL, "kv_port": "abc"}, "kv_port"),
    ("--kv-transfer-config", {**NIXL, "kv_load_failure_policy": "bogus"}, "kv_load_failure_policy"),
    ("--kv-transfer-config", {**NIXL, "enable_permute_local_kv": "maybe"}, "enable_permute_local_kv"),
    ("--kv-transfer-config", {**NIXL, "kv_connector_extra_config": 5}, "kv_connector_extra_config"),
    ("--kv-events-config", {"publisher": "bogus"}, "publisher"),
    ("--kv-events-config", {"hwm": "x"}, "hwm"),
    ("--structured-outputs-config", {"backend": "bogus"}, "backend"),  # had been said to be no attention backend
    ("--structured-outputs-config", {"backend": "xgrammar", "disable_fallback": 7}, "disable_fallback"),
    ("--profiler-config", {"nope": 1}, "nope"),
    ("--reasoning-config", {"nope": 1}, "nope"),
])
def test_config_class_fields_are_typed_as_vllms_classes_type_them(version, flag, config, field):
    """Round 110: only the KV configs' key names were checked, the structured-output, profiler and reasoning
    configs' not at all; vLLM's TypeAdapter refuses a port that is text, a policy outside its Literal, a key its
    class does not have."""
    with pytest.raises(ConfigError) as e:
        read([MODEL, flag, json.dumps(config)], [], version)
    assert e.value.field == f"vllm serve {flag}.{field}", str(e.value)
    read([MODEL, flag, json.dumps({k: v for k, v in config.items() if k != field})], [], version)  # the rest is taken


DEEP = '{"a":' * 3000 + "1" + "}" * 3000


@pytest.mark.parametrize("serve, bench, says", [
    # r150: the server's --skip-tokenizer-init (the bench's was refused): every text prompt answered 400
    (["--skip-tokenizer-init"], [], "vllm serve --skip-tokenizer-init: the server then has no tokenizer"),
    (["--override-generation-config", DEEP], [], "--override-generation-config: not valid JSON (nested too deeply)"),
    (["-cc", '{"a":' * 70 + "1" + "}" * 70], [], "JSON nested more than 64 levels deep"),
    (["--override-generation-config." + ".".join(["a"] * 3000), "1"], [], "a dotted key more than 64 levels deep"),
    (["--hf-overrides.x", DEEP], [], "--hf-overrides.x: not valid JSON (nested too deeply)"),
    ([], ["--extra-body", DEEP], "--extra-body: not valid JSON (nested too deeply)"),
    ([], ["--random-range-ratio", DEEP], "--random-range-ratio: a ratio in [0, 1)"),
])
def test_json_nested_past_the_stack_is_one_line(tmp_path, capsys, serve, bench, says):
    """Round 110: a flag's JSON (or a dotted key) nested 3,000 deep was an internal error, exit 3."""
    assert main(["vllm", "--out", str(tmp_path), "serve", MODEL, *serve, "--", "bench", "serve", *bench]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and len(err[0]) < 400, err


@pytest.mark.parametrize("version, overrides, key", [
    ("0.33.0", '{"max_position_embeddings": 262144}', "max_position_embeddings"),  # a longer model, refused as 131,072
    ("0.19.0", '{"text_config": {"num_hidden_layers": 2}}', "num_hidden_layers"),  # nested: a smaller model
    ("0.33.0", '{"rope_scaling": {"rope_type": "linear", "factor": 2}}', "rope_scaling"),
    ("0.33.0", '{"some_flag_servesim_does_not_read": 1}', None),  # recorded, as before
])
def test_hf_overrides_of_what_servesim_reads_of_the_model_are_refused(version, overrides, key):
    """Round 106: --hf-overrides was recorded as not modelled while it changed the model vLLM builds: a longer
    --max-model-len vLLM takes was refused as past the model's own length, a shorter model ran as the longer."""
    line = [MODEL, "--hf-overrides", overrides]
    if key is None:
        assert "vllm serve --hf-overrides" in read(line, [], version).not_modelled
        return
    with pytest.raises(ConfigError, match=f"--hf-overrides: {key} changes the model servesim reads"):
        read(line, [], version)


SPEC = '{"method": "ngram", "num_speculative_tokens": %d, "prompt_lookup_max": 3}'


@pytest.mark.parametrize("serve, bench, says, starts", [
    (["--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"], [], "--max-cpu-loras: must be >= --max-loras (4)",
     ["--enable-lora", "--max-loras", "4", "--max-cpu-loras", "4"]),
    (["--enable-lora", "--speculative-config", SPEC % 8], [], "--enable-lora: beside speculation needs "
     "max_num_batched_tokens >= max_num_seqs x (k + 1) = 9,216, got 8,192", ["--enable-lora", "--speculative-config",
                                                                              SPEC % 2]),
    (["--enable-lora", "--lora-modules", "foo=/x"], ["--model", "foo"], "'foo' is a LoRA adapter of the server",
     ["--enable-lora", "--lora-modules", "foo=/x"]),
    # round 108: any speculative config counts, extract_hidden_states too (servesim runs it as none)
    (["--enable-lora", "--max-num-seqs", "256", "--max-num-batched-tokens", "300", "--speculative-config",
      '{"method": "extract_hidden_states", "num_speculative_tokens": 1, '
      '"draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}}'], [],
     "= 512, got 300", ["--enable-lora", "--max-num-seqs", "256", "--max-num-batched-tokens", "300"]),
])
def test_lora_lines_vllm_refuses_at_start_are_refused(tmp_path, capsys, serve, bench, says, starts):
    """Round 106: --max-cpu-loras below --max-loras, and LoRA beside speculation past the token budget, ran (vLLM
    does not start); a client naming one of the server's adapters was said to get 404s, which vLLM does not give."""
    line = ["vllm", "--gpu", "h100-sxm", "--out", str(tmp_path), "--quiet", "serve", MODEL]
    assert main([*line, *serve, "--", "bench", "serve", "--num-prompts", "3", *bench]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert main([*line, *starts, "--", "bench", "serve", "--num-prompts", "3"]) == 0  # the line vLLM starts


@pytest.mark.parametrize("version, flags, refused", [
    ("0.33.0", ["--enable-dbo", "--dbo-decode-token-threshold", "1"], "--dbo-decode-token-threshold: 1 is below the 2"),
    ("0.33.0", ["--ubatch-size", "3", "--dbo-prefill-token-threshold", "2"], "--dbo-prefill-token-threshold: 2 is"),
    ("0.33.0", ["--enable-dbo"], None),  # 32 and 512 are at least 2
    ("0.19.0", ["--enable-dbo", "--dbo-decode-token-threshold", "1"], None),  # 0.19 has no such check
])
def test_dbo_thresholds_below_the_microbatch_count_are_refused_as_0_33_does(version, flags, refused):
    """Round 108: 0.33's ParallelConfig refuses a DBO threshold below its microbatch count; servesim ran it."""
    line = ["Qwen/Qwen3-30B-A3B", "-dp", "2", "--enable-expert-parallel", "--all2all-backend",
            "deepep_low_latency", *flags]
    if refused is None:  # the backend is read in both (0.19 has no batched DP MoE: its kernels are said untimed)
        assert read(line, [], version).settings["engine.all2all_backend"] == "deepep_low_latency"
        return
    with pytest.raises(ConfigError, match=refused):
        read(line, [], version)


@pytest.mark.parametrize("flags, field, value", [
    (["-cc.cudagraph_capture_sizes+=1,2", "-cc.cudagraph_capture_sizes+=8"], "engine.cudagraph_capture_sizes",
     [1, 2, 8]),  # a list given again is appended to, as vLLM's recursive_dict_update does
    (["-cc.pass_config.fuse_norm_quant", "true", "-cc.pass_config", '{"fuse_act_quant": true}'],
     "vllm serve --compilation-config.pass_config", {"fuse_norm_quant": True, "fuse_act_quant": True}),  # merged
    # round 109: two spellings are two JSON values, the last replacing the first (graphs stay on, at 64)
    (["--compilation-config.cudagraph_mode", "NONE", "-cc.max_cudagraph_capture_size", "64"],
     "engine.max_cudagraph_capture_size", 64),
])
def test_dotted_json_keys_merge_as_vllms_parser_merges_them(flags, field, value):
    """Round 106: a list key given twice kept the last; a dict after a dotted sub-key replaced it."""
    cmd = read([MODEL, *flags], [])
    assert {**cmd.settings, **cmd.not_modelled}[field] == value
    assert not cmd.settings.get("engine.enforce_eager")  # graphs on


@pytest.mark.parametrize("flags, field", [
    (["-cc.mode", "3", "-cc.mode.x", "1"], "--compilation-config.mode"),
    (["--speculative-config.method", "ngram", "--speculative-config.method.x", "1"], "--speculative-config.method"),
])
def test_a_dotted_key_below_a_value_is_refused_in_one_line(flags, field):
    """Round 106: a key below one holding a number was an internal error (vLLM's merge replaces the number with
    the object, which the config then refuses)."""
    with pytest.raises(ConfigError) as e:
        read([MODEL, *flags], [])
    assert e.value.field == f"vllm serve {field}", str(e.value)


@pytest.mark.parametrize("version, flags, eager, said", [
    # piecewise graphs need vLLM's compile: without it 0.33 drops the piecewise part, 0.19 captures nothing
    ("0.33.0", ["-O0", "-cc.cudagraph_mode=PIECEWISE"], True, None),
    ("0.19.0", ["-O0", "-cc.cudagraph_mode=FULL_AND_PIECEWISE"], True, None),
    ("0.33.0", ["-O0", "-cc.cudagraph_mode=FULL_AND_PIECEWISE"], False, "cudagraph_mode"),  # decode-only graphs
    ("0.33.0", ["-cc.mode=0"], False, "compilation-config.mode"),  # the level's FULL_AND_PIECEWISE, decode only
    ("0.19.0", ["-cc.mode=0"], True, "compilation-config.mode"),  # eager; the compile off itself is not modelled
    ("0.33.0", ["-O0", "-cc.mode=3", "-cc.cudagraph_mode=PIECEWISE"], False, "cudagraph_mode"),  # compiled
    ("0.33.0", ["-cc.cudagraph_mode=PIECEWISE"], False, "cudagraph_mode"),  # attention eager, as -O1's
    ("0.33.0", ["-O1"], False, "optimization-level"),
    ("0.33.0", ["-O0", "-cc.cudagraph_mode=FULL"], False, None),  # full graphs need no compile
])
def test_a_piecewise_cuda_graph_mode_as_the_compile_mode_leaves_it(capsys, version, flags, eager, said):
    """Round 106: -O0 beside -cc.cudagraph_mode=PIECEWISE ran timed with full graphs, unsaid (vLLM captures none
    without its compile); -cc.cudagraph_mode=PIECEWISE alone was not said to be timed as full graphs as -O1 is."""
    engine = resolved_engine(capsys, flags, version)
    cmd = read([MODEL, *flags], [], version)
    named = [k for k in cmd.not_modelled if "cudagraph" in k or "optimization" in k or k.endswith(".mode")]
    assert engine["enforce_eager"] == eager and (named == [] if said is None else any(said in k for k in named)), \
        named


@pytest.mark.parametrize("version, flags, largest", [
    # vLLM's grid: 1, 2, 4, steps of 8 to 248, of 16 from 256; 0.33 adds the budget and max_num_seqs's decode batch
    ("0.33.0", ["--max-num-seqs", "5"], 8),  # min(2 x 5, 512) = 10, grid's 8 (5 is captured too)
    ("0.33.0", ["--max-num-seqs", "150"], 288),  # 300 -> 288
    ("0.33.0", ["--max-cudagraph-capture-size", "100"], 96),
    ("0.33.0", ["--max-num-batched-tokens", "100"], 100),  # the budget itself is captured
    ("0.19.0", ["--max-num-batched-tokens", "100"], 96),  # 0.19 does not add it
    ("0.19.0", ["--max-num-seqs", "150"], 288),
    # a decode of 3 tokens (2 drafts): min(5 x 3 x 2, 512) = 30, the grid's 24
    ("0.33.0", ["--max-num-seqs", "5", "--speculative-config", '{"method":"ngram","num_speculative_tokens":2}'], 24),
])
def test_the_largest_cuda_graph_is_on_vllms_grid(capsys, version, flags, largest):
    """servesim took min(2 x max_num_seqs, 512) or the flag as the largest graph; vLLM captures sizes on its grid,
    so steps of 9-10 tokens at max_num_seqs 5 ran eager in vLLM and graphed here (round 72)."""
    assert resolved_engine(capsys, flags, version)["max_cudagraph_capture_size"] == largest


@pytest.mark.parametrize("version", ["0.19.0", "0.33.0"])
def test_gpt_oss_captures_graphs_up_to_its_own_1024(capsys, version):
    """vLLM's gpt-oss model config raises the capture ceiling to 1024 when neither size flag is given: servesim
    timed its 513-1,024-token steps eager (round 73)."""
    def largest(*flags):
        assert main(["vllm", "--vllm-version", version, "--gpu", "h200-sxm", "--config", "serve", "openai/gpt-oss-120b",
                     *flags, "--", "bench", "serve", "--num-prompts", "10"]) == 0
        return yaml.safe_load(capsys.readouterr().out)["engine"]["max_cudagraph_capture_size"]

    assert largest() == largest("--max-num-seqs", "64") == 1024
    assert largest("--max-cudagraph-capture-size", "256") == 256  # a size given stands


@pytest.mark.parametrize("flags", [["--cudagraph-capture-sizes", "1", "2", "--max-cudagraph-capture-size", "8"],
                                   ["--cudagraph-capture-sizes", "1", "2", "4", "10000",
                                    "--max-cudagraph-capture-size", "10000"]])  # 10,000 is dropped: 4 is the largest
def test_capture_sizes_unlike_the_largest_size_are_refused(capsys, flags):
    assert main(["vllm", "--config", "serve", MODEL, *flags, "--", "bench", "serve", "--num-prompts", "10"]) == 2
    assert "is not the largest of cudagraph_capture_sizes" in capsys.readouterr().err


def test_capture_sizes_given_in_compilation_config_are_named_there(capsys):
    """A refusal of -cc's sizes names -cc's key, not a flag "left at vLLM's default" (round 82)."""
    assert main(["vllm", "--config", "serve", MODEL, "-cc", '{"cudagraph_capture_sizes": [1, 2, 4, 8], '
                 '"max_cudagraph_capture_size": 16}']) == 2
    err = capsys.readouterr().err
    assert "vllm serve --compilation-config.max_cudagraph_capture_size: 16 is not the largest" in err
    assert "left at vLLM's default" not in err


@pytest.mark.parametrize("flags, says", [
    (["--max-cudagraph-capture-size", "8", "-cc.max_cudagraph_capture_size=8"], "mutually exclusive"),
    (["--cudagraph-capture-sizes", "4", "-cc.cudagraph_capture_sizes=[4]"], "mutually exclusive"),
    (["--cudagraph-capture-sizes", "1", "x"], "--cudagraph-capture-sizes: integers >= 1"),
    (["-cc.cudagraph_capture_sizes=[0]"], "--compilation-config.cudagraph_capture_sizes: integers >= 1"),
    (["-cc.cudagraph_mode=SOMETIMES"], "--compilation-config.cudagraph_mode: one of NONE"),
    (["-O5"], "--optimization-level: one of 0, 1, 2, 3"),
])
def test_cuda_graph_lines_vllm_refuses_are_refused(flags, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, *flags], [])


def test_cuda_graphs_change_the_timing_as_eager_does(tmp_path):
    tpot = {}
    for name, flags in (("graphs", []), ("eager", ["--enforce-eager"]), ("O0", ["-O0"])):
        assert main(["vllm", "--quiet", "--out", str(tmp_path / name), "serve", MODEL, *flags] + BENCH) == 0
        tpot[name] = json.loads((tmp_path / name / "summary.json").read_text())["mean_tpot_ms"]
    assert tpot["O0"] == tpot["eager"] > tpot["graphs"]


@pytest.mark.parametrize("version, flags, budget", [
    ("0.33.0", ["--all2all-backend", "deepep_low_latency"], 256),
    ("0.33.0", ["--all2all-backend", "deepep_low_latency", "--performance-mode", "throughput"], 512),  # a default
    ("0.33.0", ["--all2all-backend", "nixl_ep"], 256),
    ("0.33.0", ["--all2all-backend", "deepep_low_latency", "--max-num-batched-tokens", "1024"], 1024),
    ("0.33.0", ["--all2all-backend", "deepep_high_throughput"], 8192),
    ("0.19.0", ["--all2all-backend", "deepep_low_latency"], 8192),
    # a default, so vLLM's later limits apply to it: chunked prefill off raises it to max_model_len, and it is at
    # most max_num_seqs x max_model_len (round 74: refused, and 256)
    ("0.33.0", ["--all2all-backend", "deepep_low_latency", "--no-enable-chunked-prefill", "--max-model-len", "4096"],
     4096),
    ("0.33.0", ["--all2all-backend", "nixl_ep", "--max-model-len", "100", "--max-num-seqs", "2"], 200),
])
def test_batched_dp_moe_takes_its_own_default_budget(capsys, version, flags, budget):
    """0.33: DP + EP on a low-latency all-to-all backend defaults the token budget to 256 (SchedulerConfig's
    batched-DP default); servesim kept 8192 (round 70)."""
    engine = resolved_engine(capsys, ["-dp", "2", "--enable-expert-parallel", *flags], version, "Qwen/Qwen3-30B-A3B")
    assert engine["max_num_batched_tokens"] == budget


def test_a_0_19_block_override_below_one_max_length_request_starts(tmp_path, capsys):
    """vLLM 0.19 checks one max-length request against the memory it profiled, before --num-gpu-blocks-override
    replaces the count, so it starts (0.33 checks the override: refused); a request larger than that pool then
    waits for ever, said in one line (it was an internal error, round 70)."""
    line = ["serve", MODEL, "--num-gpu-blocks-override", "5000", "--", "bench", "serve", "--num-prompts", "4"]
    assert main(["vllm", "--vllm-version", "0.19.0", "--quiet", "--out", str(tmp_path / "a"), *line]) == 0
    assert main(["vllm", "--quiet", "--out", str(tmp_path / "b"), *line]) == 2
    assert "cannot hold one request of max_model_len=131,072" in capsys.readouterr().err
    assert main(["vllm", "--vllm-version", "0.19.0", "--quiet", "--out", str(tmp_path / "c"), *line,
                 "--random-input-len", "90000", "--random-output-len", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a request of 90,000 tokens" in err[0] and "4,999 usable blocks" in err[0], err


@pytest.mark.parametrize("flags, says", [
    (["-dcp", "2", "-tp", "2"], "--decode-context-parallel-size: 2 needs --tensor-parallel-size (2) above the "
                                "model's 8 KV heads"),
    (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'], "llama-3.1-8b has none"),
    (["--speculative-config", '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'], "own MTP layers"),
])
def test_round_71_lines_vllm_refuses_against_the_model(flags, says):
    """Decode context parallelism on a GQA model needs TP above its KV heads; MTP drafts with the model's own MTP
    layers, which Llama has none of: both were simulated."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, *flags], [])
    assert read(["deepseek-ai/DeepSeek-V3", "-tp", "8", *flags], []).settings  # latent attention, MTP layers


def test_suffix_decoding_drafts_up_to_its_tree_depth():
    """vLLM defaults suffix decoding's num_speculative_tokens to suffix_decoding_max_tree_depth (24); it was
    refused for lacking the count (round 71)."""
    for extra, k in (({}, 24), ({"suffix_decoding_max_tree_depth": 8}, 8)):
        cmd = read([MODEL, "--speculative-config", json.dumps({"method": "suffix"} | extra)], [])
        assert cmd.settings["speculative.num_speculative_tokens"] == k


def test_0_19_fits_auto_to_the_memory_before_the_block_override(tmp_path, capsys):
    """0.19 fits max_model_len auto against the memory it profiled, then applies --num-gpu-blocks-override: the
    length stays the model's (servesim fitted it to the override, and refused every request with a 400); a
    request that then outgrows the pool is said in one line (round 71)."""
    line = ["serve", MODEL, "--num-gpu-blocks-override", "101", "--max-model-len", "auto", "--", "bench", "serve",
            "--random-input-len", "1000", "--random-output-len", "1000", "--num-prompts", "4"]
    assert main(["vllm", "--vllm-version", "0.19.0", "--quiet", "--out", str(tmp_path / "a"), *line]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a request of 1,6" in err[0] and "100 usable blocks" in err[0], err
    assert main(["vllm", "--quiet", "--out", str(tmp_path / "b"), *line]) == 0  # 0.33: fitted to the override
    assert yaml.safe_load((tmp_path / "b" / "config.yaml").read_text())["engine"]["max_model_len"] == 100 * 16


@pytest.mark.parametrize("version, chunks", [("0.19.0", [512, 512, 512, 464]), ("0.33.0", [2000])])
def test_a_lone_long_prefill_is_capped_in_0_19_only(tmp_path, version, chunks):
    """0.33 lifts --long-prefill-token-threshold while one request is eligible (nobody to starve); 0.19 caps every
    prefill. servesim lifted it in both (round 75)."""
    out = tmp_path / version
    assert main(["vllm", "--vllm-version", version, "--quiet", "--out", str(out), "serve", MODEL, "--max-model-len",
                 "8k", "--long-prefill-token-threshold", "512", "--", "bench", "serve", "--num-prompts", "1",
                 "--random-input-len", "2000", "--random-output-len", "3"]) == 0
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps.prefill_tokens[steps.prefill_tokens > 0].tolist() == chunks


@pytest.mark.parametrize("flags, v019, v033", [
    (["--long-prefill-token-threshold", "200000"], 200000, "is above max_model_len"),  # 0.19: partial prefills only
    (["--long-prefill-token-threshold", "-5"], 0, "must be >= 0 (vLLM 0.33.0's SchedulerConfig)"),  # 0.19: no floor
    (["--max-num-partial-prefills", "2"], "Concurrent Partial Prefill is not supported", "not a flag of vLLM 0.33"),
    (["--max-long-partial-prefills", "2"], "Concurrent Partial Prefill is not supported", "not a flag of vLLM 0.33"),
])
def test_prefill_limits_as_each_release_checks_them(tmp_path, capsys, flags, v019, v033):
    """Lines 0.19 starts and servesim refused, or 0.19 refuses and servesim took (round 75)."""
    for version, expected in (("0.19.0", v019), ("0.33.0", v033)):
        code = main(["vllm", "--vllm-version", version, "--config", "serve", MODEL, *flags])
        captured = capsys.readouterr()
        if isinstance(expected, str):
            assert code == 2 and expected in captured.err, (version, captured.err)
        else:
            assert code == 0 and yaml.safe_load(captured.out)["engine"]["long_prefill_token_threshold"] == expected


@pytest.mark.parametrize("version, fits", [("0.19.0", 8192), ("0.33.0", 8176)])
def test_the_start_up_check_counts_the_null_block_in_0_33_only(tmp_path, capsys, version, fits):
    """1 GiB of Llama-3.1-8B KV is 512 blocks of 16 tokens: 0.19 checks one max-length request against all of
    them, 0.33 against those beside its null block. servesim refused 8,192 and fitted auto to 8,176 in 0.19 too
    (round 75)."""
    line = ["serve", MODEL, "--kv-cache-memory-bytes", "1G"]
    assert main(["vllm", "--vllm-version", version, "--config", *line, "--max-model-len", "auto"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["engine"]["max_model_len"] == fits
    assert main(["vllm", "--vllm-version", version, "--config", *line, "--max-model-len", str(fits + 1)]) == 2
    assert f"cannot hold one request of max_model_len={fits + 1:,}" in capsys.readouterr().err


def test_a_choice_vllm_takes_and_servesim_does_not_model_is_said_so(capsys):
    """0.33's --kv-cache-dtype nvfp4 is a value vLLM takes: the refusal read as if vLLM refused it (round 75)."""
    assert main(["vllm", "--config", "serve", MODEL, "--kv-cache-dtype", "nvfp4"]) == 2
    assert "--kv-cache-dtype: not modelled: servesim's choices are 'auto'" in capsys.readouterr().err


def _scheduler(serve: list[str], version: str = "0.33.0"):
    """The scheduler a serve line runs, resolved."""
    from servesim.simulator.config import load, override

    cmd = read([MODEL, *serve], [], version)
    return load(None, [override(k, v) for k, v in cmd.settings.items()]).scheduler


DRAFT = {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4}
EAGLE_PARALLEL = {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 4,
                  "parallel_drafting": True}


@pytest.mark.parametrize("config, flags, step", [
    (DRAFT, [], 8192 - 1024),  # a draft model adds a slot to each of max_num_seqs' sequences
    (EAGLE_PARALLEL, [], 8192 - 3 * 1024),  # parallel drafting, k - 1 masked slots each
    (DRAFT, ["--max-num-seqs", "256", "--max-num-batched-tokens", "256"], 256),  # 0 is read as unset: all
    (EAGLE_PARALLEL, ["--max-num-seqs", "256", "--max-num-batched-tokens", "512"], "would schedule nothing"),
    (DRAFT, ["--no-enable-chunked-prefill", "--max-model-len", "8192", "--max-num-batched-tokens", "8192",
             "--max-num-seqs", "16"], "never start a prompt longer than that"),
])
def test_0_19_keeps_the_drafters_slots_out_of_the_step(config, flags, step):
    """vLLM 0.19's _set_max_num_scheduled_tokens: the step schedules the budget less max_num_new_slots_for_drafting
    x max_num_seqs (round 74: servesim scheduled the whole budget)."""
    serve = ["--speculative-config", json.dumps(config), *flags]
    if isinstance(step, str):
        with pytest.raises(ConfigError, match=step):
            _scheduler(serve, "0.19.0")
    else:
        assert _scheduler(serve, "0.19.0").max_num_batched_tokens == step
        assert _scheduler(serve).max_num_batched_tokens == min([8192] + [int(f) for f in flags[1:2]])  # 0.33: none


def test_a_given_step_must_leave_the_drafters_slots():
    """0.19's SchedulerConfig field (no flag of its own): a given max_num_scheduled_tokens stands if it leaves the
    slots, else vLLM refuses it."""
    from servesim.simulator.config import load

    sets = ["speculative.method=fixed", "speculative.drafting_slots_per_seq=1", "engine.vllm_defaults=0.19.0"]
    assert load(None, sets + ["engine.max_num_scheduled_tokens=7000"]).scheduler.max_num_batched_tokens == 7000
    with pytest.raises(ConfigError, match="7500 leaves less than the drafter's 1024 slots"):
        load(None, sets + ["engine.max_num_scheduled_tokens=7500"])


@pytest.mark.parametrize("method, k, budget, active", [("dflash", 7, 2048, 256), ("dspark", 7, 2048, 292),
                                                       ("dflash", 3, 8192, 1024), ("eagle3", 7, 2048, 1024)])
def test_0_33_dflash_and_dspark_run_as_many_requests_as_their_draft_pass_holds(method, k, budget, active):
    """0.33 lowers max_num_active_seqs to budget // the draft pass's query tokens per request (DFlash k + 1, DSpark
    k): the scheduler ran max_num_seqs requests at once (round 74)."""
    config = {"method": method, "model": f"z-lab/{method}-llama", "num_speculative_tokens": k}
    serve = ["--speculative-config", json.dumps(config), "--max-num-batched-tokens", str(budget)]
    assert _scheduler(serve).max_num_seqs == active


@pytest.mark.parametrize("version, most", [("0.33.0", 256), ("0.19.0", 128)])
def test_a_draft_models_slots_come_out_of_the_budget(tmp_path, version, most):
    """A draft model takes a slot beside each scheduled request's tokens: 0.33 charges it request by request
    (a step's tokens plus one per request stay within the budget), 0.19 keeps max_num_seqs of them out of every
    step (256 - 128). servesim scheduled the whole budget in both (round 74)."""
    out = tmp_path / version
    assert main(["vllm", "--vllm-version", version, "--quiet", "--out", str(out), "serve", MODEL,
                 "--max-num-batched-tokens", "256", "--max-num-seqs", "128", "--speculative-config",
                 json.dumps(DRAFT), "--", "bench", "serve", "--num-prompts", "200", "--random-input-len", "64",
                 "--random-output-len", "32"]) == 0
    steps = pd.read_parquet(out / "steps.parquet")
    charged = steps.scheduled_tokens + (steps.num_seqs if version == "0.33.0" else 0)
    assert charged.max() == most  # the budget binds, and is never passed


@pytest.mark.parametrize("version, prefix, cached", [("0.33.0", 1000, 992), ("0.33.0", 992, 976),
                                                     ("0.19.0", 1000, 976), ("0.19.0", 992, 976)])
def test_033_lookahead_hashes_prove_an_eagle_hits_last_block(tmp_path, version, prefix, cached):
    """0.33 hashes each block with the token after it where EAGLE-type drafts read it (prefix caching on, no KV
    connector), and then drops no block: a 1,000-token shared prefix keeps its 62 blocks; one of 992 ends at a
    block's edge, so its token after differs and 61 stay. servesim dropped the last block as 0.19 does
    (round 76)."""
    out = tmp_path / "run"
    spec = {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3}
    assert main(["vllm", "--vllm-version", version, "--quiet", "--out", str(out), "serve", MODEL,
                 "--speculative-config", json.dumps(spec), "--", "bench", "serve", "--dataset-name",
                 "prefix_repetition", "--prefix-repetition-prefix-len", str(prefix), "--prefix-repetition-suffix-len",
                 "100", "--prefix-repetition-num-prefixes", "1", "--prefix-repetition-output-len", "10",
                 "--num-prompts", "10", "--request-rate", "1"]) == 0
    assert sorted(set(pd.read_parquet(out / "requests.parquet").cached_tokens)) == [0, cached]


@pytest.mark.parametrize("flags, setting", [([], "speculative.lookahead_block_hashes"),
                                            (["--kv-transfer-config", '{"kv_connector": "NixlConnector", '
                                                                      '"kv_role": "kv_both"}'],
                                             "speculative.eagle_block_drop"),
                                            (["--no-enable-prefix-caching"], None)])
def test_the_eagle_hit_rule_follows_prefix_caching_and_kv_connectors(flags, setting):
    spec = {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3}
    s = read([MODEL, "--speculative-config", json.dumps(spec), *flags], []).settings
    rules = {k for k in ("speculative.lookahead_block_hashes", "speculative.eagle_block_drop") if s.get(k)}
    assert rules == ({setting} if setting else set())  # none without prefix caching: nothing to say of a hit


def test_round_76_lines_read_as_vllm_reads_them(capsys):
    """A count vLLM's lax SpeculativeConfig takes ("3", 3.0) was refused; 0.19's default
    --gpu-memory-utilization beside --kv-cache-memory-bytes was said to have no effect, though the line left it."""
    for k in ("3", 3.0):
        spec = json.dumps({"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4})
        assert read([MODEL, "--speculative-config", spec], []).settings["speculative.num_speculative_tokens"] == 3
    capsys.readouterr()
    assert main(["vllm", "--vllm-version", "0.19.0", "--config", "serve", MODEL, "--kv-cache-memory-bytes", "10G",
                 "--max-model-len", "8192"]) == 0
    assert "has no effect" not in capsys.readouterr().err


@pytest.mark.parametrize("sets, says", [
    (["speculative.drafting_slots_per_seq=65", "engine.max_num_batched_tokens=64", "engine.max_num_seqs=8"],
     "leave 0 of the 64-token budget for a request: vLLM 0.33.0 would schedule nothing"),
    (["speculative.drafting_slots_per_seq=4", "engine.enable_chunked_prefill=false", "engine.max_model_len=4096",
      "engine.max_num_batched_tokens=4096"], "leave 4092 of the 4096-token budget for a request: vLLM 0.33.0 would "
                                             "never start a prompt longer than that"),
    (["speculative.lookahead_block_hashes=true", "speculative.eagle_block_drop=true"], "two rules for a hit's"),
    (["speculative.lookahead_block_hashes=true", "engine.vllm_defaults=0.19.0"], "0.19 has no lookahead block"),
    # round 94: 0.33's DFlash/DSpark draft pass lowered a 0.19 run's running requests to 4
    (["speculative.draft_pass_tokens=64", "engine.max_num_batched_tokens=256", "engine.vllm_defaults=0.19.0"],
     "speculative.draft_pass_tokens: 64: vLLM 0.19 has no draft pass of its own"),
])
def test_round_77_drafter_settings_vllm_would_hang_on_or_that_contradict_are_one_line(sets, says):
    """A 0.33 draft model's slots leaving no room for a request ran into an internal error (nothing schedulable);
    two rules for an EAGLE hit's last block, or 0.33's under 0.19, were taken silently."""
    from servesim.simulator.config import load

    with pytest.raises(ConfigError, match=re.escape(says)):
        load(None, ["speculative.method=fixed", *sets])


def test_a_local_attention_request_larger_than_a_0_19_override_is_one_line(tmp_path, capsys):
    """0.19 starts on an override below one long request; with local-attention groups the request needs their
    blocks too, and the run ended in an internal error instead of the one line a dense model gets (round 77)."""
    assert main(["run", "--quiet", "--set", "model=gpt-oss-120b", "--set", "engine.vllm_defaults=0.19.0", "--set",
                 "engine.max_model_len=32768", "--set", "engine.num_gpu_blocks_override=1500", "--set",
                 "workload.num_requests=1", "--set", "workload.prompt_tokens={dist: fixed, value: 20000}", "--set",
                 "workload.output_tokens={dist: fixed, value: 10}", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # 1,250 full blocks and, 0.19 asking its sliding group for
    assert len(err) == 1 and "a request of 20,000 tokens" in err[0] and "needs 2,500 blocks" in err[0], err  # all


def test_parallel_drafting_is_read_not_recorded():
    """It sets the drafter's slots, so it is no longer listed as not modelled (round 77)."""
    cmd = read([MODEL, "--speculative-config", json.dumps(DRAFT | {"parallel_drafting": True})], [], "0.19.0")
    assert cmd.settings["speculative.drafting_slots_per_seq"] == 4
    assert not any("parallel_drafting" in key for key in cmd.not_modelled)


def test_a_0_33_line_from_a_0_19_scenario_says_what_0_33_refuses(capsys):
    """A 0.19 threshold above max_model_len printed as a 0.33 line without a word; 0.33 refuses it (round 76)."""
    sets = ["engine.vllm_defaults=0.19.0", "engine.long_prefill_token_threshold=200000", "engine.max_model_len=4096"]
    for version, said in (("0.33.0", True), ("0.19.0", False)):
        assert main(["config", "--vllm", "--vllm-version", version, *sum((["--set", s] for s in sets), [])]) == 0
        assert ("refuses --long-prefill-token-threshold 200000 above" in capsys.readouterr().err) == said


@pytest.mark.parametrize("model, sets, error", [
    ("openai/gpt-oss-120b", ["--prefix-cache-retention-interval", "256"], None),
    ("openai/gpt-oss-120b", ["--prefix-cache-retention-interval", "200"], "not a multiple of block_size"),
    (MODEL, ["--prefix-cache-retention-interval", "256"], "no sliding-window KV cache group"),
    (SCOUT, ["--prefix-cache-retention-interval", "256"], "no sliding-window KV cache group"),  # chunks are dense
])
def test_the_sliding_window_retention_interval_is_read_and_checked_as_vllm_checks_it(model, sets, error):
    from servesim.simulator.config import load

    cmd = read([model, "-tp", "8", *sets], [])
    assert cmd.settings["engine.prefix_cache_retention_interval"] == int(sets[1])
    overrides = [f"{k}={json.dumps(v)}" for k, v in cmd.settings.items()]
    if error is None:
        assert load(None, overrides).scenario.engine.prefix_cache_retention_interval == 256
    else:
        with pytest.raises(ConfigError, match=error):
            load(None, overrides)
    with pytest.raises(ConfigError, match="vLLM 0.19 has no such setting"):
        load(None, ["model=gpt-oss-120b", "engine.vllm_defaults=0.19.0", "engine.prefix_cache_retention_interval=256"])


def test_a_retention_interval_of_none_keeps_every_window_block_and_goes_back_to_the_line(capsys):
    """vLLM parses the flag with optional_type: `None` is its own setting (every sliding-window block cached)."""
    cmd = read(["openai/gpt-oss-120b", "--prefix-cache-retention-interval", "None"], [])
    assert "engine.prefix_cache_retention_interval" in cmd.settings
    assert cmd.settings["engine.prefix_cache_retention_interval"] is None
    capsys.readouterr()
    assert main(["config", "--vllm", "--set", "model=gpt-oss-120b",
                 "--set", "engine.prefix_cache_retention_interval=null"]) == 0
    assert "--prefix-cache-retention-interval None" in capsys.readouterr().out


@pytest.mark.parametrize("sets, noted", [
    (["engine.prefix_cache_retention_interval=0"], True),  # 0.33's sparse windows: 0.19 keeps every block
    (["engine.prefix_cache_retention_interval=null"], False),  # what 0.19 does
    (["engine.vllm_defaults=0.19.0"], False),  # a 0.19 scenario: simulated as 0.19 keeps them
    (["model=llama-3.1-8b"], False)])  # no window: nothing to retain
def test_a_019_line_says_when_it_keeps_windows_a_033_scenario_did_not(sets, noted, capsys):
    """Speaking 0.19, a None interval was noted as lost and 0's sparse retention was not (round 80, inverted)."""
    argv = ["config", "--vllm", "--vllm-version", "0.19.0", "--set", "model=gpt-oss-120b"]
    assert main(argv + [a for s in sets for a in ("--set", s)]) == 0
    err = capsys.readouterr().err
    assert ("prefix_cache_retention_interval=0 has no flag in vLLM 0.19.0: it keeps every sliding-window block "
            "cached" in err) == noted and ("interval=None" not in err)


@pytest.mark.parametrize("version, flag, config, says", [
    ("0.33.0", "--kv-transfer-config", {"kv_connector": "NixlConnector"}, ".kv_role: needed beside kv_connector"),
    ("0.33.0", "--kv-transfer-config", {"kv_connector": "NixlConnector", "kv_role": "bogus"}, ".kv_role: 'bogus'"),
    ("0.33.0", "--kv-transfer-config", {"kv_conector": "NixlConnector", "kv_role": "kv_both"},
     ".kv_conector: not a field of vLLM 0.33.0's KVTransferConfig"),
    ("0.33.0", "--kv-transfer-config", {"kv_role": "kv_both"}, ".kv_connector: not set"),
    ("0.33.0", "--kv-transfer-config", {"kv_connector": "P2pNcclConnector", "kv_role": "kv_both"},
     ".kv_connector: 'P2pNcclConnector': vLLM 0.33.0 registers no such connector"),  # 0.19's only
    ("0.19.0", "--kv-transfer-config", {"kv_connector": "FooConnector", "kv_role": "kv_both"},
     ".kv_connector: 'FooConnector': vLLM 0.19.0 registers no such connector"),
    ("0.19.0", "--kv-events-config", {"bogus_key": 1}, ".bogus_key: not a field of vLLM 0.19.0's KVEventsConfig")])
def test_a_kv_config_vllm_refuses_is_refused(version, flag, config, says):
    """Recorded as not modelled, they still turned the hybrid manager off; vLLM's config classes refuse them
    (KVTransferConfig.__post_init__, KVConnectorFactory; round 80)."""
    with pytest.raises(ConfigError, match=f"vllm serve {flag}{re.escape(says)}"):
        read(["openai/gpt-oss-120b", flag, json.dumps(config)], [], version=version)


@pytest.mark.parametrize("model, said", [("gpt-oss-120b", True), ("llama-3.1-8b", False)])
def test_a_019_scenario_spoken_as_033_keeps_its_windows(model, said, capsys):
    """0.19 keeps every window block cached: its line for 0.33 says None, or 0.33 would run its sparse default."""
    assert main(["config", "--vllm", "--vllm-version", "0.33.0", "--set", f"model={model}",
                 "--set", "engine.vllm_defaults=0.19.0"]) == 0
    assert ("--prefix-cache-retention-interval None" in capsys.readouterr().out) == said


def test_a_label_with_a_slash_is_taken_where_the_result_filename_names_the_file(tmp_path):
    """vLLM names the result after --label only without --result-filename; servesim refused the label anyway."""
    out = tmp_path / "v"
    assert main(["vllm", "--out", str(out), "serve", MODEL] + BENCH +
                ["--save-result", "--result-filename", "r.json", "--label", "../y"]) == 0
    assert json.loads((out / "r.json").read_text())["label"] == "../y"


def test_a_refused_line_is_one_line_even_after_a_warning_its_client_earns(tmp_path, capsys):
    """The client's --ignore-eos warning came before the serve line's refusal: two lines, not one (round 80)."""
    bench = ["--", "bench", "serve", "--dataset-name", "prefix_repetition", "--num-prompts", "20"]
    assert main(["vllm", "--out", str(tmp_path / "v"), "serve", "openai/gpt-oss-120b",
                 "--prefix-cache-retention-interval", "7", *bench]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--prefix-cache-retention-interval: 7 is not a multiple" in err[0], err


def test_every_built_in_checkpoint_is_read_from_its_hf_id():
    """A built-in made from a checkpoint's config.json answers to that HF id, so `config --vllm` prints a line
    vLLM can load and `servesim vllm serve <id>` reads it (llama-3-8b and qwen2.5-7b had none: round 82)."""
    from servesim.simulator.model_arch import builtin_model_names

    folder = pathlib.Path(__file__).parents[1] / "simulator" / "data" / "models"
    for name in builtin_model_names():
        first = (folder / f"{name}.yaml").read_text().splitlines()[0]
        checkpoint = re.match(r"# ([\w.-]+/[\w.-]+) \(config\.json", first)
        if checkpoint:  # the synthetic test models name none
            assert HF_IDS.get(checkpoint[1]) == name, name


def test_a_checkpoint_of_a_built_in_shape_keeps_its_own_length(tmp_path):
    """Round 100: Qwen3-30B-A3B-Instruct-2507 was read as Qwen3-30B-A3B, 40,960 positions, and its model card's
    `vllm serve ... --max-model-len 262144` refused; its config.json reads 262,144. The built-in's profiles apply."""
    tables = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "gpu" / "aiconfigurator"
    if not tables.is_dir():  # its MoE profile is composed from them
        pytest.skip(f"kernel tables not found at {tables} (../shared is absent)")
    assert main(["vllm", "--gpu", "h200-sxm", "--out", str(tmp_path), "--quiet", "serve",
                 "Qwen/Qwen3-30B-A3B-Instruct-2507", "--max-model-len", "262144", "--", "bench", "serve",
                 "--num-prompts", "5"]) == 0
    rs = load(str(tmp_path / "config.yaml"))
    assert (rs.arch.name, rs.max_model_len) == ("qwen3-30b-a3b", 262144) and "qwen3-30b-a3b" in rs.profile.name
    assert load(None, ["model=Qwen/Qwen3-30B-A3B"]).arch.max_position_embeddings == 40960
    # round 101: Llama 4 Scout's base checkpoint reads 262,144 positions, its Instruct one 10,485,760
    from servesim.simulator.model_arch import HF_ID_CHANGES

    assert [load_model(m).max_position_embeddings for m in ("meta-llama/Llama-4-Scout-17B-16E",
                                                            "meta-llama/Llama-4-Scout-17B-16E-Instruct")] \
        == [262144, 10485760]
    hf = {v: k for k, v in reversed(list(HF_IDS.items())) if k not in HF_ID_CHANGES}
    assert hf["llama-4-scout"] == "meta-llama/Llama-4-Scout-17B-16E-Instruct"  # the built-in's own checkpoint


@pytest.mark.parametrize("version, line, flag, says", [
    # round 83: launch modes and expert load balancing vLLM refuses at start were simulated
    ("0.33.0", [MODEL, "-dp", "2", "--data-parallel-external-lb"], "--data-parallel-external-lb", "without --data-parallel-rank"),
    ("0.19.0", [MODEL, "-dp", "2", "--data-parallel-external-lb"], "--data-parallel-external-lb", "without --data-parallel-rank"),
    ("0.33.0", [MODEL, "-dp", "2", "--data-parallel-hybrid-lb"], "--data-parallel-hybrid-lb", "--data-parallel-size-local"),
    ("0.33.0", [MODEL, "-dp", "2", "--data-parallel-rank", "1"], "--data-parallel-rank", "a dense model"),
    ("0.33.0", [MOE, "-dp", "2", "--enable-expert-parallel", "--data-parallel-size-local", "4"],
     "--data-parallel-size-local", "4 above --data-parallel-size 2"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--data-parallel-size-local", "0",
                "--data-parallel-hybrid-lb"], "--data-parallel-size-local", "0 under hybrid balancing"),  # round 85: exit 3
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--data-parallel-size-local", "-1"],
     "--data-parallel-size-local", "must be >= 0 (vLLM 0.33.0's ParallelConfig), got -1"),
    ("0.33.0", [MOE, "-dp", "2", "--enable-expert-parallel", "--data-parallel-rank", "-1"], "--data-parallel-rank",
     "must be >= 0 (vLLM 0.33.0's ParallelConfig), got -1"),  # round 85: simulated as rank -1's one rank
    ("0.19.0", [MOE, "-dp", "2", "--enable-expert-parallel", "--data-parallel-rank", "2"], "--data-parallel-rank",
     "2 outside the ranks 0..1"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--data-parallel-size-local", "2",
                "--data-parallel-start-rank", "4"], "--data-parallel-start-rank", "4 outside the ranks 0..3"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--nnodes", "3"], "--nnodes", "3 does not divide the 4 GPUs"),
    ("0.19.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--nnodes", "2", "--node-rank", "2"], "--node-rank",
     "2 outside the nodes 0..1"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--nnodes", "2", "--data-parallel-external-lb"],
     "--data-parallel-external-lb", "--nnodes 2 not a multiple of -dp 4"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--nnodes", "2", "--data-parallel-rank", "1"],
     "--data-parallel-size-local", "2 (the ranks on one of 2 nodes) beside an external balancer's rank"),
    # round 86/87: taken, where vLLM's serve CLI or ParallelConfig refuses them
    ("0.33.0", [MOE, "--enable-expert-parallel", "--data-parallel-external-lb", "--data-parallel-rank", "0"],
     "--data-parallel-rank", "at --data-parallel-size 1 (external balancing needs data parallelism)"),
    ("0.19.0", [MOE, "--enable-expert-parallel", "--data-parallel-hybrid-lb", "--data-parallel-size-local", "1"],
     "--data-parallel-hybrid-lb", "at --data-parallel-size 1"),  # local 1: hybrid is external
    ("0.33.0", [MOE, "-dp", "2", "--enable-expert-parallel", "--data-parallel-rank", "1", "--data-parallel-hybrid-lb"],
     "--data-parallel-hybrid-lb", "beside vllm serve --data-parallel-rank (one data-parallel balancing mode only)"),
    ("0.19.0", [MOE, "-dp", "2", "--enable-expert-parallel", "--data-parallel-rank", "1",
                "--data-parallel-start-rank", "0"], "--data-parallel-start-rank", "beside vllm serve --data-parallel-rank"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--nnodes", "2", "--node-rank", "1"], "--node-rank",
     "1: under the internal balancer only the node of rank 0 serves"),
    ("0.19.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--nnodes", "4", "--node-rank", "2"], "--node-rank",
     "2: under the internal balancer"),
    ("0.19.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--nnodes", "2", "--data-parallel-backend", "ray"],
     "--data-parallel-backend", "ray with --nnodes 2"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--data-parallel-size-local", "2",
                "--data-parallel-start-rank", "3"], "--data-parallel-start-rank", "ranks 3..4 run past"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--data-parallel-multi-port-external-lb"],
     "--data-parallel-size-local", "left out with --data-parallel-multi-port-external-lb"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--data-parallel-multi-port-external-lb",
                "--data-parallel-size-local", "2", "--data-parallel-start-rank", "3"], "--data-parallel-start-rank",
     "the supervised ranks 3..4 run past"),
    ("0.33.0", [MODEL, "-dp", "4", "--data-parallel-multi-port-external-lb", "--data-parallel-size-local", "2"],
     "--data-parallel-multi-port-external-lb", "a dense model"),
    # round 88: multi-port supervisor, -dcp, gRPC, EPLB, elastic EP and fault-tolerance rules vLLM applies
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--data-parallel-multi-port-external-lb",
                "--data-parallel-size-local", "2", "--port", "9255"], "--data-parallel-supervisor-port",
     "9256 inside the child ranks' ports 9255..9256"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--data-parallel-multi-port-external-lb",
                "--data-parallel-size-local", "2", "--uds", "/tmp/s"], "--uds", "serves no Unix socket"),
    ("0.33.0", ["deepseek-ai/DeepSeek-V3", "-tp", "8", "-dcp", "3"], "--decode-context-parallel-size",
     "3 must divide --tensor-parallel-size (8)"),  # latent attention too
    ("0.19.0", [MODEL, "-dcp", "0"], "--decode-context-parallel-size", "0: vLLM 0.19.0 refuses it"),
    ("0.19.0", [MOE, "--grpc"], "--grpc", "no vllm bench serve backend reaches"),
    ("0.19.0", [MOE, "--enable-expert-parallel", "--enable-eplb", "-pcp", "2"], "--enable-eplb", "without tensor or data parallelism"),
    ("0.33.0", [MOE, "-dp", "2", "--enable-expert-parallel", "--enable-eplb", "--eplb-config",
                '{"num_redundant_experts": 3}'], "--eplb-config", "128 experts + 3 redundant do not divide over the 2"),
    ("0.33.0", [MOE, "-dp", "2", "--enable-expert-parallel", "--enable-elastic-ep"], "--enable-elastic-ep",
     "without --enable-eplb"),
    ("0.19.0", [MOE, "-dp", "2", "--enable-expert-parallel", "--enable-elastic-ep", "--enable-eplb",
                "--data-parallel-rank", "0"], "--enable-elastic-ep", "with external balancing"),
    ("0.33.0", [MOE, "-dp", "4", "--enable-expert-parallel", "--enable-elastic-ep", "--enable-eplb",
                "--elastic-ep-max-dp-size", "2"], "--elastic-ep-max-dp-size", "2 below --data-parallel-size 4"),
    ("0.33.0", [MOE, "-dp", "2", "--enable-expert-parallel", "--enable-fault-tolerance"], "--enable-fault-tolerance",
     "without external balancing"),
    ("0.33.0", [MOE, "--enable-eplb"], "--enable-eplb", "without --enable-expert-parallel"),
    ("0.19.0", [MOE, "--enable-expert-parallel", "--enable-eplb"], "--enable-eplb", "without tensor or data parallelism"),
    ("0.33.0", [MOE, "--eplb-config", '{"num_redundant_experts": 8}'], "--eplb-config", "without --enable-eplb"),
    ("0.33.0", [MOE, "--headless"], "--headless", "starts no API server"),
    ("0.33.0", [MOE, "--api-server-count", "0"], "--api-server-count", "starts no API server"),
    ("0.19.0", [MOE, "--api-server-count", "-2"], "--api-server-count", "starts no API server"),  # round 102
    ("0.33.0", ["deepseek-ai/DeepSeek-V3", "-tp", "8", "--kv-cache-dtype", "fp8_e5m2"], "--kv-cache-dtype",
     "no MLA attention backend on an NVIDIA GPU"),
])
def test_parallel_launches_vllm_refuses_are_refused(version, line, flag, says, tmp_path, capsys):
    assert main(["vllm", "--vllm-version", version, "--config", "serve", *line]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"servesim: error: vllm serve {flag}") and says in err, err


def test_what_passes_of_the_parallel_launches_is_taken(capsys):
    """An external balancer's rank on a MoE model, EPLB with TP 2, and the default all-to-all (0.33's removed pplx
    falls back to it) pass; the backend EP is timed as is no 'not modelled' warning."""
    assert main(["vllm", "--config", "serve", MOE, "-dp", "2", "--enable-expert-parallel", "--data-parallel-rank",
                 "1"]) == 0
    assert main(["vllm", "--config", "serve", MOE, "-tp", "2", "--enable-expert-parallel", "--enable-eplb"]) == 0
    capsys.readouterr()
    for backend in ("allgather_reducescatter", "pplx"):
        assert main(["vllm", "--config", "serve", MOE, "-dp", "2", "--enable-expert-parallel", "--all2all-backend",
                     backend]) == 0
        assert "--all2all-backend" not in capsys.readouterr().err
    untimed = "its dispatch and combine kernels are not timed; expert parallelism is timed as vLLM's default"
    assert main(["vllm", "--vllm-version", "0.19.0", "--config", "serve", MOE, "-dp", "2", "--enable-expert-parallel",
                 "--all2all-backend", "pplx"]) == 0  # 0.19's pplx is a backend of its own: not timed
    assert f"engine.all2all_backend=pplx: {untimed}" in capsys.readouterr().err
    # r165: DeepEP's backends ran silently on the NCCL collectives' times (the low-latency one changing the budget)
    for backend, budget in (("deepep_low_latency", ", with the batched DP MoE's default budget"),
                            ("deepep_high_throughput", "")):
        assert main(["vllm", "--config", "serve", MOE, "-dp", "2", "--enable-expert-parallel", "--all2all-backend",
                     backend]) == 0
        assert f"engine.all2all_backend={backend}: {untimed} backend's, allgather_reducescatter (NCCL all-gather and " \
               f"reduce-scatter){budget}\n" in capsys.readouterr().err
    assert main(["vllm", "--config", "serve", MOE, "-dp", "2", "--enable-expert-parallel", "--all2all-backend",
                 "deepep_low_latency", "--max-num-batched-tokens", "4096"]) == 0  # r166: not its default budget
    assert f"engine.all2all_backend=deepep_low_latency: {untimed} backend's, allgather_reducescatter (NCCL all-gather " \
           f"and reduce-scatter)\n" in capsys.readouterr().err
    for version, backend in (("0.33.0", "mori"), ("0.19.0", "moonep")):  # each release's own choices
        with pytest.raises(ConfigError, match=f"engine.all2all_backend: {backend} is no choice of vLLM {version}'s"):
            load(None, ["model=qwen3-30b-a3b", f"engine.vllm_defaults={version}", f"engine.all2all_backend={backend}"])


@pytest.mark.parametrize("version, flags, reached", [
    ("0.33.0", ["--data-parallel-external-lb", "--data-parallel-rank", "1"], 1),
    ("0.19.0", ["--data-parallel-rank", "3"], 1),
    ("0.33.0", ["--data-parallel-size-local", "2", "--data-parallel-hybrid-lb"], 2),
    ("0.33.0", ["--data-parallel-size-local", "1", "--data-parallel-hybrid-lb"], 1),  # vLLM switches to external
    ("0.33.0", ["--data-parallel-size-local", "2", "--data-parallel-start-rank", "0"], 2),  # a start rank: hybrid
    ("0.19.0", ["--data-parallel-size-local", "2", "--data-parallel-start-rank", "0"], None),  # 0.19: rank 0 is not
    ("0.33.0", ["--data-parallel-size-local", "4", "--data-parallel-hybrid-lb"], None),  # all local: internal
    ("0.33.0", ["--nnodes", "2", "--node-rank", "1", "--data-parallel-hybrid-lb"], 2),  # round 85: was refused
    ("0.19.0", ["--nnodes", "4", "--node-rank", "3", "--data-parallel-external-lb"], 1),  # the node names its rank
    # round 87: 0.33's multi-port supervisor: one server per local rank, the client's --port the first one's
    ("0.33.0", ["--data-parallel-multi-port-external-lb", "--data-parallel-size-local", "2"], 1),
    ("0.33.0", ["--data-parallel-size-local", "1", "--data-parallel-start-rank", "2"], 1),  # hybrid of 1: external
    # round 88: 0.19 replaces a given external rank by the node's under --nnodes (it was refused as out of range)
    ("0.19.0", ["--nnodes", "2", "--node-rank", "1", "--data-parallel-external-lb", "--data-parallel-rank", "9"], 1),
])
def test_a_balancing_mode_serves_the_ranks_its_api_server_reaches(version, flags, reached, capsys):
    """Round 84: an external balancer's rank, or hybrid balancing's node, was simulated as the whole deployment
    behind one balancer (the bench client reached 4 ranks, not 1 or 2) with a 'not modelled' warning."""
    command = read([MOE, "-dp", "4", "--enable-expert-parallel", *flags], [], version)
    assert command.settings.get("cluster.dp_ranks_reached") == reached
    assert not any(flag.startswith("--data-parallel-") for flag in command.not_modelled) or \
        version == "0.19.0" and reached is None  # 0.19's start rank 0 with a local size: placement, not balancing
    if reached is not None:  # config --vllm speaks it back as hybrid balancing, which reads the same
        line, notes = serve_command({"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm"}, "engine": {
            "data_parallel_size": 4, "enable_expert_parallel": True}, "cluster": {"dp_ranks_reached": reached}})
        assert read(line.split()[2:], []).settings["cluster.dp_ranks_reached"] == reached
        assert any(f"serves {reached} of the 4 DP ranks" in n for n in notes)


def test_a_quantized_checkpoint_refuses_another_format_everywhere():
    """Round 83: capacity and run took awq on DeepSeek-V3's fp8 checkpoint (weights 78 -> 42 GiB), which servesim
    vllm refuses as vLLM does; its own format is no change."""
    from servesim.simulator.config import load

    with pytest.raises(ConfigError, match=r"deepseek-v3's checkpoint is already quantized \(fp8\): vLLM refuses awq"):
        load(None, ["model=deepseek-v3", "engine.tensor_parallel_size=8", "engine.quantization=awq"])
    with pytest.raises(ConfigError, match="engine.kv_cache_dtype: fp8_e5m2 with deepseek-v3's latent attention"):
        load(None, ["model=deepseek-v3", "engine.tensor_parallel_size=8", "engine.kv_cache_dtype=fp8_e5m2"])
    fp8 = load(None, ["model=deepseek-v3", "engine.tensor_parallel_size=8", "engine.quantization=fp8"])
    assert fp8.arch == load(None, ["model=deepseek-v3", "engine.tensor_parallel_size=8"]).arch


def test_vllm_serve_without_a_model_serves_vllms_default(tmp_path, monkeypatch):
    """Round 90: `vllm serve` alone was refused ("give the model"); vLLM's model argument is optional and it serves
    ModelConfig's default, Qwen/Qwen3-0.6B, in both releases."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ConfigError, match="none given: vLLM serves its default, Qwen/Qwen3-0.6B is neither"):
        read([], [])
    snap = tmp_path / "hub" / "models--Qwen--Qwen3-0.6B" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    qwen3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
             "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
             "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960, "torch_dtype": "bfloat16"}
    (snap / "config.json").write_text(json.dumps(qwen3))
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("abc")
    for version in ("0.33.0", "0.19.0"):
        assert read(["--max-num-seqs", "8"], [], version).settings["model"] == "Qwen/Qwen3-0.6B"


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_disable_sliding_window_caps_the_length_at_the_window_and_attends_to_the_whole_context(version):
    """Round 90: --disable-sliding-window was recorded as not modelled while vLLM caps max_model_len at the model's
    window (refusing a longer one) and then runs every layer on the whole context (config/model.py)."""
    with pytest.raises(ConfigError, match="--max-model-len: 8192 is longer than the 4096-token sliding window"):
        read(["mistralai/Mistral-7B-v0.1", "--disable-sliding-window", "--max-model-len", "8192"], [], version)
    cmd = read(["mistralai/Mistral-7B-v0.1", "--disable-sliding-window"], [], version)
    assert cmd.settings["model.max_position_embeddings"] == 4096 and cmd.settings["model.sliding_window"] is None
    assert not cmd.not_modelled
    oss = read(["openai/gpt-oss-120b", "--disable-sliding-window"], [], version).settings
    assert oss["model.max_position_embeddings"] == 128 and oss["model.num_local_attention_layers"] is None
    llama = read([MODEL, "--disable-sliding-window"], [], version)  # no window: nothing changes
    assert not any(k.startswith("model.") for k in llama.settings) and not llama.not_modelled


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
@pytest.mark.parametrize("flag, config, needle", [
    ("-cc", {"foo": 1}, "--compilation-config.foo: not a field of vLLM {v}'s CompilationConfig"),
    ("-cc", {"mode": 7}, "--compilation-config.mode: one of NONE, STOCK_TORCH_COMPILE, DYNAMO_TRACE_ONCE, "
                         "VLLM_COMPILE (or 0-3), got 7"),
    ("-cc", {"mode": "3"}, "--compilation-config.mode: one of NONE"),  # a text is a name (validate_mode_before)
    ("-cc", {"mode": "fastest"}, "--compilation-config.mode: one of NONE, STOCK_TORCH_COMPILE"),
    ("--attention-config", {"bogus": 1}, "--attention-config.bogus: not a field of vLLM {v}'s AttentionConfig"),
    ("--kernel-config", {"bogus": 1}, "--kernel-config.bogus: not a field of vLLM {v}'s KernelConfig"),
    ("--eplb-config", {"num_redundant_experts": -1}, "--eplb-config.num_redundant_experts: must be >= 0 (vLLM {v}'s "
                                                     "EPLBConfig), got -1"),
    ("--eplb-config", {"log_balancedness": True, "log_balancedness_interval": 0},
     "--eplb-config.log_balancedness_interval: must be "),
    ("--eplb-config", {"policy": "greedy"}, "--eplb-config.policy: one of default"),
])
def test_json_config_flags_take_their_classes_fields_and_bounds(version, flag, config, needle):
    """Round 88: -cc, --attention-config, --kernel-config and --eplb-config took any key and value (vLLM's @config
    forbids unknown keys; its EPLBConfig bounds its numbers)."""
    with pytest.raises(ConfigError, match=re.escape(needle.format(v=version))):
        read([MODEL, flag, json.dumps(config)], [], version)


def test_eplb_numbers_are_read_as_vllm_reads_them():
    """A window of 0 is 0.33's refusal only (0.19's EPLBConfig has no bound there); "2" redundant experts are 2, as
    pydantic's lax mode reads them (it was an internal error counting experts with text)."""
    eplb = ["Qwen/Qwen3-30B-A3B", "-tp", "2", "--enable-expert-parallel", "--enable-eplb", "--eplb-config"]
    with pytest.raises(ConfigError, match="window_size: must be > 0 \\(vLLM 0.33.0's EPLBConfig\\), got 0"):
        read([*eplb, json.dumps({"window_size": 0})], [], "0.33.0")
    read([*eplb, json.dumps({"window_size": 0})], [], "0.19.0")
    read([*eplb, json.dumps({"num_redundant_experts": "2"})], [])  # 128 + 2 over 2 EP ranks
    with pytest.raises(ConfigError, match="128 experts \\+ 1 redundant do not divide over the 2 EP ranks"):
        read([*eplb, json.dumps({"num_redundant_experts": "1"})], [])


@pytest.mark.parametrize("version, config, needle", [
    ("0.33.0", {"compile_sizes": 5}, "--compilation-config.compile_sizes: list[int | str] | None, as vLLM's "
                                     "CompilationConfig types it, got 5"),
    ("0.19.0", {"inductor_compile_config": [1]}, "--compilation-config.inductor_compile_config: dict"),
    ("0.33.0", {"cudagraph_num_of_warmups": "two"}, "--compilation-config.cudagraph_num_of_warmups: int"),
    ("0.33.0", {"pass_config": {"fi_allreduce_fusion_max_size_mb": "big"}},
     "--compilation-config.pass_config.fi_allreduce_fusion_max_size_mb: float | None"),
    ("0.33.0", {"decoder_replay_trim_threshold": -1}, "decoder_replay_trim_threshold: must be >= 0"),
    ("0.33.0", {"custom_ops": "all"}, "--compilation-config.custom_ops: list[str]"),
])
def test_json_config_fields_of_any_type_are_read_as_vllms_annotations_say(version, config, needle):
    """Round 94: -cc's lists, dicts, numbers and texts went unchecked (only bool and Literal fields were typed), so a
    line vLLM refuses at start-up ran; now every field of builtins is validated by its annotation in vLLM's source,
    in pydantic's lax mode, as vLLM's @config dataclasses validate it."""
    with pytest.raises(ConfigError, match=re.escape(needle)):
        read([MODEL, "-cc", json.dumps(config)], [], version)


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_json_config_values_vllm_takes_are_taken_as_it_reads_them(version):
    """What vLLM takes: lax numbers ("16" is 16), None where a field's validator skips None, a 0.19 logging
    interval of 0 while logging is off (its __post_init__ checks it only then)."""
    cmd = read([MODEL, "-cc", json.dumps({"cudagraph_capture_sizes": ["16", 8], "use_inductor_graph_partition": None,
                                           "compile_sizes": [1, "cudagraph_capture_sizes"]})], [], version)
    assert cmd.settings["engine.cudagraph_capture_sizes"] == [16, 8]
    eplb = ["Qwen/Qwen3-30B-A3B", "-tp", "2", "--enable-expert-parallel", "--enable-eplb", "--eplb-config"]
    if version == "0.19.0":
        read([*eplb, json.dumps({"log_balancedness_interval": 0})], [], version)
    else:
        with pytest.raises(ConfigError, match="log_balancedness_interval: must be > 0"):
            read([*eplb, json.dumps({"log_balancedness_interval": 0})], [], version)


@pytest.mark.parametrize("argv, needle", [
    (["--node-rank", "-1"], "--node-rank: must be >= 0 (vLLM 0.33.0's ParallelConfig), got -1"),
    (["--nnodes", "0"], "--nnodes: must be >= 1 (vLLM 0.33.0's ParallelConfig)"),
    (["--data-parallel-rpc-port", "70000"], "--data-parallel-rpc-port: must be <= 65535"),
    (["--stream-interval", "0"], "--stream-interval: must be >= 1 (vLLM 0.33.0's SchedulerConfig)"),
    (["--max-logprobs", "-2"], "--max-logprobs: must be >= -1 (vLLM 0.33.0's ModelConfig)"),
])
def test_flags_vllm_bounds_are_refused_outside_them_modelled_or_not(argv, needle):
    """Round 88: unmodelled flags outside their config class's pydantic bounds were recorded, not refused: vLLM
    starts no server with --node-rank -1 or --stream-interval 0."""
    with pytest.raises(ConfigError, match=re.escape(needle)):
        read([MODEL, *argv], [])
    read([MODEL, "--max-logprobs", "-1", "--stream-interval", "1"], [])  # the bounds themselves are taken


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_the_model_is_placed_as_vllms_parser_places_it(version, tmp_path, monkeypatch):
    """Round 92: `serve A --model B` served A (vLLM moves --model's to the front and refuses A as an unrecognized
    argument); `serve --served-model-name foo` without a model served the default (vLLM refuses the line)."""
    with pytest.raises(ConfigError, match="--model: meta-llama/Llama-3.1-8B-Instruct beside the positional"):
        read(["Qwen/Qwen3-8B", "--model", "meta-llama/Llama-3.1-8B-Instruct"], [], version)
    with pytest.raises(ConfigError, match="--served-model-name: `model` should be provided as the first positional"):
        read(["--served-model-name", "foo"], [], version)
    with pytest.raises(ConfigError, match="--served-model-name"):
        read(["--max-num-seqs", "4", "--served_model_name=foo"], [], version)
    assert read(["--max-num-seqs", "4", "--model", MODEL, "--served-model-name", "foo"], [], version).settings[
        "model"] == MODEL  # --model counts as the model given first


def test_a_block_size_intels_xpu_cannot_take_is_refused_in_0_33():
    """Round 92: 0.33's FlashAttention on XPU takes multiples of 64 only; a given 16 has no common block size."""
    with pytest.raises(ConfigError, match="block_size: 16: vLLM 0.33's FlashAttention on Intel's XPU"):
        load(None, ["hardware.gpu=b60", "model=qwen3-8b", "engine.max_model_len=8192", "engine.block_size=16"])
    assert load(None, ["hardware.gpu=b60", "model=qwen3-8b", "engine.max_model_len=8192", "engine.block_size=16",
                       "engine.vllm_defaults=0.19.0"]).scenario.engine.block_size == 16  # 0.19's: multiples of 16


@pytest.mark.parametrize("argv, needle", [
    (["--eplb-config", '{"communicator": "bogus"}'], "--eplb-config.communicator: one of torch_nccl"),
    (["--eplb-config", '{"communicator": "torch_nccl"}'], "torch_nccl is incompatible with async EPLB"),
    (["--eplb-config", '{"use_async": "maybe"}'], "--eplb-config.use_async: bool, as vLLM's EPLBConfig types it"),
    (["-cc", '{"pass_config": {"bogus": 1}}'], "--compilation-config.pass_config.bogus: not a field of vLLM 0.33.0's "
                                               "PassConfig"),
    (["-cc", '{"use_inductor_graph_partition": "x"}'], "use_inductor_graph_partition: bool | None, as vLLM's"),
    (["--attention-config", '{"backend": "BOGUS"}'], "--attention-config.backend: 'BOGUS' is not an attention backend"),
    (["--attention-config", '{"flash_attn_version": 7}'], "flash_attn_version: one of 2, 3, 4, got 7"),
    # round 98: the MLA prefill backend and the per-kind backends, by their enums' names
    (["--attention-config", '{"mla_prefill_backend": "bogus"}'], "mla_prefill_backend: 'bogus' is not an MLA prefill"),
    (["--attention-config", '{"backend_per_kind": {"nope": "FLASH_ATTN"}}'], "unknown KV cache group kind 'nope'"),
    (["--attention-config", '{"backend_per_kind": {"full_attention": "auto"}}'], "'auto' is not an attention backend"),
    (["--kernel-config", '{"moe_backend": "bogus"}'], "--kernel-config.moe_backend: one of auto, triton"),
    (["--attention-backend", "BOGUS"], "--attention-backend: 'BOGUS' is not an attention backend of vLLM 0.33.0"),
    (["--attention-backend", "FLASH_ATTN", "--attention-config", '{"backend": "TRITON_ATTN"}'],
     "--attention-backend: and --attention-config's backend are mutually exclusive"),
])
def test_json_config_values_are_read_as_vllms_pydantic_classes_read_them(argv, needle):
    """Round 92: only the top-level keys were checked; vLLM validates the whole object (TypeAdapter over its @config
    class): Literal and bool fields, PassConfig's keys, attention backends by name, EPLB's async communicators."""
    with pytest.raises(ConfigError, match=re.escape(needle)):
        read([MODEL, *argv], [])
    read([MODEL, "--attention-backend", "flash_attn", "--eplb-config",
          '{"communicator": "torch_nccl", "use_async": "false"}'], [])  # a name any case; async off by "false"


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_micro_batching_needs_deepeps_all2all_and_0_33s_v1_runner(version):
    """Round 92: --enable-dbo / --ubatch-size 2 were recorded as not modelled where VllmConfig asserts a DeepEP
    all2all backend; in 0.33 DBO runs on the V1 model runner, where an n-gram drafter turns async scheduling off."""
    moe = ["Qwen/Qwen3-30B-A3B", "-dp", "2", "--enable-expert-parallel"]
    for flag in (["--enable-dbo"], ["--ubatch-size", "2"]):
        with pytest.raises(ConfigError, match=f"{flag[0]}: micro-batching needs --all2all-backend deepep_low_latency"):
            read([*moe, *flag], [], version)
    dbo = [*moe, "--all2all-backend", "deepep_low_latency", "--enable-dbo"]
    assert read(dbo, [], version).settings.get("engine.async_scheduling") is not False
    ngram = ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 3})]
    if version == "0.33.0":
        assert read([*dbo, *ngram], [], version).settings["engine.async_scheduling"] is False
        with pytest.raises(ConfigError, match="--async-scheduling: vLLM 0.33.0 does not run async scheduling with "
                                              "ngram"):
            read([*dbo, *ngram, "--async-scheduling"], [], version)


def test_bench_requests_end_capped_at_their_max_tokens(tmp_path):
    """Round 93: requests.parquet said "stop" for bench requests ending at the max_tokens the client sends (each
    output length) where the same run's metrics.prom, as vLLM, counted them "length"."""
    out = tmp_path / "run"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, "--", "bench", "serve", "--dataset-name",
                 "random", "--random-input-len", "256", "--random-output-len", "16", "--num-prompts", "10",
                 "--request-rate", "5"]) == 0
    assert set(pd.read_parquet(out / "requests.parquet")["finish_reason"]) == {"length"}
    prom = (out / "metrics.prom").read_text()
    assert re.search(r'request_success_total\{engine="0",finished_reason="length",model_name="[^"]*"\} 10\.0', prom)
    assert re.search(r'request_success_total\{engine="0",finished_reason="stop",model_name="[^"]*"\} 0\.0', prom)


def test_prefix_repetition_without_a_suffix_sends_the_prefix_alone(tmp_path):
    """Round 93: --prefix-repetition-suffix-len 0 was refused (must be >= 1); vLLM sends each prompt as its prefix
    alone, which hits all but the block holding its last token once the prefix is cached."""
    out = tmp_path / "run"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, "--", "bench", "serve", "--dataset-name",
                 "prefix_repetition", "--prefix-repetition-suffix-len", "0", "--prefix-repetition-num-prefixes", "2",
                 "--num-prompts", "20", "--request-rate", "5"]) == 0
    req = pd.read_parquet(out / "requests.parquet")
    assert set(req["prompt_tokens"]) == {256} and req["cached_tokens"].max() == 240  # (256 - 1) // 16 * 16
    with pytest.raises(ConfigError, match="--prefix-repetition-suffix-len: 0 beside a prefix of 0"):
        read([MODEL], ["--dataset-name", "prefix_repetition", "--prefix-repetition-suffix-len", "0",
                       "--prefix-repetition-prefix-len", "0"])


def test_an_infinite_goodput_target_is_one_every_request_meets(tmp_path):
    """Round 93: --goodput ttft:inf was refused; vLLM takes any float >= 0 and counts every request good on it."""
    out = tmp_path / "run"
    assert main(["vllm", "--out", str(out), "--quiet", "serve", MODEL, "--", "bench", "serve", "--num-prompts", "10",
                 "--request-rate", "5", "--goodput", "ttft:inf", "tpot:1e400"]) == 0
    assert json.loads((out / "summary.json").read_text())["goodput_fraction"] == 1.0
    with pytest.raises(ConfigError, match="--goodput: KEY:MILLISECONDS .* got 'ttft:nan' .vLLM's client takes nan"):
        read([MODEL], ["--goodput", "ttft:nan"])
    with pytest.raises(ConfigError) as e:  # round 106: a value that is no number was said to be nan
        read([MODEL], ["--goodput", "ttft:0x10"])
    assert "nan" not in str(e.value)


@pytest.mark.parametrize("backend, endpoint, said", [
    ("openai-chat", "/v1/chat/completions", True),
    ("openai-responses", "/v1/responses", True),
    ("openai", "/v1/completions", False),  # raw text: the prompt is the dataset's tokens
])
def test_a_chat_backend_says_its_template_tokens_are_not_simulated(backend, endpoint, said):
    """Round 93: --backend openai-chat sends each prompt as a message the server wraps in the chat template (some
    tens of tokens vLLM's input_lens count); servesim ran it with no word of the difference."""
    cmd = read([MODEL], ["--backend", backend, "--endpoint", endpoint])
    note = cmd.not_modelled.get("vllm bench serve --backend", "")
    assert ("chat template" in note) is said


def test_the_result_duration_waits_for_every_answer_refusals_too(tmp_path):
    """Round 94: the duration ended at the last completion though the last request, sent later, was refused (400):
    vLLM's client waits for every task, so its rates are over the whole; a --metadata date beside a ramp-up was
    an internal error (the ramp's events were stamped by parsing the file's date)."""
    out = tmp_path / "run"
    assert main(["vllm", "--out", str(out), "--quiet", "--vllm-version", "0.19.0", "serve", MODEL, "--max-model-len",
                 "1100", "--", "bench", "serve", "--num-prompts", "20", "--random-range-ratio", "0.5",
                 "--request-rate", "1", "--save-result", "--save-detailed", "--result-filename", "r.json"]) == 0
    r = json.loads((out / "r.json").read_text())
    refused = [t for t, e in zip(r["start_times"], r["errors"]) if e]
    assert refused and r["duration"] >= max(r["start_times"]) == max(refused)
    assert r["request_throughput"] == pytest.approx(r["completed"] / r["duration"])
    assert main(["vllm", "--out", str(tmp_path / "md"), "--quiet", "serve", MODEL, "--", "bench", "serve",
                 "--num-prompts", "5", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps",
                 "3", "--save-result", "--result-filename", "r.json", "--metadata", "date=foo"]) == 0
    md = json.loads((tmp_path / "md" / "r.json").read_text())
    assert md["date"] == "foo" and md["rps_change_events"][0]["rps"] == 1
    # r129: without --save-detailed vLLM deletes the per-request keys, a --metadata key of those names too
    assert main(["vllm", "--out", str(tmp_path / "md2"), "--quiet", "serve", MODEL, "--", "bench", "serve",
                 "--num-prompts", "5", "--save-result", "--result-filename", "r.json", "--metadata", "errors=none",
                 "latencies=x", "team=a"]) == 0
    md = json.loads((tmp_path / "md2" / "r.json").read_text())
    assert "errors" not in md and md["team"] == "a" and isinstance(md["latencies"], list)  # 0.33 keeps latencies


@pytest.mark.parametrize("version, flag", [
    ("0.33.0", "-q"), ("0.19.0", "-q"), ("0.33.0", "--num-gpu-blocks-override"), ("0.19.0", "--kv-cache-memory-bytes"),
    ("0.33.0", "--speculative-config"), ("0.33.0", "--max-num-scheduled-tokens"), ("0.33.0", "--max-num-queued-reqs"),
    ("0.33.0", "--attention-backend"), ("0.33.0", "--kv-transfer-config"),
])
@pytest.mark.parametrize("word", ["None", ""])
def test_none_or_empty_for_an_optional_flag_is_its_default(version, flag, word):
    """Round 94: vLLM reads "" and "None" as None for flags whose config field may be None (optional_type in
    arg_utils.get_kwargs), the field's default (`-q ${Q:-None}` in a sweep script); servesim refused them."""
    plain = read([MODEL], [], version)
    given = read([MODEL, flag, word], [], version)
    assert given.settings == plain.settings and not given.not_modelled


@pytest.mark.parametrize("flag", ["--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization"])
def test_none_for_a_flag_vllm_types_without_none_is_refused(flag):
    """Their config fields' type hints hold no None: vLLM's int/float parse refuses the word."""
    with pytest.raises(ConfigError, match=re.escape(flag)):
        read([MODEL, flag, "None"], [])


@pytest.mark.parametrize("version, flag, value", [
    ("0.33.0", "--override-generation-config", "5"), ("0.19.0", "--override-generation-config", "[1]"),
    ("0.33.0", "--hf-overrides", '"x"'), ("0.33.0", "--kv-transfer-config", "7"), ("0.33.0", "-cc", "3"),
])
def test_a_json_flag_whose_field_takes_an_object_refuses_anything_else(version, flag, value):
    """Round 95: --override-generation-config 5 ran (recorded as not modelled); vLLM's config field is a dict (or a
    config dataclass) and its pydantic validation refuses the line at start-up (serve_json_objects)."""
    with pytest.raises(ConfigError, match="a JSON object is expected"):
        read([MODEL, flag, value], [], version)
    with pytest.raises(ConfigError, match="a JSON object is expected"):  # round 98: 0.19's parse_dataclass too
        read([MODEL, "-cc", "3"], [], "0.19.0")


QUANTIZED = {"awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
             "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128},
             "modelopt_fp8": {"quant_method": "modelopt", "quant_algo": "FP8"},
             "modelopt_fp4": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
             "fp8": {"quant_method": "fp8", "activation_scheme": "dynamic"}}


@pytest.mark.parametrize("checkpoint, q, version, starts", [
    ("awq", "gptq", "0.33.0", False), ("awq", "gptq_marlin", "0.19.0", False), ("gptq", "awq", "0.33.0", False),
    ("awq", "marlin", "0.33.0", True), ("awq", "marlin", "0.19.0", True), ("awq", "auto_awq", "0.33.0", True),
    ("awq", "auto_awq", "0.19.0", False), ("gptq", "auto_gptq", "0.33.0", True), ("gptq", "gptq", "0.19.0", True),
    ("modelopt_fp8", "modelopt", "0.33.0", True), ("modelopt_fp4", "awq", "0.19.0", True),
    ("modelopt_fp4", "fp8", "0.33.0", True), ("fp8", "awq", "0.33.0", False), ("fp8", "fp8", "0.19.0", True),
])
def test_quantization_beside_a_quantized_checkpoint_is_held_to_vllms_overrides(tmp_path, checkpoint, q, version,
                                                                               starts):
    """Round 95: -q gptq on an AWQ checkpoint ran (same 4-bit format); -q marlin and 0.33's auto_awq on AWQ, and any
    -q on a ModelOpt checkpoint, were refused. vLLM's _verify_quantization lets the checkpoint's method claim the
    line (AutoAWQ/AutoGPTQ, 0.19's AWQ/GPTQ Marlin, ModelOpt's any value) or refuses a mismatch."""
    path = tmp_path / checkpoint
    path.mkdir()
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "quantization_config": QUANTIZED[checkpoint]}))
    if starts:
        assert "engine.quantization" not in read([str(path), "-q", q], [], version).settings  # the checkpoint's own
    else:
        with pytest.raises(ConfigError, match=f"--quantization: .* vLLM refuses --quantization {q}"):
            read([str(path), "-q", q], [], version)


@pytest.mark.parametrize("version, first_step, preemptions", [("0.33.0", 14, 0), ("0.19.0", 28, 2)])
def test_a_drafter_reserves_its_lookahead_slots(tmp_path, version, first_step, preemptions):
    """Round 97: vLLM allocates k KV slots past the scheduled tokens for an EAGLE-type drafter (num_lookahead_tokens):
    0.33 at admission too, so a 14-token prompt with 4 drafts takes 2 blocks and the second request waits; 0.19
    reserves none at admission, admits both and preempts as they decode. servesim reserved none."""
    out = tmp_path / "run"
    assert main(["vllm", "--vllm-version", version, "--out", str(out), "--quiet", "serve", MODEL,
                 "--num-gpu-blocks-override", "4", "--max-model-len", "32", "--speculative-config",
                 json.dumps({"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                             "num_speculative_tokens": 4}), "--", "bench", "serve", "--random-input-len", "14",
                 "--random-output-len", "10", "--num-prompts", "2"]) == 0
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps.scheduled_tokens.iloc[0] == first_step and steps.num_preempted.sum() == preemptions
    assert json.loads((out / "vllm_command.json").read_text())["settings"]["speculative.lookahead_slots"] == 4


def test_a_request_0_19s_fitted_length_cannot_hold_names_max_model_len(tmp_path, capsys):
    """Round 98: 0.19 fits max_model_len=auto against every block, the null one too, so a request of that length
    can never be admitted; the one line named engine.num_gpu_blocks_override, which nobody gave."""
    assert main(["run", "--quiet", "--out", str(tmp_path / "r"), "--set", "model=llama-3.1-70b", "--set",
                 "hardware.gpu=h100-sxm", "--set", "engine.tensor_parallel_size=2", "--set",
                 "engine.vllm_defaults=0.19.0", "--set", "engine.max_model_len=auto", "--set", "workload.num_requests=2",
                 "--set", "workload.prompt_tokens={dist: fixed, value: 27114}", "--set",  # the fitted 27,120 less 6
                 "workload.output_tokens={dist: fixed, value: 5}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("servesim: error: engine.max_model_len: a request of 27,114"), err


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_kernel_backend_names_are_read_as_vllm_normalises_them(version):
    """Round 98: --moe-backend FLASHINFER-CUTLASS and --kernel-config's {"moe_backend": "Triton"} were refused;
    vLLM lower-cases them and reads dashes as underscores (arg_utils' type, KernelConfig's validators)."""
    read([MODEL, "--moe-backend", "FLASHINFER-CUTLASS"], [], version)
    read([MODEL, "--kernel-config", json.dumps({"moe_backend": "Triton"})], [], version)
    with pytest.raises(ConfigError, match="--moe-backend: invalid choice: 'bogus'"):
        read([MODEL, "--moe-backend", "BOGUS"], [], version)


@pytest.mark.parametrize("flag, taken", [
    ("-cc", False), ("--kv-transfer-config", False), ("--override-generation-config", False),
    ("--speculative-config", True), ("--mm-processor-kwargs", True),  # optional json.loads: null is None
])
def test_json_null_is_taken_only_where_vllm_reads_it_as_none(flag, taken):
    """Round 98: a JSON flag given null ran as if left out; vLLM's parse_dataclass (config classes) and its
    pydantic fields that are never None refuse it, where an optional json.loads flag reads it as None."""
    if taken:
        assert not read([MODEL, flag, "null"], []).not_modelled
    else:
        with pytest.raises(ConfigError, match="a JSON object is expected, got 'null'"):
            read([MODEL, flag, "null"], [])


def test_attention_enum_fields_vllm_takes_are_taken():
    """Their enums' names in any case (vLLM's Enum[value.upper()]): an MLA prefill backend, backends per KV kind."""
    cmd = read([MODEL, "--attention-config", json.dumps({"mla_prefill_backend": "flashinfer",
                                                         "backend_per_kind": {"full_attention": "flash_attn"}})], [])
    assert "vllm serve --attention-config" in cmd.not_modelled  # checked, and recorded as not modelled


@pytest.mark.parametrize("version, flags, says", [
    ("0.33.0", ["--temperature", "-1"], "--temperature: -1.0: vLLM 0.33.0's server takes temperature in [0, 2]"),
    ("0.33.0", ["--temperature", "2.5"], "temperature in [0, 2]"),
    ("0.19.0", ["--temperature=-0.5"], "takes temperature from 0"),
    ("0.33.0", ["--top-p", "0"], "top_p in (0, 1]"),
    ("0.33.0", ["--top-k", "-2"], "top_k -1 (off) or above 0"),
    ("0.19.0", ["--min-p", "1.5"], "min_p in [0, 1]"),
    ("0.33.0", ["--presence-penalty", "3"], "presence_penalty in [-2, 2]"),
    ("0.33.0", ["--frequency-penalty=-2.5"], "frequency_penalty in [-2, 2]"),
    ("0.33.0", ["--repetition-penalty", "0"], "repetition_penalty above 0"),
    ("0.33.0", ["--temperature", "0.5", "--extra-body", '{"temperature": 9}'], "--extra-body.temperature: 9"),
])
def test_sampling_values_the_server_refuses_are_refused(version, flags, says):
    """r111: out-of-range sampling flags ran as completed requests; vLLM's server answers each 400
    (SamplingParams._verify_args) and the bench stops at its first test request."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL], ["--num-prompts", "5", *flags], version=version)


@pytest.mark.parametrize("version, flags", [("0.19.0", ["--temperature", "2.5"]), ("0.33.0", ["--temperature", "2"]),
                                            ("0.33.0", ["--top-k", "-1", "--top-p", "1", "--min-p", "0"]),
                                            ("0.33.0", ["--temperature", "9", "--extra-body", '{"temperature": 1}'])])
def test_sampling_values_the_server_takes_run(version, flags):
    assert read([MODEL], ["--num-prompts", "5", *flags], version=version)


NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


@pytest.mark.parametrize("flags, says", [
    (["deepseek-ai/DeepSeek-V3", "-tp", "8", "-dcp", "2"], "-size: 2 beside NixlConnector must be 1 or the NIXL "
                                                          "transfer parallel size, max(TP, PCP) = 8"),
    ([MODEL, "-tp", "8", "-dcp", "8"], None),  # MLA only: Llama's GQA is refused (by the GQA rule or NIXL's)
    ([MODEL, "-pcp", "2"], "--prefill-context-parallel-size: 2 beside NixlConnector's kv_both"),
])
def test_033_nixl_refuses_context_parallelism_it_cannot_transfer(flags, says):
    """r111: 0.33's VllmConfig and NixlConnector refuse DCP other than 1 or the transfer size (MLA only) and PCP on
    a consumer; these lines ran."""
    line = [*flags, "--kv-transfer-config", json.dumps(NIXL)]
    with pytest.raises(ConfigError) as err:
        read(line, [], version="0.33.0")
    assert says is None or says in str(err.value)
    if flags[1:] == ["-tp", "8", "-dcp", "2"]:  # 0.19 checks none of it
        read(line, [], version="0.19.0")


@pytest.mark.parametrize("kv, refused", [
    ({"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}, True),
    ({"kv_connector": "MoRIIOConnector", "kv_role": "kv_both"}, True),
    ({"kv_connector": "NixlPushConnector", "kv_role": "kv_producer"}, True),
    ({**NIXL, "kv_connector_extra_config": {"backends": ["UCX", "GDS"]}}, True),
    (NIXL, False),
    ({"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": [
        NIXL, {"kv_connector": "MoRIIOConnector", "kv_role": "kv_both"}]}}, True),
])
def test_033_sleep_mode_needs_a_connector_that_follows_it(kv, refused):
    """r111: VllmConfig._verify_kv_transfer_compat refuses sleep mode beside a connector without supports_sleep_mode."""
    line = [MODEL, "--enable-sleep-mode", "--kv-transfer-config", json.dumps(kv)]
    if refused:
        with pytest.raises(ConfigError, match="--enable-sleep-mode: beside .* refuses it"):
            read(line, [], version="0.33.0")
    else:
        read(line, [], version="0.33.0")
    if kv["kv_connector"] not in ("NixlPushConnector", "MooncakeStoreConnector"):  # 0.33's connectors only
        read(line, [], version="0.19.0")  # 0.19 has no such check


def test_kv_offloading_decides_the_hybrid_manager_as_each_release_does():
    """r111: 0.19 makes --kv-offloading-size's connector after leaving the hybrid manager on, and that connector
    refuses to start beside it; 0.33 makes it first, so LMCache's turns the manager off (it had stayed on: a KV pool
    of twice the size for gpt-oss where the same connector given by --kv-transfer-config halved it)."""
    with pytest.raises(ConfigError, match="--kv-offloading-size: vLLM 0.19.0 makes its OffloadingConnector after"):
        read([MODEL, "--kv-offloading-size", "10"], [], version="0.19.0")
    read([MODEL, "--kv-offloading-size", "10", "--disable-hybrid-kv-cache-manager"], [], version="0.19.0")
    gpt = "openai/gpt-oss-120b"
    lmcache = read([gpt, "--kv-offloading-size", "10", "--kv-offloading-backend", "lmcache"], [])
    assert lmcache.settings["engine.disable_hybrid_kv_cache_manager"] is True
    native = read([gpt, "--kv-offloading-size", "10"], [])
    assert "engine.disable_hybrid_kv_cache_manager" not in native.settings  # 0.33's OffloadingConnector supports it


@pytest.mark.parametrize("flags, says", [
    ([MODEL], "with the model is not a mixture of experts"),
    (["Qwen/Qwen3-30B-A3B", "--no-enable-prefix-caching"], "with prefix caching is off"),
    (["Qwen/Qwen3-30B-A3B", "-pp", "2"], "with pipeline parallelism"),
    (["Qwen/Qwen3-30B-A3B", "--kv-transfer-config", json.dumps({"kv_connector": "MultiConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"connectors": [{"kv_connector": "NixlPushConnector", "kv_role": "kv_both"}]}})],
     "with NixlPushConnector, whose P/D transfer"),
    (["Qwen/Qwen3-30B-A3B"], None),
])
def test_033_routed_experts_are_returned_where_vllm_starts(flags, says):
    """r112: --enable-return-routed-experts on a dense model (and beside what 0.33's aux output refuses) ran as not
    modelled; VllmConfig._verify_aux_output_compatibility refuses it. 0.19 checks none of it."""
    line = [*flags, "--enable-return-routed-experts"]
    if says:
        with pytest.raises(ConfigError, match=re.escape(f"--enable-return-routed-experts: {says}")):
            read(line, [], version="0.33.0")
    else:
        assert "vllm serve --enable-return-routed-experts" in read(line, [], version="0.33.0").not_modelled
    if "-pp" not in flags and "NixlPushConnector" not in str(flags):  # (0.19 has no push connector)
        read(line, [], version="0.19.0")


@pytest.mark.parametrize("kv", [{"kv_connector": "NixlPullConnector", "kv_role": "kv_consumer"},
                                {"kv_connector": "NixlPushConnector", "kv_role": "kv_both"},
                                {**NIXL, "kv_role": "kv_producer", "kv_connector_extra_config":
                                 {"bidirectional_kv_xfer": True}}])
def test_033_every_nixl_connector_refuses_pcp_it_cannot_transfer(kv):
    """r112: the PCP checks live in every NIXL connector's __init__ (pull and push), bidirectional transfer too."""
    with pytest.raises(ConfigError, match="--prefill-context-parallel-size: 2 beside Nixl"):
        read([MODEL, "-pcp", "2", "--kv-transfer-config", json.dumps(kv)], [], version="0.33.0")


def test_kv_offloading_replaces_the_lines_connector():
    """r112: --kv-offloading-size replaces --kv-transfer-config's connector in both releases
    (_post_init_kv_transfer_config), so a P/D line beside it runs an offloading connector, which moves no KV."""
    for version in ("0.19.0", "0.33.0"):
        cmd = read([MODEL, "--kv-transfer-config", json.dumps(NIXL), "--kv-offloading-size", "10"], [],
                   version=version)
        assert cmd.kv_transfer["kv_connector"] == "OffloadingConnector"


@pytest.mark.parametrize("body, says", [
    ({"top_k": 1.5}, "--extra-body.top_k: 1.5: vLLM 0.33.0's server takes top_k an integer"),
    ({"top_k": "nan"}, "takes top_k an integer"),
    ({"temperature": "abc"}, "takes temperature a number"),
    ({"temperature": "3"}, "takes temperature in [0, 2]"),
    ({"top_p": False}, "takes top_p in (0, 1]"),
    ({"min_p": "nan"}, "takes min_p in [0, 1]"),
    ({"max_tokens": 0}, "--extra-body.max_tokens: 0: vLLM 0.33.0's server takes max_tokens from 1"),
    ({"n": 0}, "takes n from 1"),
    ({"min_tokens": -1}, "takes min_tokens from 0"),
    ({"min_tokens": 9, "max_tokens": 5}, "--extra-body.min_tokens: 9: vLLM 0.33.0's server takes no min_tokens above "
                                         "max_tokens 5"),
    ({"n": 2, "temperature": 0}, "takes n 1 only with greedy sampling"),
    ({"n": 20000}, "takes n up to VLLM_MAX_N_SEQUENCES (16,384)"),
    ({"stream": False}, "--extra-body.stream: False: vLLM 0.33.0's server streams only"),
    ({"prompt_logprobs": 1}, "gives no prompt_logprobs but 0 to a streamed request"),
    ({"logprobs": "abc"}, "takes logprobs an integer, -1 or from 0"),
    ({"logprobs": -5}, "takes logprobs an integer, -1 or from 0"),
    ({"logprobs": 30}, "takes logprobs up to its --max-logprobs (20)"),
    ({"stop": 5}, "takes stop as text or a list of texts"),
    ({"seed": "x"}, "takes seed an integer"),
    ({"ignore_eos": "maybe"}, "takes ignore_eos true or false"),
    ({"response_format": {"type": "json_schema"}}, "needs a json_schema beside response_format json_schema"),
])
def test_extra_body_values_the_server_refuses_are_refused(body, says):
    """r112: --extra-body's values are read as the server's request class reads them (pydantic, lax: numeric text
    and bools taken, no fraction for an integer) and then held to SamplingParams' checks; these ran."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL], ["--num-prompts", "5", "--extra-body", json.dumps(body)])


def test_extra_body_values_the_server_takes_run():
    cmd = read([MODEL], ["--num-prompts", "5", "--extra-body", json.dumps(
        {"top_k": "4", "temperature": "0.7", "top_p": True, "max_tokens": 9, "min_tokens": 9, "n": 2, "stream": "yes",
         "prompt_logprobs": 0, "logprobs": 5, "stop": ["x"], "seed": "7", "ignore_eos": "false"})])
    # r113: what changes the outputs vLLM generates is said apart
    assert {"vllm bench serve --extra-body.max_tokens", "vllm bench serve --extra-body.ignore_eos"} <= \
        set(cmd.not_modelled)
    read([MODEL], ["--num-prompts", "5", "--extra-body", '{"max_tokens": 0, "echo": true}'])  # the prompt, echoed
    # r150: the server's own cap on every answer, said by its key (it was --override-generation-config alone)
    cmd = read([MODEL, "--override-generation-config", '{"max_new_tokens": 32}'], ["--num-prompts", "5"])
    assert "caps every answer" in cmd.not_modelled["vllm serve --override-generation-config.max_new_tokens"]
    read([MODEL, "--max-logprobs", "-1"], ["--num-prompts", "5", "--logprobs", "-1"])  # no cap on the server


def test_the_clients_logprobs_are_held_to_the_servers_cap():
    """r113: the client sends --logprobs in every completions request; above the server's --max-logprobs (or a
    negative other than -1) each is a 400."""
    with pytest.raises(ConfigError, match=re.escape("--logprobs: 30: vLLM 0.33.0's server takes logprobs up to its "
                                                    "--max-logprobs (20)")):
        read([MODEL], ["--num-prompts", "5", "--logprobs", "30"])
    read([MODEL, "--max-logprobs", "30"], ["--num-prompts", "5", "--logprobs", "30"])


@pytest.mark.parametrize("version, kv, says", [
    ("0.33.0", {"kv_connector": "MultiConnector", "kv_role": "kv_both"},
     "kv_connector_extra_config.connectors: a list of connectors' configs is needed"),
    ("0.19.0", {"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {
        "connectors": [{"kv_connector": "NixlConnector"}]}}, "connectors[0].kv_role: needed beside kv_connector"),
    ("0.33.0", {"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {
        "connectors": [NIXL, {"kv_connector": "NoSuch", "kv_role": "kv_both"}]}},
     "connectors[1].kv_connector: 'NoSuch': vLLM 0.33.0 registers no such connector"),
    ("0.33.0", {**NIXL, "kv_connector_module_path": ""}, "kv_connector_module_path: empty"),
])
def test_kv_connector_configs_vllm_cannot_make_are_refused(version, kv, says):
    """r112: a MultiConnector's children were not checked (vLLM makes each a KVTransferConfig: a role, a registered
    class), nor its missing list, nor 0.33's empty module path."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, "--kv-transfer-config", json.dumps(kv)], [], version=version)


def test_019_takes_a_registered_connector_before_its_module_path(tmp_path, capsys):
    """r112: 0.19's factory finds a registered name first (0.33 the module path first), so an OffloadingConnector
    given a module path is 0.19's own, which moves no KV between instances."""
    kv = json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_module_path": "my.mod",
                     "kv_connector_extra_config": {"cpu_bytes_to_use": 2**30}})
    line = ["vllm", "--out", str(tmp_path / "o"), "--config", "--set", "cluster.prefill_replicas=1", "serve", MODEL,
            "--kv-transfer-config", kv, "--", "bench", "serve", "--num-prompts", "5"]
    assert main(["vllm", "--vllm-version", "0.19.0", *line[1:]]) == 2
    assert "OffloadingConnector moves no prompt's KV" in capsys.readouterr().err
    assert main(line) == 0  # 0.33: the class from my.mod, taken at its word


def test_033_sleep_mode_refuses_a_multiconnector_without_children():
    kv = {"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": []}}
    with pytest.raises(ConfigError, match="--enable-sleep-mode: beside MultiConnector"):
        read([MODEL, "--enable-sleep-mode", "--kv-transfer-config", json.dumps(kv)], [], version="0.33.0")


@pytest.mark.parametrize("flags, says", [
    (["--enable-return-routed-experts", "--speculative-config", '{"method": "suffix", "num_speculative_tokens": 4}'],
     "--enable-return-routed-experts: with suffix speculative decoding, which runs the V1 model runner"),
    (["--aux-output-config", '{"enable_return_routed_experts": true}', "-pp", "2"],
     "--aux-output-config.enable_return_routed_experts: with pipeline parallelism"),
    (["--aux-output-config", '{"bogus": 1}'], "--aux-output-config.bogus"),
    (["--aux-output-config", '{"max_bytes": 0}'], "--aux-output-config.max_bytes"),
])
def test_033_aux_output_is_checked_as_vllm_makes_it(flags, says):
    """r113: --aux-output-config sets the field --enable-return-routed-experts sets, and its class's fields are
    typed and bounded; routed experts need Model Runner V2, which a suffix drafter rules out."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read(["Qwen/Qwen3-30B-A3B", *flags], [], version="0.33.0")


@pytest.mark.parametrize("child, says", [({"kv_port": "abc"}, "connectors[0].kv_port"),
                                         ({"bogus": 1}, "connectors[0].bogus"),
                                         ({"engine_id": "x"}, "connectors[0].engine_id: vLLM's MultiConnector")])
def test_a_multiconnectors_children_are_typed_as_vllm_makes_them(child, says):
    """r113: vLLM makes each child a KVTransferConfig (typed, no other keys, engine_id given by the parent)."""
    kv = {"kv_connector": "MultiConnector", "kv_role": "kv_both",
          "kv_connector_extra_config": {"connectors": [{**NIXL, **child}]}}
    for version in ("0.19.0", "0.33.0"):
        with pytest.raises(ConfigError, match=re.escape(says)):
            read([MODEL, "--kv-transfer-config", json.dumps(kv)], [], version=version)


@pytest.mark.parametrize("version, flags, says", [
    ("0.33.0", ["--structured-outputs-config", '{"disable_any_whitespace": true}'],
     "--structured-outputs-config.disable_any_whitespace: needs the xgrammar or guidance backend, not auto"),
    ("0.19.0", ["--structured-outputs-config", '{"backend": "xgrammar", "disable_additional_properties": true}'],
     "disable_additional_properties: needs the guidance backend, not xgrammar"),
    ("0.33.0", ["--collect-detailed-traces", "all"], "--collect-detailed-traces: needs --otlp-traces-endpoint"),
    ("0.19.0", ["--show-hidden-metrics-for-version", "abc"], "--show-hidden-metrics-for-version: 'abc' is not a version"),
    ("0.33.0", ["--ray-workers-use-nsight"], "--ray-workers-use-nsight: needs Ray workers"),
    ("0.33.0", ["--numa-bind-nodes", "0"], "--numa-bind-nodes: needs --numa-bind"),
    ("0.33.0", ["--numa-bind", "--numa-bind-cpus", "3-1"], "--numa-bind-cpus: takes numactl CPU lists"),
    ("0.33.0", ["--enable-lora", "--moe-backend", "deep_gemm_mega_moe"], "--enable-lora: beside the MoE backend"),
    ("0.33.0", ["--enable-lora", "--kernel-config", '{"moe_backend": "deep_gemm_mega_moe"}'],
     "--enable-lora: beside the MoE backend deep_gemm_mega_moe"),  # r115: however it is set
    ("0.33.0", ["--numa-bind", "--numa-bind-nodes", "x"], "--numa-bind-nodes: takes NUMA node numbers from 0"),
    ("0.19.0", ["--gpu-memory-utilization", "1.0"], "--gpu-memory-utilization: 1.0 asks for the whole GPU"),
    ("0.33.0", ["--seed", "-5"], "--seed: -5 is not from 0 to 2**32 - 1"),
    ("0.19.0", ["--seed", str(2**32)], "--seed: 4294967296 is not from 0"),
])
def test_config_validators_vllm_runs_at_start_up_refuse_the_line(version, flags, says):
    """r114: the config classes' validators on flags servesim records (structured outputs, observability, parallel
    NUMA and nsight options, LoRA on a MoE megakernel, the memory check at 100%): these lines ran."""
    with pytest.raises(ConfigError, match=re.escape(says) + ".*refuses to start"):
        read([MODEL, *flags], [], version=version)


def test_lines_those_validators_pass_run():
    read([MODEL, "--structured-outputs-config", '{"backend": "guidance", "disable_any_whitespace": true, '
                                                '"disable_additional_properties": true}',
          "--collect-detailed-traces", "all", "--otlp-traces-endpoint", "http://x:4317",
          "--show-hidden-metrics-for-version", "0.32", "--numa-bind", "--numa-bind-cpus", "0-3,8", "--enable-lora",
          "--gpu-memory-utilization", "0.99"], [])


def test_a_quantization_method_is_read_in_any_case():
    """r114: ModelConfig lower-cases --quantization before it checks it: -q FP8 runs as fp8 (it was refused)."""
    for version in ("0.19.0", "0.33.0"):
        assert read([MODEL, "-q", "FP8"], [], version=version).settings["engine.quantization"] == "fp8"


def test_max_logprobs_minus_one_is_the_vocabulary():
    """r114: --max-logprobs -1 caps logprobs at the model's vocabulary (128,256 for Llama 3.1), not at nothing."""
    with pytest.raises(ConfigError, match=re.escape("takes logprobs up to its --max-logprobs (128,256)")):
        read([MODEL, "--max-logprobs", "-1"], ["--num-prompts", "5", "--logprobs", "200000"])


def test_a_ray_data_parallel_backend_runs_ray_workers():
    """r115: ParallelConfig fills an unset executor with Ray for a Ray DP backend, so nsight runs (it was refused),
    and 0.19's Ray executor has no async scheduling (it was simulated on; asked for, vLLM refuses it)."""
    line = [MODEL, "-dp", "2", "--data-parallel-backend", "ray"]
    for version in ("0.19.0", "0.33.0"):
        read([*line, "--ray-workers-use-nsight"], [], version=version)
    assert read(line, [], version="0.19.0").settings["engine.async_scheduling"] is False
    assert "engine.async_scheduling" not in read(line, [], version="0.33.0").settings
    with pytest.raises(ConfigError, match="the ray executor"):
        read([*line, "--async-scheduling"], [], version="0.19.0")


@pytest.mark.parametrize("version, model, spec, says", [
    ("0.33.0", "mistralai/Mixtral-8x7B-Instruct-v0.1", {"method": "eagle3", "model": "foo/eagle3-mixtral"},
     "eagle3 reads the target's hidden states, and vLLM 0.33.0's mixtral model has no EAGLE-3 interface"),
    ("0.33.0", "mistralai/Mixtral-8x7B-Instruct-v0.1", {"method": "dflash", "model": "z-lab/foo-dflash"},
     "dflash reads the target's hidden states"),
    ("0.19.0", MODEL, {"method": "mlp_speculator", "model": "ibm-ai-platform/llama3-8b-accelerator"},
     "mlp_speculator: vLLM 0.19's V1 model runner has no such drafter"),
])
def test_drafters_a_release_cannot_load_are_refused(version, model, spec, says):
    """r115: 0.33 loads a hidden-state drafter only on a target with SupportsEagle3 (Mixtral has none); 0.19 keeps
    mlp_speculator as a method but drafts it with nothing. Both lines ran as working speculation."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([model, "-tp", "2", "--speculative-config", json.dumps({**spec, "num_speculative_tokens": 3})], [],
             version=version)
    if spec["method"] == "eagle3":  # Mistral's class is Llama's, which has it
        read(["mistralai/Mistral-7B-Instruct-v0.1", "--speculative-config",
              json.dumps({**spec, "num_speculative_tokens": 3})], [], version=version)


@pytest.mark.parametrize("version, serve, says", [
    # 0.33's VllmConfig._reject_mismatched_float_kv_cache (0.19 has none)
    ("0.33.0", ["--kv-cache-dtype", "float16"], "--kv-cache-dtype: float16 beside the model's dtype bfloat16"),
    ("0.33.0", ["--dtype", "half", "--kv-cache-dtype", "bfloat16"], "bfloat16 beside the model's dtype float16 "
                                                                    "(--dtype half): vLLM 0.33 refuses it; give auto "
                                                                    "or float16"),
    # _get_quantization_config: the method's kernels take bf16 or fp16 activations (MXFP4 bf16 only)
    ("0.33.0", ["-q", "fp8", "--dtype", "float32"], "--dtype: float32 beside fp8 quantization"),
    ("0.19.0", ["-q", "fp8", "--dtype", "float"], "--dtype: float beside fp8 quantization"),
    ("0.33.0", ["-q", "fp8_per_tensor", "--dtype", "float32"], "--dtype: float32 beside fp8 quantization"),
    # --kv-sharing-fast-prefill beside a drafter reading the target's hidden states (SpeculativeConfig.use_eagle)
    ("0.33.0", ["--kv-sharing-fast-prefill", "--speculative-config", '{"method": "eagle", "model": '
                '"yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'],
     "--kv-sharing-fast-prefill: beside eagle: vLLM refuses it"),
    ("0.19.0", ["--kv-sharing-fast-prefill", "--speculative-config", '{"method": "eagle3", "model": '
                '"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'],
     "--kv-sharing-fast-prefill: beside eagle3: vLLM refuses it"),
])
def test_round_116_serve_lines_vllm_refuses_are_refused(version, serve, says):
    """r116: each of these started in servesim where vLLM's VllmConfig refuses it."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, *serve], [], version=version)


@pytest.mark.parametrize("extra, says", [
    (["-q", "fp8"], "moonep beside quantized models (fp8)"), (["--enable-eplb"], "moonep beside --enable-eplb"),
    (["--expert-placement-strategy", "round_robin"], "moonep beside --expert-placement-strategy round_robin"),
    (["--dtype", "float16"], "moonep beside dtype float16")])
def test_moonep_is_held_to_what_vllm_serves_with_it(extra, says):
    """r116: 0.33's MoonEP all-to-all serves unquantized bf16 models, without EPLB, experts placed linearly; and
    where it moves tokens between ranks vLLM captures no CUDA graph (its dispatch is eager-only)."""
    moe = ["Qwen/Qwen3-30B-A3B", "-tp", "2", "-ep", "--all2all-backend", "moonep"]
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([*moe, *extra], [])
    assert read(moe, []).settings.get("engine.enforce_eager") is not True  # no rank to move tokens between
    assert read(["Qwen/Qwen3-30B-A3B", "-dp", "2", "-ep", "--all2all-backend", "moonep"], []).settings[
        "engine.enforce_eager"] is True


def test_what_vllm_takes_of_dtypes_and_timeline_thresholds_is_taken():
    """r116: 0.19 takes --timeline-itl-thresholds as two numbers (nargs=2; 0.33 one LOW,HIGH text), which servesim
    had refused; the float KV check is 0.33's only, and a KV dtype of the model's own is taken."""
    bench = ["--plot-timeline", "--timeline-itl-thresholds"]
    read([MODEL], [*bench, "25", "50"], version="0.19.0")
    read([MODEL], [*bench, "25,50"], version="0.33.0")
    with pytest.raises(ConfigError, match="invalid float value: 'x'"):
        read([MODEL], [*bench, "25", "x"], version="0.19.0")
    read([MODEL, "--kv-cache-dtype", "float16"], [], version="0.19.0")
    read([MODEL, "--kv-cache-dtype", "bfloat16"], [], version="0.33.0")
    read([MODEL, "--dtype", "half", "--kv-cache-dtype", "float16", "-q", "fp8"], [], version="0.33.0")


def test_a_kv_dtype_other_than_the_models_is_refused_under_0_33_as_vllm_refuses_it(capsys):
    """r148: a run took it (config --vllm noted it), where `servesim vllm` refuses the same line; 0.19 takes it."""
    for argv in (["config", "--set", "engine.kv_cache_dtype=float16", "--vllm"],
                 ["run", "--set", "engine.kv_cache_dtype=float16", "--set", "workload.num_requests=2"]):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == "servesim: error: engine.kv_cache_dtype: float16 beside the " \
                                                  "model's dtype bfloat16: vLLM 0.33 refuses it; give auto or bfloat16"
    assert main(["config", "--set", "engine.kv_cache_dtype=float16", "--set", "engine.vllm_defaults=0.19.0"]) == 0
    assert main(["config", "--set", "engine.kv_cache_dtype=bfloat16"]) == 0
    capsys.readouterr()
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--kv-cache-dtype", "float16"]) == 2
    assert capsys.readouterr().err.startswith("servesim: error: --kv-cache-dtype: float16 beside the model's dtype")
    assert main(["capacity", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--kv-cache-dtype", "float16",
                 "--vllm-version", "0.19.0"]) == 0


ADAPTIVE = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "enable_adaptive_verification": true}'


@pytest.mark.parametrize("serve, says", [
    (["--enable-batch-sharded-sampling"], "with tensor parallel size 1 there is nothing to shard"),
    (["-tp", "2", "--enable-batch-sharded-sampling", "--max-num-seqs", "1"], "--max-num-seqs below the tensor"),
    (["-tp", "2", "--enable-batch-sharded-sampling", "--max-logprobs", "-1"], "--max-logprobs -1 allows"),
    (["-tp", "2", "--enable-batch-sharded-sampling", "--return-sampling-mask"], "its gather drops sampling masks"),
    (["--speculative-config", ADAPTIVE, "--enforce-eager"], "enable_adaptive_verification: needs full CUDA graphs"),
    (["--speculative-config", ADAPTIVE, "-O0"], "enable_adaptive_verification: needs full CUDA graphs"),
    (["--speculative-config", ADAPTIVE, "-cc", '{"cudagraph_mode": "PIECEWISE"}'], "needs full CUDA graphs"),
    (["--speculative-config", ADAPTIVE, "--enable-lora"], "enable_adaptive_verification: not with LoRA"),
])
def test_0_33s_sharded_sampling_and_adaptive_verification_are_held_to_their_validators(serve, says):
    """r116: _validate_batch_sharded_sampling and _validate_adaptive_verification refuse these at start-up."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, *serve], [])
    read([MODEL, "-tp", "2", "--enable-batch-sharded-sampling"], [])
    read([MODEL, "--speculative-config", ADAPTIVE], [])


@pytest.mark.parametrize("ready, says", [([], "every request of the bench fails (its result: completed 0)"),
                                         (["--ready-check-timeout-sec", "5"], "the bench stops at its test request")])
def test_a_sampling_value_the_server_refuses_says_what_the_bench_does(ready, says):
    """r116: the bench sends its test request only with --ready-check-timeout-sec (0 by default): without it every
    request fails; the message had said the bench stops."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL], ["--temperature", "3", *ready])


@pytest.mark.parametrize("version, serve, says", [
    ("0.33.0", ["--lora-modules", "a=/x"], "--lora-modules: needs --enable-lora"),
    ("0.33.0", ["--enable-lora", "--lora-modules", "foo"], "'foo': not NAME=PATH nor valid JSON"),
    ("0.33.0", ["--enable-lora", "--lora-modules", '{"name": "a"}'], "invalid fields"),
    ("0.19.0", ["--enable-lora", "--lora-modules", '{"name": "a", "path": "/x", "is_3d_lora_weight": true}'],
     "invalid fields: vLLM 0.19.0 takes an object of name, path, base_model_name"),
    ("0.19.0", ["--enable-lora", "--lora-modules", "a=b=c"], "reads NAME=PATH with one '='"),
    ("0.33.0", ["--enable-lora", "--lora-modules", "a="], "both the adapter's name and its path must be given"),
    ("0.33.0", ["--enable-lora", "--lora-modules", "a=/x", "a=/y"], "'a' given twice"),
    ("0.33.0", ["--enable-lora", "--lora-modules", f"{MODEL}=/x"], "conflicts with a served base model"),
    ("0.19.0", ["--default-mm-loras", '{"image": "/x"}'], "--default-mm-loras: meta-llama/Llama-3.1-8B-Instruct is "
                                                          "no multimodal model"),
    ("0.33.0", ["--tokenizer-mode", "bogus"], "--tokenizer-mode: 'bogus': vLLM 0.33.0 registers no such"),
    ("0.19.0", ["--tokenizer-mode", "cohere"], "--tokenizer-mode: 'cohere': vLLM 0.19.0 registers no such"),
])
def test_round_117_lora_adapters_and_tokenizer_modes_vllm_refuses_are_refused(version, serve, says):
    """r117: the server's static adapters are parsed and loaded at start (LoRA enabled, a name and a path each,
    once), modality LoRAs need a multimodal model, and a tokenizer mode is looked up in the release's registry."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, *serve], [], version=version)


def test_what_vllm_takes_of_lora_modules_and_tokenizer_modes_is_taken():
    read([MODEL, "--enable-lora", "--lora-modules", "a=b=c"], [], version="0.33.0")  # 0.33 splits once
    read([MODEL, "--enable-lora", "--lora-modules", '{"name": "a", "path": "/x", "is_3d_lora_weight": true}'], [])
    read([MODEL, "--tokenizer-mode", "slow"], [], version="0.19.0")
    read([MODEL, "--tokenizer-mode", "mistral"], ["--tokenizer-mode", "hf"])
    with pytest.raises(ConfigError, match="vllm bench serve --tokenizer-mode: 'slow'"):
        read([MODEL], ["--tokenizer-mode", "slow"], version="0.33.0")


SPEC_EAGLE = '"model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"'
SPEC_DRAFT = '"model": "meta-llama/Llama-3.2-1B-Instruct"'
SPEC_NGRAM = '"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4'


@pytest.mark.parametrize("version, serve, says", [
    ("0.33.0", [f'{{{SPEC_NGRAM}, "num_speculative_tokens_per_batch_size": [[2, 10, 3]]}}'], "the first range starts at 2"),
    ("0.33.0", [f'{{{SPEC_NGRAM}, "num_speculative_tokens_per_batch_size": [[1, 8, 3], [5, 10, 2]]}}'], "must not overlap"),
    ("0.33.0", [f'{{{SPEC_NGRAM}, "num_speculative_tokens_per_batch_size": [[1, 8, 3], [12, 9, 2]]}}'],
     "ranges from 1 with start <= end"),
    ("0.19.0", [f'{{{SPEC_DRAFT}, "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1}}', "-tp", "2"],
     "draft_tensor_parallel_size: 1 beside the target's tensor_parallel_size 2"),
    ("0.19.0", [f'{{{SPEC_DRAFT}, "num_speculative_tokens": 3, "disable_padded_drafter_batch": true}}'],
     "draft_model drafts only in padded drafter batches"),
    ("0.33.0", [f'{{{SPEC_EAGLE}, "num_speculative_tokens": 3, "parallel_drafting": true, '
                f'"disable_padded_drafter_batch": true}}'], "eagle with parallel drafting drafts only in padded"),
    ("0.33.0", [f'{{{SPEC_EAGLE}, "num_speculative_tokens": 3, "use_local_argmax_reduction": true, '
                f'"draft_sample_method": "probabilistic"}}'], "use_local_argmax_reduction: not with draft_sample"),
    ("0.33.0", ['{"method": "extract_hidden_states", "num_speculative_tokens": 1, "draft_model_config": {"hf_config": '
                '{"eagle_aux_hidden_state_layer_ids": [1, 2]}}, "draft_sample_method": "probabilistic"}'],
     "extract_hidden_states samples greedily only"),
    ("0.19.0", [f'{{{SPEC_DRAFT}, "num_speculative_tokens": 3, "quantization": "bogus"}}'],
     "quantization: 'bogus' is not a quantization method of vLLM 0.19.0"),
    ("0.33.0", ['{"method": "suffix", "num_speculative_tokens": 200}'], "200 above the V1 rejection sampler's 128"),
])
def test_round_118_speculative_configs_vllm_refuses_are_refused(version, serve, says):
    """r118: the dynamic schedule 0.33's scheduler reads at start, and what the model runner's drafter refuses as it
    loads or first verifies, were accepted."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, "--speculative-config", *serve], [], version=version)


def test_what_vllm_takes_of_speculative_configs_is_taken(tmp_path):
    """r118: more than 64 drafts were refused on servesim's own bound, where vLLM takes any count (its V1 sampler
    up to 128; 0.33's V2 runner without one); an EAGLE drafter without parallel drafting needs no padding; a
    DeepSeek-V2 checkpoint has no MTP layers."""
    assert read([MODEL, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 100, '
                                                '"prompt_lookup_max": 4}'], []).settings[
        "speculative.num_speculative_tokens"] == 100
    assert read([MODEL, "--speculative-config", '{"method": "suffix", "suffix_decoding_max_tree_depth": 80}'],
                []).settings["speculative.num_speculative_tokens"] == 80
    read([MODEL, "--speculative-config", f'{{{SPEC_EAGLE}, "num_speculative_tokens": 3, '
                                         f'"disable_padded_drafter_batch": true}}'], [], version="0.19.0")
    read([MODEL, "--speculative-config", f'{{{SPEC_NGRAM}, "num_speculative_tokens_per_batch_size": '
                                         f'[[1, 8, 3], [9, 100, 2]]}}'], [])
    read([MODEL, "-tp", "2", "--speculative-config", f'{{{SPEC_DRAFT}, "num_speculative_tokens": 3, '
                                                     f'"draft_tensor_parallel_size": 1}}'], [])  # 0.33's V2 runner
    model = tmp_path / "dsv2"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 2048,
        "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
        "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
        "first_k_dense_replace": 1, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400, "max_position_embeddings": 163840,
        "torch_dtype": "bfloat16"}))
    with pytest.raises(ConfigError, match="mtp drafts with the served model's own MTP layers"):
        read([str(model), "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'], [])


def test_a_printed_line_leaves_the_derived_graph_size_to_vllm_and_says_another_release(capsys):
    """r118: config --vllm printed the largest CUDA graph servesim derived, and given, 0.33 drops the graph of
    max_num_seqs' own size it adds when left to derive it (7 sequences: graphs 1, 2, 4, 8, not 1, 2, 4, 7, 8); a line
    printed for 0.19 from a scenario run as 0.33 said nothing of the other release's defaults."""
    assert main(["config", "--set", "engine.max_num_seqs=7", "--vllm"]) == 0
    captured = capsys.readouterr()
    line = captured.out.strip().splitlines()[-1]
    assert line.startswith("vllm serve") and "--max-cudagraph-capture-size" not in line
    assert read(shlex.split(line)[2:], []).settings.get("engine.max_cudagraph_capture_size") is None
    assert "ran as vLLM" not in captured.err
    assert main(["config", "--vllm", "--vllm-version", "0.19.0"]) == 0
    assert "the scenario ran as vLLM 0.33.0 (engine.vllm_defaults" in capsys.readouterr().err


@pytest.mark.parametrize("gpu, serve, says", [
    ("a100-80gb", [MODEL, "--attention-backend", "FLASHMLA"], "FLASHMLA: llama-3.1-8b has no latent attention"),
    ("a100-80gb", [MODEL, "--attention-backend", "FLASH_ATTN", "--kv-cache-dtype", "fp8"],
     "FLASH_ATTN: it takes no fp8 KV cache on compute capability 8.0"),
    ("b60", [MODEL, "--attention-backend", "FLASHINFER"], "Intel's XPU runs FLASH_ATTN or TRITON_ATTN"),
    ("h200-sxm", ["deepseek-ai/DeepSeek-V3", "-tp", "8", "--attention-backend", "FLASHMLA", "--block-size", "16"],
     "--block-size: 16: the attention backend FLASHMLA does not take it"),
    ("h200-sxm", [MODEL, "--attention-config", '{"backend": "CUTLASS_MLA"}'], "--attention-config.backend: CUTLASS_MLA"),
    ("a100-80gb", ["openai/gpt-oss-120b", "--kv-cache-dtype", "fp8"], "only Triton's take gpt-oss-120b's attention "
                                                                      "sinks there, and it needs SM89"),
    ("h100-sxm", ["meta-llama/Llama-3.1-70B-Instruct", "--cpu-offload-gb", "80", "--max-model-len", "8192"],
     "--cpu-offload-gb is not modelled: servesim keeps every weight on the GPU"),
])
def test_round_120_attention_backends_vllm_would_not_start_are_refused(gpu, serve, says, tmp_path, capsys):
    """r120: a backend the line names was never checked against the model, the GPU or the KV dtype, nor its block
    size derived; an fp8 KV cache on Ampere where only a Triton backend is left ran; a model over the GPU beside
    --cpu-offload-gb was refused as if only -tp could help."""
    assert main(["vllm", "--gpu", gpu, "--set", "profile=roofline", "--config", "serve", *serve]) == 2
    err = capsys.readouterr().err
    assert err.count("servesim: error:") == 1 and says in err, err


@pytest.mark.parametrize("gpu, serve, block", [
    ("h200-sxm", ["deepseek-ai/DeepSeek-V3", "-tp", "8", "--attention-backend", "FLASHMLA"], 64),
    ("h200-sxm", ["deepseek-ai/DeepSeek-V3", "-tp", "8", "--attention-backend", "TRITON_MLA", "--kv-cache-dtype", "fp8"],
     16),
    ("b200-sxm", ["deepseek-ai/DeepSeek-V3", "-tp", "8", "--attention-backend", "CUTLASS_MLA"], 128),
    ("b60", [MODEL, "--attention-backend", "TRITON_ATTN", "--max-model-len", "8192"], 16),
    ("b60", [MODEL, "--max-model-len", "8192"], 64),  # vLLM's own choice there: FlashAttention, multiples of 64
])
def test_the_block_size_is_the_named_backends(gpu, serve, block, capsys):
    """r120: the block size was derived from vLLM's automatic choice only (FlashMLA's 64 read as 16)."""
    assert main(["vllm", "--gpu", gpu, "--set", "profile=roofline", "--config", "serve", *serve]) == 0
    assert f"\n  block_size: {block}\n" in capsys.readouterr().out


@pytest.mark.parametrize("serve, says", [
    (["-cc", '{"custom_ops": ["rms_norm"]}'], "custom_ops: invalid syntax 'rms_norm'"),
    (["-cc", '{"custom_ops": ["all", "none"]}'], "only one base mode"),
    (["-cc", '{"custom_ops": ["+rms_norm", "-rms_norm"]}'], "cannot both enable and disable rms_norm"),
    (["-cc", '{"mode": 3, "backend": "cudagraphs"}'], "backend: 'cudagraphs'"),
    (["-cc", '{"decoder_replay_cudagraph_capture_sizes": [0]}'], "must all be positive"),
    (["-cc", '{"compile_sizes": ["foo"]}'], "a text entry can only be 'cudagraph_capture_sizes'"),
    (["--offload-group-size", "4", "--offload-num-in-group", "8"], "--offload-num-in-group: 8 must be <="),
    (["--offload-group-size", "4", "--offload-prefetch-step", "0"], "--offload-prefetch-step: must be >= 1"),
])
def test_round_120_compilation_and_offload_configs_vllm_refuses_are_refused(serve, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, *serve], [])


@pytest.mark.parametrize("serve, eager", [
    (["-cc", '{"mode": 1}'], True),  # stock torch.compile: no graph wrapped
    (["-cc", '{"mode": 1, "cudagraph_mode": "FULL"}'], True),
    (["-cc", '{"cudagraph_mode": "PIECEWISE", "splitting_ops": []}'], True),  # nothing to split
    (["-cc", '{"splitting_ops": []}'], False),  # FULL_AND_PIECEWISE keeps its full graphs
    (["Qwen/Qwen3-30B-A3B", "-dp", "2", "--enable-expert-parallel", "--all2all-backend", "deepep_high_throughput"],
     True),
])
def test_lines_vllm_captures_no_cuda_graph_for_run_eager(serve, eager):
    """r120: these were simulated with CUDA graphs up to 512 tokens, where vLLM captures none."""
    model = [] if serve[0].startswith("Qwen") else [MODEL]
    assert read([*model, *serve], []).settings.get("engine.enforce_eager") is eager


@pytest.mark.parametrize("version, serve, bench, says", [
    ("0.33.0", ["--override-generation-config", '{"temperature": 3}'], [],
     "--override-generation-config.temperature: 3: vLLM 0.33.0's server takes temperature in [0, 2]"),
    ("0.19.0", ["--override-generation-config", '{"top_p": 0}'], [], "--override-generation-config.top_p"),
    ("0.33.0", ["--reasoning-parser", "nosuchparser"], [], "'nosuchparser' is not a reasoning parser vLLM 0.33.0"),
    ("0.19.0", ["--reasoning-parser", "deepseek_v4"], [], "'deepseek_v4' is not a reasoning parser vLLM 0.19.0"),
    ("0.33.0", ["--tool-call-parser", "nosuch", "--enable-auto-tool-choice"], [], "'nosuch' is not a tool call parser"),
    ("0.33.0", ["--grpc-port", "9000"], [], "--grpc-port: needs the Rust frontend"),
    ("0.19.0", ["--port", "70000"], [], "--port: 70000 is no TCP port"),
    ("0.33.0", ["--reasoning-effort-map", '{"bogus": "x"}'], [], "--reasoning-effort-map: a JSON object of none"),
    ("0.33.0", [], ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--extra-body",
                    '{"logprobs": true, "top_logprobs": 50}'], "top_logprobs up to its --max-logprobs (20)"),
    ("0.33.0", [], ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--extra-body",
                    '{"top_logprobs": 5}'], "top_logprobs only beside logprobs true"),
])
def test_round_121_server_and_client_lines_vllm_refuses_are_refused(version, serve, bench, says):
    """r121: the server's sampling defaults (every request that sends none is a 400), parsers no release
    registers, the Rust frontend's gRPC port, a port no socket binds, 0.33's effort map and the chat client's
    logprobs ran as served."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read([MODEL, *serve], bench, version=version)


def test_what_vllm_takes_of_server_defaults_and_parsers_is_taken():
    read([MODEL, "--override-generation-config", '{"temperature": 3}'], ["--temperature", "1"])  # the client's wins
    read([MODEL, "--override-generation-config", '{"repetition_penalty": 0}'], [])  # completions send 1.0
    read([MODEL, "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes", "--enable-auto-tool-choice"], [])
    read([MODEL, "--reasoning-parser", "mine", "--reasoning-parser-plugin", "/p.py"], [])  # a plugin registers it
    read([MODEL, "--tool-call-parser", "nosuch"], [])  # checked only beside auto tool choice
    read([MODEL, "--reasoning-effort-map", '{"high": "x"}'], [])


def test_a_backend_vllm_applies_is_not_said_to_be_unmodelled():
    """r121: --attention-config's backend was applied and yet listed as not modelled; --attention-backend auto
    (vLLM's own choice) was too."""
    cmd = read([MODEL, "--attention-config", '{"backend": "FLASH_ATTN"}'], [])
    assert cmd.settings["engine.attention_backend"] == "FLASH_ATTN" and not cmd.not_modelled
    cmd = read([MODEL, "--attention-backend", "auto"], [])
    assert "engine.attention_backend" not in cmd.settings and not cmd.not_modelled


@pytest.mark.parametrize("version, flags, block", [
    ("0.33.0", ["--block-size", "16"], 16),  # r121: refused as FlashAttention's multiples of 64 on XPU
    ("0.19.0", [], 64)])  # 0.19's XPU platform sets 64 whatever the backend
def test_triton_attention_on_intels_xpu_takes_its_own_block_size(version, flags, block, capsys):
    assert main(["vllm", "--vllm-version", version, "--gpu", "b60", "--config", "serve", MODEL, "--attention-backend",
                 "TRITON_ATTN", "--max-model-len", "4096", *flags]) == 0
    assert f"\n  block_size: {block}\n" in capsys.readouterr().out


def test_a_test_request_the_server_refuses_stops_the_bench(tmp_path, capsys):
    """r122: with --ready-check-timeout-sec the client first sends its first request as a test; one over
    max_model_len is a 400 and the bench stops, writing nothing: servesim wrote a result of 20 failures."""
    line = ["serve", MODEL, "--max-model-len", "1000", "--", "bench", "serve", "--dataset-name", "random",
            "--random-input-len", "991", "--random-output-len", "10", "--num-prompts", "20", "--save-result"]
    assert main(["vllm", "--vllm-version", "0.19.0", "--out", str(tmp_path / "a"), *line,
                 "--ready-check-timeout-sec", "5"]) == 2
    assert "--ready-check-timeout-sec: the client's test request (its first: 991 prompt + 10 output tokens)" in \
        capsys.readouterr().err
    assert main(["vllm", "--vllm-version", "0.19.0", "--out", str(tmp_path / "b"), "--quiet", *line]) == 0


@pytest.mark.parametrize("k, largest", [(1, 512), (2, 498), (4, 500), (6, 497)])
def test_0_19s_graphs_under_speculation_are_multiples_of_its_decode_query(k, largest):
    """r122: 0.19 rounds each capture size up to a multiple of 1 + k and drops those past the ceiling
    (adjust_cudagraph_sizes_for_spec_decode); servesim kept 512."""
    from servesim.simulator.config import load, override

    cmd = read([MODEL, "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": k,
                                                           "prompt_lookup_max": 4})], [], version="0.19.0")
    rs = load(None, [override(key, v) for key, v in cmd.settings.items()] + ["hardware.gpu=h100-sxm"])
    assert rs.as_dict()["engine"]["max_cudagraph_capture_size"] == largest


NGRAM = {"method": "ngram", "prompt_lookup_max": 4}


@pytest.mark.parametrize("version, method, flags, largest", [
    ("0.19.0", NGRAM, ["--cudagraph-capture-sizes", "1", "2", "4", "8", "16", "30"], 16),
    ("0.33.0", {"method": "suffix"}, ["--cudagraph-capture-sizes", "1", "2", "4", "8", "16", "30"], 16),  # V1 runner
    ("0.33.0", NGRAM, ["--cudagraph-capture-sizes", "1", "2", "4", "8", "16", "30"], 30),  # the V2 runner: as given
    ("0.19.0", NGRAM, ["--cudagraph-capture-sizes", "1", "2"], "no CUDA-graph capture size is left"),
    # r135: past the grid's top (288), not its ceiling (300): 275, not 290; a largest of 7 at k = 6 leaves none
    ("0.19.0", NGRAM | {"num_speculative_tokens": 4}, ["--max-num-seqs", "30"], 275),
    ("0.19.0", NGRAM | {"num_speculative_tokens": 6}, ["--max-cudagraph-capture-size", "7"], "is left once rounded"),
    # r135: only where decode graphs are full (0.19: with a separate decode routine), and a heterogeneous-vocabulary
    # draft model runs 0.33's V1 model runner
    ("0.19.0", NGRAM, ["-cc", json.dumps({"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 2, 3, 5, 10]})],
     10),
    ("0.19.0", NGRAM, ["-cc", json.dumps({"cudagraph_mode": "FULL", "cudagraph_capture_sizes": [1, 2, 3, 5, 10]})], 10),
    ("0.33.0", {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "use_heterogeneous_vocab": True,
                "draft_sample_method": "greedy"}, ["--cudagraph-capture-sizes", "1", "2", "4", "8", "16", "30"], 16),
])
def test_round_134_given_graph_sizes_round_to_the_decode_query_where_vllm_rounds_them(version, method, flags, largest):
    """r134: given capture sizes were kept as given under speculation: 0.19 (and 0.33 on its V1 model runner)
    round each up to a multiple of 1 + k and drop those past the largest, so 24-token verify steps ran eager in
    vLLM and as graphs here (TPOT 10% short); with none left vLLM does not start."""
    from servesim.simulator.config import load, override

    cmd = read([MODEL, "--speculative-config", json.dumps({"num_speculative_tokens": 3} | method), *flags], [],
               version=version)
    sets = [override(key, v) for key, v in cmd.settings.items()] + ["hardware.gpu=h100-sxm"]
    if isinstance(largest, str):
        with pytest.raises(ConfigError, match=largest):
            load(None, sets)
    else:
        assert load(None, sets).cost_model._graph_tokens == largest


def test_a_block_a_multiple_of_the_backends_kernel_block_is_taken(capsys):
    """r122: FlashInfer's 48 (three of its 16-token kernel blocks) and FlashMLA's 128 were refused; vLLM takes a
    multiple of a kernel block size (supports_block_size)."""
    assert main(["vllm", "--gpu", "h100-sxm", "--config", "serve", MODEL, "--attention-backend", "FLASHINFER",
                 "--block-size", "48"]) == 0
    assert "\n  block_size: 48\n" in capsys.readouterr().out
    with pytest.raises(ConfigError, match=re.escape("--random-range-ratio: a ratio in [0, 1), got -0.5")):
        read([MODEL], ["--random-range-ratio=-0.5"], version="0.19.0")  # 0.19's flag is a float: no JSON form


def test_a_bench_flag_not_modelled_is_named_as_the_benchs(capsys):
    """r123: serve's and the bench's --port were said as "--port, --port"."""
    assert main(["vllm", "--config", "serve", MODEL, "--port", "8200", "--", "bench", "serve", "--port", "8200"]) == 0
    assert "not modelled, recorded in vllm_command.json: --port, bench --port" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--result-filename", "--label"])
def test_a_result_name_no_file_system_takes_is_refused_before_the_run(flag, tmp_path, capsys):
    """r123: a 300-character name failed with 'File name too long' after the run had written its files."""
    name = "F" * 300 + (".json" if flag == "--result-filename" else "")
    assert main(["vllm", "--out", str(tmp_path / "o"), "serve", MODEL, "--", "bench", "serve", "--num-prompts", "5",
                 "--save-result", flag, name]) == 2
    err = capsys.readouterr().err
    assert f"vllm bench serve {flag}: the result file's name would be" in err and "more than the 255" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_round_125_bench_lines_vllm_refuses_are_refused(version):
    """r125: a completions backend pointed at the chat route (every request a 400), a negative decimal given as its
    own word (vLLM's parser reads -0.5 as a dotted flag and the line fails), random batches on a generation
    server (max_tokens 0, a 400 each), and 0.19's --dataset-path read while the dataset is still 'random'."""
    refused = [(["--endpoint", "/v1/chat/completions"], "--endpoint: '/v1/chat/completions': --backend openai sends"),
               (["--backend", "vllm", "--endpoint", "/v1/chat/completions"], "--backend vllm sends a completions"),
               (["--frequency-penalty", "-0.5", "--num-prompts", "10"], "write --frequency-penalty=-0.5"),
               (["--num-prompts", "10", "--presence-penalty", "-0.5"], "write --presence-penalty=-0.5"),
               (["--random-batch-size", "4"], "--random-batch-size: 4: the random dataset then folds")]
    if version == "0.19.0":
        refused.append((["--dataset-path", "/tmp/x.txt", "--dataset-name", "prefix_repetition"],
                        "--dataset-path: read while --dataset-name is still 'random'"))
    for flags, says in refused:
        with pytest.raises(ConfigError, match=re.escape(says)):
            read([MODEL], ["--num-prompts", "20", *flags], version=version)
    taken = [["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"], ["--frequency-penalty=-0.5"],
             ["--dataset-name", "prefix_repetition", "--dataset-path", "/tmp/x.txt"] if version == "0.19.0" else [],
             # another dataset's flags are not read, so not checked
             ["--dataset-name", "prefix_repetition", "--random-input-len", "0", "--random-output-len", "0",
              "--input-len", "0"],
             ["--dataset-name", "random", "--prefix-repetition-num-prefixes", "0",
              "--prefix-repetition-prefix-len", "-1", "--prefix-repetition-output-len", "0"]]
    for flags in taken:
        read([MODEL], ["--num-prompts", "20", *flags], version=version)


def test_round_125_0_33s_range_ratio_is_read_as_its_parser_reads_it():
    """0.33's parser folds --random-range-ratio.input/.output into the JSON form (any flag's dotted keys), and
    reads the ratio for every dataset: prefix_repetition with an unreadable one stops the bench."""
    dotted = read([MODEL], ["--random-range-ratio.input", "0.3", "--random-range-ratio.output", "0.5"])
    given = read([MODEL], ["--random-range-ratio", '{"input": 0.3, "output": 0.5}'])
    assert dotted.settings == given.settings
    with pytest.raises(ConfigError, match="invalid float value"):  # 0.19's flag is a float
        read([MODEL], ["--random-range-ratio.input", "0.3"], version="0.19.0")
    with pytest.raises(ConfigError, match="--random-range-ratio: 'abc': vLLM 0.33 reads it"):
        read([MODEL], ["--dataset-name", "prefix_repetition", "--random-range-ratio", "abc", "--num-prompts", "20"])
    read([MODEL], ["--dataset-name", "prefix_repetition", "--random-range-ratio", "0.9", "--num-prompts", "20"])


def test_round_125_one_seed_sends_the_same_requests_at_every_rate_at_vllms_times(tmp_path):
    """vLLM's random dataset draws lengths from a generator of its own and its client the gaps from numpy's
    legacy one seeded with --seed (np.random.gamma, one a request); servesim drew both from one stream, so each
    rate sent other prompts, at other times."""
    def run(name, *rate):
        assert main(["vllm", "--quiet", "--out", str(tmp_path / name), "serve", "Qwen/Qwen3-8B", "--", "bench",
                     "serve", "--num-prompts", "10", "--random-input-len", "100", "--random-output-len", "20",
                     "--random-range-ratio", "0.5", "--seed", "7", "--save-result", "--save-detailed",
                     "--result-filename", "r.json", *rate]) == 0
        return json.loads((tmp_path / name / "r.json").read_text()), pd.read_parquet(tmp_path / name / "requests.parquet")

    burst, _ = run("inf")
    paced, requests = run("rate", "--request-rate", "5", "--burstiness", "2")
    assert (paced["input_lens"], paced["output_lens"]) == (burst["input_lens"], burst["output_lens"])
    legacy = np.random.RandomState(7)  # as vLLM's client: np.random.seed(seed), then a gamma draw per request
    sent = np.cumsum([legacy.gamma(shape=2.0, scale=1.0 / (5 * 2.0)) for _ in range(10)])
    np.testing.assert_allclose(requests.sort_values("request_id").arrival_time, sent * 2.0 / sent[-1], rtol=1e-6)


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_round_128_a_request_whose_max_tokens_is_below_its_min_tokens_is_answered_400(version, tmp_path):
    """r128: --extra-body min_tokens above a request's max_tokens (the output length the client sends, or what
    0.33 lowers it to) is SamplingParams' 400; servesim completed every request."""
    def run(name, extra, *more):
        line = ["vllm", "--quiet", "--vllm-version", version, "--out", str(tmp_path / name), "serve",
                "Qwen/Qwen3-8B", "--max-model-len", "1024", "--", "bench", "serve", "--num-prompts", "30",
                "--random-input-len", "64", "--random-output-len", "128", "--random-range-ratio", "0.5",
                "--save-result", "--save-detailed", "--result-filename", "r.json", *extra, *more]
        assert main(line) == 0
        return json.loads((tmp_path / name / "r.json").read_text())
    free = run("free", [])
    lens = free["output_lens"]
    held = run("held", ["--extra-body", '{"min_tokens": 150}'])
    assert held["completed"] == sum(n >= 150 for n in lens) and 0 < held["failed"] < 30
    assert all(e == "Bad Request" for e in held["errors"] if e) and held["output_lens"] == [
        n if n >= 150 else 0 for n in lens]
    from servesim.simulator.front_end import bad_request
    from servesim.workloads.spec import RequestSpec

    long = RequestSpec(0, 0.0, 900, 200)  # 0.33 lowers its max_tokens to the 124 the context leaves: below 150
    assert bad_request(long, 1024, "lower", True, 150) == "min_tokens_above_max_tokens"
    assert bad_request(long, 1024, "lower", True, 120) is None
    assert bad_request(long, 1024, "refuse", True, 150) == "max_tokens_too_large"
    assert bad_request(long, 1024, "lower", False, 150) == "min_tokens_above_max_tokens"  # none sent: the room


def test_round_128_a_random_prompt_of_its_prefix_alone_as_vllm_sends_it(tmp_path):
    """r128: --random-input-len 0 beside a prefix sent prefix + 1 tokens (32 of them cached), where vLLM sends the
    prefix alone, its last block computed (16 cached); 0.19's server ignores --extra-body's stream_interval."""
    assert main(["vllm", "--quiet", "--out", str(tmp_path / "p"), "serve", "Qwen/Qwen3-8B", "--", "bench", "serve",
                 "--random-input-len", "0", "--random-prefix-len", "32", "--random-output-len", "4", "--num-prompts",
                 "5", "--request-rate", "5", "--save-result", "--save-detailed", "--result-filename", "r.json"]) == 0
    assert json.loads((tmp_path / "p" / "r.json").read_text())["input_lens"] == [32] * 5
    assert pd.read_parquet(tmp_path / "p" / "requests.parquet").cached_tokens.tolist() == [0, 16, 16, 16, 16]
    cmd = read([MODEL], ["--extra-body", '{"stream_interval": 0}'], version="0.19.0")
    assert "ignored" in cmd.not_modelled["vllm bench serve --extra-body.stream_interval"]


def test_round_128_a_burstiness_below_1e_4_runs_at_vllms_times(tmp_path):
    """r128: --burstiness 5e-5 was refused (servesim drew no gamma past cv 100); vLLM takes any above 0: most of its
    gaps are 0 and its rescale spreads the rest to N / rate."""
    assert main(["vllm", "--quiet", "--out", str(tmp_path / "b"), "serve", "Qwen/Qwen3-8B", "--", "bench", "serve",
                 "--num-prompts", "50", "--random-input-len", "64", "--random-output-len", "8", "--request-rate",
                 "10", "--burstiness", "5e-5"]) == 0
    requests = pd.read_parquet(tmp_path / "b" / "requests.parquet").sort_values("request_id")
    legacy = np.random.RandomState(0)
    sent = np.cumsum([legacy.gamma(shape=5e-5, scale=1.0 / (10 * 5e-5)) for _ in range(50)])
    assert 0 < (np.diff(sent) > 0).sum() < 49  # mostly zero gaps
    np.testing.assert_allclose(requests.arrival_time, sent * 5.0 / sent[-1], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_round_126_memory_lines_as_vllm_starts_them(version):
    """r126: --kv-offloading-size 0 and an OffloadingConnector without cpu_bytes_to_use fail vLLM's start-up;
    --kv-cache-memory-bytes 0 is vLLM's 'not given'; --max-model-len 1 starts but refuses every request."""
    hma = ["--disable-hybrid-kv-cache-manager"] if version == "0.19.0" else []
    with pytest.raises(ConfigError, match="--kv-offloading-size: 0: vLLM's CPU offloading then has no bytes"):
        read([MODEL, "--kv-offloading-size", "0", *hma], [], version=version)
    read([MODEL, "--kv-offloading-size", "4", *hma], [], version=version)
    offload = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}
    with pytest.raises(ConfigError, match="OffloadingConnector without kv_connector_extra_config's cpu_bytes_to_use"):
        read([MODEL, "--kv-transfer-config", json.dumps(offload), *hma], [], version=version)
    read([MODEL, "--kv-transfer-config", json.dumps(offload | {"kv_connector_extra_config": {
        "cpu_bytes_to_use": 2**30}}), *hma], [], version=version)
    assert read([MODEL, "--kv-cache-memory-bytes", "0"], [], version=version).settings == \
        read([MODEL], [], version=version).settings
    with pytest.raises(ConfigError, match="--max-model-len: 1: vLLM starts, but refuses every request"):
        read([MODEL, "--max-model-len", "1"], [], version=version)


def test_round_126_0_19_checks_a_given_cache_size_before_the_block_override(capsys):
    """0.19 checks the longest request against --kv-cache-memory-bytes (what it sized) before the override
    replaces the count; servesim checked the gpu_memory_utilization pool instead, both ways wrong."""
    line = ["vllm", "--vllm-version", "0.19.0", "--gpu", "h100-sxm", "--config", "serve", MODEL]
    assert main(line + ["--kv-cache-memory-bytes", "1G", "--num-gpu-blocks-override", "20000"]) == 2
    assert "--kv-cache-memory-bytes: the KV pool (512 blocks" in capsys.readouterr().err
    assert main(line + ["--gpu-memory-utilization", "0.2", "--kv-cache-memory-bytes", "20G",
                        "--num-gpu-blocks-override", "1000", "--max-model-len", "4096"]) == 0


def test_round_127_eplbs_redundant_experts_take_memory(capsys):
    """Each redundant expert is a whole expert's weights on some GPU; the pool ignored them (DeepSeek-V3 on 8 x H200:
    256 of them need 170 GiB a GPU, and ran)."""
    blocks = []
    for n in (0, 32):
        assert main(["vllm", "--gpu", "h200-sxm", "--config", "serve", "deepseek-ai/DeepSeek-V3", "-dp", "8",
                     "--enable-expert-parallel", "--enable-eplb", "--eplb-config",
                     json.dumps({"num_redundant_experts": n}), "--", "bench", "serve", "--num-prompts", "5"]) == 0
        blocks.append(yaml.safe_load(capsys.readouterr().out)["resolved"]["num_gpu_blocks"])
    assert blocks[1] < 0.8 * blocks[0]
    assert main(["vllm", "--gpu", "h200-sxm", "--config", "serve", "deepseek-ai/DeepSeek-V3", "-dp", "8",
                 "--enable-expert-parallel", "--enable-eplb", "--eplb-config", '{"num_redundant_experts": 256}']) == 2
    assert "170.0 GiB per GPU" in capsys.readouterr().err  # its bf16 routers (r133)
    with pytest.raises(ConfigError, match="engine.num_redundant_experts: needs enable_expert_parallel"):
        load(None, ["model=qwen3-30b-a3b", "engine.num_redundant_experts=8"])


@pytest.mark.parametrize("version", ["0.33.0", "0.19.0"])
def test_round_127_parallel_launch_lines_vllm_refuses(version):
    for flags, says in [(["--data-parallel-backend", "foo"], "'foo' (vLLM takes mp or ray)"),
                        (["-tp", "2", "--nnodes", "2", "--distributed-executor-backend", "ray"],
                         "--distributed-executor-backend: ray with --nnodes 2"),
                        (["-tp", "4", "--nnodes", "2", "--node-rank", "1"], "that node's engine is a follower")]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            read([MODEL, *flags], [], version=version)
    read([MODEL, "-tp", "4", "--nnodes", "2", "--node-rank", "0"], [], version=version)
    if version == "0.33.0":  # the V1 model runner's refusal
        with pytest.raises(ConfigError, match="--prefill-context-parallel-size: beside suffix speculative decoding"):
            read([MODEL, "-pcp", "2", "--speculative-config", '{"method": "suffix", "num_speculative_tokens": 3}'], [])


@pytest.mark.parametrize("model, unit, says", [
    ("meta-llama/Llama-3.1-8B-Instruct", "8", "--prefix-match-unit: 8: with a single KV cache group, prefix-cache "
                                              "hits land on the block size (16)"),
    ("openai/gpt-oss-120b", "32", "--prefix-match-unit: 32: the KV cache groups' block size (16) is no multiple"),
    ("meta-llama/Llama-3.1-8B-Instruct", "16", None), ("openai/gpt-oss-120b", "8", None),
])
def test_round_130_a_prefix_match_unit_vllm_refuses_is_refused(model, unit, says, capsys):
    """vLLM 0.33's resolve_kv_cache_block_sizes refuses a unit other than the block size with one KV cache group,
    and one that does not divide the groups' block sizes with several; servesim recorded it as not modelled."""
    assert main(["vllm", "--config", "serve", model, "--prefix-match-unit", unit]) == (2 if says else 0)
    err = capsys.readouterr().err
    assert (says in err) if says else "error" not in err


def test_round_131_config_vllm_carries_eplb_copies_and_names_an_edited_model(capsys):
    """r131: engine.num_redundant_experts was said to have no flag, so the line read back ran a larger KV pool
    (EPLB's copies gone); it is --enable-eplb --eplb-config, which servesim vllm reads. A model edited with
    --set model.FIELD was printed as the built-in's own checkpoint without a word (an fp8 edit read back as bf16,
    3,300 fewer KV blocks); a checkpoint servesim reads as a built-in with other positions keeps its own id."""
    moe = ["--set", "model=qwen3-30b-a3b", "--set", "engine.data_parallel_size=2", "--set",
           "engine.enable_expert_parallel=true", "--set", "engine.num_redundant_experts=2", "--set",
           "engine.max_model_len=8192"]
    assert main(["config", "--vllm", *moe]) == 0
    captured = capsys.readouterr()
    line = shlex.split(captured.out)
    assert line[line.index("--enable-eplb") + 1:][:2] == ["--eplb-config", '{"num_redundant_experts": 2}'], line
    assert "num_redundant_experts" not in captured.err
    assert resolved_engine(capsys, line[3:], model="Qwen/Qwen3-30B-A3B")["num_redundant_experts"] == 2
    assert main(["config", "--vllm", "--set", "model.dtype=fp8", "--set", "model.num_hidden_layers=16"]) == 0
    err = capsys.readouterr().err
    assert "the scenario edits llama-3.1-8b (num_hidden_layers 16, dtype fp8): meta-llama/Llama-3.1-8B is the " \
           "unedited checkpoint" in err, err
    for flag in ("engine.kv_cache_dtype=fp8", "engine.quantization=fp8"):  # the line's own flags (r152: a note
        assert main(["config", "--vllm", "--set", flag]) == 0  # sent the user to find another checkpoint)
        assert "unedited checkpoint" not in capsys.readouterr().err
    assert main(["config", "--vllm", "--set", "model=Qwen/Qwen3-30B-A3B-Instruct-2507", "--set",
                 "engine.max_model_len=32768"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split()[2] == "Qwen/Qwen3-30B-A3B-Instruct-2507" and "edits" not in captured.err


@pytest.mark.parametrize("config, rc, says", [
    ({"kv_connector": "MooncakeConnector", "kv_role": "kv_producer"}, 2, "kv_role: kv_producer: this line serves both"),
    ({"kv_connector": "P2pNcclConnector", "kv_role": "kv_both"}, 2, "a P2pNcclConnector producer"),
    ({"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "xpu"}, 2, "takes cuda or cpu"),
    ({"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"}, 0, "kv_buffer_device"),
    ({"kv_connector": "MooncakeConnector", "kv_role": "kv_both"}, 0, "kv_connector"),
    ({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, 0, None),
])
def test_round_132_a_pd_line_says_what_its_connector_does_that_nixls_pull_does_not(config, rc, says, tmp_path,
                                                                                   capsys):
    """r132 (vLLM): every connector that moves KV was simulated as NIXL's pull, its settings taken as modelled:
    Mooncake with kv_producer on a line serving both instances fails the decode side's first request, a
    P2pNccl producer (kv_both is one) loads nothing, an xpu buffer fails vLLM's start on CUDA; a host buffer
    (cpu) and another connector's way of moving KV are recorded as not modelled."""
    argv = ["vllm", "--vllm-version", "0.19.0", "--set", "cluster.prefill_replicas=1", "--out", str(tmp_path / "o"),
            "serve", MODEL, "--kv-transfer-config", json.dumps(config), "--", "bench", "serve", "--num-prompts", "10"]
    assert main(argv) == rc
    err = capsys.readouterr().err.strip().splitlines()
    if rc == 2:
        assert len(err) == 1 and says in err[0], err
    elif says:
        assert any("not modelled" in line and f"--kv-transfer-config.{says}" in line for line in err), err
    else:
        assert not any("kv-transfer-config" in line for line in err), err


def test_round_132_cpu_offloading_keeps_the_legacy_block_hashes_beside_an_eagle_drafter(capsys):
    """r132 (vLLM 0.33): --kv-offloading-size makes a KV connector, and with one vLLM keeps the legacy hashes and
    drops a hit's last block for an EAGLE-type drafter; servesim took the lookahead hashes."""
    assert main(["vllm", "--config", "serve", MODEL, "--kv-offloading-size", "10", "--speculative-config",
                 json.dumps({"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                                          "num_speculative_tokens": 3}), "--", "bench", "serve", "--num-prompts", "10"]) == 0
    speculative = yaml.safe_load(capsys.readouterr().out)["speculative"]
    assert speculative["eagle_block_drop"] is True and speculative["lookahead_block_hashes"] is False


def test_round_136_chunked_local_attention_captures_no_full_graph(capsys):
    """vLLM's chunked local attention (Llama 4) reports no CUDA-graph support: a full mixed mode does not start,
    the default falls to piecewise graphs (said: the per-layer launches are not charged), -O0 to none."""
    scout = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
    base = ["vllm", "--config", "serve", scout, "-tp", "4", "--max-model-len", "8192"]
    assert main(base + ["-cc", json.dumps({"cudagraph_mode": "FULL"})]) == 2
    assert "FULL: llama-4-scout's chunked local attention captures no full CUDA graph" in capsys.readouterr().err
    assert main(base) == 0
    out = capsys.readouterr()
    assert "chunked local attention outside CUDA graphs" in out.err and "\n  enforce_eager: false\n" in out.out
    assert main(base + ["-O0"]) == 0
    assert "\n  enforce_eager: true\n" in capsys.readouterr().out


@pytest.mark.parametrize("version, extra, sections", [
    ("0.33.0", ["--max-concurrency", "4", "--percentile-metrics", "ttft,e2el,client_queue_time"],
     ["Time to First Token", "End-to-end Latency", "Client-side Queueing"]),
    ("0.19.0", ["--metric-percentiles", "50,99.9"], ["Time to First Token", "Time per Output Token (excl. 1st token)",
                                                     "Inter-token Latency"])])
def test_round_139_the_client_prints_vllms_block_from_its_result(version, extra, sections, tmp_path, capsys):
    """r139: servesim printed only its own table, whose duration starts at the first arrival (5.32 s against the
    file's 5.37 s): a script reading vLLM's printed block read nothing. Its lines are the file's figures, in vLLM's
    format and order; --json and --quiet print no block."""
    argv = ["vllm", "--vllm-version", version, "--out", str(tmp_path), "serve", "meta-llama/Llama-3.1-8B-Instruct",
            "--", "bench", "serve", "--random-input-len", "128", "--random-output-len", "16", "--num-prompts", "20",
            "--request-rate", "10", "--save-result", "--result-filename", "r.json", *extra]
    assert main(argv) == 0
    out = capsys.readouterr().out
    block = out[out.index("=" * 12 + " Serving Benchmark Result "):].splitlines()
    data = json.loads((tmp_path / "r.json").read_text())
    assert block[0] == "{:=^50}".format(" Serving Benchmark Result ") and block[-1] == "=" * 50
    rows = dict((line[:40].strip(), line[41:].strip()) for line in block if len(line) > 40 and line[40] == " ")
    assert rows["Successful requests:"] == str(data["completed"]) == "20"
    assert rows["Benchmark duration (s):"] == f"{data['duration']:.2f}"
    assert rows["Peak output token throughput (tok/s):"] == f"{data['max_output_tokens_per_s']:.2f}"
    assert [line.strip("-") for line in block if line.startswith("-")] == sections
    assert ("Maximum request concurrency:" in rows) == (version == "0.33.0")
    percentiles = [k for k in data if k.startswith("p") and k.endswith("_ttft_ms")]
    for key in percentiles:  # p99, or p50 and p99.9
        assert rows[f"P{key[1:-len('_ttft_ms')]} TTFT (ms):"] == f"{data[key]:.2f}"
    assert rows["Mean TTFT (ms):"] == f"{data['mean_ttft_ms']:.2f}"
    for flag in ("--json", "--quiet"):
        assert main([argv[0], flag, *argv[1:]]) == 0
        assert "Serving Benchmark Result" not in capsys.readouterr().out


def test_round_139_the_printed_block_has_the_speculative_section_of_the_result(tmp_path, capsys):
    assert main(["vllm", "--out", str(tmp_path), "--set", "speculative.acceptance_rate=0.7", "serve",
                 "meta-llama/Llama-3.1-8B-Instruct", "--speculative-config",
                 '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}', "--", "bench", "serve",
                 "--random-input-len", "128", "--random-output-len", "16", "--num-prompts", "20", "--save-result",
                 "--result-filename", "r.json"]) == 0
    block = capsys.readouterr().out.split("---------------Speculative Decoding---------------\n")[1].splitlines()
    data = json.loads((tmp_path / "r.json").read_text())
    assert block[0].split() == ["Acceptance", "rate", "(%):", f"{data['spec_decode_acceptance_rate']:.2f}"]
    assert block[2].split() == ["Drafts:", str(data["spec_decode_num_drafts"])] and block[5] == \
        "Per-position acceptance (%):"
    rates = data["spec_decode_per_position_acceptance_rates"]
    assert [line.split()[-1] for line in block[6:-1]] == [f"{100 * r:.2f}" for r in rates] and len(rates) == 3


MULTI_PD = ('{"kv_connector":"MultiConnector","kv_role":"kv_both","kv_connector_extra_config":{"connectors":[%s,'
            '{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_connector_extra_config":'
            '{"cpu_bytes_to_use":10000000000}}]}}')


@pytest.mark.parametrize("child, code, says", [
    ('{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}', 2,
     "servesim: error: vllm serve --kv-transfer-config.kv_connector_extra_config.connectors.0.kv_role: kv_producer"),
    ('{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_buffer_device":"cpu"}', 0,
     "connectors.0.kv_buffer_device, --kv-transfer-config.kv_connector_extra_config.connectors.1.kv_connector")])
def test_round_141_a_multiconnectors_children_are_each_checked_and_said(child, code, says, tmp_path, capsys):
    """r141: under P/D a MultiConnector's children passed unchecked and unsaid (a Mooncake producer, which fails
    the decode instance's first request; an offloading child's CPU tier; a host buffer)."""
    assert main(["vllm", "--gpu", "h100-sxm", "--set", "cluster.prefill_replicas=1", "--out", str(tmp_path), "serve",
                 MODEL, "--kv-transfer-config", MULTI_PD % child] + BENCH) == code
    assert says in capsys.readouterr().err


def test_round_141_the_connector_a_refusal_suggests_is_one_vllm_takes(tmp_path, capsys):
    """The suggestion read kv_role "kv_producer or kv_consumer", a value vLLM refuses when pasted."""
    assert main(["vllm", "--gpu", "h100-sxm", "--set", "cluster.prefill_replicas=1", "--out", str(tmp_path), "serve",
                 MODEL] + BENCH) == 2
    suggested = re.search(r"--kv-transfer-config '([^']+)'", capsys.readouterr().err).group(1)
    assert main(["vllm", "--gpu", "h100-sxm", "--set", "cluster.prefill_replicas=1", "--quiet", "--out",
                 str(tmp_path / "again"), "serve", MODEL, "--kv-transfer-config", suggested] + BENCH) == 0


@pytest.mark.parametrize("release", ["0.33.0", "0.19.0"])
def test_compare_of_a_concurrency_capped_runs_own_result_file_is_exact(tmp_path, capsys, release):
    """r149: a --max-concurrency run at a finite rate with ranged lengths: a request the cap releases as another
    ends arrives as that step ends; replayed from the result file (its times rebased, a few ulps off) it missed the
    back-to-back step under async scheduling: TTFT +38% against itself."""
    run = tmp_path / "v"
    assert main(["vllm", "--quiet", "--vllm-version", release, "--gpu", "h100-sxm", "--out", str(run), "serve",
                 "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "16", "--", "bench", "serve", "--num-prompts",
                 "40", "--random-input-len", "256", "--random-output-len", "64", "--random-range-ratio", "0.3",
                 "--request-rate", "40", "--max-concurrency", "3", "--save-result", "--save-detailed",
                 "--result-filename", "r.json"]) == 0
    assert main(["compare", str(run / "r.json"), "--scenario", str(run / "config.yaml"), "--tolerance", "0.0001",
                 "--out", str(tmp_path / "c")]) == 0, capsys.readouterr().out[-1500:]


@pytest.mark.parametrize("bench, said", [
    (["--save-detailed", "--label", "x"], "vllm bench serve --save-detailed has no effect: without --save-result"),
    (["--save-result", "--save-detailed"], None),
    (["--plot-timeline", "--result-filename", "t.json"], None),  # names the timeline's file
    (["--model", "llama8b"], "vllm bench serve --model llama8b without --tokenizer"),
    (["--model", "llama8b", "--tokenizer", "meta-llama/Llama-3.1-8B-Instruct"], None),
])
def test_round_149_bench_flags_that_do_nothing_or_fail_in_vllm_are_said(capsys, bench, said):
    """r149: a result file's flags without --save-result shaped nothing, unsaid; a served name as --model, with no
    --tokenizer, is what vLLM's client loads a tokenizer by (get_tokenizer), which fails."""
    from servesim.simulator import config

    config._WARNED.clear()
    assert main(["vllm", "--vllm-version", "0.19.0", "--config", "serve", "meta-llama/Llama-3.1-8B-Instruct",
                 "--served-model-name", "llama8b", "--", "bench", "serve", *bench]) == 0
    err = capsys.readouterr().err
    assert (said in err) if said else "warning: vllm bench serve" not in err, err


def test_a_pooling_backend_is_refused_naming_the_releases_own_backends(capsys):
    """r149: 0.19's refusal listed openai-responses, a backend 0.19 has not."""
    for release, says in (("0.19.0", "(backends vllm, openai, openai-chat)"),
                          ("0.33.0", "(backends vllm, openai, openai-chat, openai-responses)")):
        assert main(["vllm", "--vllm-version", release, "--config", "serve", "meta-llama/Llama-3.1-8B-Instruct",
                     "--", "bench", "serve", "--backend", "vllm-pooling"]) == 2
        assert says in capsys.readouterr().err


def test_round_156_vllm_starts_an_api_server_per_dp_rank_by_default_and_it_is_said(capsys):
    """r156: `-dp 2` starts two API servers in vLLM (serve.py: api_server_count defaults to data_parallel_size under
    internal balancing), each balancing the ranks from its own start; servesim balances as one, unsaid, and called
    an explicit --api-server-count 1 (what it simulates) not modelled."""
    line = ["vllm", "--config", "serve", "meta-llama/Llama-3.1-8B-Instruct", "-dp", "2"]
    assert main(line) == 0
    assert "vLLM starts 2 API servers" in capsys.readouterr().err
    assert main(line + ["--api-server-count", "1"]) == 0
    assert "api-server-count" not in capsys.readouterr().err
    assert main(line + ["--api-server-count", "2"]) == 0
    assert "not modelled, recorded in vllm_command.json: --api-server-count" in capsys.readouterr().err
    assert main(line[:-2] + ["--api-server-count", "1"]) == 0 and "api" not in capsys.readouterr().err


def test_round_156_another_datasets_lengths_and_unreported_metrics_are_said(capsys):
    """r156: --input-len 2000 beside --dataset-name prefix_repetition sent the dataset's 256-token default, unsaid
    (vLLM's client reads it for the random dataset only); --percentile-metrics client_queue_time without
    --max-concurrency reported nothing, unsaid (vLLM leaves it out the same way)."""
    line = ["vllm", "--config", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--", "bench", "serve",
            "--num-prompts", "20", "--request-rate", "5"]
    assert main(line + ["--dataset-name", "prefix_repetition", "--input-len", "2000", "--ignore-eos"]) == 0
    assert "--input-len has no effect with --dataset-name prefix_repetition" in capsys.readouterr().err
    assert main(line + ["--prefix-repetition-prefix-len", "500"]) == 0
    assert "--prefix-repetition-prefix-len has no effect with --dataset-name random" in capsys.readouterr().err
    assert main(line + ["--percentile-metrics", "ttft,client_queue_time"]) == 0
    assert "--percentile-metrics client_queue_time: vLLM reports it only with --max-concurrency" in \
        capsys.readouterr().err
    assert main(line + ["--percentile-metrics", "ttft,client_queue_time", "--max-concurrency", "4",
                        "--input-len", "100"]) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("version", ["0.19.0", "0.33.0"])
@pytest.mark.parametrize("layers, k, refused", [(0, 1, "num_nextn_predict_layers is 0"), (2, 3, "3 must be divisible"),
                                                (2, 4, None), (2, 1, None), (1, 3, None), (None, 3, None)])
def test_round_162_mtp_is_held_to_the_checkpoints_mtp_layers(tmp_path, version, layers, k, refused):
    """r162 (vLLM SpeculativeConfig): the MTP drafter's n_predict is the checkpoint's num_nextn_predict_layers; 0
    fails vLLM's start (k % 0) and k above it must be a multiple of it. Both ran, with an MTP speed-up."""
    config = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
              "intermediate_size": 18432, "num_hidden_layers": 61, "num_attention_heads": 128,
              "num_key_value_heads": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
              "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
              "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
              "qk_nope_head_dim": 128, "v_head_dim": 128, "torch_dtype": "bfloat16"}
    if layers is not None:
        config["num_nextn_predict_layers"] = layers
    (tmp_path / "config.json").write_text(json.dumps(config))
    argv = [str(tmp_path), "-tp", "8", "--speculative-config", f'{{"method": "mtp", "num_speculative_tokens": {k}}}']
    if refused:
        with pytest.raises(ConfigError, match=refused):
            read(argv, [], version=version)
    else:
        assert read(argv, [], version=version).settings["speculative.num_speculative_tokens"] == k


@pytest.mark.parametrize("words, said", [
    (["VLLM_ATTENTION_BACKEND=FLASHINFER", "vllm", "serve", MODEL], "'VLLM_ATTENTION_BACKEND=FLASHINFER': environment "
                                                                   "variables are not read"),
    (["env", "X=1", "vllm", "serve", MODEL], "'env': environment variables are not read"),  # r163: elsewhere too
    (["vllm", "X=1", "serve", MODEL], "'X=1': environment variables are not read"),
    (["vllm", "serve", "X=1", MODEL], "'X=1': environment variables are not read"),
    (["serve", MODEL, "--", "X=1", "vllm", "bench", "serve"], "'X=1': environment variables are not read"),
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL], "the api_server module's form is not "
                                                                               "read: write it as `serve MODEL"),
])
def test_round_162_a_command_line_in_another_form_says_what_is_not_read(capsys, words, said):
    """r162: both were refused as "expects `serve MODEL ...`", without saying why."""
    assert main(["vllm", "--config", *words]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err


def test_round_166_vllms_own_flags_are_said_as_themselves(tmp_path, capsys):
    """r166: `vllm --gpu h999` was refused as hardware.gpu and `--gpu ""` as unknown GPU ''; --config ran nothing
    while --out and --plot said nothing, and --config --quiet printed nothing, exit 0."""
    line = ["serve", "meta-llama/Llama-3.1-8B-Instruct", "--", "bench", "serve", "--num-prompts", "20"]
    assert main(["vllm", "--gpu", "h999", "--out", str(tmp_path / "v"), *line]) == 2
    assert capsys.readouterr().err.startswith("servesim: error: --gpu: unknown GPU 'h999'")
    assert main(["vllm", "--gpu", "", "--out", str(tmp_path / "v"), *line]) == 2
    assert "argument --gpu: is empty" in capsys.readouterr().err
    assert main(["vllm", "--out", str(tmp_path / "v"), "--plot", "--config", *line]) == 0
    out = capsys.readouterr()
    assert "model: llama-3.1-8b" in out.out and not (tmp_path / "v").exists()
    for flag in ("--out", "--plot"):
        assert f"servesim: warning: {flag} has no effect with --config: it prints the scenario YAML" in out.err
    assert main(["vllm", "--config", *line]) == 0 and "has no effect" not in capsys.readouterr().err
    assert main(["vllm", "--config", "--quiet", *line]) == 2
    assert capsys.readouterr().err.startswith("servesim: error: --quiet: with --config nothing is printed")


@pytest.mark.parametrize("serve, bench, says", [
    (["--api-key", "secret"], [], "vllm serve --api-key: the server answers 401 to a request without its key, and "
                                  "vllm bench serve sends none"),
    (["--api-key", "secret"], ["--header", "Authorization=Bearer wrong"], "and vllm bench serve sends another"),
    (["--port", "9000"], [], "vllm bench serve --port: 8000, where the server listens on 9000"),
    ([], ["--port", "9000"], "vllm bench serve --port: 9000, where the server listens on 8000"),
    (["--dtype", "float32"], [], "vllm serve --dtype: float32: float32 weights and KV cache"),
    (["--cpu-offload-gb", "4"], [], "vllm serve --cpu-offload-gb: 4: --cpu-offload-gb is not modelled"),
])
def test_round_171_a_client_that_gets_no_answer_and_unmodelled_formats_are_refused(serve, bench, says, capsys):
    """r171: a server whose --api-key the client did not send, or on another port, was simulated as serving every
    request (vLLM's client stops at its failed test request); --dtype float32 and --cpu-offload-gb ran as a 16-bit
    model held on the GPU."""
    line = ["vllm", "--config", "serve", MODEL, "--max-model-len", "4096", *serve, "--", "bench", "serve",
            "--num-prompts", "6", *bench]
    assert main(line) == 2
    err = capsys.readouterr().err
    assert err.count("servesim: error:") == 1 and says in err, err


def test_round_171_the_right_key_and_port_and_a_config_key_given_twice_run(tmp_path, capsys):
    """The key sent, the ports agreeing, a server alone on its port; a --config key given twice is vLLM's
    yaml.safe_load's: the last value, said (r171: refused as a scenario's would be)."""
    ok = [["--api-key", "k", "--port", "9000", "--", "bench", "serve", "--port", "9000", "--header",
           "Authorization=Bearer k", "--num-prompts", "6"], ["--port", "9000"],
          # r172: the client strips a header's value; an empty key is no authentication
          ["--api-key", "k", "--", "bench", "serve", "--header", "Authorization= Bearer k "],
          ["--api-key", "", "--", "bench", "serve", "--num-prompts", "6"]]
    for words in ok:
        assert main(["vllm", "--config", "serve", MODEL, "--max-model-len", "4096", *words]) == 0, words
    capsys.readouterr()
    (tmp_path / "c.yaml").write_text("max-num-seqs: 8\nmax-num-seqs: 16\nmax-model-len: 4096\n")
    assert main(["vllm", "--config", "serve", MODEL, "--config", str(tmp_path / "c.yaml")]) == 0
    out = capsys.readouterr()
    assert yaml.safe_load(out.out)["engine"]["max_num_seqs"] == 16
    assert f"vllm serve --config: {tmp_path / 'c.yaml'} gives max-num-seqs twice" in out.err
    (tmp_path / "c.yaml").write_text("max-num-seqs: 64\nmax_num_seqs: 32\nmax-model-len: 4096\n")  # r173
    assert main(["vllm", "--config", "serve", MODEL, "--config", str(tmp_path / "c.yaml")]) == 0
    out = capsys.readouterr()
    assert yaml.safe_load(out.out)["engine"]["max_num_seqs"] == 32 and "gives max_num_seqs twice" in out.err
    # r174: "the last value is taken" of `enforce-eager: true` then `enforce_eager: false`, where the false is dropped
    # (0.19 drops every false; 0.33 finds no --no-enforce_eager) and the first stands; a dropped false that leaves a
    # switch on is said
    (tmp_path / "c.yaml").write_text("enforce-eager: true\nenforce_eager: false\nmax-model-len: 4096\n")
    for version in ("0.33.0", "0.19.0"):
        assert main(["vllm", "--vllm-version", version, "--config", "serve", MODEL, "--config",
                     str(tmp_path / "c.yaml")]) == 0
        out = capsys.readouterr()
        assert yaml.safe_load(out.out)["engine"]["enforce_eager"] is True and "twice" not in out.err
        assert f"enforce_eager: false is dropped, as vLLM {version} drops it; enforce-eager: true is taken" in out.err
    (tmp_path / "c.yaml").write_text("enable_prefix_caching: false\nenforce-eager: false\nmax-model-len: 4096\n")
    for version, said in (("0.33.0", "vLLM 0.33.0 adds --no-KEY only as the flag is spelt (--no-enable-prefix-caching)"),
                          ("0.19.0", "as vLLM 0.19.0 drops a false entry")):
        assert main(["vllm", "--vllm-version", version, "--config", "serve", MODEL, "--config",
                     str(tmp_path / "c.yaml")]) == 0
        out = capsys.readouterr()
        assert yaml.safe_load(out.out)["engine"].get("enable_prefix_caching") is not False
        assert f"enable_prefix_caching: false is dropped, {said}: --enable-prefix-caching's default stands" in out.err
        assert "enforce-eager: false" not in out.err  # off by default: dropping it changes nothing
