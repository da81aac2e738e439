"""The Python API (`import servesim`) gives what the CLI gives, and refuses what the CLI refuses."""

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import servesim
from servesim.simulator.cli import main
from servesim.simulator.config import apply_overrides, override
from servesim.workloads.spec import RequestSpec

SMALL = {"workload.num_requests": 30, "workload.arrival.rate": 6}


def test_simulate_is_the_cli_run(tmp_path, capsys):
    run = servesim.simulate("docs/scenarios/essay-batching.yaml", SMALL | {"engine.max_num_batched_tokens": 512})
    assert main(["run", "docs/scenarios/essay-batching.yaml", "--set", "workload.num_requests=30", "--set",
                 "workload.arrival.rate=6", "--set", "engine.max_num_batched_tokens=512", "--out", str(tmp_path),
                 "--quiet"]) == 0
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(run.summary))
    pd.testing.assert_frame_equal(run.requests, pd.read_parquet(tmp_path / "requests.parquet"))


def test_a_scenario_is_a_path_a_mapping_or_a_scenario_object():
    import yaml

    data = yaml.safe_load(open("docs/scenarios/essay-batching.yaml"))
    by_path = servesim.simulate("docs/scenarios/essay-batching.yaml", SMALL).summary
    assert servesim.simulate(data, SMALL).summary == by_path
    assert servesim.simulate(servesim.resolve(data, SMALL).scenario).summary == by_path
    assert servesim.simulate(None, [f"{k}={v}" for k, v in SMALL.items()]).summary == \
        servesim.simulate(None, SMALL).summary
    assert data == yaml.safe_load(open("docs/scenarios/essay-batching.yaml"))  # the caller's mapping is not changed


def test_edits_to_a_scenario_object_are_simulated_and_checked():
    """An edit inside a section left at its default was dropped (Scenario() with workload.num_requests = 20 ran
    1,000 requests), and a bad value assigned ran unchecked (round 72)."""
    from servesim.simulator.errors import ConfigError

    s = servesim.Scenario()
    s.workload.num_requests = 20
    s.workload.arrival.rate = 40.0
    assert servesim.simulate(s).summary == servesim.simulate(None, {"workload.num_requests": 20,
                                                                    "workload.arrival.rate": 40.0}).summary
    edited = servesim.resolve(None, SMALL).scenario
    edited.workload.arrival.rate = 2.0
    assert servesim.simulate(edited).summary == servesim.simulate(None, SMALL | {"workload.arrival.rate": 2.0}).summary
    edited.engine.max_num_seqs = -5
    with pytest.raises(ConfigError, match="engine.max_num_seqs"):
        servesim.simulate(edited)
    s = servesim.Scenario()
    s.engine.gpu_memory_utilization = True  # as a --set or a mapping would be: no true where a number goes
    with pytest.raises(ConfigError, match="engine.gpu_memory_utilization: a number is expected, not true"):
        servesim.simulate(s)
    # NaN and infinity are refused as a --set's are: JSON's dump made them null, an unset value derived again, so
    # max_num_seqs = nan ran with 1,024 sequences and max_concurrency = inf without a cap (round 88)
    for section, name, value in (("engine", "max_num_seqs", math.nan), ("workload", "max_concurrency", math.inf),
                                 ("engine", "block_size", math.nan), ("workload", "priorities", [1, math.nan])):
        s = servesim.Scenario()
        setattr(getattr(s, section), name, value)
        with pytest.raises(ConfigError, match=rf"{section}\.{name}(\.1)?: Input should be a finite number \(got "
                                              rf"(nan|inf)\)"):
            servesim.resolve(s)
    # a resolved deployment edited since: its derived values are stale (round 73), so it is refused ...
    rs = servesim.resolve(None, SMALL)
    rs.scenario.engine.max_num_seqs = 3
    with pytest.raises(ConfigError, match="scenario: a ResolvedScenario whose .scenario or .profile was edited"):
        servesim.simulate(rs)
    rs = servesim.resolve(None, SMALL)  # its profile too: the run used the old one, config.yaml the new (round 74)
    rs.profile.coefficients = {k: 10 * v for k, v in rs.profile.coefficients.items()}
    with pytest.raises(ConfigError, match="scenario: a ResolvedScenario whose .scenario or .profile was edited"):
        servesim.simulate(rs)
    # ... and its .scenario derives again what the edit changes (DeepSeek-V3's block size on another GPU)
    sc = servesim.resolve(None, {"model": "deepseek-v3", "hardware.gpu": "b200-sxm", "engine.tensor_parallel_size": 8,
                                 "engine.kv_cache_dtype": "fp8"}).scenario
    assert sc.engine.block_size == 32
    sc.hardware.gpu = "h200-sxm"
    assert servesim.resolve(sc).scenario.engine.block_size == 64


def test_write_writes_the_run_as_simulated(tmp_path, capsys):
    """An edited summary was written beside tables that said otherwise (round 72): write keeps to the run."""
    run, other = servesim.simulate(None, SMALL), servesim.simulate(None, SMALL)
    measured = json.loads(json.dumps(run.summary))
    run.summary["p99_ttft_ms"] = -5
    other.summary["completed"] = 999
    run.write(tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text()) == measured
    assert "RunResult.summary was edited after the run" in capsys.readouterr().err
    other.write(tmp_path / "other")  # r155: a second result's edit, written after the first, went unsaid
    assert "RunResult.summary was edited after the run" in capsys.readouterr().err
    # r130: so with its config, which a notebook edits to make the next scenario (config.yaml said max_num_seqs 4
    # beside tables measured at 1024)
    as_run = yaml.safe_load((tmp_path / "config.yaml").read_text())
    next_one = run.config
    next_one["engine"]["max_num_seqs"] = 4
    assert servesim.simulate(next_one).config["engine"]["max_num_seqs"] == 4
    run.write(tmp_path / "again")
    assert yaml.safe_load((tmp_path / "again" / "config.yaml").read_text()) == as_run
    assert "RunResult.config was edited after the run" in capsys.readouterr().err


def test_requests_replace_the_workload():
    specs = [servesim.RequestSpec(i, 0.1 * i, 100 + i, 5) for i in range(10)]
    run = servesim.simulate(None, requests=specs)
    assert run.summary["completed"] == 10 and run.requests["prompt_tokens"].tolist() == [100 + i for i in range(10)]
    import numpy as np  # numbers from a numpy array or a DataFrame are numbers

    np_specs = [servesim.RequestSpec(np.int64(i), np.float64(0.1 * i), np.int64(100 + i), np.int64(5),
                                     prefix_ids=[np.int64(7)], prefix_block_tokens=16) for i in range(10)]
    again = servesim.simulate(None, requests=np_specs)
    assert again.summary["completed"] == 10 and again.requests["prompt_tokens"].tolist() == \
        run.requests["prompt_tokens"].tolist()


@pytest.mark.parametrize("past_context", ["refuse", "lower"])
def test_the_api_server_checks_the_max_tokens_a_request_sends(past_context):
    """Round 99: the check read the output length, not the max_tokens sent: prompt 1,000 + max_tokens 100 fits a
    1,200-token context and had been refused (an output of 300 past it); prompt 1,000 + max_tokens 500 does not,
    and ran (0.19 answers it 400). A request's own max_tokens is sent, and checked, without request_max_tokens."""
    def run(max_tokens, output, sends_output_len):
        specs = [servesim.RequestSpec(i, 0.1 * i, 1000, output, max_tokens=max_tokens) for i in range(10)]
        return servesim.simulate(None, {"engine.max_model_len": 1200, "workload.request_max_tokens": sends_output_len,
                                        "workload.max_tokens_past_context": past_context}, requests=specs)

    for sends in (True, False):
        fits = run(100, 300, sends)
        assert fits.summary["completed"] == 10 and fits.summary["total_output_tokens"] == 1000
        assert set(fits.requests.finish_reason) == {"length"}
        over = run(500, 20, sends)
        assert over.summary["completed"] == (10 if past_context == "lower" else 0)  # 0.33 lowers it to 200
        # r147: an answer ending before the max_tokens its row sends stops ("length" under request_max_tokens)
        assert set(over.requests.finish_reason) == ({"stop"} if past_context == "lower" else {"max_tokens_too_large"})
    assert run(None, 300, True).summary["completed"] == (10 if past_context == "lower" else 0)
    assert run(None, 300, False).summary["completed"] == 10  # nothing sent: the context ends the output
    assert run(1300, 20, False).summary["completed"] == 0  # above max_model_len alone: 400 in both releases


