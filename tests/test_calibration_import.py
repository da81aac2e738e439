"""Profiles composed from NVIDIA's H100/H200 kernel tables in ../shared/data/gpu/aiconfigurator."""

from pathlib import Path

import pandas as pd
import pytest

from servesim.calibration.aiconfigurator import TABLES, KernelTables, compose_step_ms, import_profile
from servesim.calibration.grid import GridPoint
from servesim.simulator.config import load
from servesim.simulator.cost_model import builtin_profile_names, load_profile
from servesim.simulator.engine import simulate
from servesim.simulator.errors import ConfigError
from servesim.simulator.model_arch import load_model

AIC = Path(__file__).resolve().parents[2] / "shared" / "data" / "gpu" / "aiconfigurator"
needs_shared = pytest.mark.skipif(not AIC.is_dir(), reason=f"kernel tables not found at {AIC} (../shared is absent)")


@pytest.fixture(scope="module")
def h200():
    return KernelTables(AIC, "h200_sxm")


@needs_shared
def test_gemm_lookup_matches_the_table_and_interpolates(h200):
    g = h200.t["gemm"]
    row = g[(g.gemm_dtype == "bfloat16") & (g.kernel_source == "torch.nn.functional.linear")
            & (g.m == 256) & (g.n == 4096) & (g.k == 4096)].iloc[0]
    assert h200.gemm_ms(256, 4096, 4096, "bf16") == pytest.approx(row.latency)
    small, mid, big = (h200.gemm_ms(m, 28672, 4096, "bf16") for m in (1, 2048, 8192))  # n between grid values
    assert small < mid < big
    assert h200.gemm_ms(1, 128256, 4096, "bf16") > h200.gemm_ms(1, 65536, 4096, "bf16")  # beyond the grid
    assert h200.gemm_ms(4096, 4096, 4096, "fp8") < h200.gemm_ms(4096, 4096, 4096, "bf16")


@needs_shared
def test_composed_steps_are_physical(h200):
    arch = load_model("llama-3.1-8b")
    one = compose_step_ms(h200, arch, GridPoint("decode", 1, 0, 1024), "bf16", 1)
    # batch-1 decode reads 16 GB of weights: 3.3 ms at the H200's 4.8 TB/s, a little more in practice
    assert 3.3 < one["gemm_ms"] < 6.0 and one["allreduce_ms"] == 0
    many = compose_step_ms(h200, arch, GridPoint("decode", 128, 0, 4096), "bf16", 1)
    assert many["attention_ms"] > 10 * one["attention_ms"]
    assert many["gemm_ms"] < 2 * one["gemm_ms"]  # the weights are read once for the whole batch
    qwen = load_model("qwen3-32b")
    tp1 = compose_step_ms(h200, qwen, GridPoint("prefill", 1, 2048), "bf16", 1)
    tp2 = compose_step_ms(h200, qwen, GridPoint("prefill", 1, 2048), "bf16", 2)
    assert tp2["gemm_ms"] < 0.6 * tp1["gemm_ms"] and tp2["allreduce_ms"] > 0


@needs_shared
def test_import_writes_a_profile_with_its_held_out_error(tmp_path):
    path, fit = import_profile(AIC, "h100_sxm", "llama-3.1-8b", "bf16", 1, tmp_path / "p.yaml")
    prof = load_profile(str(path))
    assert prof.device.startswith("NVIDIA H100") and prof.model == "llama-3.1-8b" and prof.tensor_parallel_size == 1
    assert 0 < prof.held_out_error["mape"] < 0.15 and prof.held_out_error["points"] == 12
    r = simulate(load(None, [f"profile={path}", "hardware.gpu=h100-sxm", "workload.num_requests=50"]))
    assert r.summary["completed"] == 50


