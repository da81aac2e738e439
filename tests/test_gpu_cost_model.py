"""The GPU cost model: the right profile for every deployment, the importer's units, overhead, KV dtype, async."""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from servesim.calibration.grid import GridPoint
from servesim.simulator.batch import BatchShape
from servesim.simulator.config import load
from servesim.simulator.cost_model import LinearCoefficients, LinearCostModel, Overhead, OverheadCostModel
from servesim.simulator.errors import ConfigError
from servesim.simulator.hardware import load_hardware
from servesim.simulator.model_arch import load_model

TABLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "gpu" / "aiconfigurator"
SERVING = Path(__file__).resolve().parents[2] / "shared" / "data" / "serving"
needs_tables = pytest.mark.skipif(not TABLES.is_dir(), reason=f"kernel tables not found at {TABLES}")
needs_serving = pytest.mark.skipif(not SERVING.is_dir(), reason=f"serving runs not found at {SERVING}")
DECODE_128 = GridPoint("decode", 128, 0, 4096).shape


@needs_tables
def test_allreduce_tables_count_elements_and_the_importer_passes_elements():
    from servesim.calibration.aiconfigurator import KernelTables, compose_step_ms

    # the unit, from the data: NCCL's fp16 all-reduce of n elements takes as long as its int8 one of 2n (same bytes)
    n = pd.read_parquet(TABLES / "h100_sxm/comm/nccl/2.29.2/nccl_perf.parquet")
    ar = n[(n.op_name == "all_reduce") & (n.num_gpus == 8)].pivot_table(index="message_size", columns="nccl_dtype",
                                                                         values="latency")
    big = ar.index[(ar.index >= 2**22) & (ar.index * 2 <= ar.index.max())]
    same_bytes = ar.loc[big, "half"].to_numpy() / ar.loc[big * 2, "int8"].to_numpy()
    same_count = ar.loc[big, "half"].to_numpy() / ar.loc[big, "int8"].to_numpy()
    assert np.all(np.abs(same_bytes - 1) < 0.25) and np.median(same_count) > 1.5, (same_bytes, same_count)
    t = KernelTables(TABLES, "h100_sxm")
    a = t.t["allreduce"]
    row = a[(a.num_gpus == 4) & (a.backend == "vllm_graph") & (a.message_size == 2**20)].iloc[0]
    assert t.allreduce_ms(2**20, 4) == pytest.approx(row.latency)
    arch = load_model("llama-3.1-70b")
    pt = GridPoint("decode", 256, 0, 1024)
    step = compose_step_ms(t, arch, pt, "bf16", 4)
    assert step["allreduce_ms"] == pytest.approx(arch.num_hidden_layers * 2 * t.allreduce_ms(256 * arch.hidden_size, 4))


@needs_tables
def test_each_gpu_uses_its_newest_tables_and_older_collections_load():
    from servesim.calibration.aiconfigurator import KernelTables

    assert KernelTables(TABLES, "l40s").versions == {"gemm": "0.24.0", "context": "0.24.0", "generation": "0.24.0",
                                                     "allreduce": "0.22.0"}
    a100 = KernelTables(TABLES, "a100_sxm")  # vLLM 0.14 tables: no window_size column, vllm_default GEMMs
    assert a100.gemm_ms(1, 4096, 4096, "bf16") > 0
    with pytest.raises(ConfigError, match="fp8 GEMM"):
        a100.gemm_ms(1, 4096, 4096, "fp8")


def test_default_scenario_takes_the_built_in_profile_and_says_so(tmp_path):
    rs = load(None, ["workload.num_requests=5"])
    assert rs.profile.name == "h200-llama-3.1-8b-bf16-tp1" and rs.profile.gpu == "h200-sxm"
    assert rs.cost_model_source == "built-in profile h200-llama-3.1-8b-bf16-tp1"
    from servesim.simulator.engine import simulate

    s = simulate(rs, rs.scenario.workload.source(0, rs.max_model_len)).summary
    assert s["cost_model_source"] == rs.cost_model_source


@pytest.mark.parametrize("gpu,short", [("h100-sxm", "h100"), ("a100-80gb", "a100"), ("l40s", "l40s"),
                                       ("b200-sxm", "b200"), ("rtx-pro-6000", "rtxpro6000")])
def test_setting_another_gpu_changes_the_step_times(gpu, short):
    """hardware.gpu=h100-sxm used to keep the H200's step times silently."""
    rs = load(None, [f"hardware.gpu={gpu}", "engine.max_model_len=8192"])
    assert rs.profile.name == f"{short}-llama-3.1-8b-bf16-tp1"
    h200 = load(None, ["engine.max_model_len=8192"])
    assert rs.cost_model.step_time(DECODE_128) != h200.cost_model.step_time(DECODE_128)


def test_decode_time_follows_memory_bandwidth_across_gpus():
    """Batch-1 decode reads every weight: the faster the memory, the faster the step."""
    times = [load(None, [f"hardware.gpu={g}", "engine.max_model_len=8192"]).cost_model.step_time(
        GridPoint("decode", 1, 0, 1024).shape) for g in ("b200-sxm", "h200-sxm", "h100-sxm", "a100-80gb", "l40s")]
    assert times == sorted(times), times


@needs_tables
def test_a_deployment_without_a_built_in_profile_is_composed_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    sets = ["model=qwen3-8b", "hardware.gpu=gb200", "engine.tensor_parallel_size=2"]
    rs = load(None, sets)
    assert rs.cost_model_source.startswith("composed from the gb200 kernel tables")
    cached = list((tmp_path / "profiles").glob("gb200-qwen3-8b-bf16-kvbf16-tp2-*.yaml"))
    assert len(cached) == 1 and rs.profile.gpu == "gb200" and rs.profile.overhead is not None
    mtime = cached[0].stat().st_mtime_ns
    again = load(None, sets)
    assert cached[0].stat().st_mtime_ns == mtime  # read back, not rebuilt
    assert again.cost_model.step_time(DECODE_128) == rs.cost_model.step_time(DECODE_128)
    cached[0].write_text("not: [a profile")  # a damaged cache entry is rebuilt
    assert load(None, sets).cost_model.step_time(DECODE_128) == rs.cost_model.step_time(DECODE_128)


@needs_tables
@pytest.mark.parametrize("sets,field,hint", [
    (["hardware.gpu=a100-80gb", "engine.kv_cache_dtype=fp8"], "engine.kv_cache_dtype", "measured: bf16"),
    (["hardware.gpu=b200-sxm", "model=llama-3.1-70b", "engine.tensor_parallel_size=16"],
     "engine.tensor_parallel_size", "measured: 2, 4, 8"),
])
def test_what_the_tables_do_not_cover_is_refused_with_what_would_work(tmp_path, monkeypatch, sets, field, hint):
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as e:
        load(None, sets + ["engine.max_model_len=8192"])
    assert e.value.field == field and hint in e.value.message


def test_a_gpu_without_tables_falls_back_to_the_roofline_with_a_warning(capsys):
    rs = load(None, ["hardware.gpu=l4", "engine.max_model_len=4096"])
    assert rs.cost_model_source.startswith("roofline fallback (l4 has no measured kernel tables")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("servesim: warning: l4 has no measured kernel tables")


def test_missing_tables_fall_back_to_the_roofline_naming_where_they_were_looked_for(monkeypatch, capsys):
    monkeypatch.setenv("SERVESIM_KERNEL_TABLES", "/nonexistent/tables")
    rs = load(None, ["hardware.gpu=gb300", "engine.max_model_len=8192"])
    assert "/nonexistent/tables/gb300" in rs.cost_model_source
    assert "warning" in capsys.readouterr().err


