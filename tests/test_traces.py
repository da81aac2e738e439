"""Trace readers: the real traces load with their published row counts, the options do what
they say, our JSONL round-trips exactly, and every bad input is one line naming file, line, column."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from servesim.simulator.errors import ConfigError
from servesim.workloads.spec import RequestSpec
from servesim.workloads.traces import (TRACE_FORMATS, describe_trace, infer_format, read_lengths, read_trace,
                              read_trace_with_info, write_jsonl)

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason=f"shared traces not found at {TRACES}")

AZURE_CONV = TRACES / "azure2023" / "AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = TRACES / "azure2023" / "AzureLLMInferenceTrace_code.csv"
MOONCAKE_CONV = TRACES / "mooncake" / "conversation_trace.jsonl"
MOONCAKE_SYNTH = TRACES / "mooncake" / "synthetic_trace.jsonl"
SHAREGPT = TRACES / "length_stats" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def config_error(call, path, *parts, field=None) -> str:
    """The error's one line, checked to name the file and every part."""
    with pytest.raises(ConfigError) as e:
        call()
    text = str(e.value)
    assert "\n" not in text
    assert str(path) in text
    for part in parts:
        assert part in text, f"{part!r} not in {text!r}"
    if field is not None:
        assert e.value.field == field
    return text


def stream(n=1000, seed=1):
    """A canonical stream (sorted, ids 0..n-1) with every kind of field set somewhere."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.1, n))
    out = []
    for i in range(n):
        prompt = int(rng.integers(1, 3000))
        ids = tuple(range(1000 * i, 1000 * i + math.ceil(prompt / 16))) if i % 3 else ()
        out.append(RequestSpec(i, float(t[i]), prompt, int(rng.integers(1, 500)),
                               max_tokens=None if i % 2 else 600, priority=int(i % 5) - 2,
                               slo_class=None if i % 4 else "chat \"quoted\" é", session_id=i // 7 if i % 5 else None,
                               turn=i % 7, prefix_ids=ids, prefix_block_tokens=16 if ids else 0))
    return out


# ---------------------------------------------------------------- the shared traces

@needs_traces
def test_azure_conversation_trace():
    specs, info = read_trace_with_info(AZURE_CONV)
    assert info["format"] == "azure" and info["rows"] == len(specs) == 19_366
    assert 3_300 < info["duration_s"] < 3_700
    assert specs[0].arrival_time == 0.0
    assert [s.request_id for s in specs] == list(range(len(specs)))
    assert all(a.arrival_time <= b.arrival_time for a, b in zip(specs, specs[1:]))
    assert specs[0].prompt_tokens == 374 and specs[0].output_tokens == 44  # the file's first row
    assert specs[1].arrival_time == pytest.approx(4.3145790)  # 7 fractional digits parsed
    assert info["prefix_reuse"] is None and info["skipped"] == 0


@needs_traces
def test_azure_code_trace():
    assert len(read_trace(AZURE_CODE)) == 8_819


@needs_traces
def test_mooncake_conversation_prefix_blocks():
    specs, info = read_trace_with_info(MOONCAKE_CONV)
    assert len(specs) == 12_031
    assert all(s.prefix_block_tokens == 512 and len(s.prefix_ids) == math.ceil(s.prompt_tokens / 512) for s in specs)
    assert 0 < info["prefix_reuse"] < 1
    token_reuse = describe_trace(specs, block_tokens=16)["prefix_reuse"]
    assert 0 < token_reuse < 1


@needs_traces
def test_mooncake_synthetic_trace():
    assert len(read_trace(MOONCAKE_SYNTH)) == 3_993


@needs_traces
def test_sharegpt_stats_lengths_only():
    pairs = read_lengths(SHAREGPT)
    assert pairs.shape == (30_731, 2) and pairs.dtype == np.int64 and (pairs > 0).all()
    assert pairs[0].tolist() == [74, 918]
    config_error(lambda: read_trace(SHAREGPT), SHAREGPT, "no arrival times", "arrival process")


@needs_traces
def test_read_lengths_of_a_timed_trace():
    pairs = read_lengths(AZURE_CODE)
    assert pairs.shape == (8_819, 2) and pairs[0].tolist() == [4808, 10]


@needs_traces
@pytest.mark.parametrize("path, fmt", [(AZURE_CONV, "azure"), (AZURE_CODE, "azure"), (MOONCAKE_CONV, "mooncake"),
                                       (MOONCAKE_SYNTH, "mooncake"), (SHAREGPT, "sharegpt_stats")])
def test_format_inference_on_shared_traces(path, fmt):
    assert infer_format(path) == fmt


@needs_traces
def test_time_scale_on_a_real_trace():
    base, fast = read_trace_with_info(AZURE_CODE)[1], read_trace_with_info(AZURE_CODE, time_scale=2)[1]
    assert fast["duration_s"] == pytest.approx(base["duration_s"] / 2)


# ---------------------------------------------------------------- options

@pytest.fixture
def trace(tmp_path):
    specs = stream()
    return specs, write_jsonl(specs, tmp_path / "stream.jsonl")


def test_time_scale_halves_every_arrival(trace):
    specs, path = trace
    fast = read_trace(path, time_scale=2)
    assert [s.arrival_time for s in fast] == [s.arrival_time / 2 for s in specs]
    assert describe_trace(fast)["duration_s"] == pytest.approx(describe_trace(specs)["duration_s"] / 2)


def test_the_time_bound_is_checked_on_the_requests_kept(trace):
    """A tiny time_scale stretches the whole trace past what can be simulated, but not the first rows `limit` keeps."""
    specs, path = trace
    span = specs[-1].arrival_time
    scale = span / 2e9  # the last arrival lands at 2e9 s, past the 1e9 s bound; the first quarter within it
    head = [s for s in specs if s.arrival_time <= span / 4][:5]
    got = read_trace(path, time_scale=scale, limit=len(head))
    assert [s.arrival_time for s in got] == [s.arrival_time / scale for s in head]
    with pytest.raises(ConfigError, match="arrivals kept, scaled by"):
        read_trace(path, time_scale=scale)


def test_a_trace_whose_own_times_span_too_far_names_the_file_not_time_scale(tmp_path):
    """A year-0001 timestamp among 2023's was blamed on time_scale, which the user never set."""
    path = tmp_path / "year1.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0001-01-01 00:00:00,5,3\n2023-11-16 18:15:46.68,5,3\n")
    with pytest.raises(ConfigError, match="year1.csv: its arrivals kept reach 6.38e\\+10 s of its clock .*another unit") as e:
        read_trace(path)
    assert e.value.field == str(path)


def test_window_selects_then_shifts(trace):
    specs, path = trace
    got = read_trace(path, start_s=10, duration_s=20)
    want = [s for s in specs if 10 <= s.arrival_time < 30]
    assert len(got) == len(want) > 0
    assert [s.arrival_time for s in got] == [s.arrival_time - 10 for s in want]
    assert [s.prompt_tokens for s in got] == [s.prompt_tokens for s in want]
    # servesim's own file keeps its ids (r119: a replay had renumbered them from 0)
    assert [s.request_id for s in got] == [s.request_id for s in want] and all(0 <= s.arrival_time < 20 for s in got)
    assert read_trace(path, start_s=10, duration_s=20, first_id=5)[0].request_id == 5  # asked to renumber
    scaled = read_trace(path, start_s=10, duration_s=20, time_scale=4)  # window in original time, then scaled
    assert [s.arrival_time for s in scaled] == [(s.arrival_time - 10) / 4 for s in want]