def test_the_max_tokens_check_follows_the_release_by_default():
    """Round 99: max_tokens_past_context defaulted to refuse, 0.19's way, under the default release 0.33, which
    lowers max_tokens to fit."""
    specs = [servesim.RequestSpec(i, 0.1 * i, 1000, 300) for i in range(10)]
    for release, completed in (("0.33.0", 10), ("0.19.0", 0)):
        run = servesim.simulate(None, {"engine.max_model_len": 1200, "workload.request_max_tokens": True,
                                       "engine.vllm_defaults": release}, requests=specs)
        assert run.summary["completed"] == completed


def test_workload_write_keeps_the_max_tokens_each_request_sends(tmp_path):
    """Round 99: a request_max_tokens workload was written with max_tokens null, so its replay sent none: 24 of
    200 refusals vanished and every finish_reason was stop."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("seed: 2\nengine: {max_model_len: 2048, vllm_defaults: 0.19.0}\n"
                        "workload:\n  num_requests: 200\n"
                        "  arrival: {process: poisson, rate: 10}\n"
                        "  prompt_tokens: {dist: uniform, low: 500, high: 1900}\n"
                        "  output_tokens: {dist: uniform, low: 50, high: 600}\n  request_max_tokens: true\n")
    assert main(["workload", "write", str(scenario), "--out", str(tmp_path / "w.jsonl"), "--quiet"]) == 0
    first = servesim.simulate(str(scenario))
    replay = servesim.simulate(str(scenario), {"workload": {"type": "trace", "path": str(tmp_path / "w.jsonl")}})
    assert 0 < first.summary["failed"] == replay.summary["failed"]
    assert first.requests.finish_reason.tolist() == replay.requests.finish_reason.tolist()
    assert first.summary["total_output_tokens"] == replay.summary["total_output_tokens"]


def test_a_run_of_given_requests_writes_a_config_that_repeats_it(tmp_path):
    specs = [servesim.RequestSpec(i, 0.05 * i, 200 + 7 * i, 20 + i) for i in range(40)]
    servesim.simulate(None, {"engine.max_num_seqs": 8}, requests=specs).write(tmp_path / "a")
    again = servesim.simulate(tmp_path / "a" / "config.yaml").write(tmp_path / "b")
    for name in ("summary.json", "requests.parquet", "steps.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (again / name).read_bytes(), name


def test_a_request_source_serves_several_runs_and_a_static_one_is_repeatable(tmp_path, capsys):
    """Round 35: a StaticSource given to a second run raised (the first run had let go of its requests), and a run
    given one wrote a config.yaml of the scenario's own 1,000 requests, not the 5 it ran."""
    from servesim.workloads.source import ClosedLoopSource, StaticSource

    src = StaticSource([servesim.RequestSpec(i, 0.1 * i, 100, 10) for i in range(5)])
    first = servesim.simulate(None, {"profile": "teaching"}, requests=src)
    second = servesim.simulate(None, {"profile": "teaching", "engine.max_num_seqs": 2}, requests=src)
    assert first.summary["completed"] == second.summary["completed"] == 5
    first.write(tmp_path / "a")
    again = servesim.simulate(tmp_path / "a" / "config.yaml").write(tmp_path / "b")
    for name in ("summary.json", "requests.parquet", "steps.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (again / name).read_bytes(), name
    templates = iter([servesim.RequestSpec(i, 0.0, 100, 10) for i in range(6)])
    loop = ClosedLoopSource(2, lambda: 0.1, templates, 6, None)
    servesim.simulate(None, {"profile": "teaching"}, requests=loop).write(tmp_path / "c")
    assert "not the ClosedLoopSource given to simulate()" in capsys.readouterr().err


@pytest.mark.parametrize("make, field", [
    (lambda S, C, R: S([R(0, float("nan"), 100, 5)]), "arrival_time"),
    (lambda S, C, R: S([R(0, 0.0, 10, 5), R(0, 0.1, 10, 5)]), "request_id"),
    (lambda S, C, R: S([R(0, -1.0, 100, 5)]), "arrival_time"),
    (lambda S, C, R: C(2, lambda: -1.0, iter([R(i, 0.0, 50, 3) for i in range(6)]), 6, None), "arrival_time"),
    (lambda S, C, R: C(2, lambda: float("nan"), iter([R(i, 0.0, 50, 3) for i in range(6)]), 6, None),
     "arrival_time"),
])
def test_a_sources_requests_are_checked_as_a_lists_are(make, field):
    """Round 36: a StaticSource or a ClosedLoopSource skipped the checks a list gets: a NaN arrival ran with NaN
    latencies, a duplicate id was accepted, a negative time or think time crashed the clock."""
    from servesim.workloads.source import ClosedLoopSource, StaticSource

    with pytest.raises(servesim.ConfigError) as e:
        servesim.simulate(None, {"profile": "teaching"}, requests=make(StaticSource, ClosedLoopSource,
                                                                        servesim.RequestSpec))
    assert e.value.field.endswith(field), (e.value.field, str(e.value))


def test_a_source_that_sends_nothing_or_not_a_list_is_refused():
    """Round 38: a source whose initial() was empty ran as an empty run (an empty list is refused); one returning
    None was a bare TypeError; a StaticSource subclass's follow-ups were dropped (it ran as its list)."""
    from servesim.workloads.source import ClosedLoopSource, RequestSource, StaticSource

    class Empty(RequestSource):
        def initial(self):
            return []

    class Nothing(RequestSource):
        def initial(self):
            return None

    spec = servesim.RequestSpec(0, 0.0, 10, 5)
    for source in (Empty(), Nothing(), ClosedLoopSource(0, lambda: 0.1, iter([spec] * 5), 5, None)):
        with pytest.raises(servesim.ConfigError) as e:
            servesim.simulate(None, {"profile": "teaching"}, requests=source)
        assert e.value.field == "requests"

    class More(StaticSource):  # one request, then three follow-ups
        def on_finish(self, spec, t, completed, idle=False):
            return [servesim.RequestSpec(spec.request_id + 1, t, 10, 5)] if spec.request_id < 3 else []

    assert servesim.simulate(None, {"profile": "teaching"}, requests=More([spec])).summary["completed"] == 4


@pytest.mark.parametrize("returns, field", [
    ({"on_finish": 5}, "requests"),  # not a list: a TypeError from simpy's loop
    ({"on_finish": "spec"}, "requests"),  # a bare RequestSpec, not [spec]
    ({"planned": "x"}, "requests.planned()"),  # read after the run: the result was lost to a TypeError
    ({"planned": -1}, "requests.planned()"),
    ({"held_back": "x"}, "requests.held_back()"),
    ({"planned": 1, "held_back": 2}, "requests.held_back()"),  # r146: held back more than it planned
    ({"planned": 0}, "requests.planned()"),  # r150: sent more than it planned (a cut's warning left them out)
    ({"planned": 1, "on_finish": "follow-up"}, "requests.planned()"),
])
def test_a_sources_answers_that_are_not_what_they_must_be_are_named(returns, field):
    """Round 106: on_finish() returning an int or a bare RequestSpec escaped as a TypeError mid-run; planned() or
    held_back() returning text, as one after the whole run."""
    from servesim.workloads.source import RequestSource

    spec = servesim.RequestSpec(0, 0.0, 10, 5)
    answers = {"on_finish": [], "planned": None, "held_back": 0, **returns}
    if answers["on_finish"] in ("spec", "follow-up"):
        answers["on_finish"] = servesim.RequestSpec(1, 1.0, 10, 5) if answers["on_finish"] == "spec" else \
            [servesim.RequestSpec(1, 1.0, 10, 5)]

    class Odd(RequestSource):
        def initial(self):
            return [spec]

        def on_finish(self, *a, **k):
            return answers["on_finish"]

        def planned(self):
            return answers["planned"]

        def held_back(self):
            return answers["held_back"]

    with pytest.raises(servesim.ConfigError) as e:
        servesim.simulate(None, {"profile": "teaching"}, requests=Odd())
    assert e.value.field == field, str(e.value)


def test_round_158_a_source_sending_fewer_than_it_planned_is_said(capsys):
    """r158: planned() 5, one request sent, none held back and no cut: 4 requests vanished without a word."""
    from servesim.workloads.source import RequestSource

    class Few(RequestSource):
        def initial(self):
            return [servesim.RequestSpec(0, 0.0, 10, 5)]

        def planned(self):
            return 5

    result = servesim.simulate(None, {"profile": "teaching"}, requests=Few())
    assert "the request source (Few) planned 5 requests and sent 1, holding back 0: 4 never arrived" in \
        " ".join(result.warnings)


def test_a_sources_one_warning_given_as_text_is_said_as_one_line(capsys):
    """Round 106: a `warnings` given as one str was said a letter per line."""
    from servesim.workloads.source import RequestSource

    class Said(RequestSource):
        warnings = "ten turns never sent"

        def initial(self):
            return [servesim.RequestSpec(0, 0.0, 10, 5)]

    result = servesim.simulate(None, {"profile": "teaching"}, requests=Said())
    assert "ten turns never sent" in result.warnings and "servesim: warning: t\n" not in capsys.readouterr().err


@pytest.mark.parametrize("cls", [None, "y"])
def test_a_sources_request_outside_the_scenarios_slo_classes_is_refused(cls):
    """Round 86: a list's request outside workload.slo_classes was refused, a source's (its first request or a
    follow-up) was counted as good, inflating goodput."""
    from servesim.workloads.source import RequestSource

    class Turns(RequestSource):
        def initial(self):
            return [servesim.RequestSpec(0, 0.0, 10, 5, slo_class="x")]

        def on_finish(self, spec, t, completed, idle=False):
            return [servesim.RequestSpec(1, t, 10, 5, slo_class=cls)] if spec.request_id == 0 else []

    sets = {"profile": "teaching", "workload.slo_classes": {"x": {"ttft_ms": 1e6}}}
    with pytest.raises(servesim.ConfigError) as e:
        servesim.simulate(None, sets, requests=Turns())
    assert e.value.field == "Turns request[0].slo_class" and "one of the scenario's slo_classes (x)" in str(e.value)
    sets["workload.slo_classes"]["y"] = {"ttft_ms": 1e-3}
    if cls:  # a class the scenario has: judged by it (missed)
        assert servesim.simulate(None, sets, requests=Turns()).summary["slo_classes"]["y"]["good"] == 0


@settings(max_examples=60, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text("abc", min_size=1, max_size=3),
                                                                              kids, max_size=3), max_leaves=6))