def test_weights_that_do_not_fit_name_the_tensor_parallel_size_that_would():
    with pytest.raises(ConfigError) as e:
        load(None, ["model=llama-3.1-70b", "hardware.gpu=h100-sxm"])
    assert e.value.field == "engine.tensor_parallel_size" and "tensor_parallel_size=2 holds the weights" in e.value.message
    assert load(None, ["model=llama-3.1-70b", "hardware.gpu=h100-sxm", "engine.tensor_parallel_size=4",
                       "engine.max_model_len=8192"]).profile.name == "h100-llama-3.1-70b-bf16-tp4"
    # the TP named leaves room for vLLM's start-up profile too: on 72 GiB, TP 2's 65.7 GiB of weights fit the 66.2
    # usable but its 3.3 GiB profile does not (the advice said TP 2, which then had no memory for the KV cache)
    small = ["model=llama-3.1-70b", "hardware.gpu=h100-sxm", "hardware.memory_gib=72"]
    with pytest.raises(ConfigError, match="tensor_parallel_size=4 holds the weights and vLLM's start-up profile"):
        load(None, small)
    with pytest.raises(ConfigError, match="no memory left for the KV cache"):
        load(None, small + ["engine.tensor_parallel_size=2"])
    load(None, small + ["engine.tensor_parallel_size=4", "engine.max_model_len=8192"])


def test_fp8_kv_cache_halves_kv_bytes_doubles_the_pool_and_speeds_long_decodes():
    bf16 = load(None, ["engine.quantization=fp8"])
    fp8 = load(None, ["engine.quantization=fp8", "engine.kv_cache_dtype=fp8"])
    assert fp8.arch.kv_bytes_per_token * 2 == bf16.arch.kv_bytes_per_token
    assert fp8.num_gpu_blocks == pytest.approx(2 * bf16.num_gpu_blocks, rel=1e-4)
    assert (bf16.profile.name, fp8.profile.name) == ("h200-llama-3.1-8b-fp8-tp1", "h200-llama-3.1-8b-fp8-kvfp8-tp1")
    assert fp8.cost_model.step_time(DECODE_128) < 0.9 * bf16.cost_model.step_time(DECODE_128)


def _overhead_model(async_scheduling: bool, graph_tokens: int = 512):
    kernels = LinearCostModel(LinearCoefficients(step_overhead_ms=1.0, per_token_ms=0.01))
    o = Overhead(gpu_per_layer_us=10, gpu_per_token_per_layer_ns=100, gpu_per_seq_us=2, eager_per_layer_us=500,
                 host_per_step_ms=0.5, host_per_seq_us=20)
    arch = load_model("llama-3.1-8b")  # 32 layers, hidden 4096
    hw = load_hardware("h100-sxm")  # 3350 GB/s: the per-token term's reference, no rescaling
    return OverheadCostModel(kernels, o, arch, hw, graph_tokens, async_scheduling)


def test_overhead_terms_add_up_and_async_scheduling_hides_the_host():
    shape = BatchShape(8, 0, 0, 8, 8000)  # a decode of 8 sequences
    kernel, other, host = _overhead_model(False).parts(shape)
    assert kernel == pytest.approx(1.0e-3 + 8 * 0.01e-3)
    from servesim.simulator.cost_model import activation_traffic

    # Llama-3.1-8B against the reference (Llama-2-7B): same hidden, 40 of 64 rotary heads, 14336 / 11008 MLP
    traffic = activation_traffic(arch := load_model("llama-3.1-8b"))
    assert traffic == pytest.approx((134 + 84 * 40 / 64 + 139 * 14336 / 11008) / 357)
    assert activation_traffic(arch, 4) < traffic  # rotary and activation split over the TP group, norms do not
    assert other == pytest.approx(32 * 10e-6 + 32 * 100e-9 * traffic * 8 + 8 * 2e-6)
    assert host == pytest.approx(0.5e-3 + 8 * 20e-6)
    assert _overhead_model(False).step_time(shape) == pytest.approx(kernel + other + host)
    assert _overhead_model(True).step_time(shape) == pytest.approx(kernel + other)  # the host overlaps the GPU
    tiny = LinearCostModel(LinearCoefficients(step_overhead_ms=0.01))
    m = OverheadCostModel(tiny, Overhead(host_per_step_ms=2.0), load_model("llama-3.1-8b"), load_hardware("h100-sxm"),
                          512, True)
    assert m.step_time(shape) == pytest.approx(2e-3)  # a GPU faster than the CPU waits for it


def test_a_step_beyond_the_largest_cuda_graph_pays_for_eager_launches():
    small, big = BatchShape(1, 512, 0, 0, 0), BatchShape(1, 513, 0, 0, 0)
    m = _overhead_model(True, graph_tokens=512)
    gpu = lambda s: sum(m.parts(s)[:2])  # noqa: E731
    from servesim.simulator.cost_model import activation_traffic

    per_token = 32 * 100e-9 * activation_traffic(load_model("llama-3.1-8b"))
    assert gpu(big) - gpu(small) == pytest.approx(32 * 500e-6 + 0.01e-3 + per_token)
    eager = load(None, ["engine.enforce_eager=true"])
    graphs = load(None, [])
    assert eager.cudagraph_max_tokens == 0 and graphs.cudagraph_max_tokens == 512  # min(2 x 1024, 512)
    one = BatchShape(1, 0, 0, 1, 100)
    assert eager.cost_model.step_time(one) > graphs.cost_model.step_time(one)


def test_async_scheduling_is_vllms_default_and_written_to_the_resolved_config():
    rs = load(None, [])
    d = rs.as_dict()
    assert rs.async_scheduling and d["engine"]["async_scheduling"] is True
    assert d["engine"]["max_cudagraph_capture_size"] == 512
    sync = load(None, ["engine.async_scheduling=false"])
    assert sync.cost_model.step_time(DECODE_128) > rs.cost_model.step_time(DECODE_128)


def test_closed_loop_clients_can_start_over_a_window():
    from servesim.simulator.engine import simulate

    sets = ["profile=teaching", "workload.num_requests=64", "workload.prompt_tokens={dist: fixed, value: 200}",
            "workload.output_tokens={dist: fixed, value: 50}"]
    at_once = load(None, sets + ["workload.arrival={process: closed_loop, concurrency: 16}"])
    ramped = load(None, sets + ["workload.arrival={process: closed_loop, concurrency: 16, ramp_up_s: 4}"])
    first = sorted(s.arrival_time for s in ramped.scenario.workload.source(0, ramped.max_model_len).initial())
    assert first == pytest.approx([i * 0.25 for i in range(16)])
    assert all(s.arrival_time == 0 for s in at_once.scenario.workload.source(0, 8192).initial())
    a = simulate(at_once, at_once.scenario.workload.source(0, at_once.max_model_len)).summary
    b = simulate(ramped, ramped.scenario.workload.source(0, ramped.max_model_len)).summary
    assert b["completed"] == a["completed"] == 64
    assert b["mean_ttft_ms"] < a["mean_ttft_ms"]  # not all 16 prompts queue behind each other


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_request_rate_ramps_as_vllm_bench(strategy):
    rs = load(None, ["workload.num_requests=2000",
                     f"workload.arrival={{process: poisson, ramp_up_strategy: {strategy}, ramp_up_start_rps: 1, "
                     f"ramp_up_end_rps: 50}}"])
    t = np.array([s.arrival_time for s in rs.scenario.workload.source(0, rs.max_model_len).initial()])
    gaps = np.diff(t)
    assert t[0] > 0 and np.all(gaps >= 0)  # vLLM's client waits a gap before the first request too (round 68)
    assert gaps[:200].mean() > 3 * gaps[-200:].mean()  # slow start, fast end
    assert 1 / gaps[-200:].mean() == pytest.approx(50, rel=0.25)


