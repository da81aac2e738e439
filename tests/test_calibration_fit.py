"""The fit recovers known coefficients; bad measurement files are named, not tracebacks."""

import re
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from servesim.calibration.fit import PARAMS, fit_step_model, predict_ms
from servesim.calibration.grid import STEP_KINDS, GridPoint, make_grid
from servesim.calibration.profile_io import fit_directory
from servesim.simulator.batch import BatchShape
from servesim.simulator.config import load
from servesim.simulator.cost_model import LinearCoefficients, LinearCostModel, load_profile
from servesim.simulator.engine import simulate
from servesim.simulator.errors import ConfigError

TRUE = dict(step_overhead_ms=2.0, per_seq_ms=0.05, per_token_ms=0.01, linear_floor_ms=5.0,
            per_context_token_ms=1e-4, per_spilled_context_token_ms=3e-4, context_cache_tokens=50_000.0,
            per_attention_pair_ms=2e-6)


def synthetic(grid="gpu", coef=TRUE):
    df = pd.DataFrame([p.row() for p in make_grid(grid) if p.kind in STEP_KINDS])
    df["time_ms"] = predict_ms(coef, df)
    return df


@pytest.mark.parametrize("grid", ["gpu", "cpu"])
def test_fit_recovers_known_coefficients_within_1pct(grid):
    coef = TRUE if grid == "gpu" else TRUE | {"context_cache_tokens": 20_000.0}
    fit = fit_step_model(synthetic(grid, coef))
    for k in PARAMS:
        assert fit.coefficients[k] == pytest.approx(coef[k], rel=0.01), k
    assert fit.held_out["mape"] < 1e-6 and fit.held_out["points"] >= 2


def test_fitted_coefficients_mean_the_same_in_the_simulator():
    model = LinearCostModel(LinearCoefficients(**TRUE))
    df = synthetic()
    for row in df.head(20).itertuples():
        shape = BatchShape(row.num_seqs, row.prefill_tokens, row.prefill_attention_pairs, row.decode_seqs,
                           row.decode_context_tokens)
        assert model.step_time(shape) * 1000 == pytest.approx(row.time_ms, rel=1e-12)


def test_noisy_measurements_report_their_error():
    import numpy as np

    df = synthetic()
    df["time_ms"] *= np.random.default_rng(1).lognormal(0, 0.05, len(df))
    fit = fit_step_model(df)
    assert 0.005 < fit.held_out["mape"] < 0.15


def test_missing_columns_and_too_few_points_are_named():
    df = synthetic().drop(columns=["decode_context_tokens"])
    with pytest.raises(ConfigError, match="missing column.*decode_context_tokens"):
        fit_step_model(df)
    with pytest.raises(ConfigError, match="at least 8"):
        fit_step_model(synthetic().head(5))
    with pytest.raises(ConfigError, match="at least 8"):
        fit_step_model(synthetic().iloc[0:0])


@pytest.mark.parametrize("col, value, message", [
    ("time_ms", -3.0, "row 4: time_ms must be 0 or a time from 1e-6 to 1e9 ms, got -3.0"),
    ("time_ms", 1e-300, "row 4: time_ms must be 0 or a time"),  # overflowed the relative-error fit
    ("experts_touched", float("nan"), "row 4: experts_touched must be a non-negative number"),
    ("experts_touched", -5.0, "row 4: experts_touched must be a non-negative number"),
    ("experts_touched", "abc", "row 4: experts_touched must be a non-negative number up to 2^40"),
    ("experts_touched", float("inf"), "row 4: experts_touched must be"),
    ("time_ms", float("nan"), "row 4: time_ms must be"),
    ("prefill_tokens", -10, "row 4: prefill_tokens must be a non-negative integer"),
    ("decode_seqs", "x", "row 4: decode_seqs must be a non-negative integer up to 2^40, got 'x'"),
    ("decode_context_tokens", 2**70, "row 4: decode_context_tokens must be a non-negative integer up to 2^40"),
    ("time_ms", True, "row 4: time_ms must be 0 or a time from 1e-6 to 1e9 ms, got True"),  # round 42: read as 1 ms
    # r158: the harness's spread columns were read by nothing
    ("repeats", 0, "row 4: repeats must be an integer >= 1"),
    ("time_ms_p10", 1e9, "row 4: time_ms 26.7264 must lie within its time_ms_p10 and time_ms_p90"),
    ("time_ms_p90", 1e-3, "row 4: time_ms 26.7264 must lie within its time_ms_p10 and time_ms_p90"),
    ("time_ms_p90", -1.0, "row 4: time_ms_p90 must be 0 or a time"),
])
def test_a_damaged_measurement_row_is_named_not_dropped(col, value, message):
    df = synthetic()
    if col == "experts_touched":
        df[col] = 4.0
    if col in ("repeats", "time_ms_p10", "time_ms_p90"):  # as the harness writes them
        df = df.assign(repeats=5, time_ms_p10=df["time_ms"] * 0.9, time_ms_p90=df["time_ms"] * 1.1)
    df = df.astype({col: object})
    df.loc[3, col] = value
    with pytest.raises(ConfigError, match=re.escape(message)):
        fit_step_model(df)