@needs_shared
@pytest.mark.parametrize("model,tp", [("llama-3.1-8b", 1), ("gpt-oss-120b", 1), ("deepseek-v3", 8)])
def test_a_composed_profile_prices_a_long_prompts_late_chunks_as_the_kernels_do(model, tp):
    """Round 90: the grid's chunks sat after 1,024 cached tokens at most, so the fit extrapolated a long prompt's
    late chunks: gpt-oss-120b's attention term fell to 1e-22 (every 8,192-token chunk of a 64k prompt 201 ms, the
    kernels 188 -> 461 ms), Llama-3.1-8B's last chunk was 40% dear and DeepSeek-V3's 30% cheap."""
    import pandas as pd

    from servesim.calibration.aiconfigurator import compose_profile
    from servesim.calibration.fit import predict_ms
    from servesim.simulator.local_attention import local_attention

    arch, t = load_model(model), KernelTables(AIC, "h200_sxm")
    _, fit = compose_profile(AIC, "h200_sxm", model, arch.dtype, tp, hardware_key="h200-sxm")
    local = local_attention(arch)
    for cached in (0, 24576, 57344):
        point = GridPoint("mixed", 0, 8192, cached)
        shape = point.local_shape(local) if local else point.shape
        row = pd.DataFrame([shape._asdict()])
        if arch.is_moe:
            row["experts_touched"] = [arch.experts_touched(8192)]
        kernels = compose_step_ms(t, arch, point, arch.dtype, tp)["time_ms"]
        # (the first chunk, a plain 8,192-token prefill, within the fit's own held-out p90: gpt-oss's is +10% since
        # the grid's decodes reach 1,024 sequences, r144)
        assert float(predict_ms(fit.coefficients, row)[0]) == pytest.approx(kernels, rel=0.08 if cached else 0.11), \
            cached


def test_shipped_profiles_load_and_match_their_names():
    names = builtin_profile_names()
    for gpu in ("h100", "h200"):
        for spec in ("llama-3.1-8b-bf16-tp1", "llama-3.1-8b-fp8-tp1", "llama-3.1-70b-bf16-tp4",
                     "llama-3.1-70b-bf16-tp8", "qwen3-32b-bf16-tp1", "qwen3-32b-bf16-tp2"):
            name = f"{gpu}-{spec}"
            assert name in names
            p = load_profile(name)
            assert p.name == name and p.model in name and f"-{p.dtype}-" in name
            assert name.endswith(f"tp{p.tensor_parallel_size}") and gpu.upper() in p.device
            assert p.held_out_error["mape"] < 0.15


def test_missing_tables_and_columns_are_named(tmp_path):
    with pytest.raises(ConfigError) as e:
        KernelTables(tmp_path, "b200_sxm")
    assert e.value.field == "gpu"
    for key, (rel, cols) in TABLES.items():
        f = tmp_path / "fake" / rel.replace("*", "0.24.0")
        f.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({c: [1] for c in cols if not (key == "gemm" and c == "latency")}).to_parquet(f)
    with pytest.raises(ConfigError, match="lacks column.*latency"):
        KernelTables(tmp_path, "fake")


def test_unknown_model_is_named():
    with pytest.raises(ConfigError) as e:
        import_profile(AIC, "h200_sxm", "gpt-7", "bf16", 1, "/tmp/never.yaml")
    assert e.value.field == "model"


@needs_shared
@pytest.mark.parametrize("table, column, value, needle", [
    ("comm/vllm/0.24.0/custom_allreduce_perf.parquet", "backend", None, "column backend must hold text"),  # IndexError
    ("gemm/vllm/0.24.0/gemm_perf.parquet", "m", "text", "column m must hold numbers >= 1"),  # TTFT 2.5x, exit 0
    ("attention/vllm/0.24.0/context_attention_perf.parquet", "num_heads", 0, "column num_heads must hold numbers >= 1"),
    ("gemm/vllm/0.24.0/gemm_perf.parquet", "n", "negative", "column n must hold numbers >= 1"),  # TTFT halved, exit 0
    # r150: a <NA> latency passed (a NaN did not); a kind empty or padded matched nothing, its rows dropped unsaid
    ("gemm/vllm/0.24.0/gemm_perf.parquet", "latency", lambda c: c.astype("Float64").mask(c.index == 5),
     "1 of .* rows have a latency that is not a positive number"),
    ("gemm/vllm/0.24.0/gemm_perf.parquet", "kernel_source", lambda c: c.mask(c.index % 2 == 1, ""),
     "column kernel_source must hold text \\(not empty"),
    ("gemm/vllm/0.24.0/gemm_perf.parquet", "gemm_dtype", lambda c: c + " ", "column gemm_dtype must hold text"),
])
def test_a_damaged_kernel_table_is_named_by_file_and_column(tmp_path, table, column, value, needle):
    """A damaged shape or kind column crashed the composition or priced steps 2-3x wrong with exit 0."""
    import shutil

    import pandas as pd

    src = AIC / "h100_sxm"
    if not (src / table).is_file():
        pytest.skip(f"{src / table} is not in this copy of the tables")
    root = tmp_path / "tables"
    shutil.copytree(src, root / "h100_sxm")
    d = pd.read_parquet(root / "h100_sxm" / table)
    d[column] = value(d[column]) if callable(value) else -d[column] if value == "negative" else \
        d[column].astype(str) if value == "text" else value
    d.to_parquet(root / "h100_sxm" / table)
    with pytest.raises(ConfigError, match=f"{table}: {needle}"):
        import_profile(root, "h100_sxm", "qwen3-8b", "bf16", 2, tmp_path / "p.yaml")