def test_sample_keeps_about_half_deterministically(trace):
    specs, path = trace
    a, b, c = read_trace(path, sample=0.5, seed=3), read_trace(path, sample=0.5, seed=3), read_trace(path, sample=0.5, seed=4)
    assert 400 < len(a) < 600
    assert a == b and a != c
    originals = {(s.arrival_time, s.prompt_tokens) for s in specs}
    assert all((s.arrival_time, s.prompt_tokens) in originals for s in a)
    assert read_trace(path, sample=1.0) == specs


def test_limit_comes_last_and_ids_start_at_first_id(trace):
    specs, path = trace
    got = read_trace(path, limit=5, first_id=100)
    assert [s.request_id for s in got] == [100, 101, 102, 103, 104]
    assert [s.arrival_time for s in got] == [s.arrival_time for s in specs[:5]]
    sampled = read_trace(path, sample=0.5, seed=3)
    assert read_trace(path, sample=0.5, seed=3, limit=7) == sampled[:7]


@pytest.mark.parametrize("option, value", [("time_scale", 0), ("time_scale", -1.0), ("time_scale", float("nan")),
                                           ("sample", 0), ("sample", 1.5), ("limit", 0), ("limit", 2.5),
                                           ("duration_s", 0), ("start_s", -1)])
def test_bad_option_values_name_the_option(trace, option, value):
    with pytest.raises(ConfigError) as e:
        read_trace(trace[1], **{option: value})
    assert e.value.field == option and "\n" not in str(e.value)


def test_a_window_with_no_requests_is_an_error(trace):
    config_error(lambda: read_trace(trace[1], start_s=1e6), trace[1], "no request", field="start_s")


# ---------------------------------------------------------------- our own format

def test_write_jsonl_round_trip_is_exact(tmp_path):
    specs = stream(50)
    specs[1] = RequestSpec(1, specs[0].arrival_time + 0.1 + 0.2, 7, 3, prefix_ids=(5,), prefix_block_tokens=512)
    specs[2] = RequestSpec(2, specs[1].arrival_time + 1e-9 / 3, 1, 1)
    path = write_jsonl(specs, tmp_path / "out.jsonl")
    assert infer_format(path) == "servesim"
    back = read_trace(path)
    assert back == specs
    assert back[1].arrival_time == specs[0].arrival_time + 0.1 + 0.2
    assert isinstance(back[1].prefix_ids, tuple) and back[3].max_tokens is None
    assert read_trace(write_jsonl(back, tmp_path / "again.jsonl")) == specs


def test_describe_trace(tmp_path):
    specs = [RequestSpec(0, 0.0, 1024, 10, session_id=1, prefix_ids=(1, 2), prefix_block_tokens=512),
             RequestSpec(1, 2.0, 1500, 30, session_id=1, prefix_ids=(1, 2, 3), prefix_block_tokens=512),
             RequestSpec(2, 4.0, 100, 20, session_id=2)]
    info = describe_trace(specs, skipped=4)
    assert info["rows"] == 3 and info["duration_s"] == 4.0 and info["rate"] == 0.5  # 2 gaps in 4 s (round 39: 0.75)
    steady = [RequestSpec(i, 0.25 * i, 10, 5) for i in range(5)]  # a constant 4 req/s stream reads as 4, not 5
    assert describe_trace(steady)["rate"] == pytest.approx(4.0)
    assert info["prompt"]["p50"] == 1024 and info["prompt"]["max"] == 1500 and info["output"]["mean"] == 20
    assert info["prefix_reuse"] == pytest.approx(2 / 5)  # ids 1, 2 seen again, out of 5 blocks
    assert info["sessions"] == 2 and info["skipped"] == 4
    # an unbounded cache of 16-token blocks hits the 1024 shared tokens of request 1 only
    assert describe_trace(specs, block_tokens=16)["prefix_reuse"] == pytest.approx(1024 / 2624)
    plain = describe_trace([RequestSpec(0, 1.0, 5, 5)])
    assert plain["prefix_reuse"] is None and plain["sessions"] is None and plain["rate"] is None
    # round 44: a client's max_tokens below the answer's length cuts it, in the run and in the description
    capped = describe_trace([RequestSpec(i, float(i), 100, 5, max_tokens=m) for i, m in enumerate((2, 2, 9))])
    assert capped["output"]["p50"] == 2 and capped["output"]["max"] == 5


# ---------------------------------------------------------------- the other formats

def test_timed_trace(tmp_path):
    path = write(tmp_path, "timed.jsonl",
                 '{"timestamp": 0, "queries": [{"prompt_length": 10, "response_length": 2},'
                 ' {"prompt_length": 11, "response_length": 3}]}\n\n'
                 '{"timestamp": 1500, "queries": [{"prompt_length": 12, "response_length": 4}]}\n')
    assert infer_format(path) == "timed_trace"
    got = read_trace(path)
    assert [(s.arrival_time, s.prompt_tokens, s.output_tokens) for s in got] == [(0.0, 10, 2), (0.0, 11, 3), (1.5, 12, 4)]


def test_vllm_bench_result(tmp_path):
    result = {"backend": "vllm", "completed": 3, "input_lens": [100, 200, 300, 400], "output_lens": [10, 0, 30, 40],
              "start_times": [1000.5, 1001.0, 1000.25, 1002.0], "errors": ["", "timeout", "", ""]}
    path = write(tmp_path, "result.json", json.dumps(result, indent=2))  # pretty-printed: one object, many lines
    assert infer_format(path) == "vllm_bench"
    specs, info = read_trace_with_info(path)
    assert [(s.arrival_time, s.prompt_tokens, s.output_tokens) for s in specs] == [(0.0, 300, 30), (0.25, 100, 10),
                                                                                  (1.75, 400, 40)]
    assert info["skipped"] == 1
    del result["start_times"]
    bare = write(tmp_path, "bare.json", json.dumps(result))
    config_error(lambda: read_trace(bare), bare, "key start_times", "missing", "cannot be replayed")


def test_burstgpt_skips_failed_requests_and_counts_them(tmp_path):
    path = write(tmp_path, "burst.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                        "5,ChatGPT,472,18,490,Conversation log\n"
                                        "45,ChatGPT,1087,0,1087,Conversation log\n"
                                        "118,GPT-4,417,276,693,API log\n")
    assert infer_format(path) == "burstgpt"
    specs, info = read_trace_with_info(path)
    assert [(s.arrival_time, s.prompt_tokens, s.output_tokens) for s in specs] == [(5.0, 472, 18), (118.0, 417, 276)]
    assert info["skipped"] == 1 and info["rows"] == 2
    assert read_lengths(path).tolist() == [[472, 18], [417, 276]]
    assert "Model, Log Type not read" in info["unread"]  # r151: two models' traffic mixed unsaid


def test_azure_2024_timestamps_with_offsets(tmp_path):
    path = write(tmp_path, "azure2024.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                            "2024-05-10 00:00:00.009930+00:00,2162,5\n"
                                            "2024-05-10 00:00:01.509930+00:00,300,7\n")
    assert [s.arrival_time for s in read_trace(path)] == [0.0, 1.5]


def test_mooncake_without_hash_ids_has_no_prefix(tmp_path):
    path = write(tmp_path, "m.jsonl", '{"timestamp": 250, "input_length": 600, "output_length": 5}\n')
    (spec,) = read_trace(path, "mooncake")
    assert spec.arrival_time == 0.25 and spec.prefix_ids == () and spec.prefix_block_tokens == 0


# ---------------------------------------------------------------- errors: file, line, column in one line

AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = "2023-11-16 18:15:46.6805900,374,44\n"
MC = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
BURST = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"