@pytest.mark.parametrize("holdout", [0.95, 0.99])
def test_a_holdout_that_leaves_too_little_to_fit_is_refused(holdout):
    """The at-least-8 rule held for the whole table only: --holdout 0.95 fitted one point ("train MAPE 0.0%"),
    0.99 none (a TypeError)."""
    df = synthetic("quick")
    with pytest.raises(ConfigError, match=f"--holdout: {holdout:g} leaves .* a fit needs at least 8"):
        fit_step_model(df, holdout=holdout)


def test_a_holdout_of_a_point_or_two_is_said_to_mean_little(capsys):
    """Round 62: --holdout 1e-9 held out one measurement and reported its error as the fit's held-out error."""
    from servesim.simulator import config

    config._WARNED.clear()
    fit_step_model(synthetic("quick"), holdout=1e-9)
    assert "--holdout 1e-09 holds out 1 of" in capsys.readouterr().err
    config._WARNED.clear()
    fit_step_model(synthetic("quick"), holdout=0.3)
    assert "holds out" not in capsys.readouterr().err


def test_check_on_a_device_this_machine_lacks_is_one_line(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    import yaml

    from servesim.calibration.check import check_profile

    profiles = Path(__file__).resolve().parents[1] / "calibration" / "profiles"
    prof = next(p for p in sorted(profiles.glob("*.yaml")) if load_profile(str(p)).grid and
                (load_profile(str(p)).tensor_parallel_size or 1) == 1 and load_profile(str(p)).cost_model == "linear")
    harness_like = yaml.safe_load(prof.read_text()) | {"overhead": None}  # as `calibrate run` writes (r135: one
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(harness_like))  # with overhead terms is refused first)
    with pytest.raises(ConfigError, match="no such CUDA device here"):
        check_profile(str(tmp_path / "p.yaml"), "cuda")


def test_unknown_grid_is_an_error():
    with pytest.raises(ConfigError, match="unknown grid"):
        make_grid("huge")
    with pytest.raises(ConfigError, match="no point"):
        make_grid("quick", max_model_len=8)


def test_grid_shapes():
    assert GridPoint("prefill", 2, 4).shape == BatchShape(2, 8, 2 * 10, 0, 0)
    assert GridPoint("decode", 3, 0, 9).shape == BatchShape(3, 0, 0, 3, 30)
    assert GridPoint("mixed", 2, 4, 10).shape == BatchShape(3, 4, 40 + 10, 2, 22)


def test_fit_directory_writes_a_profile_that_drives_a_run(tmp_path):
    # a GPU's law: no cache knee (r171: a GPU table is fitted without one, as a composition is)
    synthetic(coef=TRUE | {"per_spilled_context_token_ms": 0.0, "context_cache_tokens": 0.0}).to_parquet(
        tmp_path / "measurements.parquet")
    with pytest.raises(ConfigError, match="does not say which model"):
        fit_directory(tmp_path, name="synthetic")  # a bare table: the profile must say what it measured
    path, fit = fit_directory(tmp_path, name="synthetic", model="llama-3.1-8b", dtype="bf16", gpu="h200-sxm")
    prof = load_profile(str(path))
    assert prof.name == "synthetic" and prof.cost_model == "linear"
    assert (prof.model, prof.dtype, prof.gpu, prof.tensor_parallel_size) == ("llama-3.1-8b", "bf16", "h200-sxm", 1)
    assert prof.shape_range == {"max_tokens": 16384, "max_seqs": 1024, "max_decode_context_tokens": 1024 * 1025}
    with pytest.raises(ConfigError, match="measured on h200-sxm"):
        load(None, [f"profile={path}", "hardware.gpu=h100-sxm"])
    assert prof.held_out_error["mape"] < 1e-6 and prof.tolerance == 0.10
    assert (tmp_path / "profile.predictions.parquet").exists()
    r = simulate(load(None, [f"profile={path}", "workload.num_requests=30"]))
    assert r.summary["completed"] == 30
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="missing column"):
        fit_directory(bad, model="llama-3.1-8b", dtype="bf16")
    with pytest.raises(ConfigError, match="file not found"):
        fit_directory(tmp_path / "nothing-here")


@pytest.mark.parametrize("keep,lack", [
    (lambda d: d[d.prefill_tokens > 0], "decode-only steps"),
    (lambda d: d[d.prefill_tokens == 0], "steps with prefill"),
    # repeated measurements of two batch sizes only: decodes of 8 and 1,024-token prefills
    (lambda d: pd.concat([d[(d.prefill_tokens + d.decode_seqs).isin([8, 1024])]] * 2), "token counts"),
])
def test_data_that_cannot_identify_the_terms_is_refused(keep, lack):
    """A fit on one kind of batch reports a small error on its own rows and then predicts others badly."""
    with pytest.raises(ConfigError, match=lack):
        fit_step_model(keep(synthetic()).reset_index(drop=True))


def test_a_run_beyond_the_profiles_fitted_batches_is_warned_about(tmp_path):
    # (the built-in profiles are fitted up to vLLM's default 1,024 sequences since r144: one fitted to 128)
    narrow = ["profile=h200-llama-3.1-8b-bf16-tp1", "profile.shape_range.max_seqs=128"]
    rs = load(None, narrow + ["workload.num_requests=1500", "workload.arrival.rate=40"])
    s = simulate(rs).summary
    assert s["max_running_requests"] > 256 and any("at most 128 sequences" in w for w in s["cost_model_warnings"])
    assert simulate(load(None, narrow + ["workload.num_requests=50"])).summary["cost_model_warnings"] == []
    assert simulate(load(None, ["workload.num_requests=1500", "workload.arrival.rate=40"])).summary[
        "cost_model_warnings"] == []  # within the built-in profile's 1,024