def test_a_profile_never_takes_a_built_in_profiles_name_or_file_for_another_deployment(tmp_path, monkeypatch):
    """Round 90: `calibrate import --out calibration/profiles/h100-llama-....yaml` of an H200 Qwen3 profile replaced the
    shipped one (an H100 Llama run then lost it, silently), and --name took a built-in's name (an H200 Qwen3 run
    labelled with the H100 Llama profile's name)."""
    import shutil

    import yaml

    from servesim.calibration.profile_io import write_profile
    from servesim.simulator import cost_model

    shipped = tmp_path / "profiles"
    shipped.mkdir()
    name = "h100-llama-3.1-8b-bf16-tp1"
    shutil.copy(Path(str(cost_model._builtin_profiles())) / f"{name}.yaml", shipped)
    monkeypatch.setattr(cost_model, "_builtin_profiles", lambda: shipped)
    cost_model._builtin_profile_data.cache_clear()
    try:
        own = yaml.safe_load((shipped / f"{name}.yaml").read_text())
        other = own | {"model": "qwen3-8b", "device": "NVIDIA H200"}
        with pytest.raises(ConfigError, match="is the built-in profile of another deployment .*model llama-3.1-8b"):
            write_profile(other, shipped / f"{name}.yaml")
        assert yaml.safe_load((shipped / f"{name}.yaml").read_text()) == own
        with pytest.raises(ConfigError, match=f"--name: {name} is a built-in profile's name"):
            write_profile(other, tmp_path / "mine.yaml")
        assert not (tmp_path / "mine.yaml").exists()
        write_profile(own | {"source": "regenerated"}, shipped / f"{name}.yaml")  # its own deployment: make profiles
        write_profile(other | {"name": "my-qwen"}, shipped / "my-qwen.yaml")  # a new one beside them
        assert sorted(p.name for p in shipped.iterdir()) == [f"{name}.yaml", "my-qwen.yaml"]
    finally:
        cost_model._builtin_profile_data.cache_clear()


@needs_shared
@pytest.mark.parametrize("gpu, key, kv", [("gb200", "gb200", None), ("h100_sxm", "h100-sxm", "fp8")])
def test_a_cache_knee_is_fitted_only_where_points_lie_past_it(gpu, key, kv):
    """Round 92: the fit put its KV-cache knee just above the largest decode context it trained on, with a slope
    past it fitted on nothing: GB200's Llama-3.1-8B (and H100's with an fp8 KV cache) priced a decode step reading
    1M KV tokens at 1,180 ms against the kernels' 33 ms (held-out MAPE 385%; TPOT 801 ms)."""
    import pandas as pd

    from servesim.calibration.aiconfigurator import compose_profile
    from servesim.calibration.fit import predict_ms

    _, fit = compose_profile(AIC, gpu, "llama-3.1-8b", "bf16", 1, kv, hardware_key=key)
    # (the worst point is GB200's 16,384-token prefill, 2.5x its 8,192-token one in the tables: -32% since the
    # grid's decodes reach 1,024 sequences, r144)
    assert fit.held_out["mape"] < 0.10 and fit.held_out["max_ape"] < 0.35
    point = GridPoint("decode", 256, 0, 4096)
    kernels = compose_step_ms(KernelTables(AIC, gpu), load_model("llama-3.1-8b"), point, "bf16", 1, kv)["time_ms"]
    assert float(predict_ms(fit.coefficients, pd.DataFrame([point.shape._asdict()]))[0]) == pytest.approx(kernels, rel=0.2)


@needs_shared
@pytest.mark.parametrize("sets", [["model=qwen3-8b", "hardware.gpu=b200-sxm", "engine.quantization=fp8"],
                                  ["model=llama-3.1-70b", "hardware.gpu=b200-sxm", "profile=b200-llama-3.1-70b-fp8-tp2",
                                   "engine.tensor_parallel_size=2", "engine.quantization=fp8"]])