ERRORS = [
    # name, fmt, text, parts the message must contain
    ("missing_column.csv", "azure", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,5\n",
     ["line 1", "column GeneratedTokens", "missing", "found columns: TIMESTAMP, ContextTokens"]),
    ("repeated_column.csv", "azure", "TIMESTAMP,ContextTokens,GeneratedTokens, GeneratedTokens\n"
     "2023-11-16 18:15:46,5,44,3\n", ["line 1, column GeneratedTokens", "appears twice"]),
    ("not_int.csv", "azure", AZ + ROW + "2023-11-16 18:15:47,abc,4\n",
     ["line 3, column ContextTokens", "non-negative integer", "'abc'"]),
    ("fraction.csv", "azure", AZ + ROW + ROW + "2023-11-16 18:15:47,5,4.5\n", ["line 4, column GeneratedTokens", "'4.5'"]),
    ("negative.csv", "azure", AZ + "2023-11-16 18:15:47,-3,4\n", ["line 2, column ContextTokens", "'-3'"]),
    ("zero_prompt.csv", "azure", AZ + ROW + ROW + "2023-11-16 18:15:47,0,4\n",
     ["line 4, column ContextTokens", "at least 1 prompt token"]),
    ("zero_output.csv", "azure", AZ + ROW + "2023-11-16 18:15:47,5,0\n",
     ["line 3, column GeneratedTokens", "at least 1 output token"]),
    ("bad_time.csv", "azure", AZ + ROW + "yesterday,5,4\n", ["line 3, column TIMESTAMP", "timestamp", "'yesterday'"]),
    # r129: vLLM's --append-result file was "invalid JSON: Extra data"; a result without --save-detailed had no format
    ("appended.json", None, '{"start_times": [0], "input_lens": [5], "output_lens": [3]}\n' * 2,
     ["holds 2 results, one a line, as `vllm bench serve --append-result` adds them"]),
    ("summary_only.json", None, '{"date": "20261206-133050", "backend": "vllm", "completed": 20}',
     ["key start_times: missing", "--save-detailed"]),
    # r128: one row's offset among naive times (read as UTC) made a 5-hour gap
    ("mixed_zones.csv", "azure", AZ + ROW + "2023-11-16 18:15:47.5+05:00,5,4\n" + ROW,
     ["line 3, column TIMESTAMP", "has a UTC offset, where 2 of the 3 rows lack one"]),
    ("mixed_zones_z.csv", "azure", AZ + "2023-11-16T18:15:46Z,5,4\n" + ROW + "2023-11-16 18:15:48-0130,5,4\n",
     ["line 3, column TIMESTAMP", "lacks a UTC offset, where 2 of the 3 rows have one"]),
    ("earliest_row.csv", "azure", AZ + ROW + "2023-11-16 18:15:47,5,x\nnever,5,4\n", ["line 3, column GeneratedTokens"]),
    ("blank_line.csv", "azure", AZ + ROW + "\n" + ROW + "2023-11-16 18:15:47,5,-1\n", ["line 5, column GeneratedTokens"]),
    ("extra_field.csv", "azure", AZ + ROW + ROW + "2023-11-16 18:15:47,5,4,9\n", ["line 4", "expected 3 fields", "saw 4"]),
    ("burst_zero_prompt.csv", "burstgpt", BURST + "5,ChatGPT,0,18,18,Conversation log\n",
     ["line 2, column Request tokens", "prompt"]),
    ("burst_total.csv", "burstgpt", BURST + "5,ChatGPT,3,18,22,x\n",  # r151: not checked
     ["line 2, column Total tokens", "'22' is not Request tokens + Response tokens (21)"]),
    ("burst_time.csv", "burstgpt", BURST + "5,ChatGPT,3,18,21,x\n-1,ChatGPT,3,18,21,x\n", ["line 3, column Timestamp"]),
    ("stats_total.csv", "sharegpt_stats",  # round 83: a row contradicting itself was read as its two lengths
     "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n5,3,8,1.6666667\n5,3,999,7\n",
     ["line 3, column num_total_tokens", "is not num_prefill_tokens + num_decode_tokens (8)"]),
    ("stats_ratio.csv", "sharegpt_stats", "num_prefill_tokens,num_decode_tokens,pd_ratio\n5,3,7\n",
     ["line 2, column pd_ratio", "is not num_prefill_tokens / num_decode_tokens (1.66667)"]),
    ("stats_zero.csv", "sharegpt_stats", "num_prefill_tokens,num_decode_tokens\n5,5\n7,0\n",
     ["line 3, column num_decode_tokens"]),
    ("bad_json.jsonl", "mooncake", MC + '{"timestamp": 0, "input_length": 600,, "output_length": 5}\n',
     ["line 2, column 38", "invalid JSON"]),
    ("json_type.jsonl", "mooncake", MC + MC + '{"timestamp": 0, "input_length": "600", "output_length": 5}\n',
     ["line 3, key input_length", "non-negative integer", "'600'"]),
    ("json_bool.jsonl", "mooncake", '{"timestamp": 0, "input_length": 600, "output_length": true}\n',
     ["line 1, key output_length", "True"]),
    ("json_float.jsonl", "mooncake", '{"timestamp": 0, "input_length": 600.0, "output_length": 5}\n',
     ["line 1, key input_length", "600.0"]),
    ("json_missing.jsonl", "mooncake", MC + '{"timestamp": 0, "input_length": 600}\n',
     ["line 2, key output_length", "missing", "found keys: timestamp, input_length"]),
    ("json_time.jsonl", "mooncake", MC + '{"timestamp": -5, "input_length": 600, "output_length": 5}\n',
     ["line 2, key timestamp", "non-negative number"]),
    ("json_zero.jsonl", "mooncake", '{"timestamp": 0, "input_length": 0, "output_length": 5}\n',
     ["line 1, key input_length", "at least 1 prompt token"]),
    ("json_blocks.jsonl", "mooncake", MC + '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]}\n',
     ["line 2, key hash_ids", "expected 2 ids", "512-token"]),
    ("json_array.jsonl", "mooncake", MC + "[1, 2]\n", ["line 2", "expected a JSON object", "list"]),
    ("timed_query.jsonl", "timed_trace",
     '{"timestamp": 0, "queries": [{"prompt_length": 1, "response_length": 2}, {"prompt_length": 1, "response_length": "x"}]}\n',
     ["line 1, key queries[1].response_length", "'x'"]),
    ("timed_queries.jsonl", "timed_trace", '{"timestamp": 0, "queries": 3}\n', ["line 1, key queries", "list"]),
    ("servesim_key.jsonl", "servesim", '{"arrival_time": 0.5, "prompt_tokens": 3, "output_tokens": 2, "prio": 1}\n',
     ["line 1, key prio", "unknown"]),
    ("servesim_type.jsonl", "servesim",
     '{"arrival_time": 0.5, "prompt_tokens": 3, "output_tokens": 2}\n'
     '{"arrival_time": 0.5, "prompt_tokens": 3, "output_tokens": 2, "slo_class": 7}\n', ["line 2, key slo_class"]),
    ("servesim_id.jsonl", "servesim",  # round 82: renumbered silently; two records of one request
     '{"request_id": 4, "arrival_time": 0, "prompt_tokens": 3, "output_tokens": 2}\n'
     '{"request_id": 4, "arrival_time": 1, "prompt_tokens": 3, "output_tokens": 2}\n',
     ["line 2, key request_id", "4 was given on line 1 too"]),
    ("servesim_class.jsonl", "servesim", '{"arrival_time": 0, "prompt_tokens": 3, "output_tokens": 2, "slo_class": ""}\n',
     ["line 1, key slo_class", "printable text of 1 to 100"]),  # round 82: printed as nothing in messages
    ("mooncake_chain.jsonl", "mooncake",  # round 83: an id at another place hit KV computed for other tokens
     '{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [5, 6]}\n'
     '{"timestamp": 1, "input_length": 1024, "output_length": 5, "hash_ids": [6, 7]}\n',
     ["line 2, key hash_ids", "id 6 is block 0 after none, but was given before as block 1 after id 5"]),
    ("mooncake_repeat.jsonl", "mooncake", '{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [1, 1]}\n',
     ["line 1, key hash_ids", "id 1 is block 1 after id 1"]),
    ("servesim_chain.jsonl", "servesim",
     '{"arrival_time": 0, "prompt_tokens": 32, "output_tokens": 2, "prefix_ids": [1, 2], "prefix_block_tokens": 16}\n'
     '{"arrival_time": 1, "prompt_tokens": 32, "output_tokens": 2, "prefix_ids": [3, 2], "prefix_block_tokens": 16}\n',
     ["line 2, key prefix_ids", "id 2 is block 1 of 16 tokens after id 3"]),
    ("servesim_chain_size.jsonl", "servesim",  # round 84: the same ids over 256-token then 16-token blocks: 32 hits
     '{"arrival_time": 0, "prompt_tokens": 600, "output_tokens": 2, "prefix_ids": [1, 2], "prefix_block_tokens": 256}\n'
     '{"arrival_time": 1, "prompt_tokens": 600, "output_tokens": 2, "prefix_ids": [1, 2], "prefix_block_tokens": 16}\n',
     ["line 2, key prefix_ids", "id 1 is block 0 of 16 tokens after none, but was given before as block 0 of 256"]),
    ("mooncake_huge_id.jsonl", "mooncake",  # round 84: taken here, refused by the API it was read for
     '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1180591620717411303424, 2]}\n',
     ["line 1, key hash_ids", "at most 9,007,199,254,740,992 in size", "1180591620717411303424"]),
    ("vllm_item.json", "vllm_bench", json.dumps({"input_lens": [1, 2], "output_lens": [3, -1], "start_times": [0, 1]}),
     ["output_lens[1] must be a non-negative integer, got -1"]),  # r165: as compare numbers it
    ("vllm_lengths.json", "vllm_bench", json.dumps({"input_lens": [1], "output_lens": [3, 1], "start_times": [0, 1]}),
     ["key input_lens", "one entry per request"]),
    ("vllm_short_starts.json", "vllm_bench",  # r143: the short start_times was said of input_lens
     json.dumps({"input_lens": [1, 2, 3], "output_lens": [3, 1, 2], "start_times": [0, 1]}),
     ["key start_times", "one entry per request (3)"]),
    ("vllm_all_failed.json", "vllm_bench", json.dumps({"input_lens": [1, 2], "output_lens": [0, 0], "start_times": [0, 1],
                                                        "errors": ["timeout", "500"]}),
     ["key errors", "all 2 failed"]),  # round 66: said "no requests in the file"
    ("vllm_bad_json.json", "vllm_bench", '{\n  "input_lens": [1,\n  ]\n}', ["line 3, column 3", "invalid JSON"]),
    ("pretty.jsonl", "mooncake", '{"timestamp": 0,\n "input_length": 6}\n', ["line 1, column 17", "invalid JSON"]),
    ("servesim_block.jsonl", "servesim", '{"arrival_time": 0, "prompt_tokens": 3, "output_tokens": 2, "prefix_ids": [1]}\n',
     ["line 1, key prefix_block_tokens", "> 0"]),
    ("servesim_ids_text.jsonl", "servesim",  # r149: blamed on prefix_block_tokens, which the text would not need
     '{"arrival_time": 0, "prompt_tokens": 3, "output_tokens": 2, "prefix_ids": "abc"}\n',
     ["line 1, key prefix_ids", "expected a list of integers, got 'abc'"]),
    ("empty.csv", None, "", ["empty file"]),
    ("cut_bench.json", None, '{"date": "x", "input_lens": [1, 2', ["line 1, column 34", "invalid JSON", "cut short"]),
    ("cut_pretty.json", None, '{\n  "input_lens": [\n    1,', ["line 3, column 7", "invalid JSON", "cut short"]),
    ("header_only.csv", "azure", AZ, ["no requests"]),
    ("duplicate_key.jsonl", "mooncake", '{"timestamp": 0, "input_length": 6, "output_length": 2}\n'
     '{"timestamp": 1, "input_length": 6, "output_length": 2, "timestamp": 5}\n',
     ["line 2", "key 'timestamp' is given twice"]),  # round 60: the last was taken silently
    ("vllm_duplicate_key.json", "vllm_bench", '{"input_lens": [1], "output_lens": [3], "start_times": [0], '
     '"input_lens": [2]}', ["key 'input_lens' is given twice"]),
    ("blank.jsonl", "mooncake", "\n\n", ["no requests"]),
    ("mystery.txt", None, "hello,world\n1,2\n", ["line 1", "cannot tell the trace format", "azure"]),
]