def test_an_override_reads_back_as_the_value_given(value):
    """None, True, 1e-05 or the string 'null' as a Python value: the --set text must not turn them into others."""
    assert apply_overrides({}, [override("a.b", value)])["a"]["b"] == value


def test_sweep_gives_the_cli_table_and_reuses_its_runs(tmp_path, capsys):
    grid = {"engine.max_num_seqs": [4, 64]}
    table = servesim.sweep(None, grid, SMALL, out=tmp_path / "api")
    assert main(["sweep", "--grid", "engine.max_num_seqs=4,64", "--set", "workload.num_requests=30", "--set",
                 "workload.arrival.rate=6", "--out", str(tmp_path / "cli"), "--jobs", "1", "--no-progress"]) == 0
    cli = pd.read_parquet(tmp_path / "cli" / "sweep.parquet")
    assert table["run_id"].tolist() == cli["run_id"].tolist() and table["error"].isna().all()
    assert table["p99_ttft_ms"].tolist() == cli["p99_ttft_ms"].tolist()
    again = servesim.sweep(None, grid, SMALL, out=tmp_path / "api")
    pd.testing.assert_frame_equal(again, table)
    files = servesim.plot(tmp_path / "api", "pareto", by="engine.max_num_seqs")
    assert [f.name for f in files] == ["plot-pareto.png", "plot-pareto.svg"] and files[0].stat().st_size > 5000


def test_searches_and_capacity(tmp_path):
    found = servesim.max_rate(None, {"ttft_p99_ms": 200}, {"workload.num_requests": 40}, tolerance=0.2)
    assert found["max_rate"] > 0 and found["fails_at"] > found["max_rate"]
    # twice the rate one replica fails at: its failing end, 16.6 req/s, is within noise of the SLO (TTFT p99 190-204
    # ms at 2,560-20,480 requests against 200), where one replica may well be found enough
    few = servesim.min_replicas(None, {"ttft_p99_ms": 200}, {"workload.num_requests": 40}, rate=2 * found["fails_at"])
    assert few["replicas"] >= 2 and few["fails_with"] < few["replicas"]
    plan = servesim.capacity("llama-3.1-8b", "h200-sxm", tokens_per_request=4000)
    assert plan.report.paged_requests == plan.report.num_blocks // 250


@pytest.mark.parametrize("call, field", [
    (lambda: servesim.simulate(None, {"engine.max_num_seqs": -1}), "engine.max_num_seqs"),
    (lambda: servesim.simulate(None, {"engine.no_such_setting": 1}), "engine.no_such_setting"),
    (lambda: servesim.simulate(None, [3]), "overrides"),
    (lambda: servesim.simulate(42), "scenario"),
    (lambda: servesim.simulate(servesim.resolve(), {"seed": 1}), "overrides"),
    (lambda: servesim.simulate(None, {"seed": object()}), "seed"),
    (lambda: servesim.sweep(None, {"seed": [1, 2]}, out="/tmp/x"), "grid"),
    (lambda: servesim.sweep(None, {"engine.max_num_seqs": "4,8"}, out="/tmp/x"), "engine.max_num_seqs"),
    (lambda: servesim.sweep(None, {"engine.max_num_seqs": []}, out="/tmp/x"), "grid"),
    (lambda: servesim.sweep(None, {"engine.max_num_seqs": [4]}, out="/tmp/x", seeds=0), "seeds"),
    (lambda: servesim.sweep(None, {"engine.max_num_seqs": [4]}, out="/tmp/x", jobs=10_000), "jobs"),
    (lambda: servesim.max_rate(None, {"ttft_p99_ms": -5}), "slos"),
    (lambda: servesim.max_rate(None, {"ttft_p99_ms": 5}, tolerance=0), "tolerance"),
    (lambda: servesim.max_rate(None, {"ttft_p99_ms": 5}, low=float("inf")), "low"),
    (lambda: servesim.min_replicas(None, {"ttft_p99_ms": 5}, most=True), "most"),
    (lambda: servesim.capacity(gpu_memory_utilization=2), "gpu_memory_utilization"),
    (lambda: servesim.capacity(block_size=2.5), "block_size"),
    (lambda: servesim.capacity(quantization="int3"), "quantization"),
    (lambda: servesim.capacity(tokens_per_request=4000.0), "tokens_per_request: must be an integer"),
    (lambda: servesim.simulate(None, requests=[servesim.RequestSpec(0, float("nan"), 10, 5)]),
     "requests[0].arrival_time"),
    (lambda: servesim.simulate(None, requests=[servesim.RequestSpec(0, -1.0, 10, 5)]), "requests[0].arrival_time"),
    (lambda: servesim.simulate(None, requests=[servesim.RequestSpec(0, 0.0, 0, 5)]), "requests[0].prompt_tokens"),
    (lambda: servesim.simulate(None, requests=[servesim.RequestSpec(0, 0.0, 9.5, 5)]), "requests[0].prompt_tokens"),
    (lambda: servesim.simulate(None, requests=[servesim.RequestSpec(0, 0.0, 9, 5), servesim.RequestSpec(0, 1.0, 9, 5)]),
     "requests[1].request_id"),
    (lambda: servesim.simulate(None, requests=[servesim.RequestSpec(0, 0.0, 9, 5, prefix_ids=(1, 2))]),
     "requests[0].prefix_block_tokens"),
    (lambda: servesim.simulate(None, requests=[{"prompt_tokens": 5}]), "requests[0]"),
    # round 62: a session id past 2**53 ran, then crashed the write half done (parquet), leaving an unreplayable folder
    (lambda: servesim.simulate(None, requests=[servesim.RequestSpec(0, 0.0, 9, 5, session_id=2**63)]),
     "requests[0].session_id: must be None or an integer at most 9,007,199,254,740,992"),
    (lambda: servesim.simulate(None, requests=[servesim.RequestSpec(0, 0.0, 20, 5, prefix_ids=(2**70,),
                                                                    prefix_block_tokens=16)]),
     "requests[0].prefix_ids: must be a tuple of integer content ids, each at most"),
    # a request without a class ran classless (a "nan" class in the summary); its config.yaml drew it one
    (lambda: servesim.simulate(None, {"workload.slo_classes": {"x": {"ttft_ms": 100}}},
                               requests=[servesim.RequestSpec(0, 0.0, 5, 3, slo_class="x"),
                                         servesim.RequestSpec(1, 0.0, 5, 3)]),
     "requests[1].slo_class: must be one of the scenario's slo_classes (x), got None"),
    (lambda: servesim.simulate(None, requests=[servesim.RequestSpec(0, 0.0, 5, 3, prefix_ids=(1, 2, 3),
                                                                    prefix_block_tokens=16)]),
     "requests[0].prefix_ids: must be at most one id per 16-token block of the 5 prompt and 3 output tokens (1)"),
    (lambda: servesim.simulate(None, requests="trace.jsonl"), "requests"),
    (lambda: servesim.simulate(None, requests=[]), "requests: empty"),
    (lambda: servesim.max_rate(None, {"ttft_p99_ms": 5}, low=1e300), "low: must be from 1e-06 to 1e+09"),
    (lambda: servesim.plot("/nonexistent", "pareto"), "results"),
    (lambda: servesim.plot("/nonexistent", "bars"), "kind"),
    # wrong types were TypeErrors and AttributeErrors from deep inside (round 19)
    (lambda: servesim.simulate(None, 5), "overrides"),
    (lambda: servesim.sweep(None, {"seed": [1]}, out=5), "out: must be a path"),
    # r130: "" wrote into the working folder; a NUL byte or a name past 255 bytes were ValueError and OSError
    (lambda: servesim.sweep(None, {"seed": [1]}, out=""), "out: must be a path, got an empty string"),
    (lambda: servesim.recommend(None, {"p99_ttft_ms": 500}, rate=1, out=" "), "out: must be a path, got an empty"),
    (lambda: servesim.sweep(None, {"seed": [1]}, out="/tmp/" + "x" * 300), "out: xxxxx"),
    (lambda: servesim.read_trace("/tmp/a\x00b"), "path: '/tmp/a\\x00b': a path holds no NUL byte"),
    (lambda: servesim.simulate(None, {"workload.num_requests": 2}).write(""), "out_dir: must be a path, got an empty"),
    (lambda: servesim.sweep(None, ["workload.arrival.rate=1"], out="/tmp/x"), "grid: must be a mapping"),
    (lambda: servesim.sweep(None, {"seed": [1]}, out="/tmp/x", seeds="2"), "seeds: must be an integer"),
    (lambda: servesim.capacity(5), "model: must be a path (str or os.PathLike)"),
    (lambda: servesim.capacity("llama-3.1-8b", {"memory_gib": 10}), "gpu: must be text"),
    (lambda: servesim.capacity("llama-3.1-8b", bogus=1), "capacity: got an unexpected keyword argument 'bogus'"),
    (lambda: servesim.capacity(tokens_per_request="4000"), "tokens_per_request: must be a number"),
    (lambda: servesim.max_rate(None, {"ttft_p99_ms": 5}, low="1"), "low: must be a number"),
    (lambda: servesim.plot(5, "pareto"), "results: must be a path"),
    (lambda: servesim.read_trace(b"x.csv"), "path: must be a path"),
    (lambda: servesim.read_trace("x.csv", seed=1.5), "seed: must be a non-negative integer"),
    (lambda: servesim.read_trace("x.csv", first_id=-5), "first_id: must be a non-negative integer"),
    (lambda: servesim.describe_trace("abc"), "specs: must be a list"),
    # checked as simulate(requests=) checks them: these were an AttributeError, a NaN summarised, a row counted twice
    (lambda: servesim.describe_trace([1, 2]), "specs[0]: must be a RequestSpec, got int"),
    (lambda: servesim.describe_trace([RequestSpec(0, math.nan, 5, 5)]), "specs[0].arrival_time: must be"),
    (lambda: servesim.describe_trace([RequestSpec(0, 0, -5, 5)]), "specs[0].prompt_tokens: must be"),
    (lambda: servesim.describe_trace([RequestSpec(0, 0, 5, 5), RequestSpec(0, 1, 5, 5)]),
     "specs[1].request_id: must be an integer no other request has"),
    (lambda: servesim.describe_file(None), "path: must be a path"),
    (lambda: servesim.simulate(None, {"workload.num_requests": 3}).write(5), "out_dir: must be a path"),
])
def test_bad_arguments_are_named(call, field, tmp_path):
    """Each is a ConfigError naming the argument, as the README promises, never a TypeError from inside, nor the
    CLI flag that stands for it (capacity(tokens_per_request=4000.0) said --tokens-per-request)."""
    with pytest.raises(servesim.ConfigError) as e:
        call()
    assert str(e.value).startswith(field)