def test_a_moe_fit_recovers_its_per_expert_term_and_the_simulator_means_the_same():
    """Steps of a MoE model carry the experts they touch; the fit recovers the time per expert, and the cost
    model, given E and k, computes the same curve from the step's tokens."""
    e, k = 8, 2
    df = pd.DataFrame([p.row() for p in make_grid("gpu") if p.kind in STEP_KINDS])
    tokens = df["prefill_tokens"] + df["decode_seqs"]
    df["experts_touched"] = e * (1 - (1 - k / e) ** tokens)
    coef = TRUE | {"per_expert_ms": 0.7}
    df["time_ms"] = predict_ms(coef, df)
    fit = fit_step_model(df)
    assert fit.coefficients["per_expert_ms"] == pytest.approx(0.7, rel=0.01)
    assert fit.held_out["mape"] < 1e-6
    model = LinearCostModel(LinearCoefficients(**fit.coefficients, moe_experts=e, moe_top_k=k))
    one = BatchShape(1, 0, 0, 1, 1024)
    dense = LinearCostModel(LinearCoefficients(**{p: fit.coefficients[p] for p in PARAMS}))
    assert model.step_time(one) - dense.step_time(one) == pytest.approx(0.7 * 2 * 1e-3, rel=0.01)  # 2 experts


def test_a_moe_fit_writes_what_its_expert_term_is_priced_over(tmp_path):
    """r129: calibrate fit of a MoE table wrote per_expert_ms without moe_experts/moe_top_k, so a run took the
    dense path and timed steps 3-20x too fast (warned as 'has no effect'); more experts touched than the model has
    were fitted without a word."""
    from servesim.calibration.profile_io import fit_directory
    from servesim.simulator.cost_model import linear_model, load_profile
    from servesim.simulator.model_arch import load_model

    arch = load_model("qwen3-30b-a3b")
    df = pd.DataFrame([p.row() for p in make_grid("gpu") if p.kind in STEP_KINDS])
    df["experts_touched"] = [arch.experts_touched(int(t)) for t in df["prefill_tokens"] + df["decode_seqs"]]
    df["time_ms"] = predict_ms(TRUE | {"per_expert_ms": 0.7}, df)
    df.to_csv(tmp_path / "moe.csv", index=False)
    out, fit = fit_directory(tmp_path / "moe.csv", tmp_path / "moe.yaml", model="qwen3-30b-a3b", dtype="bf16",
                             gpu="h200-sxm")
    model = linear_model(load_profile(str(out)))
    row = df.iloc[5]
    shape = BatchShape(*(int(row[c]) for c in ("num_seqs", "prefill_tokens", "prefill_attention_pairs", "decode_seqs",
                                               "decode_context_tokens")))
    assert model.step_time(shape) * 1e3 == pytest.approx(row["time_ms"], rel=0.02)
    df.assign(experts_touched=df["experts_touched"] * 30).to_csv(tmp_path / "many.csv", index=False)
    with pytest.raises(ConfigError, match="experts_touched reaches .*, more than qwen3-30b-a3b's 128 experts"):
        fit_directory(tmp_path / "many.csv", tmp_path / "m.yaml", model="qwen3-30b-a3b", dtype="bf16")


def harness_table(grid="cpu"):
    """A `calibrate run` table: the grid's columns, its attention-kernel points with scope layer, times known."""
    df = pd.DataFrame([p.row() | {"scope": "layer" if p.kind == "attention" else "step"} for p in make_grid(grid)])
    df["time_ms"] = predict_ms(TRUE, df)
    df.loc[df["kind"] == "attention", "time_ms"] = 0.01  # one layer's kernel: not a step
    return df


def cpu_run(tmp_path, df=None, **meta):
    """A calibration directory as `calibrate run` leaves it: the table and its run.json."""
    import json

    (df if df is not None else harness_table()).to_parquet(tmp_path / "measurements.parquet")
    (tmp_path / "run.json").write_text(json.dumps({"model": "small-llama", "dtype": "fp32", "device": "cpu",
                                                   "hardware": {"kind": "cpu", "name": "AMD EPYC"}} | meta))
    return tmp_path


@pytest.mark.parametrize("labels, needle", [
    ({"model": "llama-3.1-8b"}, "--model: .* measured small-llama \\(run.json\\), not llama-3.1-8b"),
    ({"model": "nosuch"}, "--model: unknown model 'nosuch'"),
    ({"dtype": "bf16"}, "--dtype: .* measured fp32 \\(run.json\\), not bf16"),
    ({"dtype": "fp7"}, "--dtype: one of fp32, .*, got 'fp7'"),
    ({"gpu": "h200-sxm"}, "--gpu: .* was measured on the CPU \\(AMD EPYC\\), not on h200-sxm"),
    ({"gpu": "nosuch"}, "--gpu: unknown GPU 'nosuch'"),
    # round 89: one device's times labelled TP 2 timed a TP-2 run (no all-reduce), which calibrate check refuses
    ({"tp": 2}, "--tp: 2: .* was measured on one device \\(cpu, run.json\\)"),
])
def test_a_fit_cannot_be_labelled_as_something_it_did_not_measure(tmp_path, labels, needle):
    """--model/--dtype/--gpu relabelled a CPU table as llama-3.1-8b on an H200 (or as a model that does not exist):
    the simulator then timed H200 runs with a CPU's numbers, or never took the profile."""
    with pytest.raises(ConfigError, match=needle):
        fit_directory(cpu_run(tmp_path), **labels)
    assert fit_directory(tmp_path, model="small-llama", dtype="fp32")[1].train["points"] > 0  # its own labels
    with pytest.raises(ConfigError, match=needle):  # the table given itself: the run.json beside it is read too
        fit_directory(tmp_path / "measurements.parquet", **labels)