@pytest.mark.parametrize("name, fmt, text, parts", ERRORS, ids=[e[0] for e in ERRORS])
def test_bad_input_is_one_line_naming_file_line_and_column(tmp_path, name, fmt, text, parts):
    path = write(tmp_path, name, text)
    config_error(lambda: read_trace(path, fmt), path, *parts, field=str(path))


def test_a_missing_file_is_named(tmp_path):
    path = tmp_path / "nowhere.csv"
    config_error(lambda: read_trace(path), path, "no such file")
    config_error(lambda: read_lengths(path), path, "no such file")


@pytest.mark.parametrize("head, what", [(b"PAR1\x15\x04\x15\x80\x02", "a parquet file"),
                                        (b"t,a\x00b\n", "a binary file")])
def test_a_binary_file_is_named_so_not_quoted(tmp_path, head, what):
    """Round 34: a results table given as a trace was refused with its raw bytes quoted as its "first line"."""
    path = tmp_path / "requests.parquet"
    path.write_bytes(head + bytes(range(256)))
    with pytest.raises(ConfigError) as e:
        infer_format(path)
    assert f"{what}, not a trace" in str(e.value) and "\\x" not in str(e.value)


def test_an_unknown_format_name_is_an_error(trace):
    with pytest.raises(ConfigError) as e:
        read_trace(trace[1], "parquet")
    assert e.value.field == "format" and all(f in str(e.value) for f in TRACE_FORMATS)