@pytest.mark.parametrize("arrival,msg", [
    ("{process: poisson, rate: 2, ramp_up_s: 3}", "ramp_up_s applies to closed_loop"),
    ("{process: poisson, ramp_up_strategy: linear, ramp_up_start_rps: 1}", "needs ramp_up_start_rps and ramp_up_end_rps"),
    ("{process: poisson, ramp_up_strategy: exponential, ramp_up_start_rps: 0, ramp_up_end_rps: 5}", "start_rps > 0"),
    ("{process: poisson, ramp_up_strategy: linear, ramp_up_start_rps: 0, ramp_up_end_rps: 5}", "start_rps > 0"),
    ("{process: poisson, ramp_up_strategy: linear, ramp_up_start_rps: 5, ramp_up_end_rps: 1}",
     "ramp_up_start_rps \\(5\\) above ramp_up_end_rps \\(1\\): a ramp goes up"),  # r173: a ramp down ran
    ("{process: onoff, rate: 1, on_s: 1, off_s: 1, ramp_up_strategy: linear, ramp_up_start_rps: 1, "
     "ramp_up_end_rps: 5}", "poisson, gamma and constant"),  # (r172: a constant ramp is vLLM's burstiness inf)
])
def test_bad_ramps_are_refused(arrival, msg):
    with pytest.raises(ConfigError, match=msg):
        load(None, [f"workload.arrival={arrival}"])


@needs_serving
def test_leave_one_out_names_its_own_input_when_a_run_repeats_another(tmp_path, capsys):
    """A copy of a run among --data was refused as "--held-out: ...", a flag validate serving lacks (round 73);
    without --leave-one-out it was taken, every error band holding its error twice (r147)."""
    import shutil

    from servesim.simulator.cli import main

    run = SERVING / "llmservingsim-vllm-0.19" / "RTXPRO6000" / "Llama-3.1-8B"
    for name in ("Llama-3.1-8B", "Llama-copy"):
        shutil.copytree(run, tmp_path / "data" / "RTXPRO6000" / name)
    for loo in (["--leave-one-out"], []):
        assert main(["validate", "serving", "--data", str(tmp_path / "data"), *loo, "--out",
                     str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == "servesim: error: --data: RTXPRO6000/Llama-copy holds the same records as " \
                      "RTXPRO6000/Llama-3.1-8B: a copy of one run would count twice in the error bands; give each " \
                      "run once", err


@needs_serving
def test_settings_a_run_cannot_take_name_the_run(tmp_path):
    """r129: a --set profile of one GPU failed on another GPU's run without naming which run."""
    from servesim.calibration.serving_fidelity import validate_serving

    with pytest.raises(ConfigError, match=r"measured on rtx-pro-6000, but hardware.gpu is rtx-4090 .*\(run "
                                          r"llmservingsim-vllm-0.19/RTX4090/Llama-3.1-8B\)$"):
        validate_serving(SERVING, tmp_path / "out", ["profile=rtxpro6000-llama-3.1-8b-bf16-tp1"])


@needs_serving
def test_a_run_recording_no_gpu_takes_the_one_set_and_says_how_to_give_it(tmp_path, capsys):
    """r129: a public run copied under a folder that names no GPU was said to have "no built-in GPU or model for
    <folder>", and `--set hardware.gpu` (applied to every run) was ignored."""
    import shutil

    from servesim.calibration.serving_fidelity import load_runs

    shutil.copytree(SERVING / "llmservingsim-vllm-0.19" / "RTXPRO6000" / "Llama-3.1-8B", tmp_path / "data" / "a")
    with pytest.raises(ConfigError, match=r"a: its meta.json records no GPU and its folder's parent \(data\) names "
                                          r"none of RTX4090, RTXPRO6000: give --set hardware.gpu=NAME"):
        load_runs(tmp_path / "data")
    runs, skipped = load_runs(tmp_path / "data", ["hardware.gpu=rtx-pro-6000"])
    assert len(runs) == 1 and not skipped and not any(s.startswith("hardware.gpu") for s in runs[0].sets)


@needs_serving
@needs_tables
def test_public_gpu_runs_are_simulated_from_kernel_tables_and_reported(tmp_path, monkeypatch, capsys):
    from servesim.calibration.serving_fidelity import validate_serving

    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path / "cache"))
    capsys.readouterr()
    table, runs = validate_serving(SERVING, tmp_path / "out", command=["validate", "serving"])
    # the kernel-only variant's profile has no overhead terms: said of the user's run, it contradicted the line
    # saying the run's roofline adds the default overhead (round 72)
    assert "has no overhead terms" not in capsys.readouterr().err
    by = {r["run"].split("/", 1)[1]: r for r in runs}
    moe = by["RTXPRO6000/Qwen3-30B-A3B-Instruct-2507"]  # DP 2 x EP 2, as the run's engine arguments say
    assert moe["cost_model_source"].startswith("composed from the rtx_pro_6000_server kernel tables")
    assert "-dp2-ep2-" in moe["cost_model_source"]
    assert {"engine.data_parallel_size=2", "engine.enable_expert_parallel=true"} <= set(moe["settings"])
    assert not any(s.startswith("cluster.router=") for s in moe["settings"])  # vLLM's own balancer, vllm_dp
    assert by["RTXPRO6000/Llama-3.1-8B"]["cost_model_source"] == "built-in profile rtxpro6000-llama-3.1-8b-bf16-tp1"
    assert by["RTX4090/Llama-3.1-8B"]["cost_model_source"].startswith("roofline fallback")
    t = table.set_index(["run", "metric"])["error"]
    # fitted on none of these runs: the dense 8B on a GPU with kernel tables lands within 20% on TPOT
    assert abs(t["llmservingsim-vllm-0.19/RTXPRO6000/Llama-3.1-8B", "TPOT mean (ms)"]) < 0.2
    assert len(table) == 4 * (5 * 4 + 2) and table["error"].notna().all()  # 5 latencies x mean/p50/p90/p99, 2 rates
    # the overhead terms lengthen every step: kernel time alone predicts shorter TPOTs
    tpot = table[table["metric"] == "TPOT mean (ms)"]
    assert (tpot["sim_kernels_only"] < tpot["sim"]).all()
    out = tmp_path / "out"
    assert json.loads((out / "summary.json").read_text())["runs"]
    assert [by[k]["cost_model_kind"] for k in ("RTXPRO6000/Llama-3.1-8B", "RTX4090/Llama-3.1-8B")] == \
        ["kernel tables", "roofline"]
    # each kind's band, as recommend reads it: the shipped one is this, from the committed results
    bands = yaml.safe_load((out / "bands.yaml").read_text())["bands"]
    assert bands["roofline"]["runs"] == ["llmservingsim-vllm-0.19/RTX4090/Llama-3.1-8B"]
    assert bands["kernel tables"]["tpot_mean"][0] == round(float(tpot[tpot.run.str.contains("RTXPRO")].error.min()), 4)
    assert (out / "cdf-llmservingsim-vllm-0.19-RTXPRO6000-Llama-3.1-8B.png").is_file()
    assert (out / "timeline-llmservingsim-vllm-0.19-RTXPRO6000-Qwen3-32B.png").is_file()
    assert "cdf-llmservingsim-vllm-0.19-RTXPRO6000-Llama-3.1-8B.png" in by["RTXPRO6000/Llama-3.1-8B"]["plots"]


def test_each_runs_plots_have_a_name_of_their_own(tmp_path):
    """r116: runs a/b and a-b wrote one cdf-a-b.png, the second over the first; a root that is itself the run
    wrote cdf-..png."""
    from servesim.calibration.serving_fidelity import plot_stems

    assert plot_stems(["a/b/X", "a-b/X", "a-b-X-2"], tmp_path) == ["a-b-X", "a-b-X-2", "a-b-X-2-2"]
    assert plot_stems(["."], tmp_path / "Llama-3.1-8B") == ["Llama-3.1-8B"]


