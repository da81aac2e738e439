"""The fit recovers known coefficients; bad measurement files are named, not tracebacks."""

import re
from pathlib import Path

import pandas as pd
import pytest

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
    ("time_ms", -3.0, "row 4: time_ms must be a finite, non-negative time, got -3.0"),
    ("time_ms", float("nan"), "row 4: time_ms must be"),
    ("prefill_tokens", -10, "row 4: prefill_tokens must be a non-negative integer"),
    ("decode_seqs", "x", "row 4: decode_seqs must be a non-negative integer up to 2^40, got 'x'"),
    ("decode_context_tokens", 2**70, "row 4: decode_context_tokens must be a non-negative integer up to 2^40"),
])
def test_a_damaged_measurement_row_is_named_not_dropped(col, value, message):
    df = synthetic().astype({col: object})
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


def test_check_on_a_device_this_machine_lacks_is_one_line():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    from servesim.calibration.check import check_profile

    profiles = Path(__file__).resolve().parents[1] / "calibration" / "profiles"
    prof = next(p for p in sorted(profiles.glob("*.yaml")) if load_profile(str(p)).grid and
                (load_profile(str(p)).tensor_parallel_size or 1) == 1 and load_profile(str(p)).cost_model == "linear")
    with pytest.raises(ConfigError, match="no such CUDA device here"):
        check_profile(str(prof), "cuda")


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
    synthetic().to_parquet(tmp_path / "measurements.parquet")
    with pytest.raises(ConfigError, match="does not say which model"):
        fit_directory(tmp_path, name="synthetic")  # a bare table: the profile must say what it measured
    path, fit = fit_directory(tmp_path, name="synthetic", model="llama-3.1-8b", dtype="bf16", gpu="h200-sxm")
    prof = load_profile(str(path))
    assert prof.name == "synthetic" and prof.cost_model == "linear"
    assert (prof.model, prof.dtype, prof.gpu, prof.tensor_parallel_size) == ("llama-3.1-8b", "bf16", "h200-sxm", 1)
    assert prof.shape_range == {"max_tokens": 16384, "max_seqs": 256, "max_decode_context_tokens": 256 * 4097}
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
    rs = load(None, ["workload.num_requests=1500", "workload.arrival.rate=40"])
    assert rs.profile.shape_range["max_seqs"] == 256
    s = simulate(rs).summary
    assert any("at most 256 sequences" in w for w in s["cost_model_warnings"])
    assert simulate(load(None, ["workload.num_requests=50"])).summary["cost_model_warnings"] == []


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