def test_the_table_given_alone_reads_its_run_json(tmp_path):
    """calibrate fit DIR/measurements.parquet said 'no run.json beside it' with run.json right there (round 70)."""
    import yaml

    written = fit_directory(cpu_run(tmp_path) / "measurements.parquet", out=tmp_path / "p.yaml")[0]
    profile = yaml.safe_load(written.read_text())
    assert (profile["model"], profile["dtype"]) == ("small-llama", "fp32")


def test_a_cuda_measurement_takes_only_its_own_gpu_and_an_hf_id_is_its_model(tmp_path):
    run = cpu_run(tmp_path, model="llama-3.1-8b", dtype="bf16", device="cuda:0",
                  hardware={"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"})
    with pytest.raises(ConfigError, match=r"--gpu: .* measured on NVIDIA H100 80GB HBM3 \(h100-sxm\), not on h200"):
        fit_directory(run, gpu="h200-sxm")
    path, _ = fit_directory(run, gpu="h100-sxm", model="meta-llama/Llama-3.1-8B-Instruct")
    assert (load_profile(str(path)).model, load_profile(str(path)).gpu) == ("llama-3.1-8b", "h100-sxm")


@pytest.mark.parametrize("damage, needle", [
    (lambda d: d.assign(kind=d["kind"].replace("attention", "decode")),
     "kind decode is timed with scope step, but the row says scope layer"),
    (lambda d: d.assign(kind=d["kind"].where(d.index != 5, None)), "row 6: kind must be one of .*, got nothing"),
    (lambda d: d.assign(scope=d["scope"].replace("layer", "kernel")), "scope must be one of step, layer, got 'kernel'"),
])
def test_a_row_whose_kind_and_scope_disagree_is_named(damage, needle):
    """Attention-kernel rows relabelled as decodes were fitted as whole steps: held-out MAPE 14% -> 63%."""
    with pytest.raises(ConfigError, match=needle):
        fit_step_model(damage(harness_table()))


def test_without_a_kind_column_the_scope_still_keeps_kernel_times_out():
    whole = fit_step_model(harness_table())
    no_kind = fit_step_model(harness_table().drop(columns=["kind", "batch", "tokens", "context"]))
    steps = (harness_table()["scope"] == "step").sum()
    assert whole.train["points"] + whole.held_out["points"] == steps
    assert no_kind.train["points"] + no_kind.held_out["points"] == steps
    assert no_kind.coefficients == pytest.approx(whole.coefficients)


@pytest.mark.parametrize("row, needle", [
    ({"kind": "prefill", "batch": 1, "tokens": 16, "prefill_tokens": 1_000_000,
      "prefill_attention_pairs": 500_000_500_000}, "are not those of its grid point"),
    ({"num_seqs": 2, "decode_seqs": 3}, "decode_seqs cannot exceed num_seqs"),
    ({"num_seqs": 0, "decode_seqs": 0, "prefill_tokens": 0, "prefill_attention_pairs": 0,
      "decode_context_tokens": 0}, "at least one sequence"),
    ({"num_seqs": 4, "decode_seqs": 4, "prefill_tokens": 16}, "need a prefill sequence"),
    ({"num_seqs": 4, "decode_seqs": 0, "prefill_tokens": 2, "decode_context_tokens": 0}, "at least one token"),
    ({"num_seqs": 1, "decode_seqs": 0, "prefill_tokens": 64, "prefill_attention_pairs": 10,
      "decode_context_tokens": 0}, "attends at least to itself"),
    ({"num_seqs": 4, "decode_seqs": 4, "prefill_tokens": 0, "prefill_attention_pairs": 0,
      "decode_context_tokens": 3}, "reads at least its own token"),
    ({"num_seqs": 1, "decode_seqs": 0, "prefill_tokens": 8, "prefill_attention_pairs": 36,
      "decode_context_tokens": 500}, "decode_context_tokens needs a decode"),
])
def test_a_row_that_contradicts_itself_is_named(row, needle):
    """A 16-token prefill recorded with 1,000,000 prefill tokens was fitted as if true."""
    df = harness_table().drop(columns=[] if "kind" in row else ["kind", "batch", "tokens", "context", "scope"])
    df = df[df.get("scope", pd.Series("step", index=df.index)) == "step"].reset_index(drop=True)
    for col, value in row.items():
        df.loc[6, col] = value
    with pytest.raises(ConfigError, match=f"row 7: the batch shape contradicts itself: .*{needle}"):
        fit_step_model(df)