@needs_serving
@needs_tables
def test_leave_one_run_out_fits_on_the_other_runs_only(tmp_path, monkeypatch):
    from servesim.calibration.serving_fidelity import validate_serving

    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path / "cache"))
    table, runs = validate_serving(SERVING, tmp_path / "out", leave_one_out=True, terms=["gpu_per_layer_us"],
                                   max_evals=4)
    done = [r for r in runs if "leave_one_out" in r]
    assert len(done) == 4
    for r in done:
        assert r["run"] not in r["leave_one_out"]["fitted_on"] and len(r["leave_one_out"]["fitted_on"]) == 3
    assert table["error_fitted"].notna().all()
    # each fold fitted its term (it moved off the default 18 us) and was scored with it: the predicted run's
    # fitted error differs from its error at the default terms
    assert all(r["leave_one_out"]["terms"]["gpu_per_layer_us"] != 18.0 for r in done)
    assert (table["error_fitted"] != table["error"]).any()


LAYERS = Path(__file__).resolve().parents[2] / "shared" / "data" / "gpu" / "layer-profiles"


@needs_tables
@pytest.mark.skipif(not LAYERS.is_dir(), reason=f"layer profiles not found at {LAYERS}")
def test_kernel_tables_match_measured_per_operator_gemms_and_the_gap_is_the_rest(tmp_path):
    from servesim.calibration.layer_check import check_layers

    t = check_layers(LAYERS, TABLES, tmp_path)
    assert set(t["tp"]) == {2, 4} and len(t) == 10 and (tmp_path / "table.csv").is_file()
    assert (t["gemm_error"].abs() < 0.15).all()  # the same four GEMMs: table and profiler agree
    # kernel tables alone leave out most of a small step; the overhead terms put part of it back
    assert (t["with_overhead_error"] > t["kernels_only_error"]).all()
    assert (t["other_ratio"] > 1).all()  # the profiled model's unfused eager norms cost more than vLLM's fused ones


@needs_tables
@pytest.mark.skipif(not LAYERS.is_dir(), reason=f"layer profiles not found at {LAYERS}")
def test_mixtral_experts_match_the_gemm_tables_and_the_fused_layer_is_compared_at_balanced_routing(tmp_path):
    from servesim.calibration.layer_check import check_moe_layers

    t = check_moe_layers(LAYERS, TABLES, tmp_path)
    assert list(t["bucket"]) == ["1", "2-8", "9-64", "65-512", "513-2048"] and (tmp_path / "moe-table.csv").is_file()
    assert (t["expert_gemm_error"].abs() < 0.10).all()  # one expert's GEMMs: two measurements agree
    assert (t["moe_layer_error"].abs() < 0.35).all()  # the fused kernel against the per-expert loop, reported
    per = pd.read_csv(tmp_path / "moe-per-token-count.csv").set_index("tokens")
    # one token reaches 2 of the 8 experts: the per-expert reconstruction is the router plus 2 experts
    assert per.loc[1, "measured_moe_ms"] > 2 * per.loc[1, "measured_expert_gemm_ms"]
    assert per.loc[2048, "measured_moe_ms"] < 8 * per.loc[2048, "measured_expert_gemm_ms"]  # 512 tokens each


@needs_tables
def test_nvfp4_on_blackwell_is_composed_from_its_tables_and_awq_falls_back_with_a_warning(tmp_path, monkeypatch,
                                                                                       capsys):
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    base = ["hardware.gpu=b200-sxm", "engine.max_model_len=8192"]
    fp8 = load(None, base + ["engine.quantization=fp8"])
    fp4 = load(None, base + ["engine.quantization=modelopt_fp4"])
    assert fp4.arch.dtype == "nvfp4" and fp4.cost_model_source.startswith("composed from the b200_sxm kernel tables")
    one = GridPoint("decode", 1, 0, 1024).shape  # batch-1 decode reads the weights: 4.5 bits beat 8
    assert fp4.cost_model.step_time(one) < fp8.cost_model.step_time(one)
    capsys.readouterr()
    # before Blackwell (fp8: before Ada/Hopper) vLLM runs the weights through its Marlin kernels, weight-only:
    # they were refused as formats the GPU cannot run (round 90); no table times those GEMMs
    for gpu, q, bits in (("h100-sxm", "modelopt_fp4", 4.5), ("a100-80gb", "fp8", 8)):
        wo = load(None, [f"hardware.gpu={gpu}", f"engine.quantization={q}", "engine.max_model_len=8192"])
        assert wo.cost_model_source.startswith(f"roofline fallback (no kernel tables time weight-only {wo.arch.dtype}")
        err = capsys.readouterr().err
        assert "weight-only with its Marlin kernel" in err and "16-bit math" in err
        bf16 = load(None, [f"hardware.gpu={gpu}", f"profile={json.dumps(wo.profile.model_dump(exclude_none=True))}",
                           "engine.max_model_len=8192"])
        assert bf16.arch.weight_bytes - wo.arch.weight_bytes == pytest.approx(
            bf16.arch.linear_params * (16 - bits) / 8, abs=1)
        # 16-bit math: a compute-bound prefill takes as long as bf16's (its FLOPs at the bf16 peak)
        big = BatchShape(1, 8192, 8192 * 8193 // 2, 0, 0)
        assert wo.cost_model.step_time(big) == pytest.approx(bf16.cost_model.step_time(big), rel=1e-9)
    capsys.readouterr()
    awq = load(None, base + ["engine.quantization=awq"])
    assert awq.cost_model_source.startswith("roofline fallback (no kernel tables time 4-bit weight-only GEMMs")
    assert "warning" in capsys.readouterr().err


def _damaged_tables(tmp_path, how: str) -> Path:
    """A copy of the H200 tables' folder layout with its GEMM table damaged one way."""
    import shutil

    dst = tmp_path / "tables" / "h200_sxm"
    for sub in ("attention", "comm"):
        shutil.copytree(TABLES / "h200_sxm" / sub, dst / sub)
    gemm = dst / "gemm" / "vllm" / "0.24.0" / "gemm_perf.parquet"
    gemm.parent.mkdir(parents=True)
    g = pd.read_parquet(TABLES / "h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet")
    if how == "corrupt":
        gemm.write_bytes(b"not a parquet file")
    elif how == "nan":
        g.assign(latency=np.nan).to_parquet(gemm)
    elif how == "no rows":
        g.head(0).to_parquet(gemm)
    elif how == "one m":
        g[g.m == 1].to_parquet(gemm)
    return tmp_path / "tables"


@needs_tables
@pytest.mark.parametrize("how,msg", [("corrupt", "cannot read"), ("nan", "not a positive number"),
                                     ("no rows", "has no rows"), ("one m", "one token count")])
def test_damaged_kernel_tables_are_refused_by_name(tmp_path, monkeypatch, how, msg):
    monkeypatch.setenv("SERVESIM_KERNEL_TABLES", str(_damaged_tables(tmp_path, how)))
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ConfigError) as e:
        load(None, ["model=qwen3-8b"])
    assert e.value.field == "hardware.kernel_tables" and msg in e.value.message


@needs_tables
def test_an_edited_cache_entry_is_rebuilt_and_an_unwritable_cache_is_said(tmp_path, monkeypatch, capsys):
    """r154: an unwritable cache (a read-only home, a file at its name) refused every run needing a composed
    profile, which is composed in memory either way: now a warning, and the run goes on."""
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    sets = ["model=qwen3-8b", "hardware.gpu=gb200"]
    first = load(None, sets).cost_model.step_time(DECODE_128)
    (cached,) = (tmp_path / "profiles").glob("*.yaml")
    cached.write_text(cached.read_text().replace("step_overhead_ms: ", "step_overhead_ms: 500"))
    assert load(None, sets).cost_model.step_time(DECODE_128) == first  # the checksum no longer matches
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path / "file"))
    capsys.readouterr()
    assert load(None, sets).cost_model.step_time(DECODE_128) == first
    assert "warning: cannot cache the composed profile" in capsys.readouterr().err