def test_numpy_numbers_are_numbers_and_a_file_in_the_way_is_named(tmp_path):
    import numpy as np

    assert servesim.capacity("llama-3.1-8b", "h200-sxm", tensor_parallel_size=np.int64(2)) == \
        servesim.capacity("llama-3.1-8b", "h200-sxm", tensor_parallel_size=2)
    (tmp_path / "afile").write_text("")
    with pytest.raises(servesim.ConfigError, match="out_dir: .*afile is a file, not a results folder"):
        servesim.simulate(None, {"workload.num_requests": 3}).write(tmp_path / "afile")


def test_numpy_values_and_paths_at_any_depth_are_values(tmp_path):
    """A list of np.int64, a np.float64 inside a mapping, a numpy SLO target, a numpy grid axis and a Path were
    refused as "not a setting value" (the README says numpy numbers are numbers)."""
    import pathlib

    import numpy as np

    base = {"workload.num_requests": 5}
    plain = servesim.simulate(None, base | {"workload.priorities": [0, 1], "policies.queue": "priority"}).summary
    assert servesim.simulate(None, base | {"workload.priorities": [np.int64(0), np.int64(1)],
                                           "policies.queue": "priority"}).summary == plain
    servesim.simulate(None, base | {"workload.arrival": {"process": "poisson", "rate": np.float64(3.0)}})
    servesim.simulate({"workload": {"num_requests": 5}, "engine": {"enable_prefix_caching": np.bool_(False)}})
    assert len(servesim.sweep(None, {"workload.arrival.rate": np.array([5.0, 10.0])}, base, out=tmp_path / "s")) == 2
    # r171: and a pandas column (a Series was refused where an array was taken)
    table = servesim.sweep(None, {"workload.arrival.rate": np.array([5.0, 10.0]),
                                  "engine.max_num_seqs": pd.Series([8, 64])}, base, out=tmp_path / "p")
    assert sorted(table["engine.max_num_seqs"].unique().tolist()) == [8, 64] and len(table) == 4
    assert servesim.max_rate(None, {"ttft_p99_ms": np.float64(500)}, base, max_runs=3)["runs"] >= 1
    model = pathlib.Path(__file__).resolve().parents[1] / "simulator" / "data" / "models" / "llama-3.1-8b.yaml"
    assert servesim.capacity(model, "h200-sxm") == servesim.capacity(str(model), "h200-sxm")


def test_round_125_a_scenario_edited_with_numpy_values_runs_as_with_python_ones():
    """A Scenario edit with an np.int64 (any value read from a table), np.bool_ or a numpy array was a pydantic
    serialization traceback; pd.NA is refused naming the setting."""
    import numpy as np

    def edited(seed, priorities, **engine):
        s = servesim.Scenario()
        s.workload.num_requests = 5
        for name, v in engine.items():
            setattr(s.engine, name, v)
        s.seed, s.workload.priorities = seed, priorities
        return s

    py = servesim.resolve(edited(3, [0, 1], max_num_seqs=64, enable_chunked_prefill=True))
    npy = servesim.resolve(edited(np.int64(3), np.array([0, 1]), max_num_seqs=pd.Series([64, 32]).max(),
                                  enable_chunked_prefill=np.bool_(True)))
    assert (npy.max_num_seqs, npy.scenario.seed, npy.scenario.workload.priorities) == (64, 3, [0, 1])
    assert npy.as_dict() == py.as_dict()
    with pytest.raises(servesim.ConfigError, match="^engine.max_num_seqs: "):
        servesim.resolve(edited(3, [0, 1], max_num_seqs=pd.NA))