def test_hash_ids_block_size_is_found_in_the_file_given_or_ignored(tmp_path):
    """vLLM's timed traces share Mooncake's keys but hash smaller blocks: read them at their own size."""
    from servesim.workloads.traces import read_trace

    f = tmp_path / "vllm-timed.jsonl"
    f.write_text("".join(json.dumps({"timestamp": 1000 * i, "input_length": n, "output_length": 8,
                                     "hash_ids": list(range(-(-n // 16)))}) + "\n"
                         for i, n in enumerate((100, 40, 700))))
    specs = read_trace(f)
    assert {s.prefix_block_tokens for s in specs} == {16} and len(specs[2].prefix_ids) == 44
    assert all(s.prefix_ids == () for s in read_trace(f, use_hash_ids=False))
    with pytest.raises(ConfigError, match="line 1, key hash_ids: expected 1 ids .*512-token"):
        read_trace(f, hash_block_tokens=512)
    mooncake = tmp_path / "mc.jsonl"  # 512 fits every row: Mooncake's size wins over smaller ones that also fit
    mooncake.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [7]}) + "\n")
    assert read_trace(mooncake)[0].prefix_block_tokens == 512
    with pytest.raises(ConfigError, match="hash_block_tokens"):
        read_trace(f, hash_block_tokens=0)
    mooncake.write_text(json.dumps({"timestamp": 0, "input_length": 2, "output_length": 3, "hash_ids": [7, 8, 9]}))
    with pytest.raises(ConfigError, match=r"expected at most 2 ids \(one per block of the 2 prompt tokens, a block "
                                          r"at least 1 token\), got 3"):  # r157: not "1-token blocks"
        read_trace(mooncake)


def test_hash_ids_that_fit_both_block_sizes_are_said_to_be_read_as_mooncake(tmp_path):
    """r116: prompts of at most 16 tokens with one id each fit Mooncake's 512-token blocks and vLLM's 16-token
    ones: read as Mooncake's milliseconds without a word (a vLLM trace 1000x too fast); now said, as without ids."""
    short = write(tmp_path, "short.jsonl", "".join(f'{{"timestamp": {i}, "input_length": 12, "output_length": 5, '
                                                   f'"hash_ids": [{i % 3}]}}\n' for i in range(4)))
    specs, info = read_trace_with_info(short)
    assert info["format"] == "mooncake" and "its hash_ids fit vLLM's 16-token blocks too" in info["note"]
    assert "note" not in read_trace_with_info(short, "mooncake")[1]
    longer = write(tmp_path, "long.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 5, '
                                           '"hash_ids": [1, 2]}\n')
    assert "note" not in read_trace_with_info(longer)[1]  # 2 ids of 600 tokens: Mooncake's blocks only


def test_a_vllm_timed_trace_counts_seconds_and_mooncake_milliseconds(tmp_path):
    """vLLM's timed trace has Mooncake's keys in seconds (--timed-trace-sec-multiplier 1): servesim's own writer's
    file read back 1000x faster (2.5 s as 2.5 ms, round 64). Ids of blocks other than Mooncake's 512 say vLLM's;
    a file without ids is read as Mooncake's and says so; an explicit format decides either way."""
    from servesim.workloads.traces import describe_file, write_timed_trace

    sent = [RequestSpec(i, t, 100, 10) for i, t in enumerate((0.0, 2.5, 5.0))]
    path = write_timed_trace(sent, tmp_path / "tt.jsonl")
    specs, info = read_trace_with_info(path)
    assert [s.arrival_time for s in specs] == [0.0, 2.5, 5.0] and info["format"] == "vllm_timed_trace"
    assert "read as vLLM's timed trace (timestamps in seconds" in info["note"]
    assert [s.arrival_time for s in read_trace(path, "mooncake")] == [0.0, 0.0025, 0.005]
    assert describe_file(path)["duration_s"] == 5.0
    bare = write(tmp_path, "bare.jsonl", '{"timestamp": 2500, "input_length": 9, "output_length": 3}\n'
                                         '{"timestamp": 0, "input_length": 9, "output_length": 3}\n')
    specs, info = read_trace_with_info(bare)
    assert [s.arrival_time for s in specs] == [0.0, 2.5] and info["format"] == "mooncake"
    assert "read as a Mooncake trace (timestamps in milliseconds); a vLLM timed trace counts seconds" in info["note"]
    specs, info = read_trace_with_info(bare, "vllm_timed_trace")
    assert [s.arrival_time for s in specs] == [0.0, 2500.0] and "note" not in info
    # the ids decide the unit even when they are not used (use_hash_ids: false read 2.5 s as 2.5 ms, round 66)
    assert [s.arrival_time for s in read_trace(path, use_hash_ids=False)] == [0.0, 2.5, 5.0]
    assert read_trace_with_info(path, use_hash_ids=False)[1]["format"] == "vllm_timed_trace"


def test_a_written_workload_replays_with_its_own_slo_classes(tmp_path, capsys):
    """Setting slo_classes (their targets) keeps the classes the trace records instead of drawing new ones."""
    from servesim.simulator.cli import main
    from servesim.simulator.config import load

    out = tmp_path / "w.jsonl"
    classes = "workload.slo_classes={gold: {weight: 1, ttft_ms: 500}, bronze: {weight: 2, ttft_ms: 5000}}"
    assert main(["workload", "write", "--set", "workload.num_requests=40", "--set", classes, "--out", str(out)]) == 0
    written = [json.loads(line)["slo_class"] for line in out.read_text().splitlines()]
    rs = load(None, ["workload.type=trace", f"workload.path={out}",
                     "workload.slo_classes={gold: {ttft_ms: 500, priority: 0}, bronze: {ttft_ms: 5000, priority: 1}}"])
    specs = rs.scenario.workload.source(0, rs.max_model_len).initial()
    assert [s.slo_class for s in specs] == written and {"gold", "bronze"} == set(written)
    assert all(s.priority == (0 if s.slo_class == "gold" else 1) for s in specs)
    with pytest.raises(ConfigError, match="records class.*bronze"):
        rs = load(None, ["workload.type=trace", f"workload.path={out}", "workload.slo_classes={gold: {ttft_ms: 1}}"])
        rs.scenario.workload.source(0, rs.max_model_len)


def test_content_id_options_that_find_no_ids_say_so(tmp_path):
    """hash_block_tokens on a file without hash_ids, or use_hash_ids: false on one that names no blocks, changed
    nothing: the replay says so; use_hash_ids: false drops a servesim file's prefix_ids too (no sharing)."""
    from servesim.workloads.trace_workload import TraceWorkload

    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"timestamp": 1000 * i, "input_length": 40, "output_length": 8}) + "\n"
                             for i in range(3)))
    hashed = tmp_path / "hashed.jsonl"
    hashed.write_text("".join(json.dumps({"timestamp": 1000 * i, "input_length": 40, "output_length": 8,
                                          "hash_ids": [1, 2, 3]}) + "\n" for i in range(3)))
    own = tmp_path / "own.jsonl"
    own.write_text("".join(json.dumps({"request_id": i, "arrival_time": i, "prompt_tokens": 40, "output_tokens": 8,
                                       "prefix_ids": [5, 6], "prefix_block_tokens": 32}) + "\n" for i in range(3)))

    def warnings(path, **options):
        return TraceWorkload(type="trace", path=str(path), **options).source(0).warnings

    assert any("hash_block_tokens has no effect" in w for w in warnings(plain, hash_block_tokens=16))
    assert any("use_hash_ids: false has no effect" in w for w in warnings(plain, use_hash_ids=False))
    assert any("hash_block_tokens has no effect" in w for w in warnings(own, hash_block_tokens=16))
    assert not warnings(hashed, format="mooncake", hash_block_tokens=16)  # named: no note on its unit either
    assert not warnings(hashed, format="mooncake", use_hash_ids=False)
    assert not warnings(own, use_hash_ids=False)
    src = TraceWorkload(type="trace", path=str(own), use_hash_ids=False).source(0)
    assert all(s.prefix_ids == () for s in src.specs)
    assert all(len(s.prefix_ids) == 2 for s in TraceWorkload(type="trace", path=str(own)).source(0).specs)


def test_class_weights_on_a_trace_that_records_every_class_are_said_unused(tmp_path):
    """A written workload records each row's SLO class, so replaying it draws none: weights (and priorities to
    draw) change nothing, and the replay says so."""
    from servesim.simulator.config import load
    from servesim.workloads.trace_workload import TraceWorkload
    from servesim.workloads.traces import write_jsonl

    rs = load(None, ["workload.num_requests=20", "workload.slo_classes={gold: {ttft_ms: 100}, bronze: {}}"])
    f = write_jsonl(rs.scenario.workload.source(0, rs.max_model_len).initial(), tmp_path / "w.jsonl")
    classes = {"gold": {"ttft_ms": 100, "weight": 5}, "bronze": {"ttft_ms": 1000}}
    src = TraceWorkload(type="trace", path=str(f), slo_classes=classes, priorities=[0, 1]).source(0)
    said = " ".join(src.warnings)
    assert "workload.slo_classes.gold.weight has no effect" in said and "workload.priorities has no effect" in said
    assert "bronze.weight" not in said
    plain = TraceWorkload(type="trace", path=str(f), slo_classes={"gold": {"ttft_ms": 100}, "bronze": {}}).source(0)
    assert [s.slo_class for s in src.specs] == [s.slo_class for s in plain.specs]