@pytest.mark.parametrize("sets,field", [
    (["hardware.gpu=b60", "engine.quantization=modelopt_fp4"], "engine.quantization"),  # no fp4, no CUDA Marlin
    (["hardware.kernel_tables=../../etc"], "hardware.kernel_tables"),
    (["engine.reserved_memory_gib=200"], "engine.reserved_memory_gib"),  # round 93: named gpu_memory_utilization
    # round 93: 0.33's settings ran under 0.19's defaults (95 of 100 requests refused by a queue 0.19 lacks)
    (["engine.vllm_defaults=0.19.0", "engine.max_num_queued_reqs=5"], "engine.max_num_queued_reqs"),
    (["engine.vllm_defaults=0.19.0", "engine.watermark=0.1"], "engine.watermark"),
    (["engine.vllm_defaults=0.19.0", "engine.max_num_active_seqs=8"], "engine.max_num_active_seqs"),
    (["profile={name: x, cost_model: linear, coefficients: {step_overhead_ms: 1}, overhead: {host_per_step_ms: .inf}}"],
     "profile.overhead.host_per_step_ms"),
    (["profile={name: x, cost_model: linear, coefficients: {step_overhead_ms: 0}}"], "profile.coefficients"),
    (["workload.arrival={process: closed_loop, concurrency: 4, ramp_up_s: .inf}"], "workload.arrival.ramp_up_s"),
    (["workload.num_requests=null", "workload.duration_s=10",
      "workload.arrival={process: poisson, ramp_up_strategy: linear, ramp_up_start_rps: 1, ramp_up_end_rps: 3}"],
     "workload"),
])
def test_impossible_deployments_and_numbers_name_their_setting(sets, field):
    with pytest.raises(ConfigError) as e:
        load(None, sets)
    assert e.value.field == field


def test_usage_mistakes_are_one_line_and_exit_2(capsys):
    from servesim.simulator.cli import main

    for argv in (["run", "--bogus"], ["calibrate", "import", "aiconfigurator", "--tp", "abc"], []):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and err.startswith("servesim: error: "), err


def test_a_roofline_warning_never_comes_with_an_error(capsys):
    with pytest.raises(ConfigError):
        load(None, ["hardware.gpu=l4"])  # no tables, and a 131k context does not fit
    assert capsys.readouterr().err == ""


@needs_serving
@pytest.mark.parametrize("damage,msg", [
    (lambda d: (d / "vllm/requests.jsonl").write_text('{"input_toks": 5}\n'), "line 1"),
    (lambda d: (d / "vllm/meta.json").write_text("[]"), "meta.json: not a JSON object"),
    (lambda d: (d / "vllm/meta.json").write_text("{}"), "lacks engine_kwargs"),
    (lambda d: (d / "vllm/requests.jsonl").write_text(""), "holds no records"),
])
def test_damaged_serving_runs_are_refused_by_file_and_line(tmp_path, damage, msg):
    import shutil

    from servesim.calibration.serving_fidelity import validate_serving

    run = tmp_path / "runs" / "RTXPRO6000" / "Llama-3.1-8B"
    shutil.copytree(SERVING / "llmservingsim-vllm-0.19/RTXPRO6000/Llama-3.1-8B", run)
    damage(run)
    with pytest.raises(ConfigError, match=msg):
        validate_serving(tmp_path / "runs", tmp_path / "out")
    with pytest.raises(ConfigError, match="no run under"):
        validate_serving(tmp_path / "out", tmp_path / "out2")  # nothing to simulate is an error, not an empty table


@needs_serving
def test_validate_serving_writes_no_results_among_a_runs_records(tmp_path):
    """Round 33 (compare's twin): --out naming a run's vllm/ folder, or one holding it, put the tables there."""
    import shutil

    from servesim.calibration.serving_fidelity import validate_serving

    run = tmp_path / "runs" / "RTXPRO6000" / "Llama-3.1-8B"
    shutil.copytree(SERVING / "llmservingsim-vllm-0.19/RTXPRO6000/Llama-3.1-8B", run)
    before = sorted(p.name for p in (run / "vllm").iterdir())
    for out in (run / "vllm", run.parent):
        with pytest.raises(ConfigError, match="the input"):
            validate_serving(tmp_path / "runs", out)
    assert sorted(p.name for p in (run / "vllm").iterdir()) == before and not (run.parent / "table.csv").exists()


@pytest.mark.skipif(not LAYERS.is_dir(), reason=f"layer profiles not found at {LAYERS}")
@pytest.mark.parametrize("edit, said", [(lambda line: line.rsplit(",", 1)[0] + ",inf", "positive finite numbers"),
                                        (lambda line: line.replace(",1,0,", ",1.5,0,", 1), "must be whole numbers")])
def test_a_damaged_layer_profile_is_refused(tmp_path, edit, said):
    """Round 24: an inf latency gave -100% errors and a 1.5-token row halved a bucket's time, both with exit 0."""
    from servesim.calibration.layer_check import _read_layers

    src = next(LAYERS.rglob("layers.csv"))
    lines = src.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.split(",")[1:2] == ["1"])
    lines[k] = edit(lines[k])
    bad = tmp_path / "layers.csv"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=said):
        _read_layers(bad)


@pytest.mark.skipif(not LAYERS.is_dir(), reason=f"layer profiles not found at {LAYERS}")
def test_a_layer_profile_of_an_impossible_tp_or_with_a_layer_missing_at_a_count_is_refused(tmp_path):
    """r116: tp_size 64 (0 of Mixtral's 32 heads per GPU) or 3 was reported as a deployment, and a q_proj row
    missing at some token counts was summed as nothing (the measured GEMMs +35% off), all with exit 0."""
    from servesim.calibration.layer_check import GEMMS, OTHER, _by_token_count, _read_layers

    src = next(LAYERS.rglob("tp2/layers.csv"))
    header, *rows = src.read_text().splitlines()
    for tp in (3, 64):
        bad = tmp_path / f"tp{tp}.csv"
        bad.write_text("\n".join([header] + [",".join(r.split(",")[:3] + [str(tp)] + r.split(",")[4:])
                                             for r in rows]) + "\n")
        with pytest.raises(ConfigError, match=f"tp_size {tp} does not split Mixtral's 32 attention heads"):
            _read_layers(bad)
    gap = tmp_path / "gap.csv"
    gap.write_text("\n".join([header] + [r for r in rows if not (r.startswith("q_proj,") and r.split(",")[1] == "2")])
                   + "\n")
    d = _read_layers(gap)
    with pytest.raises(ConfigError, match="no q_proj row at input 2"):
        _by_token_count(d, gap, GEMMS + OTHER)
    assert not _by_token_count(_read_layers(src), src, GEMMS + OTHER)[GEMMS + OTHER].isna().any().any()


@needs_tables
def test_import_never_writes_over_its_model_nor_through_a_link(tmp_path, capsys):
    """Round 41: `calibrate import --model m.yaml --out m.yaml` replaced the model with the profile (exit 0), and an
    --out that is a symbolic link wrote the profile to the link's target."""
    from servesim.simulator.cli import main

    model = tmp_path / "m.yaml"
    text = (Path(__file__).resolve().parents[1] / "simulator" / "data" / "models" / "llama-3.1-8b.yaml").read_text()
    model.write_text(text)
    base = ["calibrate", "import", "aiconfigurator", "--gpu", "h100-sxm", "--data", str(TABLES), "--model", str(model)]
    for out, why in (("m.yaml", "would write over the input"), ("hard.yaml", "is a hard link"),
                     ("link.yaml", "is a symbolic link")):
        if out == "hard.yaml":
            (tmp_path / "hard.yaml").hardlink_to(model)
            (tmp_path / "link.yaml").symlink_to(tmp_path / "victim.txt")
        assert main(base + ["--out", str(tmp_path / out)]) == 2
        err = capsys.readouterr().err
        assert f"--out: {tmp_path / out}" in err and why in err
    assert model.read_text() == text and not (tmp_path / "victim.txt").exists()
    assert main(base + ["--out", str(tmp_path / "p.yaml")]) == 0 and "cost_model: linear" in (tmp_path / "p.yaml").read_text()