def test_every_repeat_of_a_shape_is_on_one_side_of_the_split():
    """A table listed twice held out copies of its training rows: a held-out error that measured nothing."""
    twice = pd.concat([synthetic("cpu")] * 2, ignore_index=True)
    twice["time_ms"] *= __import__("numpy").random.default_rng(0).lognormal(0, 0.05, len(twice))
    out = fit_step_model(twice).predictions
    key = out[["num_seqs", "prefill_tokens", "prefill_attention_pairs", "decode_seqs", "decode_context_tokens"]] \
        .astype(str).agg(",".join, axis=1)
    sides = out.groupby(key)["split"].nunique()
    assert (sides == 1).all() and (out["split"] == "held_out").sum() >= 2
    once = fit_step_model(synthetic("cpu"))  # all shapes distinct: the plain row split, as before
    assert once.predictions["split"].eq("held_out").sum() == round(0.2 * len(synthetic("cpu")))


def test_the_identifiability_refusals_hold_for_the_part_fitted_on():
    """The whole table had decode-only steps, the 80% fitted on had none: the fit ran, blind to decode cost."""
    from servesim.calibration.fit import _held_out_rows

    df = synthetic("cpu")
    df = pd.concat([df[df.prefill_tokens > 0], df[df.prefill_tokens == 0].head(1)], ignore_index=True)
    mixed = (df.prefill_tokens > 0) & (df.decode_seqs > 0)  # at 3 contexts a sequence, as r171 asks of a table
    df.loc[mixed, "decode_context_tokens"] *= [1 + i % 3 for i in range(int(mixed.sum()))]
    df["time_ms"] = predict_ms(TRUE, df)
    seed = next(s for s in range(200) if _held_out_rows(df, 0.2, s)[len(df) - 1])
    with pytest.raises(ConfigError, match=f"the {len(df) - round(0.2 * len(df))} measurements left to fit on "
                                          f"\\(--holdout 0.2, --seed {seed}\\) lack decode-only steps"):
        fit_step_model(df, seed=seed)
    fit_step_model(df, seed=next(s for s in range(200) if not _held_out_rows(df, 0.2, s)[len(df) - 1]))