def test_a_clipped_trace_says_so_and_drops_the_ids_it_cut(tmp_path):
    """clip_to_max_model_len cut 26 of 30 Mooncake prompts to 4,095 tokens with no word (a synthetic workload says
    it), and kept the hash ids of the blocks cut off."""
    from servesim.workloads.trace_workload import TraceWorkload

    rows = [{"timestamp": 10 * i, "input_length": n, "output_length": 5,
             "hash_ids": list(range(100 * i, 100 * i + -(-n // 512)))} for i, n in enumerate((600, 5000, 9000))]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = TraceWorkload(type="trace", path=str(path), clip_to_max_model_len=True).source(0, 4096)
    assert [s.prompt_tokens for s in source.specs] == [600, 4095, 4095]
    assert [len(s.prefix_ids) for s in source.specs] == [2, 8, 8]  # 4,095 tokens are 8 blocks of 512
    assert "2 of 3 prompts are at max_model_len - 1 = 4,095 tokens" in " ".join(source.warnings)
    unclipped = TraceWorkload(type="trace", path=str(path)).source(0, 4096)
    assert [s.prompt_tokens for s in unclipped.specs] == [600, 5000, 9000] and not unclipped.warnings


def test_a_replay_keeps_each_rows_recorded_priority_and_class(tmp_path):
    """Round 23: `priorities` on a servesim file replaced every recorded priority and erased the recorded classes,
    unsaid (with slo_classes given, the same setting was said to have no effect). A row's own values win; only
    rows that record none are drawn, and a setting that draws nothing is said unused."""
    from servesim.workloads.trace_workload import TraceWorkload

    rows = [{"request_id": 0, "arrival_time": 0.0, "prompt_tokens": 100, "output_tokens": 10, "priority": 2,
             "slo_class": "a"},
            {"request_id": 1, "arrival_time": 0.1, "prompt_tokens": 200, "output_tokens": 20, "priority": 0,
             "slo_class": "b"},
            {"request_id": 2, "arrival_time": 0.2, "prompt_tokens": 300, "output_tokens": 30}]
    f = tmp_path / "pc.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def replay(**options):
        src = TraceWorkload(type="trace", path=str(f), **options).source(0)
        return [(s.priority, s.slo_class) for s in src.specs], " ".join(src.warnings)

    got, said = replay(priorities=[7])
    assert got == [(2, "a"), (0, "b"), (7, None)] and "has no effect" not in said
    got, said = replay(priorities=[7], slo_classes={"a": {"ttft_ms": 100}, "b": {"priority": 5}})
    assert got[:2] == [(2, "a"), (5, "b")] and got[2][0] in (5, 7)  # a class's own priority wins
    got, said = replay(priorities=[7], slo_classes={"a": {"ttft_ms": 100}, "b": {"ttft_ms": 50}})
    assert got[:2] == [(2, "a"), (0, "b")] and got[2][1] in ("a", "b")
    # round 25: a row recording class a but no priority took the priority of the class drawn for it (c's 8)
    f.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "priority"} | {"request_id": i}) + "\n"
                         for i, r in enumerate(rows[:1] * 3)))
    got, said = replay(slo_classes={"a": {"ttft_ms": 100}, "c": {"weight": 1000, "priority": 8}})
    assert got == [(0, "a")] * 3
    f.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    got, said = replay(priorities=[7])
    assert got == [(2, "a"), (0, "b")] and "workload.priorities has no effect" in said


def test_a_sharegpt_conversations_file_is_said_to_need_a_tokenizer(tmp_path):
    """r116: a ShareGPT JSON was told to "give the format explicitly, one of ...", none of which reads text."""
    sg = write(tmp_path, "sg.json", '[{"id": "a1", "conversations": [{"from": "human", "value": "Hello"}]}]')
    with pytest.raises(ConfigError, match="a ShareGPT conversations file: its turns are text"):
        read_trace(sg)


# ---------------------------------------------------------------- round 159

def test_r159_ids_fitting_512_and_another_size_are_said_with_fractional_milliseconds(tmp_path):
    """A vLLM timed trace of 128-token blocks whose ids also fit 512 was read as Mooncake's milliseconds unsaid
    (2,000 req/s, not 2): only 16-token blocks were looked for. Fractions of a millisecond are said as evidence."""
    vt = write(tmp_path, "vt128.jsonl", "".join(json.dumps({"timestamp": 0.5 * i, "input_length": 40 + 8 * i,
                                                            "output_length": 10, "hash_ids": [i]}) + "\n"
                                                for i in range(10)))
    specs, info = read_trace_with_info(vt)
    assert info["format"] == "mooncake" and "its hash_ids fit 128-token blocks too" in info["note"]
    assert "fractions of a millisecond" in info["note"] and "give format: vllm_timed_trace" in info["note"]
    assert "note" not in read_trace_with_info(vt, "mooncake")[1]  # named: no doubt to say
    whole = write(tmp_path, "whole.jsonl", '{"timestamp": 0, "input_length": 9, "output_length": 3}\n'
                                           '{"timestamp": 2.5, "input_length": 9, "output_length": 3}\n')
    assert "fractions of a millisecond" in read_trace_with_info(whole)[1]["note"]
    ms = write(tmp_path, "ms.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n')
    assert "note" not in read_trace_with_info(ms)[1]  # Mooncake's blocks only, whole milliseconds


@pytest.mark.parametrize("cut, lacks", [("2023-11", "lacks the day and time of day"),
                                        ("2023", "lacks the month, day and time of day"),
                                        ("2023-11-16", "lacks the time of day")])
def test_r159_an_azure_timestamp_cut_short_is_refused(tmp_path, cut, lacks):
    """`2023-11` beside rows with a time of day was read as midnight on the 1st: a span of 320 days."""
    f = write(tmp_path, "az.csv", f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,5\n"
                                  f"2023-11-16 18:15:47,10,5\n{cut},10,5\n")
    config_error(lambda: read_trace(f), f, "line 4, column TIMESTAMP", lacks, "2 of the 3 rows give")
    days = write(tmp_path, "days.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16,10,5\n2023-11-17,10,5\n")
    assert [s.arrival_time for s in read_trace(days)] == [0.0, 86400.0]  # every row a date alone: as given


def test_r159_rows_skipped_as_failed_are_said_wherever_a_run_reads_them(tmp_path, capsys):
    """BurstGPT's 0-response rows and a vLLM result's errors were dropped by run, config and workload write
    without a word; describe of a scenario said `skipped 0`; the unread-columns warning said every row replays."""
    from servesim.simulator.cli import main
    from servesim.workloads.trace_workload import TraceWorkload

    bg = write(tmp_path, "bg.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                   "5,ChatGPT,100,0,100,x\n1,GPT-4,200,20,220,y\n3,ChatGPT,400,40,440,z\n")
    said = " | ".join(TraceWorkload(type="trace", path=str(bg)).source(0).warnings)
    assert "1 of its 3 rows skipped: 1 failed request (0 Response tokens)" in said
    assert "every row but the 1 skipped is replayed" in said and "every row is replayed" not in said
    vb = write(tmp_path, "vb.json", json.dumps({"start_times": [0.0, 0.5, 1.0], "input_lens": [10, 20, 30],
                                                "output_lens": [1, 0, 3], "errors": ["", "timeout", ""]}))
    said = " | ".join(TraceWorkload(type="trace", path=str(vb)).source(0).warnings)
    assert "1 of its 3 rows skipped: 1 failed request (an entry in errors)" in said
    scenario = write(tmp_path, "s.yaml", f"workload: {{type: trace, path: {bg}}}\n")
    capsys.readouterr()
    assert main(["workload", "describe", str(scenario), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["skipped"] == 1 and "1 of its 3 rows skipped" in out.err


def test_r159_a_compressed_trace_is_refused_whatever_the_format(tmp_path, capsys):
    """`--format azure f.csv.gz` was decompressed by pandas (and its header's checks skipped), while the inferred
    format refused it as binary: every path now refuses it the same way, naming the file."""
    import gzip

    from servesim.simulator.cli import main

    text = "TIMESTAMP,ContextTokens,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,11,5\n"
    gz = tmp_path / "az.csv.gz"
    gz.write_bytes(gzip.compress(text.encode(), mtime=0))
    for fmt in (None, "azure", "mooncake", "sharegpt_stats"):
        config_error(lambda: read_trace(gz, fmt), gz, "a gzip-compressed file, not a trace", "decompress it")
    config_error(lambda: read_lengths(gz, "azure"), gz, "a gzip-compressed file")
    capsys.readouterr()
    assert main(["workload", "describe", str(gz), "--format", "azure"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"servesim: error: {gz}: a gzip-compressed file")


def test_r159_a_servesim_file_takes_prefix_ids_over_the_output_as_the_api_does(tmp_path, capsys):
    """The API takes ids covering prompt + output (r147), but the run's workload.jsonl was refused on `servesim
    run RUN/config.yaml`: "expected at most 2 ids ..., got 4"."""
    import servesim
    from servesim.simulator.cli import main

    specs = [RequestSpec(0, 0.0, 32, 32, prefix_ids=(1, 2, 3, 4), prefix_block_tokens=16),
             RequestSpec(1, 1.0, 64, 8, prefix_ids=(1, 2, 3, 4), prefix_block_tokens=16)]
    f = write_jsonl(specs, tmp_path / "w.jsonl")
    assert read_trace(f) == specs
    over = write(tmp_path, "over.jsonl", json.dumps({"arrival_time": 0, "prompt_tokens": 32, "output_tokens": 32,
                                                     "prefix_ids": [1, 2, 3, 4, 5], "prefix_block_tokens": 16}))
    config_error(lambda: read_trace(over), over, "expected at most 4 ids (one per 16-token block of the 32 prompt "
                                                 "and 32 output tokens), got 5")
    servesim.simulate(None, requests=specs).write(tmp_path / "api")
    assert main(["run", str(tmp_path / "api" / "config.yaml"), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "api" / "summary.json").read_text() == (tmp_path / "again" / "summary.json").read_text()


def test_r159_ids_of_a_size_no_candidate_fits_are_described_and_unread_for_lengths(tmp_path):
    """Ids in 200-token blocks: describe and a lengths/empirical file refused them with "set hash_block_tokens",
    which neither can set; lengths never use the ids, and describe counts them by id, saying so."""
    from servesim.workloads.lengths import load_pairs
    from servesim.workloads.traces import describe_file

    vt = write(tmp_path, "vt200.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 5, '
                                        '"hash_ids": [1, 2, 3]}\n{"timestamp": 1, "input_length": 1000, '
                                        '"output_length": 5, "hash_ids": [1, 2, 3, 4, 5]}\n')
    info = describe_file(vt)  # r160: ids no size fits tell neither unit: read as Mooncake's (was seconds), said
    assert info["rows"] == 2 and info["format"] == "mooncake" and info["duration_s"] == 0.001
    assert "fit no block size tried, so they tell neither format" in info["note"]
    assert "workload.hash_block_tokens" in info["note"]
    assert info["prefix_reuse"] == pytest.approx(3 / 8)
    assert describe_file(vt, "vllm_timed_trace")["note"].startswith(f"{vt}: its hash_ids fit no block size tried")
    assert read_lengths(vt).tolist() == [[600, 5], [1000, 5]]
    assert load_pairs(str(vt), None).tolist() == [[600, 5], [1000, 5]]
    config_error(lambda: read_trace(vt), vt, "set hash_block_tokens")  # a run still needs the size
    assert [s.prefix_block_tokens for s in read_trace(vt, hash_block_tokens=200)] == [200, 200]


def test_r159_dropped_ids_are_not_checked(tmp_path):
    """use_hash_ids: false still refused a file for its ids' chains ("id 2 is block 0 after none ...")."""
    chain = write(tmp_path, "chain.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 5, '
                                           '"hash_ids": [1, 2]}\n{"timestamp": 10, "input_length": 600, '
                                           '"output_length": 5, "hash_ids": [2, 1]}\n')
    config_error(lambda: read_trace(chain), chain, "id 2 is block 0 after none")
    specs = read_trace(chain, use_hash_ids=False)
    assert [s.prefix_ids for s in specs] == [(), ()] and [s.arrival_time for s in specs] == [0.0, 0.01]
    own = write(tmp_path, "own.jsonl", "".join(json.dumps({"arrival_time": i, "prompt_tokens": 16, "output_tokens": 1,
                                                           "prefix_ids": ids, "prefix_block_tokens": 16}) + "\n"
                                               for i, ids in enumerate(([1], [2, 1, 3]))))
    config_error(lambda: read_trace(own), own, "expected at most 2 ids")
    assert [s.prefix_ids for s in read_trace(own, use_hash_ids=False)] == [(), ()]


def test_r159_extreme_scales_and_curves_are_refused_by_name_without_numpy_warnings(tmp_path):
    """time_scale=1e-320 printed numpy's overflow warning, then blamed the file; a curve of rate 1e-320 printed
    RuntimeWarnings from arrivals.py before its error."""
    import warnings

    from servesim.simulator.config import load

    f = write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 9, "output_length": 3}\n'
                                   '{"timestamp": 1000, "input_length": 9, "output_length": 3}\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError) as e:
            read_trace(f, time_scale=1e-320)
        assert e.value.field == "time_scale" and "past any finite time" in e.value.message
        for curve, field, part in (("[[0, 1e-320], [1, 1e-320]], period_s: 2", "workload.arrival",
                                    "the rate 1e-320 at 0 s is neither 0 nor in [1e-06, 1e+09]"),
                                   ("[[0, 5], [1.7e308, 5]]", "workload.arrival", "past the 1e+09 s"),
                                   ("[[0, 5], [1e-320, 5]], period_s: 1e-320", "workload.arrival",
                                    "would never arrive")):
            with pytest.raises(ConfigError) as e:
                rs = load(None, ["workload.num_requests=5", f"workload.arrival={{process: curve, points: {curve}}}"])
                rs.scenario.workload.source(0, rs.max_model_len).initial()
            assert e.value.field == field and part in e.value.message, e.value


def test_r159_unread_keys_and_rows_of_commas_are_said_in_every_format(tmp_path):
    """A multi-query timed trace's unknown row and query keys, a sharegpt_stats file's extra columns and an Azure
    row of only commas went unsaid, where Mooncake's and Azure's extras are said."""
    from servesim.workloads.traces import describe_file

    tt = write(tmp_path, "tt.jsonl", json.dumps({"timestamp": 0, "zzz": 2, "queries": [
        {"prompt_length": 10, "response_length": 5, "x": 1}]}) + "\n")
    assert "queries[].x, zzz not read (timed_trace records give" in read_trace_with_info(tt)[1]["unread"]
    sg = write(tmp_path, "sg.csv", "num_prefill_tokens,num_decode_tokens,model\n10,5,a\n")
    assert "model not read (sharegpt_stats records give" in describe_file(sg)["unread"]
    az = write(tmp_path, "az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,5\n,,\n\n"
                                   "2023-11-16 18:15:47,10,5\n")
    specs, info = read_trace_with_info(az)
    assert len(specs) == 2 and info["skipped"] == 1
    assert "1 of its 3 rows skipped: 1 row of empty fields, only commas (line 3)" in info["skipped_rows"]


def test_r160_rows_are_named_by_their_own_lines_and_bzip2_by_its_block_magic(tmp_path):
    """r160: a quoted field's line break shifted every later row's line (an error named line 4 for line 5), and a
    blank line after it was said to be a row of commas at the quoted field's second line; a first column named
    BZhash was refused as a bzip2 file (its magic is BZh, a digit, then a block's)."""
    import bz2

    from servesim.workloads.traces import describe_file

    rows = 'TIMESTAMP,ContextTokens,GeneratedTokens,note\n2023-11-16 10:00:00,100,10,"two\nlines"\n\n'
    ok = write(tmp_path, "q.csv", rows + "2023-11-16 10:00:01,200,20,x\n")
    assert describe_file(ok)["skipped"] == 0
    bad = write(tmp_path, "q2.csv", rows + "2023-11-16 10:00:01,abc,20,x\n")
    config_error(lambda: read_trace(bad), bad, "line 5, column ContextTokens")
    commas = write(tmp_path, "c.csv", rows + ",,,\n2023-11-16 10:00:01,200,20,x\n")
    assert "only commas (line 5)" in describe_file(commas)["skipped_rows"]
    named = write(tmp_path, "bzh.csv", "BZhash,TIMESTAMP,ContextTokens,GeneratedTokens\nx,2023-11-16 10:00:00,1,1\n")
    assert describe_file(named)["rows"] == 1
    packed = tmp_path / "bzh.csv.bz2"
    packed.write_bytes(bz2.compress(named.read_bytes()))
    config_error(lambda: read_trace(packed), packed, "a bzip2-compressed file")


@pytest.mark.parametrize("field, value, said", [
    ("input_lens", "x", "input_lens[3] must be a non-negative integer, got 'x'"),
    ("output_lens", -7, "output_lens[3] must be a non-negative integer, got -7"),
    ("input_lens", 2.5, "input_lens[3] must be a non-negative integer, got 2.5"),
])
def test_round_165_both_readers_of_a_bench_result_name_an_entry_alike(tmp_path, field, value, said):
    """r165: `workload describe` said "request 4, key input_lens: expected a non-negative integer" where `compare`
    said "request 3: input_lens must be a finite number" of one input_lens[3]: one numbering (JSON's), one text."""
    from servesim.calibration.real_runs import read_run
    from servesim.workloads.traces import describe_file

    n = 5
    data = {"backend": "vllm", "ttfts": [0.05] * n, "itls": [[0.01] * 9 for _ in range(n)], "input_lens": [5] * n,
            "output_lens": [10] * n, "start_times": [float(i) for i in range(n)], "errors": [""] * n}
    data[field][3] = value
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    said_by = []
    for read in (read_run, describe_file):
        with pytest.raises(ConfigError) as exc:
            read(path)
        said_by.append(str(exc.value))
    assert said_by == [f"{path}: {said}"] * 2, said_by


def test_round_170_rows_out_of_order_empty_query_lists_and_repeated_turns(tmp_path):
    """r170: a timed-trace line with no queries dropped its timestamp unsaid; rows out of time order were replayed
    sorted, a limit taking the earliest rather than the first, unsaid; two rows of one session's turn were taken."""
    empty = tmp_path / "t.jsonl"
    empty.write_text('{"timestamp": 0, "queries": [{"prompt_length": 10, "response_length": 2}]}\n'
                     '{"timestamp": 500, "queries": []}\n')
    with pytest.raises(ConfigError, match=r"line 2, key queries: expected a list of one or more objects, got \[\]"):
        read_trace(empty)
    unordered = tmp_path / "m.jsonl"
    unordered.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 5}) + "\n"
                                 for t, n in ((3000, 100), (1000, 200), (2000, 300), (1000, 400))))
    specs, info = read_trace_with_info(unordered, "mooncake", limit=2)
    assert [s.prompt_tokens for s in specs] == [200, 400]
    assert info["unordered"].endswith("2 of its rows arrive before the row above them (the first: row 2 of those "
                                      "read): replayed in arrival order, which start_s, duration_s and limit count in")
    assert "unordered" not in read_trace_with_info(_sorted(tmp_path))[1]  # ties are in order
    turns = tmp_path / "s.jsonl"
    row = {"arrival_time": 0.0, "prompt_tokens": 10, "output_tokens": 5, "session_id": 3}
    turns.write_text("".join(json.dumps(row | {"request_id": i, "turn": 1}) + "\n" for i in range(2)))
    with pytest.raises(ConfigError, match=r"line 2, key turn: session 3's turn 1 was given on line 1 too"):
        read_trace(turns)
    turns.write_text("".join(json.dumps(row | {"request_id": i}) + "\n" for i in range(2)))  # no turns: labels
    assert len(read_trace(turns)) == 2
    # r171: numbered turns arrive in their order
    turns.write_text("".join(json.dumps(row | {"request_id": i, "turn": i, "arrival_time": 5.0 - 4 * i}) + "\n"
                             for i in range(2)))
    with pytest.raises(ConfigError, match=r"line 2, key turn: session 3's turn 1 arrives at 1 s, not after its "
                                          r"turn 0"):
        read_trace(turns)
    turns.write_text("".join(json.dumps(row | {"request_id": i, "turn": i, "arrival_time": 2.0}) + "\n"
                             for i in range(2)))  # r172: at one instant, the later turn ran beside the earlier
    with pytest.raises(ConfigError, match=r"turn 1 arrives at 2 s, not after its turn 0 \(at 2 s\)"):
        read_trace(turns)


def _sorted(tmp_path):
    path = tmp_path / "sorted.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 9, "output_length": 5}) + "\n"
                            for t in (0, 1000, 1000, 2000)))
    return path