@needs_serving
def test_a_serving_run_outside_the_public_layout_takes_its_gpu_from_its_meta(tmp_path):
    """Round 44: `validate serving` read the GPU from the parent folder's name only: a run copied elsewhere was
    refused as 'no built-in GPU', though its meta.json names it (as `compare` reads it)."""
    import shutil

    from servesim.calibration.serving_fidelity import load_run

    run = tmp_path / "rr" / "run"
    shutil.copytree(SERVING / "llmservingsim-vllm-0.19" / "RTX4090" / "Llama-3.1-8B", run)
    loaded, why = load_run(run, tmp_path / "rr")
    assert why is None and "hardware.gpu=rtx-4090" in loaded.sets


def test_the_mean_error_leaves_out_latencies_measured_as_about_zero():
    """Round 44: a real queue p50 of 0.004 ms against a simulated 26 ms (an error of 5,893x) made one run's mean
    |error| 268 where the others' were 0.2."""
    import pandas as pd

    from servesim.calibration.run_comparison import mean_abs_error

    t = pd.DataFrame({"metric": ["TTFT p50 (ms)", "queue p50 (ms)", "throughput (req/s)"],
                      "real": [100.0, 0.004, 0.5], "error": [0.2, 5893.0, -0.1]})
    assert mean_abs_error(t) == pytest.approx(0.15)
    assert mean_abs_error(t.iloc[[1]]) is None


def _first_requests_of(tmp_path, n=60):
    import shutil

    run = tmp_path / "runs" / "RTXPRO6000" / "Llama-3.1-8B"
    shutil.copytree(SERVING / "llmservingsim-vllm-0.19/RTXPRO6000/Llama-3.1-8B", run)
    lines = (run / "vllm/requests.jsonl").read_text().splitlines()[:n]
    (run / "vllm/requests.jsonl").write_text("\n".join(lines) + "\n")
    meta = json.loads((run / "vllm/meta.json").read_text())  # the count the cut copy holds (r154: said otherwise)
    (run / "vllm/meta.json").write_text(json.dumps(meta | {"num_requests": n}))
    return run


@needs_serving
def test_validate_serving_under_a_set_profile_still_shows_kernel_time_alone(tmp_path, capsys):
    """Round 48: `--set profile=P` replaced the kernels-only pass's profile too (its column equalled the full
    simulation: 'overhead worth 0'), and a warning said the run records profile=auto, which it does not."""
    from servesim.calibration.serving_fidelity import validate_serving

    _first_requests_of(tmp_path)
    table, _ = validate_serving(tmp_path / "runs", tmp_path / "out", ["profile=rtxpro6000-llama-3.1-8b-bf16-tp1"])
    ttft = table.set_index("metric").loc["TTFT mean (ms)"]
    assert ttft["sim_kernels_only"] < 0.95 * ttft["sim"]
    assert "records" not in capsys.readouterr().err