def test_round_162_a_gpu_profile_charges_decode_kv_reads_from_the_first_token(sets):
    """r162: the fit put a B200 fp8 profile's KV reads into the CPU cache knee (context_cache_tokens 17,862; the
    built-in 70B's 32,896) with no slope below it: a decode step's attention was free there, under the bandwidth
    floor. A GPU's composition has no knee: 8 decodes going from 16 to 2,048 context tokens read their KV at most
    at the datasheet's bandwidth."""
    from servesim.simulator.batch import decode_shape

    rs = load(None, sets + ["engine.max_model_len=4096"])
    assert rs.profile.coefficients["context_cache_tokens"] == 0
    added_kv = 8 * (2048 - 16) * rs.arch.kv_bytes_per_token / rs.scenario.engine.tensor_parallel_size
    floor_ms = added_kv / (rs.hardware.memory_bandwidth_gbps * 1e9) * 1e3
    step = rs.cost_model.step_time
    assert (step(decode_shape(8, 8 * 2048)) - step(decode_shape(8, 8 * 16))) * 1e3 >= floor_ms


def test_round_162_the_roofline_fallback_is_fitted_to_the_gpus_with_kernel_tables(capsys):
    """r162: the fallback's assumed efficiencies (0.8, 0.6) and no kernel time a step ran a median 12% under the
    measured kernels: an A100 PCIe (less bandwidth) ran 13% faster than the measured A100 SXM. Its coefficients
    are now fitted (make roofline-fallback) and the shipped file is that fit's, its error each GPU left out."""
    import yaml

    from servesim.calibration.roofline_fit import OUT, errors, fallback, kernel_points

    points = kernel_points()
    shipped = yaml.safe_load(OUT.read_text())
    fitted = fallback(points)
    assert fitted["coefficients"] == pytest.approx(shipped["coefficients"], abs=2e-4)
    for key in ("mape", "p90_ape", "max_ape", "points"):
        assert fitted["held_out_error"][key] == pytest.approx(shipped["held_out_error"][key], abs=2e-4), key
    old = errors([0.8, 0.6, 0.0], points)
    assert shipped["held_out_error"]["mape"] < old["mape"]  # each GPU left out still beats the assumption on all
    rs = load(None, ["hardware.gpu=a100-pcie", "engine.max_model_len=8192", "model=llama-3.1-8b"])
    assert rs.profile.coefficients == shipped["coefficients"] and rs.profile.held_out_error["mape"] == \
        shipped["held_out_error"]["mape"]
    assert "efficiencies fitted to the GPUs with kernel tables" in capsys.readouterr().err


@pytest.mark.skipif(not (AIC / "h200_sxm" / "mla").is_dir(), reason=f"H200 MLA kernel tables not found at {AIC}")
def test_round_165_no_kv_token_is_read_faster_than_the_gpus_bandwidth():
    """r165: DeepSeek-V3's composition on H200 priced a decode KV token at 12.4 ns, its 70,272-byte latent at
    5.6 TB/s on a 4.8 TB/s GPU (a 16-sequence decode at 32k contexts 5% under its kernels). Each composed
    profile's context slope is at least its KV bytes at the datasheet bandwidth; so is every built-in's."""
    from servesim.simulator.config import with_formats

    deployments = [(load_model("deepseek-v3"), "h200-sxm", 8, ["model=deepseek-v3", "hardware.gpu=h200-sxm",
                                                                "engine.tensor_parallel_size=8"])]
    for name in builtin_profile_names():
        p = load_profile(name)
        if p.gpu is not None and p.model != "any":
            arch = with_formats(load_model(p.model), "fp8" if p.dtype == "fp8" else None,
                                "fp8" if p.kv_cache_dtype == "fp8" else "auto", "0.33.0")
            deployments.append((arch, p.gpu, p.tensor_parallel_size, [f"profile={name}"]))
    for arch, gpu, tp, sets in deployments:
        rs = load(None, sets + [f"model={arch.name}", f"hardware.gpu={gpu}", f"engine.tensor_parallel_size={tp}",
                                "engine.max_model_len=4096"] + (["engine.quantization=fp8"] if arch.dtype == "fp8"
                                                                and arch.name != "deepseek-v3" else [])
                  + (["engine.kv_cache_dtype=fp8"] if arch.kv_cache_dtype == "fp8" else []))
        floor = rs.arch.kv_bytes_per_token_per_gpu(tp) / (rs.hardware.memory_bandwidth_gbps * 1e9) * 1e3
        assert rs.profile.coefficients["per_context_token_ms"] >= floor * (1 - 1e-9), (rs.profile.name, floor)
    assert len(deployments) > 20
    # r167: the floor is the GPU's the tables were measured on: H100 tables composed for an L4 took the L4's, the
    # fit driving its fixed time to 0 (held-out error 210%, a decode step under either GPU's weight read)
    borrowed = load(None, ["hardware.gpu=l4", "hardware.kernel_tables=h100_sxm", "engine.max_model_len=4096"])
    assert borrowed.profile.held_out_error["mape"] < 0.1, borrowed.profile.held_out_error