def test_round_125_request_fields_of_narrow_numpy_integers_are_python_ints(tmp_path):
    """A uint8 max_tokens (a downcast pandas column) overflowed in the engine's sums: requests stopped after one
    token, and the run's own workload.jsonl replayed to another result."""
    import numpy as np

    def specs(kind):
        return [RequestSpec(i, 0.5 * i, 300, 400, max_tokens=kind(m), priority=kind(1), turn=kind(0),
                            session_id=kind(i)) for i, m in enumerate((128, 200, 250))]

    run = servesim.simulate(None, requests=specs(np.uint8))
    assert run.requests.sort_values("request_id").output_tokens.tolist() == [128, 200, 250]
    assert run.summary == servesim.simulate(None, requests=specs(int)).summary
    run.write(tmp_path / "a")
    assert main(["run", str(tmp_path / "a" / "config.yaml"), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert (tmp_path / "b" / "summary.json").read_bytes() == (tmp_path / "a" / "summary.json").read_bytes()


def test_round_62_trace_ids_past_2_53_are_refused_where_they_are_made(tmp_path):
    """read_trace(first_id=2**62) made ids a run then called not unique (they were: too large to stay exact)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"arrival_time": {i}, "prompt_tokens": 5, "output_tokens": 2}}\n' for i in range(3)))
    with pytest.raises(servesim.ConfigError, match="first_id: 9,007,199,254,740,991: the last of 3 request ids"):
        servesim.read_trace(str(trace), first_id=2**53 - 1)
    assert [s.request_id for s in servesim.read_trace(str(trace), first_id=2**53 - 2)][-1] == 2**53


def test_a_value_nesting_without_end_is_a_config_error():
    """A value that contains itself, or nests hundreds of levels, raised RecursionError (round 79)."""
    deep: list = []
    for _ in range(400):
        deep = [deep]
    loop: dict = {}
    loop["x"] = loop
    for args, field in (((None, {"engine.block_size": deep}), "engine.block_size"), (({"engine": loop},), "engine.x")):
        with pytest.raises(servesim.ConfigError, match=f"{field}: nests more than 64 levels"):
            servesim.simulate(*args)


def test_a_content_id_names_its_place_in_every_request():
    """Round 83: ids (6, 7) after (5, 6) hit 512 tokens of KV computed after another first block; a source's later
    requests are held to the places its earlier ones gave."""
    R = servesim.RequestSpec
    with pytest.raises(servesim.ConfigError, match=r"requests\[1\].prefix_ids: id 6 is block 0 of 512 tokens after none"):
        servesim.simulate(None, {"profile": "teaching"}, requests=[R(0, 0.0, 1024, 5, prefix_ids=(5, 6),
                                                                    prefix_block_tokens=512),
                                                                  R(1, 1.0, 1024, 5, prefix_ids=(6, 7),
                                                                    prefix_block_tokens=512)])
    with pytest.raises(servesim.ConfigError, match=r"requests\[1\].prefix_ids: id 5 is block 0 of 16 tokens after "
                                                   r"none, but was given before as block 0 of 512 tokens"):
        servesim.simulate(None, {"profile": "teaching"}, requests=[R(0, 0.0, 1024, 5, prefix_ids=(5, 6),
                                                                    prefix_block_tokens=512),
                                                                  R(1, 1.0, 1024, 5, prefix_ids=(5, 6),
                                                                    prefix_block_tokens=16)])  # round 84: 32 hits
    same = [R(0, 0.0, 1024, 5, prefix_ids=(5, 6), prefix_block_tokens=512),
            R(1, 1.0, 1024, 5, prefix_ids=(5, 8), prefix_block_tokens=512)]  # a shared first block, then its own
    assert servesim.simulate(None, {"profile": "teaching"}, requests=same).requests["cached_tokens"].tolist() == [0, 512]


def test_a_runs_own_warnings_are_said_by_the_api_as_by_the_cli(capsys, tmp_path):
    """Round 89: simulate() said nothing of prompts cut to max_model_len or a run cut by max_sim_time_s (91 requests
    never sent), which `servesim run` says; a workload setting beside requests= was dropped unsaid."""
    from servesim.simulator.config import _WARNED

    _WARNED.clear()
    clipped = servesim.simulate(None, {"workload.num_requests": 50, "engine.max_model_len": 300})
    cut = servesim.simulate(None, {"workload.num_requests": 100, "simulation.max_sim_time_s": 1})
    given = servesim.simulate(None, {"workload.max_concurrency": 1, "workload.slo_classes": {"x": {"ttft_ms": 100}}},
                              requests=[servesim.RequestSpec(i, 0.0, 500, 50, slo_class="x") for i in range(4)])
    err = capsys.readouterr().err
    assert any("prompts are at max_model_len - 1 = 299 tokens" in w for w in clipped.warnings)
    assert any("never arrived (in no metric)" in w for w in cut.warnings) and not given.warnings
    for w in clipped.warnings + cut.warnings:
        assert f"servesim: warning: {w}" in err
    assert "workload.max_concurrency has no effect: requests= replaces" in err and "slo_classes has no" not in err
    assert main(["run", "--set", "workload.num_requests=50", "--set", "engine.max_model_len=300", "--out",
                 str(tmp_path / "clip")]) == 0  # the CLI's words are the same list
    assert f"servesim: warning: {clipped.warnings[0]}" in capsys.readouterr().err


def test_a_scenario_made_or_edited_badly_is_a_config_error():
    """Round 89: servesim.Scenario(...) with a bad value raised pydantic's ValidationError, and a misspelt attribute
    a bare ValueError: the README promises ConfigError naming the setting for every bad input to the API."""
    for kw, field in ((dict(engine={"max_num_seqs": "x"}), "engine.max_num_seqs"), (dict(bogus=1), "bogus"),
                      (dict(engine={"max_num_seqs": math.nan}), "engine.max_num_seqs")):
        with pytest.raises(servesim.ConfigError) as e:
            servesim.Scenario(**kw)
        assert e.value.field == field
    s = servesim.Scenario()
    with pytest.raises(servesim.ConfigError, match="max_num_seq: unknown setting of EngineSettings"):
        s.engine.max_num_seq = 5


def test_requests_naming_classes_without_targets_are_said(capsys):
    """r116: simulate(requests=) whose requests name SLO classes the scenario gives no targets dropped them
    unsaid, where a replayed trace's are warned of."""
    r = servesim.simulate(None, requests=[RequestSpec(0, 0.0, 10, 10, slo_class="gold")])
    assert r.warnings[0].startswith("requests= name SLO class(es) gold, but workload.slo_classes gives them no")
    assert "goodput is not computed" in capsys.readouterr().err
    assert not servesim.simulate(None, requests=[RequestSpec(0, 0.0, 10, 10)]).warnings


def test_a_run_result_pickles_and_writes_the_same_files(tmp_path):
    """A RunResult sent to another process (multiprocessing, a cache) failed to pickle: its computed step columns
    read the run's own through closures. Pickled, they are arrays: the copy writes the same bytes."""
    import pickle

    r = servesim.simulate(None, {"workload.num_requests": 10, "cluster.replicas": 2})
    copy = pickle.loads(pickle.dumps(r))
    r.write(tmp_path / "a")
    copy.write(tmp_path / "b")
    for name in ("summary.json", "requests.parquet", "steps.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_run_of_given_requests_is_repeated_with_their_ids(tmp_path):
    """r119: the workload.jsonl written beside a run of requests= replayed with ids renumbered from 0 (3 and 10 came
    back as 0 and 1): its config.yaml did not repeat the run."""
    from servesim.simulator.cli import main

    r = servesim.simulate(None, {"engine.max_num_batched_tokens": 2048},
                          requests=[RequestSpec(10, 0.0, 800, 50), RequestSpec(3, 0.0, 200, 5)])
    r.write(tmp_path / "a")
    assert main(["run", str(tmp_path / "a" / "config.yaml"), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    for name in ("summary.json", "requests.parquet", "steps.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_each_api_call_says_its_own_warnings(capsys):
    """r130: warnings were said once a process, so a notebook cell run again (or the same mistake in a later cell)
    said nothing; each call of the API now says its own, once."""
    import servesim.simulator.config

    inert = {"workload.num_requests": 3, "speculative.num_speculative_tokens": 3}
    servesim.simulate(None, inert)
    assert "speculative.num_speculative_tokens has no effect" in capsys.readouterr().err
    servesim.simulate(None, inert)
    assert "speculative.num_speculative_tokens has no effect" in capsys.readouterr().err
    servesim.simulator.config.say_once(["servesim: warning: x"])
    servesim.simulator.config.say_once(["servesim: warning: x"])
    assert capsys.readouterr().err.count("warning: x") == 1  # within a call (a CLI command), still once


def test_round_143_api_inputs_that_were_python_exceptions(tmp_path):
    """Each was a TypeError, KeyError or a serialization error from deep inside (two of them CLI internal errors)."""
    import numpy as np

    from servesim.workloads.source import RequestSource

    rs = servesim.resolve(None, {"workload.num_requests": 20})
    rs.scenario.workload.num_requests = np.int64(30)  # an edit in place, as a plain int's is refused
    with pytest.raises(servesim.ConfigError, match="^scenario: a ResolvedScenario whose .scenario or .profile was "
                                                   "edited"):
        servesim.simulate(rs)
    for args, arg in (({"gpus": []}, "gpus"), ({"tp": []}, "tp"), ({"grid": {"engine.max_num_seqs": []}}, "grid")):
        with pytest.raises(servesim.ConfigError, match=f"^{arg}: .*: no values"):
            servesim.recommend(None, {"ttft_p99_ms": 500}, {"workload.num_requests": 30}, rate=2,
                               out=str(tmp_path / "rec"), **args)
    with pytest.raises(servesim.ConfigError, match=r"^name: '\\ud800' is not UTF-8 text"):
        servesim.simulate(None, {"workload.num_requests": 20, "name": "\ud800"})
    with pytest.raises(servesim.ConfigError, match="^out: .*a path that is not UTF-8 text"):
        servesim.sweep(None, {"workload.arrival.rate": [1]}, {"workload.num_requests": 20},
                       out=str(tmp_path / "s_\udcff"))
    assert not list(tmp_path.iterdir())  # refused before anything was written

    class Quiet(RequestSource):
        warnings = None

        def initial(self):
            return [servesim.RequestSpec(0, 0.0, 100, 10)]

    assert len(servesim.simulate(None, requests=Quiet()).requests) == 1

    class Numbers(Quiet):
        warnings = [1, 2]

    with pytest.raises(servesim.ConfigError, match="^requests: Numbers's warnings must be text"):
        servesim.simulate(None, requests=Numbers())


@pytest.mark.parametrize("call, says", [
    (lambda: servesim.min_replicas(None, {"ttft_p99_ms": 500}, {"cluster.replicas": 3}, rate=20),
     "overrides: cluster.replicas is the setting the search varies"),
    (lambda: servesim.simulate(None, ["=5"]), "overrides: '=5': KEY must be a dotted setting name"),
    (lambda: servesim.sweep(None, None, out="unused", zipped={"engine.max_num_seqs": [4, 8],
                                                              "workload.arrival.rate": [1]}),
     "zipped: zipped settings need the same number of values"),
])
def test_round_143_an_api_error_names_the_argument_not_the_cli_flag(call, says):
    with pytest.raises(servesim.ConfigError, match=f"^{re.escape(says)}"):
        call()


def test_round_146_a_sweep_reuses_only_its_own_run_and_sources_of_every_signature(tmp_path):
    """A run written into a sweep's run folder was read into its table as that point's (5 requests for 30); a
    RequestSource whose on_finish lacks `idle` was a TypeError mid-run; servesim.RequestSource was not exported;
    a spaced axis name became a spaced column."""
    grid, sets = {" workload.arrival.rate ": [2, 8]}, {"workload.num_requests": 30}
    first = servesim.sweep(None, grid, sets, out=str(tmp_path / "s"))
    assert "workload.arrival.rate" in first.columns
    runs = sorted((tmp_path / "s" / "runs").iterdir())
    servesim.simulate(None, {"workload.num_requests": 5}).write(str(runs[0]))
    again = servesim.sweep(None, grid, sets, out=str(tmp_path / "s"))
    assert (again["completed"] == 30).all()

    class Plain(servesim.RequestSource):
        def initial(self):
            return [servesim.RequestSpec(i, i * 0.05, 200, 20) for i in range(3)]

        def on_finish(self, spec, t, completed):
            return []

    class Wrong(Plain):
        def on_finish(self, spec):
            return []

    assert len(servesim.simulate(None, requests=Plain()).requests) == 3
    with pytest.raises(servesim.ConfigError, match=r"^requests: Wrong's on_finish must take \(spec, t, completed"):
        servesim.simulate(None, requests=Wrong())


def test_round_146_the_api_sweep_says_what_the_cli_sweep_says(tmp_path, capsys):
    """Runs that completed no request and runs that failed were said by the CLI only (exit 1 for failed ones);
    the API's table held them in silence."""
    servesim.sweep(None, {"workload.arrival.rate": [5]}, {"workload.num_requests": 10,
                                                          "engine.max_num_queued_reqs": 0}, out=str(tmp_path / "a"))
    assert "1 of 1 sweep runs completed no request" in capsys.readouterr().err
    table = servesim.sweep(None, {"model": ["llama-3.1-8b", "llama-3.1-70b"]}, {"workload.num_requests": 5,
                                                                                 "hardware.gpu": "l40s"},
                           out=str(tmp_path / "b"))
    assert table["error"].notna().sum() == 1 and "1 of 2 sweep runs failed" in capsys.readouterr().err


def test_the_sessions_workloads_own_source_runs_given_as_requests():
    """r147: a chat turn's ids run on over its answer (RequestSpec's doc; the next turn resends it), and
    simulate(requests=) refused the sessions workload's own source, and any source written as that doc says."""
    scenario = "docs/scenarios/chat-sessions.yaml"
    rs = servesim.resolve(scenario, {"workload.num_sessions": 4})
    given = servesim.simulate(scenario, requests=rs.scenario.workload.source(rs.scenario.seed, rs.max_model_len))
    own = servesim.simulate(scenario, {"workload.num_sessions": 4})
    assert own.summary["completed"] > 4 and given.requests.equals(own.requests)



def test_min_tokens_holds_the_models_stop_back():
    """r148: an answer the model ends before min_tokens stopped there; vLLM suppresses the stop until min_tokens
    (SamplingParams.min_tokens), up to the max_tokens sent (a max_tokens below it is refused, 400)."""
    specs = [servesim.RequestSpec(i, 0.1 * i, 100, 50, max_tokens=mt) for i, mt in enumerate((200, 120, 80, None))]
    plain = servesim.simulate(None, {"profile": "teaching"}, requests=specs).requests
    held = servesim.simulate(None, {"profile": "teaching", "workload.min_tokens": 120}, requests=specs).requests
    assert plain["output_tokens"].tolist() == [50] * 4 and set(plain["finish_reason"]) == {"stop"}
    assert held["output_tokens"].tolist() == [120, 120, 0, 120]
    assert held["finish_reason"].tolist() == ["stop", "length", "min_tokens_above_max_tokens", "stop"]


def test_round_149_api_misuse_is_named():
    """r149: tuple keys were TypeErrors (unhashable), bytes were read as text inside a scenario or an edited
    Scenario (refused in overrides), a source's dict of specs was taken (its keys) and an on_finish that is no
    method failed mid-run."""
    from servesim.workloads.source import RequestSource

    spec = servesim.RequestSpec(0, 0.0, 10, 5)

    class Keys(RequestSource):
        def initial(self):
            return {spec: "x"}

    class NoMethod(RequestSource):
        on_finish = 5

        def initial(self):
            return [spec]

    def edited():
        s = servesim.Scenario()
        s.policies.queue = b"priority"

    for call, says in [(lambda: servesim.simulate({("workload", "num_requests"): 5}), "a setting's name is text"),
                       (lambda: servesim.simulate({"model": b"qwen3-8b"}), "model: b'qwen3-8b' is bytes"),
                       (edited, "queue: b'priority' is bytes"),
                       (lambda: servesim.simulate(None, {"profile": "teaching"}, requests=Keys()),
                        "must return lists of RequestSpec, got dict"),
                       (lambda: servesim.simulate(None, {"profile": "teaching"}, requests=NoMethod()),
                        "on_finish must be a method")]:
        with pytest.raises(servesim.ConfigError, match=re.escape(says)):
            call()


def test_round_149_an_edited_summary_of_numpy_values_is_written_as_measured(tmp_path, capsys):
    """r149: a numpy count added to run.summary (or an array in run.config) was a TypeError (a ValueError) with
    config.yaml alone written; the edit is said and the run's own files written whole."""
    import numpy as np

    for edit in ("summary", "config"):
        run = servesim.simulate(None, {"workload.num_requests": 10, "profile": "teaching"})
        if edit == "summary":
            run.summary["slow"] = (run.requests["ttft"] > 0).sum()
        else:
            run.config["engine"]["max_num_seqs"] = np.array([8, 16])
        run.write(tmp_path / edit)
        assert f"RunResult.{edit} was edited after the run" in capsys.readouterr().err
        assert sorted(p.name for p in (tmp_path / edit).iterdir() if not p.name.startswith(".")) == \
            ["config.yaml", "requests.parquet", "steps.parquet", "summary.json"]
        assert json.loads((tmp_path / edit / "summary.json").read_text()) == \
            json.loads(json.dumps(servesim.simulate(None, {"workload.num_requests": 10,
                                                           "profile": "teaching"}).summary))


def test_an_open_ended_source_without_a_time_limit_is_said(capsys):
    """r149: a source with planned() None (open-ended) ran until simulated time ran out, nothing said up front."""
    from servesim.workloads.source import RequestSource

    class Ten(RequestSource):
        def initial(self):
            return [servesim.RequestSpec(0, 0.0, 10, 2)]

        def on_finish(self, spec, t, completed, idle=False):
            return [servesim.RequestSpec(spec.request_id + 1, t, 10, 2)] if spec.request_id < 9 else []

    assert servesim.simulate(None, {"profile": "teaching"}, requests=Ten()).summary["completed"] == 10
    assert "Ten.planned() is None (open-ended): the run goes on while it sends follow-ups" in capsys.readouterr().err
    servesim.simulate(None, {"profile": "teaching", "simulation.max_sim_time_s": 100}, requests=Ten())
    assert "open-ended" not in capsys.readouterr().err


def test_round_152_a_section_given_another_sections_object_is_refused():
    """r152: scenario.workload = Scenario().policies (a default object of another class) dumped as {} and ran the
    default 1,000-request workload, unsaid."""
    s = servesim.Scenario()
    s.workload = servesim.Scenario().policies
    with pytest.raises(servesim.ConfigError, match="^workload: a PolicySettings, where the section takes "):
        servesim.simulate(s)
    s = servesim.Scenario()
    s.engine = servesim.Scenario().policies
    with pytest.raises(servesim.ConfigError, match="^engine: a PolicySettings"):
        servesim.resolve(s)


def test_round_152_write_removes_an_earlier_runs_optional_files_and_names_what_it_does_not_take(tmp_path, capsys):
    """r152: run.write left an earlier CLI run's metrics.prom and prometheus.parquet (another run's numbers) and
    dropped them from the folder's record, so no later rerun removed them; write(prometheus=True) was a TypeError."""
    from servesim.simulator.cli import main

    assert main(["run", "--quiet", "--prometheus", "--set", "workload.num_requests=10", "--set", "profile=teaching",
                 "--out", str(tmp_path)]) == 0
    assert (tmp_path / "metrics.prom").is_file()
    servesim.simulate(None, {"workload.num_requests": 20, "profile": "teaching"}).write(tmp_path)
    assert not (tmp_path / "metrics.prom").exists() and not (tmp_path / "prometheus.parquet").exists()
    assert "removed metrics.prom, prometheus.parquet" in capsys.readouterr().err
    with pytest.raises(servesim.ConfigError, match="^write: takes no argument 'prometheus'"):
        servesim.simulate(None, {"workload.num_requests": 5, "profile": "teaching"}).write(tmp_path, prometheus=True)


def test_round_155_a_complex_number_is_no_setting_and_its_error_names_it():
    """r155: a numpy complex in a scenario mapping ran with its imaginary part dropped (numpy's warning leaking);
    inside a list given in overrides the error called the list "not a setting value"."""
    with pytest.raises(servesim.ConfigError, match=r"^workload.arrival.rate: .*a complex number is not a setting"):
        servesim.simulate({"workload": {"num_requests": 5, "arrival": {"rate": np.complex128(2 + 1j)}}})
    from servesim.simulator.config import override

    with pytest.raises(servesim.ConfigError, match="a complex is not a setting value"):
        override("engine.cudagraph_capture_sizes", [8, 2 + 1j])


def test_round_158_arrays_text_subclasses_and_units_are_taken_as_the_cli_takes_them(tmp_path):
    """r158: recommend's gpus=np.array([...]) was "must be a list" where grids take arrays; a str subclass (a
    StrEnum, np.str_) was "not a setting value (numbers, strings, ...)"; disagg=[(1, 1)] was split at its comma."""
    import enum

    from servesim.simulator.errors import ConfigError

    class Gpu(enum.StrEnum):
        H100 = "h100-sxm"

    for gpu in (Gpu.H100, np.str_("h100-sxm")):
        assert servesim.resolve(None, {"hardware.gpu": gpu}).hardware.name == "NVIDIA H100 SXM 80GB"
    with pytest.raises(ConfigError, match=r"^gpus: unknown GPU 'nope'"):  # read as a list, then checked
        servesim.recommend(None, {"ttft_p99_ms": 500}, rate=1, gpus=np.array(["nope", "a30"]), out=tmp_path / "r")
    with pytest.raises(ConfigError, match=r"^disagg: each unit is text, prefill:decode replicas \('1:2'\) or 'none'; "
                                          r"got \(1, 1\)"):
        servesim.recommend(None, {"ttft_p99_ms": 500}, rate=1, disagg=[(1, 1)], out=tmp_path / "r")


def test_round_160_an_answer_a_search_could_not_confirm_is_said_as_the_cli_says_it(capsys, monkeypatch):
    """r160: the API's max_rate and min_replicas returned a "not stable: ..." answer without a word, where `servesim
    search` warns that it is not confirmed (the searches' answers stood in for: their own tests find them)."""
    from servesim.simulator import search

    monkeypatch.setattr(search, "max_rate", lambda *a, **k: {"max_rate": 5.0, "reason": "not stable: 5 req/s ..."})
    monkeypatch.setattr(search, "min_replicas", lambda *a, **k: {"replicas": 2, "reason": "not steady: 2 ..."})
    sets = {"workload.num_requests": 10, "profile": "teaching"}
    r = servesim.max_rate(None, {"ttft_p99_ms": 300}, sets)
    assert f"servesim: warning: the max rate at 1 of 1 point(s) is not confirmed: {r['reason']}\n" in \
        capsys.readouterr().err
    r = servesim.min_replicas(None, {"ttft_p99_ms": 300}, sets, rate=30)
    assert f"servesim: warning: the replicas at 1 of 1 point(s) is not confirmed: {r['reason']}\n" in \
        capsys.readouterr().err


def test_round_160_a_source_is_told_idle_after_its_last_completion_too():
    """r160: on_finish's idle (nothing in flight or due) was only ever True after a rejection, so a source that
    sends its next wave once the last one is done never sent it."""
    class Waves(servesim.RequestSource):
        def __init__(self):
            self.sent, self.idle_at = 0, []

        def _wave(self, t):
            self.sent += 3
            return [RequestSpec(self.sent - 3 + i, t, 20, 5) for i in range(3)]

        def initial(self):
            return self._wave(0.0)

        def on_finish(self, spec, t, completed, idle=False):
            self.idle_at.append(idle)
            return self._wave(t) if idle and self.sent < 9 else []

        def planned(self):
            return 9

    source = Waves()
    run = servesim.simulate(None, {"profile": "teaching"}, requests=source)
    assert run.summary["completed"] == 9 and source.idle_at == [False, False, True] * 3
    assert (run.requests["arrival_time"].to_numpy()[3:] > 0).all()


def test_round_160_a_scenarios_own_workload_settings_beside_requests_are_said_to_have_no_effect(capsys):
    """r160: a Scenario object's (or a mapping's) workload.max_concurrency beside requests= ran 6 at once, unsaid,
    where the same key in overrides was said to have no effect."""
    specs = [RequestSpec(i, 0.0, 20, 5) for i in range(6)]
    s = servesim.Scenario()
    s.workload.max_concurrency = 1
    s.workload.arrival.rate = 3
    assert servesim.simulate(s, {"profile": "teaching"}, requests=specs).summary["max_concurrent_requests"] == 6
    err = capsys.readouterr().err
    for key in ("workload.max_concurrency", "workload.arrival.rate"):
        assert f"servesim: warning: {key} has no effect: requests= replaces the scenario's workload" in err
    servesim.simulate({"workload": {"max_concurrency": 1}, "profile": "teaching"}, requests=specs)
    assert "warning: workload.max_concurrency has no effect: requests=" in capsys.readouterr().err
    servesim.simulate(servesim.Scenario(), {"profile": "teaching"}, requests=specs)  # its defaults: nothing given
    servesim.simulate({"workload": {"min_tokens": 2}, "profile": "teaching"}, requests=specs)  # read beside them
    assert "no effect" not in capsys.readouterr().err


def test_round_160_a_deleted_setting_is_an_error_naming_it(tmp_path):
    """r160: `del s.seed` (or a section, or a value inside one) on a Scenario was an AttributeError from inside;
    it is a ConfigError naming the setting (not read as unset: assign the default again for that)."""
    for path in ("seed", "workload", "workload.arrival.rate", "engine.max_num_seqs"):
        s = servesim.Scenario()
        *head, last = path.split(".")
        section = s
        for name in head:
            section = getattr(section, name)
        delattr(section, last)
        for call in (lambda: servesim.resolve(s), lambda: servesim.simulate(s),
                     lambda: servesim.sweep(s, {"seed": [1]}, out=tmp_path / "sw")):
            with pytest.raises(servesim.ConfigError, match=rf"^{re.escape(path)}: was deleted \(del\)"):
                call()


def test_round_160_write_without_its_folder_or_with_more_is_an_error_naming_out_dir(tmp_path):
    """r160: write(out=...), write(outdir=...), write() and write(folder, "a", "b") were TypeErrors."""
    run = servesim.simulate(None, {"workload.num_requests": 3, "profile": "teaching"})
    for call, message in ((lambda: run.write(out=tmp_path), r"^write: takes no argument 'out' \(it takes out_dir"),
                          (lambda: run.write(outdir=tmp_path), r"^write: takes no argument 'outdir' \(it takes out_dir"),
                          (lambda: run.write(), r"^out_dir: missing: the folder to write the run into"),
                          (lambda: run.write(tmp_path, "a", "b"), r"^write: takes one argument, out_dir \(the folder\), "
                                                                  r"got 3")):
        with pytest.raises(servesim.ConfigError, match=message):
            call()
    assert not any(tmp_path.iterdir())
    assert run.write(tmp_path) == tmp_path and (tmp_path / "summary.json").is_file()


def test_round_160_model_validate_is_checked_as_the_constructor_is():
    """r160: Scenario.model_validate raised pydantic's ValidationError where Scenario(...) raises ConfigError (it
    does not go through __init__)."""
    for data, message in (({"engine": {"max_num_seqs": 0}}, r"^engine\.max_num_seqs: Input should be greater"),
                          ({"sede": 1}, r"^sede: unknown setting")):
        with pytest.raises(servesim.ConfigError, match=message):
            servesim.Scenario.model_validate(data)
        with pytest.raises(servesim.ConfigError, match=message):
            servesim.Scenario(**data)
    assert servesim.Scenario.model_validate({"seed": 3}).seed == 3


def test_round_160_model_copy_refuses_a_key_no_setting_has():
    """r160: s.model_copy(update={"sede": 7}) (and a section's) dropped the unknown key unsaid."""
    s = servesim.Scenario()
    with pytest.raises(servesim.ConfigError, match=r"^sede: unknown setting of Scenario \(one of name, seed,"):
        s.model_copy(update={"sede": 7})
    with pytest.raises(servesim.ConfigError, match=r"^max_num_seqz: unknown setting of EngineSettings"):
        s.engine.model_copy(update={"max_num_seqz": 1})
    assert s.model_copy(update={"seed": 7}).seed == 7
    assert s.engine.model_copy(update={"max_num_seqs": 4}).max_num_seqs == 4


def test_round_160_itl_distribution_holds_every_finished_requests_gaps_and_says_so():
    """r160: itl_distribution's docstring said it is what the summary reads; under a warm-up window the summary
    reads only the measured requests' gaps, while it holds every finished request's."""
    run = servesim.simulate(None, {"workload.num_requests": 20, "profile": "teaching",
                                   "simulation.warmup_requests": 10})
    values, counts = run.itl_distribution
    finished = run.requests[run.requests["status"] == "finished"]
    assert counts.sum() == (finished["output_tokens"] - 1).clip(lower=0).sum() == len(run.itls)
    assert not math.isclose(run.summary["mean_itl_ms"], float((values * counts).sum() / counts.sum()) * 1000)
    doc = " ".join(type(run).itl_distribution.__doc__.split())
    assert doc.startswith("Every finished request's ITLs") and "only the measured requests' gaps" in doc


def test_round_160_resolve_refuses_a_trace_file_config_refuses(tmp_path, capsys):
    """r160: resolve of a scenario whose trace file is missing returned a ResolvedScenario (simulate then failed),
    where `servesim config` refuses it at once."""
    missing = tmp_path / "nope.jsonl"
    data = {"workload": {"type": "trace", "path": str(missing)}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    assert main(["config", str(tmp_path / "s.yaml")]) != 0
    said = capsys.readouterr().err.strip().removeprefix("servesim: error: ")
    assert said.endswith(f"{missing}: no such file")
    for scenario in (data, str(tmp_path / "s.yaml")):
        with pytest.raises(servesim.ConfigError) as exc:
            servesim.resolve(scenario)
        assert said.endswith(str(exc.value.message)) and said.startswith(exc.value.field)
    missing.write_text(json.dumps({"timestamp": 0, "input_length": 20, "output_length": 5}) + "\n")
    assert servesim.resolve(data).scenario.workload.path == str(missing)


def test_round_160_recommend_says_when_no_candidate_meets_the_slos(tmp_path, capsys):
    """r160: the CLI says "no candidate carries ..." (exit 1); the API's recommend said nothing."""
    table = servesim.recommend(None, {"ttft_p99_ms": 0.001}, {"workload.num_requests": 10}, rate=1,
                               gpus=["h100-sxm"], tp=[1], out=tmp_path / "r")
    assert not (table["status"] == "meets").any()
    assert (f"servesim: warning: no candidate carries 1 req/s within the SLOs (column `reason` of {tmp_path / 'r'}"
            f"/recommend.csv)") in capsys.readouterr().err


def test_round_160_an_api_error_names_the_arguments_not_the_cli_flags(tmp_path):
    """r160: sweep's error named its grid argument, but its message the CLI's --set (the API's overrides)."""
    with pytest.raises(servesim.ConfigError, match=r"^grid: workload.arrival.rate is also given by overrides, "
                                                   r"which would be overridden"):
        servesim.sweep(None, {"workload.arrival.rate": [5]}, {"workload.arrival.rate": 7, "workload.num_requests": 5},
                       out=tmp_path / "sw")


def test_round_160_prefix_ids_may_be_a_1d_integer_array():
    """r160: RequestSpec(..., prefix_ids=np.array([1, 2])) was refused, where numpy's values are taken elsewhere."""
    given = [RequestSpec(0, 0.0, 128, 5, prefix_ids=np.array([1, 2]), prefix_block_tokens=64),
             RequestSpec(1, 0.1, 128, 5, prefix_ids=np.array([1, 2], dtype=np.uint32), prefix_block_tokens=64)]
    as_tuples = [RequestSpec(0, 0.0, 128, 5, prefix_ids=(1, 2), prefix_block_tokens=64),
                 RequestSpec(1, 0.1, 128, 5, prefix_ids=(1, 2), prefix_block_tokens=64)]
    run = servesim.simulate(None, {"profile": "teaching"}, requests=given)
    assert run.summary == servesim.simulate(None, {"profile": "teaching"}, requests=as_tuples).summary
    assert run.summary["prefix_cache_hits"] > 0
    for ids in (np.array([1.0, 2.0]), np.array([[1, 2]])):  # not integers, not one row: refused by name
        with pytest.raises(servesim.ConfigError, match=r"^requests\[0\]\.prefix_ids: must be a tuple of integer"):
            servesim.simulate(None, requests=[RequestSpec(0, 0.0, 128, 5, prefix_ids=ids, prefix_block_tokens=64)])


def test_round_161_the_api_says_what_the_cli_says_whatever_form_the_scenario_takes(tmp_path, capsys):
    """r161: a YAML path's or a ResolvedScenario's workload settings beside requests= were dropped unsaid (a mapping's
    and a Scenario object's were said); a search finding no answer said nothing (the CLI's error says why); an
    integer past str()'s 4,300 digits was a ValueError."""
    from servesim.simulator.errors import ConfigError

    path = tmp_path / "w.yaml"
    path.write_text("workload:\n  num_requests: 50\n  max_concurrency: 4\n")
    specs = [servesim.RequestSpec(i, 0.0, 100, 5) for i in range(3)]
    for scenario in (str(path), servesim.resolve(str(path))):
        capsys.readouterr()
        servesim.simulate(scenario, requests=specs)
        assert "workload.max_concurrency has no effect: requests= replaces" in capsys.readouterr().err
    r = servesim.max_rate(None, {"ttft_p99_ms": 0.001}, {"workload.num_requests": 5, "profile": "teaching"})
    assert r["max_rate"] is None and f"no max rate found: {r['reason']}" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="max_runs: must be at most"):
        servesim.max_rate(None, {"ttft_p99_ms": 500}, max_runs=10**5000)


def test_round_161_a_scenario_from_json_is_checked_as_from_a_mapping():
    """r161: model_validate_json and model_validate_strings raised pydantic's ValidationError (r160 fixed
    model_validate alone)."""
    from servesim.simulator.config import Scenario
    from servesim.simulator.errors import ConfigError

    assert Scenario.model_validate_json('{"seed": 3}').seed == 3
    for call, says in ((lambda: Scenario.model_validate_json('{"seed": -1}'), "^seed: "),
                       (lambda: Scenario.model_validate_json("{bad"), "^scenario: not JSON"),
                       (lambda: Scenario.model_validate_strings({"seed": "3"}), "^scenario: .*is not taken")):
        with pytest.raises(ConfigError, match=says):
            call()