@needs_serving
def test_compare_checks_a_given_simulation_is_of_the_runs_arrivals_and_deployment(tmp_path, capsys):
    """Round 48: `compare REAL SIM` took a simulation of another model, or of other arrival times, as the run's own."""
    from servesim.simulator.cli import main

    run = _first_requests_of(tmp_path)
    main(["compare", str(run), "--out", str(tmp_path / "c1")])
    config = str(tmp_path / "c1" / "sim" / "config.yaml")
    for name, sets in (("other-model", ["model=qwen2.5-7b"]), ("other-arrivals", ["workload.time_scale=0.05"]),
                       ("other-seqs", ["engine.max_num_seqs=16"])):
        assert main(["run", config, "--quiet", "--out", str(tmp_path / name)] + [a for s in sets for a in ("--set", s)]) == 0
    capsys.readouterr()
    main(["compare", str(run), str(tmp_path / "other-model"), "--out", str(tmp_path / "c2")])
    assert "simulated model=qwen2.5-7b, but" in capsys.readouterr().err
    main(["compare", str(run), str(tmp_path / "other-seqs"), "--out", str(tmp_path / "c6")])  # r134: said nothing
    assert "simulated engine.max_num_seqs=16, but" in capsys.readouterr().err
    assert main(["compare", str(run), str(tmp_path / "other-arrivals"), "--out", str(tmp_path / "c3")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: SIM:") and "other arrival times" in err and err.count("\n") == 1
    assert main(["compare", str(run), str(tmp_path / "c1" / "sim"), "--out", str(tmp_path / "c4")]) in (0, 1)
    assert "simulated model" not in capsys.readouterr().err
    import shutil  # r134: its lengths re-paired to other arrivals (each list checked apart) passed as the run's

    shutil.copytree(tmp_path / "c1" / "sim", tmp_path / "repaired")
    table = pd.read_parquet(tmp_path / "repaired" / "requests.parquet")
    for c in ("prompt_tokens", "output_tokens"):
        table[c] = table[c].to_numpy()[::-1]
    many = table["output_tokens"] > 1  # its TPOT as its times give it, else refused as damaged first (r165)
    table["tpot"] = ((table["e2el"] - table["ttft"]) / (table["output_tokens"] - 1)).where(many)
    table.to_parquet(tmp_path / "repaired" / "requests.parquet")
    assert main(["compare", str(run), str(tmp_path / "repaired"), "--out", str(tmp_path / "c5")]) == 2
    assert "simulated other requests at the run's arrival times: its request 1" in capsys.readouterr().err


@pytest.mark.skipif(not LAYERS.is_dir(), reason=f"layer profiles not found at {LAYERS}")
def test_validate_layers_refuses_mixed_tp_degrees_and_names_tables(tmp_path, capsys):
    """Round 48: a layers.csv holding TP 2 and TP 4 rows was reported as TP 2 with medians over both; a --tables
    naming a GPU's folder, not the root, was an error about 'gpu' at a path never given."""
    from servesim.simulator.cli import main

    tp2, tp4 = (next(LAYERS.rglob(f"tp{n}/layers.csv")).read_text().splitlines() for n in (2, 4))
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "layers.csv").write_text("\n".join(tp2 + tp4[1:]) + "\n")
    assert main(["validate", "layers", "--data", str(tmp_path / "mixed"), "--out", str(tmp_path / "o1")]) == 2
    assert "several TP degrees (2, 4)" in capsys.readouterr().err
    if TABLES.is_dir():
        assert main(["validate", "layers", "--tables", str(TABLES / "h100_sxm"), "--out", str(tmp_path / "o2")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("servesim: error: --tables: ") and "give the root that holds h100_sxm/" in err


@pytest.mark.skipif(not LAYERS.is_dir(), reason=f"layer profiles not found at {LAYERS}")
def test_validate_layers_refuses_a_table_cut_off_mid_row(tmp_path, capsys):
    """r115: a layers.csv cut off as it was written was read: its last row's latency cut short (12345 read as 1)
    changed a bucket's measured time, without a word. Its last line has no line end: refused."""
    from servesim.simulator.cli import main

    text = next(LAYERS.rglob("tp2/layers.csv")).read_text()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "layers.csv").write_text(text[:-3])
    assert main(["validate", "layers", "--data", str(tmp_path / "cut"), "--out", str(tmp_path / "o1")]) == 2
    assert "its last line has no line end" in capsys.readouterr().err


@needs_tables
def test_a_model_name_never_puts_the_composed_profile_outside_the_cache(tmp_path):
    """model.name went into the cached profile's path unchanged: ../../x wrote the YAML outside the cache
    (round 80, path traversal); it is one file name in the cache now."""
    from servesim.simulator.profile_select import cache_dir

    escape = tmp_path / "escaped"
    up = "../" * (len(cache_dir().resolve().parts) + 2)
    rs = load(None, [f"model.name={up}{str(escape).lstrip('/')}", "model.num_hidden_layers=7"])
    assert "cached as h200-sxm-" in rs.cost_model_source and "/" not in rs.cost_model_source.split("cached as ")[1]
    assert not list(tmp_path.iterdir())
    assert any(p.name.startswith("h200-sxm-") and "escaped" in p.name and p.suffix == ".yaml"
               for p in cache_dir().iterdir())


@needs_tables
def test_other_kernel_tables_named_replace_the_gpus_built_in_profile(tmp_path, monkeypatch):
    """Round 90: hardware.kernel_tables=l40s changed nothing for Llama-3.1-8B on the H200 (its built-in profile was
    kept, silently) while it recomposed Qwen3-8B: a sweep over tables gave identical rows for one model."""
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    own = load(None, [])
    other = load(None, ["hardware.kernel_tables=l40s"])
    assert own.cost_model_source.startswith("built-in profile h200-llama-3.1-8b")
    assert other.cost_model_source.startswith("composed from the l40s kernel tables")
    assert other.cost_model.step_time(DECODE_128) > 1.5 * own.cost_model.step_time(DECODE_128)  # L40S: 864 GB/s
    named_own = load(None, ["hardware.kernel_tables=h200_sxm"])  # its own tables, named: still its built-in profile
    assert named_own.cost_model_source == own.cost_model_source
    # round 94: a name that is no table folder ran on the roofline with a warning (TPOT 3x the l40s tables')
    with pytest.raises(ConfigError, match="hardware.kernel_tables: 'l40z' is not a folder of kernel tables in .*: "
                                          ".*a100_sxm, .*l40s"):
        load(None, ["hardware.gpu=l4", "hardware.kernel_tables=l40z"])


def test_intels_xpu_gets_vllms_own_block_size_and_graph_default():
    """Round 90: on the B60 vLLM uses 64-token blocks (0.19's XPU platform sets them, 0.33's FlashAttention there
    takes multiples of 64 only), and 0.19 captures no graphs there by default; servesim kept 16 and graphs."""
    base = ["hardware.gpu=b60", "model=qwen3-8b", "engine.max_model_len=8192"]
    for release, graphs in (("0.19.0", 0), ("0.33.0", 512)):
        rs = load(None, base + [f"engine.vllm_defaults={release}"])
        assert rs.scenario.engine.block_size == 64 and rs.cudagraph_max_tokens == graphs, release
    assert load(None, base + ["engine.block_size=128"]).scenario.engine.block_size == 128  # given: kept
    assert load(None, ["hardware.gpu=h100-sxm", "model=qwen3-8b"]).scenario.engine.block_size == 16


@pytest.mark.skipif(not LAYERS.is_dir(), reason=f"layer profiles not found at {LAYERS}")
def test_validate_layers_refuses_two_tables_of_one_tp_and_a_count_past_any_step(tmp_path, capsys):
    """r121: two layers.csv of TP 2 were pooled into one row per bucket (a copy with latencies x1000 read 48.78 ms
    at 1 token, 0.0975 alone); a token count of 2e9 was an internal error (no bucket held it)."""
    from servesim.simulator.cli import main

    text = next(LAYERS.rglob("tp2/layers.csv")).read_text()
    for name in ("a", "b"):
        (tmp_path / "dup" / name / "tp2").mkdir(parents=True)
        (tmp_path / "dup" / name / "tp2" / "layers.csv").write_text(text)
    assert main(["validate", "layers", "--data", str(tmp_path / "dup"), "--out", str(tmp_path / "o1")]) == 2
    assert "are both of TP 2: one layers.csv per TP degree" in capsys.readouterr().err
    header, *rows = text.splitlines()
    (tmp_path / "big" / "tp2").mkdir(parents=True)
    (tmp_path / "big" / "tp2" / "layers.csv").write_text("\n".join(
        [header] + rows + [r.replace(",2048,", ",2000000000,", 1) for r in rows if ",2048," in r]) + "\n")
    assert main(["validate", "layers", "--data", str(tmp_path / "big"), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert err.count("servesim: error:") == 1 and "input 2,000,000,000 tokens, more than 16,777,216" in err


@pytest.mark.skipif(not LAYERS.is_dir(), reason=f"layer profiles not found at {LAYERS}")
def test_a_layer_latency_past_any_kernel_is_refused(tmp_path):
    """r123: a latency(ns) of 1e300 was reported as a 290-digit ms/layer figure, exit 0."""
    from servesim.calibration.layer_check import _read_layers

    header, first, *rest = next(LAYERS.rglob("tp2/layers.csv")).read_text().splitlines()
    bad = tmp_path / "layers.csv"
    bad.write_text("\n".join([header, first.rsplit(",", 1)[0] + ",1e300", *rest]) + "\n")
    with pytest.raises(ConfigError, match=re.escape("row 2: latency(ns) 1e+300, more than 1e12 ns")):
        _read_layers(bad)


@needs_serving
def test_round_134_validate_serving_refuses_a_profile_fitted_to_the_run(tmp_path, capsys):
    """A profile fitted (calibrate fit) to the very run validate serving replays was reported as its out-of-sample
    error, bands.yaml saying "none of them fitted to"; a copy of the run under another root too."""
    import shutil

    from servesim.simulator.cli import main

    run = _first_requests_of(tmp_path)
    profile = tmp_path / "fitted.yaml"
    assert main(["calibrate", "fit", str(run), "--gpu", "rtx-pro-6000", "--max-evals", "7", "--terms",
                 "gpu_per_layer_us,memory_scale", "--out", str(profile)]) == 0
    copy = tmp_path / "copy" / "RTXPRO6000" / "Llama-3.1-8B"
    shutil.copytree(run, copy)
    written = tmp_path / "rewritten" / "RTXPRO6000" / "Llama-3.1-8B"  # r135: the same records, written without
    shutil.copytree(run, written)  # spaces (another digest): its latencies are the fitted run's
    records = written / "vllm" / "requests.jsonl"
    records.write_text("\n".join(json.dumps(json.loads(line), separators=(",", ":"))
                                 for line in records.read_text().splitlines()) + "\n")
    for root in (tmp_path / "runs", tmp_path / "copy", tmp_path / "rewritten"):
        capsys.readouterr()
        assert main(["validate", "serving", "--data", str(root), "--set", f"profile={profile}",
                     "--out", str(tmp_path / f"v-{root.name}")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("servesim: error: profile: ") and "its error there is in sample" in err
        if root.name == "rewritten":  # r168: the match by latencies named the fitted run's path as the fitted one
            assert "(the same latencies, written as" in err and f"{written}'s requests" in err, err
    # r168: compare gave PASS with no word of the profile being fitted to the run it compared
    assert main(["compare", str(run), "--profile", str(profile), "--set", "hardware.gpu=rtx-pro-6000", "--out",
                 str(tmp_path / "c")]) in (0, 1)
    assert f"servesim: warning: profile {yaml.safe_load(profile.read_text())['name']} was fitted to {run} (its " \
           f"fitted.runs): this comparison is in sample" in capsys.readouterr().err
    # r169: nor through that comparison's own simulation, given as SIM
    assert main(["compare", str(run), str(tmp_path / "c" / "sim"), "--out", str(tmp_path / "c2")]) in (0, 1)
    assert f"{tmp_path / 'c' / 'sim'} was simulated with profile {yaml.safe_load(profile.read_text())['name']}, " \
           f"which was fitted to {run}" in capsys.readouterr().err


@pytest.mark.skipif(not LAYERS.is_dir() or not TABLES.is_dir(),
                    reason=f"layer profiles or tables not found at {LAYERS}")
def test_round_135_a_moe_bucket_is_compared_only_where_its_experts_shares_were_measured(tmp_path):
    """Each expert's share of a bucket's tokens was read off the measured curve with np.interp, which holds the first
    value below the file's first token count: without the small counts a 'measured' MoE figure was invented and
    the bucket's error flipped sign (+15% to -13%)."""
    from servesim.calibration.layer_check import check_moe_layers, format_moe_table

    source = next(LAYERS.rglob("tp2/layers.csv"))
    d = pd.read_csv(source)
    column = "input" if "input" in d.columns else next(c for c in d.columns if "token" in c.lower())
    (tmp_path / "cut").mkdir()
    d[d[column] >= 512].to_csv(tmp_path / "cut" / "layers.csv", index=False)
    whole = check_moe_layers(source.parent, TABLES).set_index("bucket")
    cut = check_moe_layers(tmp_path / "cut", TABLES).set_index("bucket")
    assert np.isfinite(whole.loc["513-2048", "moe_layer_error"]) and np.isnan(cut.loc["513-2048", "moe_layer_error"])
    assert "- (an expert's share lies outside the measured token counts)" in format_moe_table(cut.reset_index())


@pytest.mark.skipif(not (TABLES / "h100_sxm").is_dir(), reason=f"h100_sxm kernel tables not found at {TABLES}")
def test_round_143_decode_attention_follows_kv_heads_prefill_query_heads():
    """The tables' decode kernels take the time of the KV cache they read, whatever the query heads (H100, 64 x
    4,095: 0.186 ms at 24/4 and 32/4, 0.354 at 32/8 and 64/8). An unmeasured pair took the nearest by query heads
    and scaled by them: an MHA model's 32 KV heads were read as 8 (decode attention 4x cheap), Qwen2.5-7B's 28/4
    12% cheap. A prefill's math follows the query heads, as before."""
    from servesim.calibration.aiconfigurator import KernelTables

    t = KernelTables(TABLES, "h100_sxm")
    gen, ctx = t.generation_attention_ms, t.context_attention_ms
    assert gen(64, 4096, 32, 32, 128) == pytest.approx(4 * gen(64, 4096, 32, 8, 128))  # no (32, 32) row
    assert gen(64, 4096, 28, 4, 128) == pytest.approx(gen(64, 4096, 32, 4, 128))  # no (28, 4) row
    assert gen(64, 4096, 32, 4, 128) != pytest.approx(gen(64, 4096, 32, 8, 128))
    assert ctx(1, 8192, 28, 4, 128) == pytest.approx(28 / 32 * ctx(1, 8192, 32, 4, 128))


def test_round_143_the_roofline_reads_no_input_embedding_or_encoder_a_step():
    """A step looks up its tokens' embedding rows; it read the whole untied table (Llama-3.1-8B: 1 GiB, +7% on a
    memory-bound decode) and Llama 4's vision encoder. A tied table is the LM head's, read whole."""
    from servesim.simulator.cost_model import RooflineCoefficients, RooflineCostModel

    hw, c = load_hardware("a100-pcie"), RooflineCoefficients()
    bw = hw.memory_bandwidth_gbps * 1e9 * c.memory_efficiency
    llama = load_model("llama-3.1-8b")
    for tp in (1, 2):
        read = RooflineCostModel(llama, hw, c, tp)._weights_s * bw
        embed = llama.vocab_size * llama.hidden_size * 2 / tp
        assert read == pytest.approx(llama.dense_weight_bytes_per_gpu(tp) - embed)
    tied = llama.model_copy(update={"tie_word_embeddings": True})
    assert RooflineCostModel(tied, hw, c)._weights_s * bw == pytest.approx(tied.dense_weight_bytes_per_gpu(1))
    scout = load_model("llama-4-scout")
    assert scout.encoder_params > 0
    unread = (scout.vocab_size * scout.hidden_size + scout.encoder_params) * 2 / 8
    assert RooflineCostModel(scout, hw, c, 8)._weights_s * bw == \
        pytest.approx(scout.dense_weight_bytes_per_gpu(8) - unread)


@needs_tables
def test_round_155_a_fifo_in_the_profile_cache_is_never_read_nor_written_through(tmp_path, monkeypatch):
    """r155: a FIFO at a cached profile's name hung every run of that deployment (read_text waited for a writer);
    one at its checksum's name would hang the write. Neither is trusted: the profile is composed and written over."""
    import os

    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path))
    sets = ["model=qwen3-8b", "hardware.gpu=gb200"]
    first = load(None, sets).cost_model.step_time(DECODE_128)
    (cached,) = (tmp_path / "profiles").glob("*.yaml")
    for victim in (cached, cached.with_suffix(".sha256")):
        victim.unlink()
        os.mkfifo(victim)
        assert load(None, sets).cost_model.step_time(DECODE_128) == first
        assert victim.is_file()  # replaced by the composition written again


def test_round_165_a_profile_faster_than_reading_the_weights_is_said(tmp_path, capsys):
    """r165: the built-in H100 8B profile cut after per_token_ms ran at 3.1 ms TPOT, under the 4.5 ms an H100 takes
    to read the model's weights once, unsaid. Every built-in profile is above that floor."""
    built_in = yaml.safe_load((Path(__file__).resolve().parents[1] / "calibration" / "profiles" /
                               "h100-llama-3.1-8b-bf16-tp1.yaml").read_text())
    cut = {**built_in, "name": "mine", "coefficients": {k: built_in["coefficients"][k] for k in (
        "step_overhead_ms", "per_seq_ms", "per_token_ms")}}
    (tmp_path / "cut.yaml").write_text(yaml.safe_dump(cut))
    for profile, said in ((tmp_path / "cut.yaml", True), ("h100-llama-3.1-8b-bf16-tp1", False)):
        rs = load(None, [f"profile={profile}", "hardware.gpu=h100-sxm"])
        err = capsys.readouterr().err
        assert ("profile mine times a decode step of 1 sequence at 1 token of context in" in err) == said, err
        assert ("(it gives no linear_floor_ms, per_context_token_ms: 0)" in err) == said, err
        m, bw = rs.arch, rs.hardware.memory_bandwidth_gbps * 1e9
        floor = (m.weight_bytes - m.vocab_size * m.hidden_size * 2) / bw  # not the embedding: its rows are looked up
        assert (rs.cost_model.step_time(BatchShape(1, 0, 0, 1, 1)) < floor) == said


@needs_serving
def test_round_172_a_fit_says_the_fitted_profiles_warnings_not_its_trials(tmp_path, capsys):
    """r172: `calibrate fit` on the RTX 4090 run said "compute_efficiency 1.058 above 1" ten times, of trial points
    the optimiser left (the written profile's is 0.88)."""
    import shutil

    from servesim.simulator.cli import main

    run = tmp_path / "runs" / "RTX4090" / "Llama-3.1-8B"
    shutil.copytree(SERVING / "llmservingsim-vllm-0.19" / "RTX4090" / "Llama-3.1-8B", run)
    assert main(["calibrate", "fit", str(run), "--gpu", "rtx-4090", "--max-evals", "20", "--out",
                 str(tmp_path / "p.yaml")]) == 0
    assert "above 1" not in capsys.readouterr().err
    assert yaml.safe_load((tmp_path / "p.yaml").read_text())["coefficients"]["compute_efficiency"] < 1