def test_compare_says_where_a_profile_is_taken_beyond_what_it_was_fitted_on(tmp_path, capsys):
    """compare's typical steps (128 decodes, 4,096-token prefills) priced by a profile fitted on the quick grid
    (16 sequences, 256 tokens) are extrapolations: said, as a run beyond a profile's range is."""
    from servesim.simulator.cli import main

    synthetic("quick").to_parquet(tmp_path / "measurements.parquet")
    small, _ = fit_directory(tmp_path, model="llama-3.1-8b", dtype="bf16")
    assert main(["calibrate", "compare", str(small), "h200-llama-3.1-8b-bf16-tp1"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any("at most 16 sequences in a step; the typical steps compared reached 128" in w for w in err), err
    assert any("at most 256 tokens in a step; the typical steps compared reached 8,192" in w for w in err), err
    assert main(["calibrate", "compare", "h100-llama-3.1-8b-bf16-tp1", "h200-llama-3.1-8b-bf16-tp1"]) == 0
    assert capsys.readouterr().err == ""  # within both gpu-grid profiles' range: nothing to say


@pytest.mark.parametrize("record, needle", [
    (b"[1,2]", "run.json: must hold a JSON object, got list"),
    (b'{"model": "small-llama", "dtype": "fp32"', "run.json: not a JSON document"),
    (b"\xff\xfe{}", "run.json is not UTF-8 text"),
    (b'{"model": "small-llama", "dtype": "fp32", "hardware": "cpu"}', "run.json.hardware: Input should be a valid dict"),
    (b'{"model": "small-llama", "dtype": "fp32", "device": 5}', "run.json.device: Input should be a valid string"),
    (b'{"model": 5, "dtype": "fp32"}', "run.json.model: Input should be a valid string"),
    (b'{"model": "small-llama", "dtype": "fp99"}', "run.json.dtype: Input should be"),
    (b'{"model": "small-llama", "dtype": "fp32", "block_size": "big"}', "run.json.block_size"),
    (None, "run.json: is not a regular file"),
    # r123: run.json's own architecture was copied into the profile unchecked (a NaN width, -3 layers), and a model
    # name with slashes named the profile with them
    (b'{"model": "small-llama", "dtype": "fp32", "architecture": {"name": "x", "num_hidden_layers": -3, '
     b'"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128, '
     b'"vocab_size": 100}}', "run.json: architecture: "),
    (b'{"model": "../../../etc/passwd", "dtype": "fp32"}', "--name: the profile's default name unknown-../../../etc/passwd-fp32 is not a plain name"),
])
def test_a_damaged_run_record_is_one_line_naming_it(tmp_path, record, needle):
    """run.json was read with a bare json.loads and its fields written into the profile unchecked: a list crashed
    the fit, `model: 5` wrote a profile no run could load."""
    harness_table().to_parquet(tmp_path / "measurements.parquet")
    if record is None:
        (tmp_path / "run.json").mkdir()
    else:
        (tmp_path / "run.json").write_bytes(record)
    with pytest.raises(ConfigError, match=re.escape(needle)):
        fit_directory(tmp_path)


def test_the_gpu_a_cuda_run_recorded_is_the_profiles_without_gpu(tmp_path):
    """An H100 measurement fitted without --gpu ran on an H200 unsaid."""
    run = cpu_run(tmp_path, model="llama-3.1-8b", dtype="bf16", device="cuda:0",
                  hardware={"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"})
    path, _ = fit_directory(run)
    assert load_profile(str(path)).gpu == "h100-sxm"
    with pytest.raises(ConfigError, match="measured on h100-sxm"):
        load(None, [f"profile={path}", "hardware.gpu=h200-sxm"])


def test_the_fit_never_writes_over_its_own_input(tmp_path):
    """--out m.csv replaced the measurements with the profile, exit 0."""
    table = tmp_path / "p.predictions.parquet"  # an earlier fit's predictions, refitted
    harness_table().to_parquet(table)
    for out in (table, tmp_path / "p.yaml"):  # the profile, or the predictions written beside it
        with pytest.raises(ConfigError, match="--out: .* is the fit's own input"):
            fit_directory(table, out=out, model="small-llama", dtype="fp32")
    (tmp_path / "d").mkdir()
    run = cpu_run(tmp_path / "d")
    for out in (run / "measurements.parquet", run / "run.json"):
        with pytest.raises(ConfigError, match="--out: .* is the fit's own input"):
            fit_directory(run, out=out)
    assert pd.read_parquet(table).equals(harness_table()) and not (tmp_path / "p.yaml").exists()
    # round 41: another name of the input (a hard link), or a symbolic link at the profile's name, is refused too
    (tmp_path / "hard.yaml").hardlink_to(table)
    (tmp_path / "link.yaml").symlink_to(tmp_path / "victim.txt")
    for out, why in ((tmp_path / "hard.yaml", "is a hard link"), (tmp_path / "link.yaml", "symbolic link")):
        with pytest.raises(ConfigError, match=f"--out: .*{why}"):
            fit_directory(table, out=out, model="small-llama", dtype="fp32")
    assert pd.read_parquet(table).equals(harness_table()) and not (tmp_path / "victim.txt").exists()


@pytest.mark.parametrize("labels, extra, needle", [
    ({"tp": 3}, {}, "--tp: 8 attention heads do not split over 3 GPUs"),
    ({}, {"experts_touched": 2.0}, "the table has experts_touched, but small-llama has no experts"),
])
def test_a_fit_the_model_cannot_have_is_refused(tmp_path, labels, extra, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        fit_directory(cpu_run(tmp_path, harness_table().assign(**extra)), **labels)


def test_a_poor_held_out_error_is_said(tmp_path, capsys):
    """A fit that predicts unseen steps 2.5x wrong passed with exit 0 and no word."""
    import numpy as np

    from servesim.simulator.cli import main

    df = synthetic("cpu")
    table = tmp_path / "m.csv"
    for sigma, said in ((0.01, False), (1.0, True)):
        df.assign(time_ms=df["time_ms"] * np.random.default_rng(0).lognormal(0, sigma, len(df))).to_csv(table, index=False)
        assert main(["calibrate", "fit", str(table), "--model", "small-llama", "--dtype", "fp32"]) == 0
        assert ("predicts steps it was not fitted on poorly" in capsys.readouterr().err) == said


def test_a_fit_of_a_plain_table_says_what_it_was_fitted_to(tmp_path):
    """Round 92: a step table (or an engine's step log) was labelled "servesim calibrate run: ... torch ?, ? grid,
    gather attention": a harness run that never happened."""
    import yaml

    from servesim.simulator.cli import main

    table = tmp_path / "m.csv"
    synthetic("cpu").to_csv(table, index=False)
    assert main(["calibrate", "fit", str(table), "--model", "small-llama", "--dtype", "fp32", "--out",
                 str(tmp_path / "p.yaml")]) == 0
    written = yaml.safe_load((tmp_path / "p.yaml").read_text())
    assert written["source"].startswith("fitted to the step times of m.csv (no run.json") and \
        "torch" not in written["source"]
    # r147: it records the KV cache it timed (the activations' unless told), so a run with another is refused
    assert written["kv_cache_dtype"] == "fp32"
    assert main(["calibrate", "fit", str(table), "--model", "small-llama", "--dtype", "fp32", "--kv-cache-dtype",
                 "fp8", "--out", str(tmp_path / "q.yaml")]) == 0
    assert yaml.safe_load((tmp_path / "q.yaml").read_text())["kv_cache_dtype"] == "fp8"
    assert main(["run", "--set", "model=small-llama", "--set", "engine.kv_cache_dtype=fp8", "--set",
                 f"profile={tmp_path / 'p.yaml'}", "--set", "workload.num_requests=2", "--out",
                 str(tmp_path / "r")]) == 2
    # round 103: a profile written under another ending was written, then refused by every command that read it
    for out in ("p.txt", "p", "p.YAML"):  # round 109: .YAML was written, and no profile reader reads it
        assert main(["calibrate", "fit", str(table), "--model", "small-llama", "--dtype", "fp32", "--out",
                     str(tmp_path / out)]) == 2
        assert not (tmp_path / out).exists()


def test_a_table_of_truth_values_is_no_timing(tmp_path):
    """Round 42: a CSV whose time_ms cells are all True (pandas reads a bool column) fitted 1 ms steps, MAPE 0%."""
    table = tmp_path / "bool.csv"
    harness_table().assign(time_ms=True).to_csv(table, index=False)
    with pytest.raises(ConfigError, match="row 1: time_ms must be 0 or a time from 1e-6 to 1e9 ms, got True"):
        fit_directory(table, out=tmp_path / "p.yaml", model="small-llama", dtype="fp32")


def test_the_fit_never_replaces_the_model_file_it_reads(tmp_path):
    """Round 69: `calibrate fit DIR --model m.yaml --out m.yaml` wrote the profile over the model's own file."""
    import shutil

    from pathlib import Path

    import servesim.simulator

    table = tmp_path / "m.csv"
    harness_table().to_csv(table, index=False)
    model = tmp_path / "model.yaml"
    shutil.copy(Path(servesim.simulator.__file__).parent / "data" / "models" / "small-llama.yaml", model)
    before = model.read_bytes()
    with pytest.raises(ConfigError, match="would write over the input"):
        fit_directory(table, out=model, model=str(model), dtype="fp32")
    assert model.read_bytes() == before


def test_the_real_run_options_on_a_measurement_table_are_said_unread(tmp_path, capsys):
    """Round 89: --terms, --max-evals, --set and --scenario were ignored silently on a table's fit (they are for
    real serving runs, which are fitted by simulating them)."""
    from servesim.simulator.cli import main

    run = cpu_run(tmp_path)
    assert main(["calibrate", "fit", str(run), "--terms", "memory_scale", "--max-evals", "9", "--set",
                 "engine.max_num_seqs=4", "--out", str(tmp_path / "p.yaml")]) == 0
    assert "warning: --terms, --max-evals, --set have no effect on a measurement table" in capsys.readouterr().err
    assert main(["calibrate", "fit", str(run), "--out", str(tmp_path / "q.yaml")]) == 0
    assert "no effect" not in capsys.readouterr().err


def test_compare_shows_every_term_a_profile_carries():
    """Round 89: teaching's per-prefill-token cost (123 ms of its 141 ms 4,096-token prefill) and a MoE profile's
    per-expert cost had no row: the profiles were compared as if they lacked them."""
    from servesim.calibration.compare import compare_profiles

    t = compare_profiles("teaching", "h200-llama-3.1-8b-bf16-tp1")
    row = t[(t["part"] == "component") & (t["what"] == "per prefill token (ms)")]
    assert row[["a", "b"]].values.tolist() == [[0.03, 0.0]]
    assert "per decode token (ms)" not in t["what"].tolist()  # neither profile has it: no row


def test_compare_refuses_a_profile_that_times_nothing():
    """Round 103: a profile without coefficients compared as 0 ms steps, exit 0; a run refuses it."""
    from servesim.calibration.compare import compare_profiles
    from servesim.simulator.cost_model import load_profile
    from servesim.simulator.errors import ConfigError

    empty = load_profile("teaching").model_copy(update={"coefficients": {}, "name": "empty"})
    with pytest.raises(ConfigError, match="empty predicts zero time for a one-token prefill step"):
        compare_profiles(empty, "teaching")


def test_compare_puts_a_profiles_overhead_on_the_other_profiles_gpu_where_it_names_none(capsys):
    """r129: a profile without `gpu` was compared on kernels alone (its overhead dropped), so two profiles that time
    every run alike differed by 9%; a run puts the terms on the scenario's GPU."""
    from servesim.calibration.compare import compare_profiles
    from servesim.simulator.cost_model import load_profile

    a = load_profile("h100-llama-3.1-8b-bf16-tp1")
    bare = a.model_copy(update={"gpu": None, "name": "bare"})
    t = compare_profiles(bare, a)
    steps = t[t["part"] == "step time (ms)"]
    assert len(steps) and (steps["a"] == steps["b"]).all()
    assert "profile bare's overhead terms are put on llama-3.1-8b on h100-sxm" in capsys.readouterr().err
    t = compare_profiles(bare, bare.model_copy(update={"name": "bare2"}))
    assert "bare's overhead terms are left out of the comparison: it names no GPU" in capsys.readouterr().err


@pytest.mark.parametrize("coefficients, says", [
    ({"per_prefill_token_ms": 0.03}, "predicts zero time for a one-sequence decode step"),  # decodes for free
    ({"step_overhead_ms": 1e-300}, "predicts 1e-300 ms for a one-token prefill step (less than 1e-06 ms)"),
])
def test_a_profile_whose_step_is_free_or_below_a_nanosecond_is_refused(coefficients, says):
    """r129: a prefill-only profile timed every decode at 0 ms (TPOT 0.02 ms, no word); a 1e-300 ms step never
    moved the clock, and a closed loop over a duration ran for ever."""
    from servesim.simulator.config import load

    with pytest.raises(ConfigError, match=r"^profile.coefficients: mine " + re.escape(says)):
        load(None, ["workload.num_requests=5", "profile={name: mine, cost_model: linear, coefficients: "
                    + json.dumps(coefficients) + "}"])


def test_a_harness_profile_records_the_kv_cache_it_timed(tmp_path):
    """Round 103: a `calibrate run` profile named no KV cache dtype, so a run with engine.kv_cache_dtype=fp8 took
    an fp32-measured profile without a word; built-in profiles refuse that."""
    import yaml

    from servesim.simulator.config import load
    from servesim.simulator.errors import ConfigError

    out, _ = fit_directory(cpu_run(tmp_path))
    assert yaml.safe_load(out.read_text())["kv_cache_dtype"] == "fp32"
    base = ["model=small-llama", f"profile={out}", "engine.num_gpu_blocks_override=4000", "engine.max_model_len=2048"]
    assert load(None, base).profile.kv_cache_dtype == "fp32"
    with pytest.raises(ConfigError, match="was measured with a fp32 KV cache, but engine.kv_cache_dtype gives fp8"):
        load(None, base + ["engine.kv_cache_dtype=fp8"])


@pytest.mark.parametrize("fitted", [{"runs": 5}, {"run_records": 5}, {"runs": "/some/run"}])
def test_round_135_a_profiles_fitted_record_is_checked_where_it_is_read(tmp_path, fitted):
    """validate serving reads fitted.runs and the digests: a number there was an internal error, a text (not a
    list) skipped the in-sample check."""
    import yaml

    from servesim.simulator.cost_model import load_profile

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "cost_model": "linear", "coefficients": {"step_overhead_ms": 1.0},
                                    "fitted": fitted}))
    with pytest.raises(Exception, match=f"fitted.{next(iter(fitted))} must be a list of texts"):
        load_profile(str(path))