def test_round_174_a_turn_replayed_before_the_answer_before_it_is_said(tmp_path):
    """A trace's later turn holds the earlier answer in its prompt; replayed at its recorded time it may arrive
    before the simulated answer exists (turns 1 and 2 finished 3 s before turn 0, unsaid)."""
    from servesim.simulator.config import load
    from servesim.simulator.engine import simulate

    turns = tmp_path / "s.jsonl"
    rows = [(0.0, 2000, 500, 0), (0.01, 2600, 10, 1), (0.02, 3000, 10, 2), (60.0, 3100, 10, 3)]
    turns.write_text("".join(json.dumps({"arrival_time": t, "prompt_tokens": p, "output_tokens": o, "session_id": 7,
                                         "turn": k}) + "\n" for t, p, o, k in rows)
                     + json.dumps({"arrival_time": 0.03, "prompt_tokens": 30, "output_tokens": 5}) + "\n")
    result = simulate(load(None, [f"workload={{type: trace, path: {turns}}}"]))
    said = [w for w in result.warnings if "later session turns" in w]
    assert len(said) == 1 and said[0].startswith("2 of 3 later session turns arrived before the turn before them was "
                                                 "answered (session 7's turn 1 at 0.01 s")
    done = result.requests[result.requests["session_id"] == 7].set_index("turn")["finish_time"]
    assert done[1] < done[0] and done[3] > done[2]
    turns.write_text("".join(json.dumps({"arrival_time": t, "prompt_tokens": p, "output_tokens": o, "session_id": 7})
                             + "\n" for t, p, o, _ in rows))  # unnumbered rows are labels: no conversation
    assert not [w for w in simulate(load(None, [f"workload={{type: trace, path: {turns}}}"])).warnings
                if "session turns" in w]
    sessions = simulate(load(None, ["workload={type: sessions, num_sessions: 20}"]))  # sent once answered
    assert sessions.requests["turn"].max() > 0 and not [w for w in sessions.warnings if "session turns" in w]