def test_a_run_json_whose_model_contradicts_its_architecture_is_refused(tmp_path):
    """r147: run.json naming llama-3.1-8b beside small-llama's architecture fitted a profile no run accepted, its
    refusal calling the scenario's unedited model edited."""
    import shutil

    src = Path(__file__).resolve().parents[1] / "results" / "fidelity" / "replay-small-llama-cpu" / "calibration"
    if not (src / "run.json").is_file():
        pytest.skip(f"{src} not found")
    shutil.copy(src / "measurements.parquet", tmp_path)
    run = json.loads((src / "run.json").read_text()) | {"model": "llama-3.1-8b"}
    (tmp_path / "run.json").write_text(json.dumps(run))
    with pytest.raises(ConfigError, match=r"^run.json: model llama-3.1-8b contradicts the architecture it records "
                                          r"\(small-llama's\)"):
        fit_directory(tmp_path, out=tmp_path / "p.yaml")


def test_round_158_steps_that_all_take_one_time_are_said(capsys):
    """r158: every step at 5 ms from 1 to 2,048 tokens fitted a profile timing every batch alike, reported as a
    0.0% error, unsaid."""
    fit_step_model(synthetic().assign(time_ms=5.0))
    assert "every step measured takes 5 ms (within 1%)" in capsys.readouterr().err
    fit_step_model(synthetic())
    assert "every step measured" not in capsys.readouterr().err


def test_round_171_one_prompt_length_at_many_batch_sizes_is_refused(tmp_path, capsys):
    """r171: one 512-token length at nine batch sizes made nine distinct step totals, passed the refusal, fitted
    0.9% "held out" and ran 8k prompts 4.5x slow; per sequence (and per prompt token) it is one shape. A table in
    seconds fitted as milliseconds is said as it is fitted."""
    from servesim.simulator.cli import main

    rows = [dict(num_seqs=b, prefill_tokens=0, prefill_attention_pairs=0, decode_seqs=b, decode_context_tokens=512 * b)
            for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    rows += [dict(num_seqs=b, prefill_tokens=512 * b, prefill_attention_pairs=131328 * b, decode_seqs=0,
                  decode_context_tokens=0) for b in (1, 2, 4, 8)]
    one = pd.DataFrame(rows)
    one["time_ms"] = predict_ms(TRUE, one)
    with pytest.raises(ConfigError, match="lack at least 3 different decode context sizes per sequence, at least 2 "
                                          "different prompt lengths"):
        fit_step_model(one)
    table = synthetic("cpu")
    table["time_ms"] /= 1000  # seconds
    table.to_csv(tmp_path / "s.csv", index=False)
    assert main(["calibrate", "fit", str(tmp_path / "s.csv"), "--model", "llama-3.1-8b", "--dtype", "bf16",
                 "--gpu", "h100-sxm", "--out", str(tmp_path / "p.yaml")]) == 0
    assert "(a table timed in seconds, read as milliseconds? time_ms is milliseconds)" in capsys.readouterr().err
    assert main(["calibrate", "fit", str(tmp_path / "s.csv"), "--model", "llama-3.1-8b", "--dtype", "fp16",
                 "--gpu", "h100-sxm", "--out", str(tmp_path / "p16.yaml")]) == 0  # r173: fp16 was judged as bf16
    assert "read as milliseconds?" in capsys.readouterr().err
    table["time_ms"] *= 1000 * 300  # milliseconds of a GPU slower than the weights' read: unsaid
    table.to_csv(tmp_path / "ms.csv", index=False)
    assert main(["calibrate", "fit", str(tmp_path / "ms.csv"), "--model", "llama-3.1-8b", "--dtype", "bf16",
                 "--gpu", "h100-sxm", "--out", str(tmp_path / "q.yaml")]) == 0
    assert "read as milliseconds" not in capsys.readouterr().err
    # and a GPU's table is fitted as a composition is: no cache knee, every KV token priced (it had a knee at 605
    # tokens, the reads below it free); a CPU's keeps its knee
    coef = yaml.safe_load((tmp_path / "q.yaml").read_text())["coefficients"]
    assert coef.get("context_cache_tokens", 0) == 0 and coef["per_context_token_ms"] > 0
    # r172: judged in the formats the profile was timed in (an fp8 fit was built as bf16 and called unrunnable)
    from pathlib import Path

    from servesim.calibration.cli import _faster_than_its_gpu

    shipped = sorted((Path(__file__).resolve().parents[1] / "calibration" / "profiles").glob("*.yaml"))
    assert any("fp8" in p.name for p in shipped)
    assert [p.name for p in shipped if _faster_than_its_gpu(p)] == []
